"""The reply guard: the approved amount, no other amount, review mention, one apology."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from services.llm_standin.reply import write_reply
from services.settler.amounts import MoneyMention, find_amounts, format_amount
from services.settler.guard import check_reply
from services.settler.template import safe_phrase, template_reply

GOOD = (
    "We have refunded INR 689 to your original payment method for the missing biryanis and the "
    "late delivery; it should arrive within three working days. A colleague will review the "
    "raita claim. We're sorry about your evening."
)


@pytest.mark.parametrize(
    ("minor", "currency", "text"),
    [
        (68900, "INR", "INR 689"),
        (68950, "INR", "INR 689.50"),
        (68905, "INR", "INR 689.05"),
        (0, "INR", "INR 0"),
        (5, "USD", "USD 0.05"),
        (100000, "EUR", "EUR 1000"),
        (50000, "JPY", "JPY 50000"),
        (1250, "KWD", "KWD 1.250"),
    ],
)
def test_format_amount(minor: int, currency: str, text: str) -> None:
    assert format_amount(minor, currency) == text


def test_format_amount_refuses_negative() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        format_amount(-1, "INR")


def test_a_reply_in_a_currency_without_decimals_states_its_whole_units() -> None:
    """JPY 50000 in minor units is what Stripe refunds as 50,000 yen: the reply says so, and one
    that states a hundredth of it, as if yen had two decimals, fails."""
    assert check_reply("We have refunded JPY 50000 to your card.", 50000, "JPY", []) == ()
    assert check_reply("We have refunded JPY 500 to your card.", 50000, "JPY", []) == (
        "does not state the approved amount JPY 50000",
        "names an amount other than the approved JPY 50000: 'JPY 500'",
    )
    assert find_amounts("JPY 500.50 and 12 more", "JPY") == (
        MoneyMention("JPY 500.50", None, "JPY"),
        MoneyMention("12", 12, None),
    )
    assert find_amounts("KWD 1.25", "KWD") == (MoneyMention("KWD 1.25", 1250, "KWD"),)


def test_a_good_reply_passes() -> None:
    assert check_reply(GOOD, 68900, "INR", ["Raita"]) == ()


def test_the_approved_amount_must_be_stated_as_formatted() -> None:
    failures = check_reply("We have refunded your order.", 68900, "INR", [])
    assert failures == ("does not state the approved amount INR 689",)
    # "INR 689" inside "INR 6890" or "INR 689.50" is not the approved amount.
    assert "does not state the approved amount INR 689" in check_reply(
        "We have refunded INR 6890.", 68900, "INR", []
    )
    assert "does not state the approved amount INR 689" in check_reply(
        "We have refunded INR 689.50.", 68900, "INR", []
    )
    assert check_reply("We have refunded INR 689.", 68900, "INR", []) == ()


@pytest.mark.parametrize("written", ["₹689", "₹ 689", "inr 689", "INR 689"])
def test_the_approved_amount_may_be_stated_with_the_rupee_sign(written: str) -> None:
    """A model writing the rupee sign states the amount as well as "INR 689" does: the sign
    names the rupee of India alone."""
    assert check_reply(f"We have refunded {written} to your card.", 68900, "INR", []) == ()


@pytest.mark.parametrize(
    "written",
    [
        "₹690",
        "₹689.50",
        "₹6,89",
        "₹68,900",
        "Rs. 689",
        "689 rupees",
        "Pakistani Rupees 689",
        "₨689",
        "a refund of 689",
        "$689",
        "A$689",
    ],
)
def test_other_spellings_do_not_state_the_approved_amount(written: str) -> None:
    """Rupees and "Rs." name the rupees of other countries too; other digits, other amounts."""
    failures = check_reply(f"We have refunded {written}.", 68900, "INR", [])
    assert "does not state the approved amount INR 689" in failures, failures


def test_the_euro_sign_states_an_amount_in_euros_and_the_dollar_sign_does_not() -> None:
    assert check_reply("We have refunded €689 to your card.", 68900, "EUR", []) == ()
    failures = check_reply("We have refunded $689 to your card.", 68900, "USD", [])
    assert "does not state the approved amount USD 689" in failures, failures


def test_the_amount_stated_with_the_sign_and_again_with_the_code_is_twice_the_money() -> None:
    failures = check_reply("We have refunded ₹689 and INR 689 for the delay.", 68900, "INR", [])
    assert "states the approved amount 2 times (at most once)" in failures, failures


@pytest.mark.parametrize(
    ("written", "failure"),
    [
        ("INR 689 Cr", "names an amount other than the approved INR 689: 'INR 689'"),
        ("₹689 crs", "names an amount other than the approved INR 689: '₹689'"),
        ("INR 689 AED", "names an amount in another currency: '689 AED'"),
        ("₹689 PKR", "names an amount in another currency: '689 PKR'"),
    ],
)
def test_a_scale_or_another_currency_after_the_amount_fails(written: str, failure: str) -> None:
    """ "Cr" is a crore; a code after the number says it is that currency's."""
    assert failure in check_reply(f"We have refunded {written}.", 68900, "INR", [])


@pytest.mark.parametrize(
    "written", ["₹689 in euros", "INR 689 (about 8 euros)", "INR 689, or 30 dirhams", "¥689 yen"]
)
def test_another_currencys_name_fails(written: str) -> None:
    failures = check_reply(f"We have refunded {written}.", 68900, "INR", [])
    assert any(f.startswith("names money without an amount") for f in failures), failures


def test_a_pound_cake_is_no_currency() -> None:
    assert check_reply("We have refunded INR 689 for the pound cake.", 68900, "INR", []) == ()


def test_the_articles_breakdown_reply_fails_because_it_names_other_amounts() -> None:
    article = (
        "We've refunded INR 689 to your original payment method: INR 640 for the missing "
        "biryanis and INR 49 for the delayed delivery. A colleague will review it."
    )
    assert check_reply(article, 68900, "INR", ["Raita"]) == (
        "names an amount other than the approved INR 689: 'INR 640'",
        "names an amount other than the approved INR 689: 'INR 49'",
    )


@pytest.mark.parametrize(
    "other",
    [
        "Rs. 700",
        "Rs 700",
        "rs700",
        "₹700",
        "₹ 1,00,000",
        "700 rupees",
        "70000 paise",
        "a refund of 700",
        "700 refund",
        "refunded up to 1,200.50",
        "INR 689.5",
        "Rupees 500",
        "a voucher worth 200/-",
        "500 paisa",
        "1 lakh",
        "2 thousand as cashback",
        "compensation of 150",
    ],
)
def test_any_other_amount_fails(other: str) -> None:
    text = f"We have refunded INR 689. You may also get {other} later. Please review."
    failures = check_reply(text, 68900, "INR", [])
    assert any(f.startswith("names an amount other than") for f in failures), failures


@pytest.mark.parametrize(
    "same",
    ["₹689", "Rs. 689", "689 rupees", "68900 paise", "INR 689.00", "refund of 689", "INR 689/-"],
)
def test_other_spellings_of_the_approved_amount_are_not_other_amounts(same: str) -> None:
    assert check_reply(f"We have refunded INR 689 ({same}).", 68900, "INR", []) == ()


@pytest.mark.parametrize(
    "foreign", ["$689", "USD 689", "689 dollars", "Dollars 689", "€5", "GBP 1"]
)
def test_amounts_in_another_currency_fail(foreign: str) -> None:
    failures = check_reply(f"We have refunded INR 689, that is {foreign}.", 68900, "INR", [])
    assert any("another currency" in f for f in failures), failures


@pytest.mark.parametrize(
    "words",
    [
        "six hundred rupees",
        "a few rupees more",
        "some paise",
        "in dollars",
        "₹ as well",
        "Rs. back",
    ],
)
def test_money_without_an_amount_it_may_state_fails(words: str) -> None:
    """A currency name, code or symbol outside the approved amount: most likely an amount in
    words, which the guard cannot read, so the reply is not sent."""
    failures = check_reply(f"We have refunded INR 689 and {words}.", 68900, "INR", [])
    assert any(f.startswith("names money without an amount") for f in failures), failures


@pytest.mark.parametrize(
    "sneaked",
    [
        "We have refunded INR 689 thousand.",
        "We have refunded INR 689 lakh.",
        "We have refunded INR 689 crore.",
        "We have refunded INR 689k.",
        "We have refunded INR 689-700.",
        "We have refunded INR 689 for each of 3 items.",
        "We have refunded INR 689 per item.",
        "We have refunded INR 689 on every biryani.",
        "We have refunded INR 689 on each of the 4 biryanis.",
        "We have refunded INR 689 to each of your cards.",
        "We have refunded INR 689 every week until the order arrives.",
        "We have refunded INR 689/- x 3.",
        "We have refunded INR 689/- each.",
        "We have refunded ₹689/- per biryani.",
        "We have refunded INR 689/- every week.",
        "For every biryani we have refunded INR 689.",
        "On each biryani we have refunded INR 689.",
        "Every week we will credit INR 689 to your card.",
        "We will credit INR 689 to your card weekly.",
        "We have refunded INR 689 to your card for each missing biryani.",
        "We have refunded INR 689 to your card per week.",
        "We have refunded INR 689 each.",
        "We have refunded INR 689. Also, 3 x INR 689 more.",
        "We have refunded INR 689, two times INR 689 in all.",
        "We have refunded INR 689 and you also get AED 500 back.",
        "We have refunded INR 689 and 500 JPY.",
        "We have refunded INR 689, plus a bonus of ₨500.",
        "We have refunded INR 689, plus ¥500.",
        "We have refunded INR 689 and an extra five hundred as goodwill.",
        "We have refunded INR 689 and fifty more for the trouble.",
        "We have refunded INR 689 and a further 200 for the trouble.",
        "We have refunded INR 689 (that is, 1,378 in total).",
        "We have refunded INR 689 and \uff15\uff10\uff10 more.",
        "We have refunded INR 689 and ५०० more.",
        "We have refunded INR 689 and 250 points.",
        "We have refunded INR 689, and 500 more on 4 December 2026.",
        "We have refunded INR 689 and a decent 20 as goodwill.",
        "We have refunded INR 689; you may 30 more.",
        "We have refunded INR 689, and a further 20 may follow.",
        "We have refunded INR 689 for the biryanis and INR 689 for the late delivery.",
        "We have refunded INR 689 now and INR 689 again next week.",
        "We have refunded INR 689, and another 689 will follow.",
        "We have refunded INR 689 and will also refund 50% of your order.",
        "We have refunded INR 689 and 100 percent of the delivery fee.",
        "We have refunded half of INR 689.",
        "We have refunded INR 689 a day for the delay.",
        "We have refunded INR 689 again.",
        "We have refunded INR 689 daily until it arrives.",
    ],
)
def test_an_amount_sneaked_past_the_approved_one_fails(sneaked: str) -> None:
    """Scaled, ranged or multiplied amounts, other currencies' codes and signs, numbers in words,
    bare numbers and other scripts' digits: each could promise money that is never paid."""
    assert check_reply(sneaked, 68900, "INR", []) != (), sneaked


@pytest.mark.parametrize(
    "sneaked",
    [
        "We have refunded INR 689 (plus INR 689 for the delay).",
        "We have refunded INR 689 (besides INR 689 for the delay).",
        "We have refunded INR 689 (and ₹689 for the trouble).",
        "We have refunded INR 689 and will add 5 to your wallet.",
        "We have refunded INR 689, plus 9 for the wait.",
        "We have refunded INR 689 and Re 1 as goodwill.",
        "We have refunded INR 689 and 5% of the delivery fee.",
        "We have refunded INR 689. Enjoy 5% discount on your next order.",
        "We have refunded INR 689 and a voucher for the full order.",
        "We have refunded INR 689. Your next order is free.",
        "We have refunded INR 689. Your next 2 orders are free.",
        "We have refunded INR 689, credited to you 3 times.",
        "We have refunded INR 689 to your account. It will be paid three times.",
        "We have refunded INR 689 and will pay it twice.",
    ],
)
def test_a_second_amount_or_benefit_the_audit_found_fails(sneaked: str) -> None:
    """Replies a model could write from a complaint: a bracket that adds the amount again, a
    one-digit amount next to money words, a percentage, a voucher or free orders, a repetition
    away from the amount. Each promises more than is paid."""
    assert check_reply(sneaked, 68900, "INR", []) != (), sneaked


def test_with_nothing_approved_a_one_digit_amount_fails() -> None:
    failures = check_reply("You will get 9 back in your wallet.", 0, "INR", [])
    assert "names an amount other than the approved INR 0: '9'" in failures, failures


@pytest.mark.parametrize(
    "plain",
    [
        "2 of the 4 biryanis were missing, and 1 raita leaked.",
        "Please feel free to contact us; the gluten-free naan was noted.",
        "We're 1 team, and you are 1 of our valued customers.",
        "A colleague will review the Raita within 24 hours.",
    ],
)
def test_one_digit_counts_and_everyday_words_still_pass(plain: str) -> None:
    assert check_reply(f"We have refunded INR 689. {plain}", 68900, "INR", []) == ()


def test_the_refund_sentence_may_not_claim_a_held_item_or_everything() -> None:
    held = ["the packaging of the Raita"]
    claims = (
        "We have refunded INR 689 for everything, including the raita. Your feedback is under"
        " review."
    )
    assert check_reply(claims, 68900, "INR", held, held_names=["Raita"]) == (
        "says the refund covers 'Raita', which is held for review",
        "says the refund covers all although items are held: 'everything'",
    )
    whole = "We have refunded INR 689 for the whole order. The raita is under review."
    assert check_reply(whole, 68900, "INR", held, held_names=["Raita"]) == (
        "says the refund covers all although items are held: 'whole'",
    )
    apart = (
        "We have refunded INR 689 for the missing biryanis. A colleague will review the raita"
        " and get back to you."
    )
    assert check_reply(apart, 68900, "INR", held, held_names=["Raita"]) == ()
    assert check_reply(claims, 68900, "INR", [], held_names=[]) == ()  # nothing is held


def test_a_reply_too_long_to_read_fails_whole_without_reading_its_numbers() -> None:
    """More digits than Python converts (4,300), and text long enough that the checks would
    take minutes: refused at once, with one failure."""
    long = "We have refunded INR 689. Your reference is " + "7" * 4400 + "."
    assert check_reply(long, 68900, "INR", []) == (
        f"is {len(long)} characters long, more than the 2000 a reply may be",
    )
    assert check_reply("We have refunded INR 689 (" * 5000, 68900, "INR", [])[0].startswith("is ")


def test_a_number_with_more_digits_than_any_amount_is_not_converted() -> None:
    reply = "We have refunded INR 689. Reference " + "7" * 1900
    failures = check_reply(reply, 68900, "INR", [])
    assert failures == (f"names an amount other than the approved INR 689: '{'7' * 1900}'",)


@pytest.mark.parametrize(
    "plain",
    [
        "It arrived 85 minutes late, at 20:15 on 04/12.",
        "Your order of 4 December 2026 (placed Dec 3rd, 2026) was late on 12th of Dec.",
        "Your orders of 20 May 2026 and May 21, 2026 were late.",
        "It should reach you within 5-7 working days, or 24-48 hours for UPI.",
        "Your order #1840 (order-1840) had 4 biryanis; 2 of them were missing.",
        "The ETA 30 minutes was missed by twenty minutes.",
        "Your \uff15 items were noted.",
    ],
)
def test_times_counts_and_identifiers_are_not_amounts(plain: str) -> None:
    assert check_reply(f"We have refunded INR 689. {plain}", 68900, "INR", []) == (), plain


def test_the_approved_amount_said_once_with_other_words_around_it_passes() -> None:
    """Only a second statement of the amount, or words that scale or repeat it, fail: the
    sentence around a single statement may say "again" or "more" elsewhere."""
    text = (
        "We have refunded INR 689 to your original payment method. Again, thank you for"
        " telling us; we will do more to deliver on time."
    )
    assert check_reply(text, 68900, "INR", []) == ()
    assert check_reply(f"{text} The INR 689 reaches you soon.", 68900, "INR", []) == (
        "states the approved amount 2 times (at most once)",
    )


def test_numbers_far_from_refund_are_not_amounts() -> None:
    text = (
        "We have refunded INR 689. Your order of 4 biryanis placed at 20:15 arrived 85 minutes "
        "after it was placed, and we have shared this with our delivery team."
    )
    assert check_reply(text, 68900, "INR", []) == ()


def test_nothing_approved_means_no_promise_of_money() -> None:
    assert check_reply("We have reviewed your order and noted the delay.", 0, "INR", []) == ()
    for promise in (
        "We have refunded your order.",
        "You will be refunded soon.",
        "A refund of your money is on its way.",
        "The amount will be credited to your account.",
        "We issued a refund.",
        "Your full refund will be processed shortly.",
        "You will receive a full refund.",
        "Your refund has been initiated.",
        "You will get your money back.",
        "We will reimburse you for the missing biryanis.",
        "We will pay you back for the missing biryanis.",
        "You will be compensated for the biryanis.",
        "We are sending your refund today.",
    ):
        assert any("promises money" in f for f in check_reply(promise, 0, "INR", [])), promise
    assert any(
        "other than the approved INR 0" in f
        for f in check_reply("You will receive Rs. 50 as a goodwill gesture.", 0, "INR", [])
    )


def test_held_items_need_a_mention_of_review() -> None:
    text = "We have refunded INR 689 to your original payment method."
    assert check_reply(text, 68900, "INR", ["Raita"]) == (
        "does not say that the held items go to review",
    )
    assert check_reply(text, 68900, "INR", []) == ()
    # A review already done is not one to come.
    done = f"{text} We reviewed everything."
    assert check_reply(done, 68900, "INR", ["Raita"]) == (
        "does not say that the held items go to review",
    )
    for pending in (
        "A colleague will review the raita.",
        "The raita claim is under review.",
        "The raita item is pending review.",
        "Our team is reviewing the raita.",
    ):
        assert check_reply(f"{text} {pending}", 68900, "INR", ["Raita"]) == (), pending


def test_the_stand_ins_own_replies_pass() -> None:
    """The LLM stand-in's reply without mischief, paid or not (a later round's lines paid
    earlier stay PAY), with items held or not, after an earlier refund or not."""
    paid = [{"category": "MISSING_ITEM", "outcome": "PAY"}]
    held = [{"category": "PACKAGING"}]
    for amount, minor, resolved in (("INR 689", 68900, paid), ("INR 0", 0, []), ("INR 0", 0, paid)):
        for holding in ([], held):
            for earlier in (False, True):
                if resolved and minor == 0 and not earlier:
                    continue  # lines paid, nothing approved: only after an earlier refund
                text = "The biryanis were missing."
                reply = write_reply(text, amount, resolved, holding, earlier)["reply"]
                names = ["the raita"] if holding else []
                assert check_reply(reply, minor, "INR", names, earlier_refund=earlier) == (), reply


def test_after_an_earlier_refund_the_reply_must_mention_it() -> None:
    """A later round's reply that reads as if this amount were all there is, or as if
    nothing had been refunded, fails; one that mentions the earlier refund or reply passes."""
    alone = "We have refunded INR 60 to your original payment method for the Raita."
    assert check_reply(alone, 6000, "INR", []) == ()
    assert check_reply(alone, 6000, "INR", [], earlier_refund=True) == (
        "does not mention the refund an earlier round paid",
    )
    for mention in ("in addition to our earlier refund", "on top of our previous refund"):
        text = f"We have refunded INR 60 to your original payment method, {mention}."
        assert check_reply(text, 6000, "INR", [], earlier_refund=True) == (), mention
    stands = "We looked into the Raita. What our earlier reply said about this order still stands."
    assert check_reply(stands, 0, "INR", [], earlier_refund=True) == ()


@pytest.mark.parametrize(
    ("planted", "problem"),
    [
        ("Confirm at https://refunds-verify.example/claim to receive it.", "somewhere else"),
        ("Write to refunds@fooddelivery-help.example for the rest.", "somewhere else"),
        ("Visit www.refund-help.example today.", "somewhere else"),
        ("Please confirm your card number and OTP so we can send it.", "credentials"),
        ("Reply with your UPI PIN to receive it faster.", "credentials"),
        ("Your next 3 orders are on us.", "besides the amount"),
        ("Enjoy a free meal with your next order.", "besides the amount"),
        ("Delivery is free of charge for a month.", "besides the amount"),
        ("A complimentary dessert comes with your next order.", "besides the amount"),
    ],
)
def test_a_reply_that_points_elsewhere_asks_for_secrets_or_gives_things_away_fails(
    planted: str, problem: str
) -> None:
    """What text planted in a complaint could make a model write: the amount is right, and the
    reply still fails."""
    reply = f"We have refunded INR 689 to your original payment method. {planted}"
    failures = check_reply(reply, 68900, "INR", [])
    assert len(failures) == 1, failures
    assert problem in failures[0]


@pytest.mark.parametrize(
    "plain",
    [
        "Please feel free to contact us if anything else went wrong.",
        "It should reach your UPI account within a few working days.",
        "We hope your next order arrives on time.",
        "Our delivery partner has been reminded to handle orders with care.",
    ],
)
def test_ordinary_service_phrases_are_not_off_script(plain: str) -> None:
    assert check_reply(f"We have refunded INR 689. {plain}", 68900, "INR", []) == ()


def test_at_most_one_apology() -> None:
    text = "Sorry! We have refunded INR 689. We apologise again, and we are sorry."
    assert check_reply(text, 68900, "INR", []) == ("apologises 3 times (at most once)",)


def test_find_amounts_reports_text_value_and_currency() -> None:
    found = find_amounts("Refunded ₹689.50 and 120 paise; total 12.345 rupees.", "INR")
    assert found == (
        MoneyMention("₹689.50", 68950, "INR"),
        MoneyMention("120 paise", 120, "INR"),
        MoneyMention("12.345 rupees", None, "INR"),
    )


def test_article_style_template_reply() -> None:
    reply = template_reply(
        68900, "INR", ["the missing Hyderabadi Biryani", "the late delivery"], ["the raita leak"]
    )
    assert reply == (
        "We have refunded INR 689 to your original payment method; it should reach you within a "
        "few working days. This covers the missing Hyderabadi Biryani and the late delivery. A "
        "colleague will review the raita leak and get back to you with the outcome. We are sorry "
        "for the trouble with this order."
    )
    assert check_reply(reply, 68900, "INR", ["Raita"]) == ()


def test_template_with_nothing_approved_and_nothing_held() -> None:
    reply = template_reply(0, "INR", ["the delivery partner's conduct"], [])
    assert "not able to offer a refund" in reply
    assert check_reply(reply, 0, "INR", []) == ()


def test_safe_phrase_strips_what_the_guard_reacts_to() -> None:
    assert safe_phrase("₹640 refund for the biryanis, sorry!", "INR") == "for the biryanis, !"
    assert safe_phrase("refrefundund Rs. 5", "INR") == "."
    assert safe_phrase("fifty ¥ for the \uff15\uff10\uff10ml Coke", "INR") == "for the ml Coke"


# --- properties ---------------------------------------------------------------------------

_TRICKY = st.sampled_from(
    [
        "Pay",
        "Back",
        "Paid",
        "Reimburse",
        "Roll",
        "refund",
        "credit",
        "money",
        "return",
        "the",
        "will",
        "we'll",
        "no",
        "not",
        "nothing",
        "n't",
        "closed",
        "review",
        "again",
        "the same",
        "once more",
        "that amount",
        "nine",
        "seven",
        "grand",
        "whole",
        "everything",
        "all your",
        "every item",
        "covers",
        "wallet",
        "added",
        "#500",
        "x5",
        "credit-500",
        "bonus:500",
        "❶",
        "½",
        "Ⅻ",
        "Raita",
        "Combo",
        "and",
        ",",
        ".",
        ";",
        "INR",
        "₹",
        "20:15",
        "sorry",
    ]
)
"""Words the guard reacts to, for item names made of them ("Pay Back Combo", "No Onion")."""
names = st.text(max_size=40) | st.lists(_TRICKY, min_size=1, max_size=6).map(" ".join)
phrases = st.lists(names, max_size=4)
currencies = st.sampled_from(["INR", "USD", "EUR", "GBP", "JPY", "KWD"]) | st.from_regex(
    r"[A-Z]{3}", fullmatch=True
).filter(lambda code: code not in ("ONE", "TWO", "SIX", "TEN"))
"""Currency codes: ISO 4217 names none that is a number word, which the guard reads as one."""


@given(
    st.integers(min_value=0, max_value=10**9),
    currencies,
    phrases,
    phrases,
)
@example(68900, "INR", ["INR 640 refund for 2 biryanis", "sorry"], ["Rs. 60 raita, apologies"])
@example(0, "AND", ["12"], ["34", "56"])
@example(0, "INR", ["refunded 500 rupees"], [])
@example(68900, "INR", ["a voucher worth 200/-", "1 lakh"], ["500 paisa", "Rupees 5"])
@example(0, "INR", ["six hundred rupees"], ["money back in dollars"])
@example(100, "INR", ["the www.evil.example link", "your OTP"], ["a free meal, on us"])
@example(0, "INR", [], ["Pay Back Combo"])
@example(1, "CVC", [], [])
@example(0, "INR", ["Paid Back Pizza"], ["Paid Back Pizza", "Reimburse Roll"])
@example(28900, "INR", ["the missing Chicken 65"], ["Momos (10 pcs)", "65"])
def test_template_reply_always_passes_the_guard(
    approved: int, currency: str, resolved: list[str], held: list[str]
) -> None:
    for earlier in (False, True):
        reply = template_reply(approved, currency, resolved, held, earlier_refund=earlier)
        assert check_reply(reply, approved, currency, held, earlier_refund=earlier) == ()
        assert reply == template_reply(approved, currency, resolved, held, earlier_refund=earlier)
        # The same phrases as the names of the round's items, whose digits it may quote.
        items = [*resolved, *held]
        named = template_reply(
            approved, currency, resolved, held, earlier_refund=earlier, item_names=items
        )
        assert (
            check_reply(named, approved, currency, held, earlier_refund=earlier, item_names=items)
            == ()
        )


_ITEM_WORDS = st.sampled_from(
    [
        "Boondi",
        "Raita",
        "Hyderabadi",
        "Biryani",
        "Paneer",
        "Tikka",
        "Garlic",
        "Naan",
        "Masala",
        "Dosa",
        "Pay",
        "Back",
        "Paid",
        "Reimburse",
        "Roll",
        "No",
        "Onion",
        "Pizza",
        "Combo",
        "Whole",
        "Wheat",
        "Family",
        "Meal",
        "Closed",
        "Lid",
        "Extra",
        "Cheese",
    ]
)
"""Words of item names, tricky ones included ("Pay Back Combo", "No Onion Pizza", "Whole Wheat",
"Closed Lid Raita")."""


@st.composite
def _resolved_with_held_names(draw: st.DrawFn) -> tuple[list[str], list[str], list[str]]:
    """Resolved phrases naming items, held phrases, and held names that are runs of words of
    the resolved items' names ("Raita" held, "the missing Boondi Raita" resolved)."""
    items = draw(st.lists(st.lists(_ITEM_WORDS, min_size=1, max_size=3), min_size=1, max_size=3))
    names = []
    for words in draw(st.lists(st.sampled_from(items), min_size=1, max_size=2)):
        start = draw(st.integers(min_value=0, max_value=len(words) - 1))
        end = draw(st.integers(min_value=start + 1, max_value=len(words)))
        names.append(" ".join(words[start:end]))
    resolved = [f"the missing {' '.join(words)}" for words in items]
    return resolved, [f"the {name}" for name in names], names


@given(st.integers(min_value=0, max_value=10**9), currencies, _resolved_with_held_names())
@example(68900, "INR", (["the missing Boondi Raita"], ["the Raita"], ["Raita"]))
def test_template_reply_passes_the_guard_with_the_handlers_held_names(
    approved: int, currency: str, drawn: tuple[list[str], list[str], list[str]]
) -> None:
    """The handler checks the model's reply with the names only held lines name; the template
    passes the same check, also when a resolved item's name holds a held one."""
    resolved, held, names = drawn
    for earlier in (False, True):
        reply = template_reply(
            approved, currency, resolved, held, earlier_refund=earlier, held_names=names
        )
        failures = check_reply(
            reply, approved, currency, held, earlier_refund=earlier, held_names=names
        )
        assert failures == (), (reply, failures)


def test_a_resolved_item_holding_a_held_items_name_is_not_said_to_be_covered() -> None:
    reply = template_reply(
        68900, "INR", ["the missing Boondi Raita"], ["the Raita"], held_names=["Raita"]
    )
    assert check_reply(reply, 68900, "INR", ["the Raita"], held_names=["Raita"]) == (), reply
    assert "This covers the missing Boondi Raita" not in reply
    assert "A colleague will review the Raita and get back to you" in reply


def test_a_later_rounds_template_keeps_the_earlier_refund_in_view() -> None:
    """Round 2 of a dispute round 1 paid: with nothing more to pay it does not say that no
    refund is offered; with more it does not say that this amount covers everything."""
    nothing_more = template_reply(0, "INR", ["the Raita"], [], earlier_refund=True)
    assert "not able to offer a refund" not in nothing_more
    assert "What our earlier reply said about this order still stands." in nothing_more
    more = template_reply(6000, "INR", ["the late delivery", "the Raita"], [], earlier_refund=True)
    assert "We have refunded INR 60 to your original payment method, in addition to our" in more
    assert "Together they cover the late delivery and the Raita." in more


@given(st.integers(min_value=0, max_value=10**9), currencies)
def test_the_formatted_amount_reads_back_as_itself(approved: int, currency: str) -> None:
    mentions = find_amounts(f"Refunded {format_amount(approved, currency)}.", currency)
    assert mentions
    assert all(m.minor == approved for m in mentions)


# --- numerals that are not decimal digits (a reply holding one used to raise) -------------

PAID_HELD = "We have refunded INR 689. The Raita will be reviewed."


@pytest.mark.parametrize(
    "numeral",
    ["Ref ❶❷.", "Ref ⓿⓵.", "Ref ➀➁.", "Ref ①②.", "Add ½ more.", "Ref Ⅻ.", "五百 back.", "Ref 7²."],
)
def test_a_numeral_that_is_not_a_decimal_digit_fails_without_raising(numeral: str) -> None:
    failures = check_reply(f"{PAID_HELD} {numeral}", 68900, "INR", ["the Raita"])
    assert any(f.startswith("writes a number in characters it cannot read") for f in failures), (
        failures
    )


def test_the_audits_circled_digits_fail_with_a_reason() -> None:
    reply = "We have refunded INR 689. The Raita will be reviewed. Ref ❶❷."
    assert check_reply(reply, 68900, "INR", ["the Raita"]) == (
        "writes a number in characters it cannot read: '❶❷'",
    )
    assert find_amounts(reply, "INR") == (MoneyMention("INR 689", 68900, "INR"),)


def test_other_scripts_decimal_digits_are_still_read_as_digits() -> None:
    assert check_reply("We have refunded INR ٦٨٩.", 68900, "INR", []) == ()
    assert check_reply("We have refunded INR \uff16\uff18\uff19.", 68900, "INR", []) == ()


@given(
    st.text(),
    st.integers(min_value=0, max_value=10**12),
    currencies,
    st.lists(st.text(max_size=30), max_size=3),
    st.lists(st.text(max_size=30), max_size=3),
    st.booleans(),
)
@example(
    "We have refunded INR 689. The Raita will be reviewed. Ref ❶❷.", 68900, "INR", ["x"], [], False
)
@example("⓿⓵ ➀ INR ❶ 12❷ #❸ x❹ 1:❺", 0, "INR", [], ["❶"], True)
def test_the_guard_never_raises_it_only_passes_or_fails(
    text: str, approved: int, currency: str, held: list[str], names: list[str], earlier: bool
) -> None:
    failures = check_reply(text, approved, currency, held, earlier_refund=earlier, held_names=names)
    assert isinstance(failures, tuple)
    assert all(isinstance(f, str) and f for f in failures)


def test_a_guard_that_raises_is_a_failure_for_the_handler_not_a_crash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model's answer is cached before the guard reads it: a guard that raised would stop
    the settler on every redelivery of the round. It is a failure instead (and the template is
    sent), logged."""
    from services.settler import handler

    def raising_guard(*_args: object, **_kwargs: object) -> tuple[str, ...]:
        raise ValueError("invalid literal for int() with base 10: '❶❷'")

    failures = handler.guard_failures(
        "Ref ❶❷.",
        68900,
        "INR",
        [],
        earlier_refund=False,
        held_names=[],
        where="d-1 round 1",
        check=raising_guard,
    )
    assert failures == [
        "the guard could not read the reply: ValueError: invalid literal for int() with base 10:"
        " '❶❷'"
    ]
    assert "d-1 round 1" in caplog.text
    assert (
        handler.guard_failures(
            "We have refunded INR 689.",
            68900,
            "INR",
            [],
            earlier_refund=False,
            held_names=[],
            where="d-1 round 1",
        )
        == []
    )


# --- nothing approved: no wording that promises money ------------------------------------


@pytest.mark.parametrize(
    "promise",
    [
        "We'll refund you.",
        "We have issued a full refund.",
        "We're refunding the biryanis.",
        "We shall refund the biryanis.",
        "We will return the money for the biryanis to your card.",
        "We are crediting your card for the biryanis.",
        "We have approved your refund request.",
        "A refund for the biryanis is on the way.",
        "We will refund the biryanis you did not get.",
        "Since the biryanis did not arrive we will refund them.",
        "We will refund you without delay.",
        "A refund for the biryanis is due, and a colleague will review the Raita.",
        "After review we will refund the Raita.",
        "The Raita is under review and a refund is on its way.",
        "We have put the money back on your card.",
        "Your money will be returned.",
    ],
)
def test_with_nothing_approved_any_refund_wording_not_negated_promises_money(
    promise: str,
) -> None:
    failures = check_reply(promise, 0, "INR", [])
    assert any(f.startswith("promises money although nothing is approved") for f in failures), (
        failures
    )


@pytest.mark.parametrize(
    "honest",
    [
        "Nothing is refunded now; the Raita is with a reviewer.",
        "We are not able to offer a refund for this order.",
        "No refund applies to the late delivery.",
        "A refund is not possible for this order.",
        "We won't be refunding anything at this stage.",
        "We have not credited anything to your wallet.",
        "A colleague will review whether a refund is due for the Raita.",
        "Your refund request for the Raita is under review.",
        "The amount approved for refund at this stage is INR 0.",
        "Our earlier refund for this order still stands.",
        "Please check your credit card statement.",
    ],
)
def test_with_nothing_approved_negated_or_review_refund_wording_passes(honest: str) -> None:
    assert check_reply(honest, 0, "INR", []) == (), honest


@pytest.mark.parametrize(
    "refusal",
    [
        "The refund you asked for could not be approved.",
        "Your refund request has been rejected.",
        "I'm afraid a refund can't be issued in this case.",
        "We did not find a reason for a refund.",
        "Your order does not qualify for a refund.",
        "We found no grounds for a refund.",
        "Refunds are only possible for missing or wrong items.",
        "We are not in a position to refund this order.",
    ],
)
def test_with_nothing_approved_a_refusal_is_no_promise(refusal: str) -> None:
    assert check_reply(refusal, 0, "INR", []) == (), refusal


def test_with_nothing_approved_a_refund_left_to_the_review_is_no_promise() -> None:
    reply = "A colleague will review your complaint and decide on any refund."
    assert check_reply(reply, 0, "INR", ["the Raita"], held_names=["Raita"]) == ()


@pytest.mark.parametrize(
    "promise",
    [
        "We found a reason for a refund.",
        "Your order qualifies for a refund.",
        "We are in a position to refund this order.",
        "The refund could be approved soon.",
        "A refund for what you could not be given is on the way.",
        "You don't need to do anything to get your refund.",
        "The Raita is under review and a refund for the biryanis is due.",
        "A colleague will review the Raita and we will refund you.",
        "A colleague will review the Raita and a refund will follow.",
    ],
)
def test_with_nothing_approved_refund_wording_beside_a_refusal_or_review_still_promises(
    promise: str,
) -> None:
    failures = check_reply(promise, 0, "INR", [])
    assert any(f.startswith("promises money although nothing is approved") for f in failures), (
        failures
    )


@pytest.mark.parametrize("name", ["Pay Back Combo", "Paid Back Pizza", "Reimburse Roll"])
def test_a_held_item_named_like_a_promise_keeps_the_template_within_its_guard(name: str) -> None:
    for approved in (0, 68900):
        reply = template_reply(approved, "INR", [], [name])
        assert check_reply(reply, approved, "INR", [name]) == (), reply
        assert "A colleague will review" in reply


# --- a review mention a negation cancels is none ------------------------------------------

PAID = "We have refunded INR 689 to your original payment method"


@pytest.mark.parametrize(
    "negated",
    [
        f"{PAID} and nothing is left to review.",
        f"{PAID}. We decided not to review the Raita.",
        f"{PAID}. The Raita was not sent for review.",
        f"{PAID}. There is no need for a review of the Raita.",
        f"{PAID}. The Raita under review earlier is now closed with nothing more to pay.",
        f"{PAID}. We won't review the Raita.",
    ],
)
def test_a_negated_review_does_not_say_the_held_items_go_to_review(negated: str) -> None:
    assert check_reply(negated, 68900, "INR", ["the Raita"]) == (
        "does not say that the held items go to review",
    )


@pytest.mark.parametrize(
    "pending",
    [
        f"{PAID}. A colleague will review the Raita, which did not arrive sealed.",
        f"{PAID}. Our team is reviewing the Raita and nothing else is needed from you.",
        f"{PAID}; no more is due for the biryanis. The Raita is under review.",
    ],
)
def test_a_review_with_a_negation_in_another_clause_still_counts(pending: str) -> None:
    assert check_reply(pending, 68900, "INR", ["the Raita"]) == (), pending


@pytest.mark.parametrize(
    "pending",
    [
        f"{PAID}. A colleague will review the Raita in no more than two days.",
        f"{PAID}. The Raita will be reviewed without delay.",
        f"{PAID}. The Raita has not been refunded pending review.",
    ],
)
def test_a_negation_after_the_review_word_does_not_cancel_it(pending: str) -> None:
    assert check_reply(pending, 68900, "INR", ["the Raita"]) == (), pending


@pytest.mark.parametrize(
    "negated",
    [
        f"{PAID}. No one will review the Raita.",
        f"{PAID}. Nobody will review the Raita.",
        f"{PAID}. The Raita is no longer under review.",
        f"{PAID}. We are unable to review the Raita.",
        f"{PAID}. There is nothing more to review.",
        f"{PAID}. The Raita will not be reviewed.",
    ],
)
def test_a_negation_right_before_the_review_word_still_cancels_it(negated: str) -> None:
    assert check_reply(negated, 68900, "INR", ["the Raita"]) == (
        "does not say that the held items go to review",
    )


def test_a_held_item_whose_name_negates_is_named_after_the_review_word() -> None:
    """A negation after "will review" (in an item's name) does not cancel the review."""
    reply = template_reply(0, "INR", ["the late delivery"], ["the No Onion Pizza"])
    assert check_reply(reply, 0, "INR", ["the No Onion Pizza"]) == (), reply
    assert "A colleague will review the No Onion Pizza and get back to you" in reply
    assert "We have noted the late delivery." in reply


def test_a_held_item_whose_name_closes_the_review_gets_the_templates_generic_sentence() -> None:
    reply = template_reply(0, "INR", ["the late delivery"], ["the Closed Lid Raita"])
    assert check_reply(reply, 0, "INR", ["the Closed Lid Raita"]) == (), reply
    assert "A colleague will review the rest of your complaint" in reply
    assert "We have noted the late delivery." in reply


# --- a number written like an identifier, with money near it, is an amount ---------------


@pytest.mark.parametrize(
    "sneaked",
    [
        "We have also credited #500 to your wallet.",
        "We have also added credit-500 to your wallet.",
        "Wallet bonus:500.",
        "Wallet top-up/500 applied.",
        "We have added x500 to your wallet.",
    ],
)
def test_a_second_amount_written_like_an_identifier_fails(sneaked: str) -> None:
    failures = check_reply(f"{PAID}. {sneaked}", 68900, "INR", [])
    assert "names an amount other than the approved INR 689: '500'" in failures, failures


@pytest.mark.parametrize(
    "labelled",
    [
        "We have refunded INR 689 for order #1840.",
        "We have refunded INR 689 for your order-1840.",
        "We have refunded INR 689 against payment pi_order1840.",
        "We have refunded INR 689 (ticket #2231) to your card.",
        "We have refunded INR 689 at 20:15 on 04/12.",
    ],
)
def test_a_labelled_identifier_clock_time_or_date_next_to_the_refund_is_not_money(
    labelled: str,
) -> None:
    assert check_reply(labelled, 68900, "INR", []) == (), labelled


# --- the amount said again without a number -----------------------------------------------


@pytest.mark.parametrize(
    "again",
    [
        "We have refunded INR 689 now and the same again tomorrow.",
        "We have refunded INR 689 now and that amount once more.",
        "We have refunded INR 689 to your card and the same to your wallet.",
        "We have refunded INR 689 and the same amount for the delay.",
        "We have refunded INR 689 and will refund it again if needed.",
    ],
)
def test_the_amount_repeated_without_a_number_fails(again: str) -> None:
    failures = check_reply(again, 68900, "INR", [])
    assert any(f.startswith("repeats the amount without a number") for f in failures), failures


@pytest.mark.parametrize(
    "plain",
    [
        "We are sorry this happened again.",
        "Once again, we are sorry.",
        "That amount should reach you within three working days.",
        "The same delivery partner will not be assigned to your orders again.",
    ],
)
def test_again_or_the_same_away_from_money_passes(plain: str) -> None:
    assert check_reply(f"We have refunded INR 689. {plain}", 68900, "INR", []) == (), plain


@pytest.mark.parametrize(
    "same_way",
    [
        "We have refunded INR 689 to the same payment method you used.",
        "We have refunded INR 689. The refund will go to the same card.",
        "We have refunded INR 689. You'll get the refund in your account in the same way you paid.",
        "We have refunded INR 689 to the same account you paid from.",
    ],
)
def test_the_same_card_account_or_way_is_not_the_amount_again(same_way: str) -> None:
    assert check_reply(same_way, 68900, "INR", []) == (), same_way


@pytest.mark.parametrize(
    "again",
    [
        "We have refunded INR 689 and will refund the same.",
        "We have refunded INR 689 and will credit the same, as promised.",
    ],
)
def test_the_same_standing_for_the_amount_still_repeats_it(again: str) -> None:
    failures = check_reply(again, 68900, "INR", [])
    assert any(f.startswith("repeats the amount without a number") for f in failures), failures


# --- a held item claimed as refunded anywhere in the reply --------------------------------

HELD_RAITA = " A colleague will review the Raita."


@pytest.mark.parametrize(
    ("claim", "failure"),
    [
        (
            "We have refunded INR 689. This covers the biryanis, the delay and the Raita.",
            "says the refund covers 'Raita', which is held for review",
        ),
        (
            "We have refunded INR 689 which covers all your items.",
            "says the refund covers all although items are held: 'all your'",
        ),
        (
            "We have refunded INR 689. It covers every item in your order.",
            "says the refund covers all although items are held: 'every item'",
        ),
        (
            "We have refunded INR 689. We will refund the Raita as well.",
            "says the refund covers 'Raita', which is held for review",
        ),
        (
            "We have refunded INR 689. The Raita will be refunded too, it is under review.",
            "says the refund covers 'Raita', which is held for review",
        ),
        (
            "We have refunded INR 689. Each item in your order is included.",
            "says the refund covers all although items are held: 'Each item'",
        ),
    ],
)
def test_a_held_item_or_everything_claimed_anywhere_in_the_reply_fails(
    claim: str, failure: str
) -> None:
    failures = check_reply(claim + HELD_RAITA, 68900, "INR", ["the Raita"], held_names=["Raita"])
    assert failure in failures, failures


@pytest.mark.parametrize(
    "apart",
    [
        "The Raita is not covered by this refund; a colleague will review it.",
        "A colleague will review whether a refund is due for the Raita.",
        "This refund does not include the Raita, which a colleague will review.",
        "A colleague will review the Raita and get back to you.",
    ],
)
def test_a_held_item_named_apart_from_the_refund_passes(apart: str) -> None:
    reply = f"We have refunded INR 689 for the biryanis. {apart}"
    assert check_reply(reply, 68900, "INR", ["the Raita"], held_names=["Raita"]) == (), reply


# --- a one-digit amount in words ----------------------------------------------------------


@pytest.mark.parametrize(
    ("sneaked", "word"),
    [
        ("You will also get seven back.", "seven"),
        ("We also added nine to your wallet.", "nine"),
        ("We have also added a grand to your wallet.", "grand"),
        ("We will add five to your wallet.", "five"),
        ("You get one more as goodwill.", "one"),
        ("You will get one more.", "one"),
        ("We will add five more.", "five"),
        ("We will give one extra as goodwill.", "one"),
        ("We will add five bucks.", "five"),
    ],
)
def test_a_one_digit_amount_in_words_fails(sneaked: str, word: str) -> None:
    failures = check_reply(f"{PAID}. {sneaked}", 68900, "INR", [])
    assert f"names an amount other than the approved INR 689: {word!r}" in failures, failures


@pytest.mark.parametrize(
    "count",
    [
        "We have refunded INR 689 for one of the biryanis.",
        "We have refunded INR 689 for the two biryanis.",
        "We have refunded INR 689 and added two biryanis to our notes for the restaurant.",
        "We have refunded INR 689. One of our team read your complaint.",
        "We have refunded INR 689 from your grand total.",
    ],
)
def test_number_words_as_counts_still_pass(count: str) -> None:
    assert check_reply(count, 68900, "INR", []) == (), count


@pytest.mark.parametrize(
    "count",
    [
        "Please give us one more chance.",
        "If you have one more question, just ask.",
        "You will get one email once it is done.",
        "We paid one visit to the restaurant.",
    ],
)
def test_a_number_word_before_a_noun_or_one_more_chance_is_a_count(count: str) -> None:
    assert check_reply(f"{PAID}. {count}", 68900, "INR", []) == (), count


@pytest.mark.parametrize(
    "reply",
    [
        "We have refunded INR 689 for the biryanis. A colleague will review the Raita and decide"
        " whether a refund is due.",
        "We have refunded INR 689 for the biryanis. A colleague will review the Raita and decide"
        " on any refund.",
        "We have refunded INR 689 for the biryanis and the Raita is under review.",
        "We have refunded INR 689 for the biryanis, while the Raita is under review.",
    ],
)
def test_a_held_item_sent_to_review_beside_refund_wording_is_not_claimed(reply: str) -> None:
    assert check_reply(reply, 68900, "INR", ["the Raita"], held_names=["Raita"]) == (), reply


@pytest.mark.parametrize(
    "claim",
    [
        "We have refunded INR 689. A colleague will review the Raita and we will refund it.",
        "We have refunded INR 689. A colleague will review the Raita and refund it.",
        "We have refunded INR 689 for the biryanis and the Raita, which is under review.",
        "We have refunded INR 689 for the Raita and the Raita is under review.",
    ],
)
def test_a_held_item_refunded_beside_its_review_is_still_claimed(claim: str) -> None:
    failures = check_reply(claim, 68900, "INR", ["the Raita"], held_names=["Raita"])
    assert "says the refund covers 'Raita', which is held for review" in failures, failures


@pytest.mark.parametrize(
    "more",
    [
        "We will refund the delivery fee as well.",
        "Your delivery fee will be returned as well.",
        "A separate refund for the delivery fee follows.",
        "We will refund the delivery fee.",
        "We will also pay back your delivery fee.",
        "We will also refund the delivery fee for this order.",
        "The rest will be refunded next week.",
        "Your delivery charge will be refunded within three working days.",
        "A second refund for the delay will follow.",
        "A further refund will be issued for the delay.",
        "The balance will be refunded next week.",
        "We will refund the difference next week.",
        "More money is on the way for the delay.",
    ],
)
def test_a_reply_that_promises_money_besides_the_approved_amount_fails(more: str) -> None:
    """The amount is stated, and then more is promised without a number: the customer would
    wait for money no line approved."""
    text = f"We have refunded INR 689 to your original payment method. {more}"
    failures = check_reply(text, 68900, "INR", [])
    assert len(failures) == 1, failures
    assert failures[0].startswith("promises money besides the approved INR 689: ")


def test_money_besides_the_amount_in_its_own_sentence_fails_after_it_not_before() -> None:
    """A clause after the amount's in its sentence is read as the next sentence is; one before
    it, or the amount's own, says what the amount is for."""
    one_sentence = check_reply(
        "We have refunded INR 689 and will refund the delivery fee as well.", 68900, "INR", []
    )
    assert one_sentence == (
        "promises money besides the approved INR 689: 'will refund the delivery fee'",
    )
    also = "We have refunded INR 689 for the biryani, and we will also refund the delivery fee."
    assert check_reply(also, 68900, "INR", []) == (
        "promises money besides the approved INR 689: 'we will also refund the delivery fee'",
    )
    # A charge named in the amount's own clause is what the amount is for.
    billing = "We have refunded the overcharge on your delivery fee: INR 689."
    assert check_reply(billing, 68900, "INR", []) == ()


@pytest.mark.parametrize(
    "after",
    [
        "It should reach your card within five working days.",
        "The refund will be credited to your original payment method.",
        "That amount should reach you within three working days.",
        "The new refund should reflect within three working days.",
        "You will get your money back within a week.",
        "Refunds are usually credited within 5-7 working days.",
        "You can expect the funds in your account within 5-7 business days.",
        "We will credit your account within 5-7 days.",
        "The refund will be credited to your wallet balance.",
        "The refund should reach you within 5-7 days, and let us know if you need further help.",
        "The refund will be credited within 5-7 days, and we are sorry for the trouble too.",
        "Unfortunately, the delivery fee cannot be refunded.",
        "The delivery fee will not be refunded separately.",
        "The refund will reach your card within three working days, plus one day at weekends.",
        "The refund will be credited within three working days without any extra fee.",
        "The refund will show in your account within three days, and extra details are in the app.",
    ],
)
def test_a_reply_may_say_more_of_the_approved_refund_without_its_number(after: str) -> None:
    """Words that add, or a charge named, away from the promise are no second promise."""
    text = f"We have refunded INR 689 to your original payment method. {after}"
    assert check_reply(text, 68900, "INR", []) == ()
    assert check_reply(f"We have refunded INR 689, and {after}", 68900, "INR", []) == ()


@pytest.mark.parametrize(
    "expect",
    [
        "You can expect your money within a week.",
        "Look out for a transfer to your card in a few days.",
        "Your card will see the payment in three days.",
        "You can expect to see the funds within two days.",
        "A payment to your card will follow.",
        "Your card will receive it within two days.",
    ],
)
def test_a_reply_that_approves_nothing_may_not_say_money_is_coming(expect: str) -> None:
    text = f"A colleague will review the Raita. {expect}"
    failures = check_reply(text, 0, "INR", ["Raita"], held_names=["Raita"])
    assert len(failures) == 1, failures
    assert failures[0].startswith("promises money although nothing is approved: ")


def test_a_reply_that_approves_nothing_may_say_what_else_is_coming_and_what_was_charged() -> None:
    for answer in (
        "A colleague will review the Raita, and you can expect an answer within two days.",
        "A colleague will review the Raita, and you can expect news of any refund within two days.",
    ):
        assert check_reply(answer, 0, "INR", ["Raita"], held_names=["Raita"]) == ()
    for nothing_owed in (
        "We checked the payment on your card and it was charged only once, so no refund is due.",
        "Your card will show only one charge once the pending authorisation lapses.",
    ):
        assert check_reply(nothing_owed, 0, "INR", []) == ()


def test_a_number_written_onto_the_amount_is_not_the_amount() -> None:
    assert check_reply("We have refunded INR 689e2.", 68900, "INR", []) == (
        "does not state the approved amount INR 689",
    )
    assert check_reply("We have refunded INR 689/-.", 68900, "INR", []) == ()


@pytest.mark.parametrize(
    "promise",
    [
        "Your claim is under review. You will be paid the full order value.",
        "You'll be paid for the biryanis.",
        "Your claim is under review. We'll settle this with the full amount.",
    ],
)
def test_with_nothing_approved_being_paid_or_settling_is_a_promise(promise: str) -> None:
    failures = check_reply(promise, 0, "INR", ["your whole claim"])
    assert any("promises money" in f for f in failures), (promise, failures)


@pytest.mark.parametrize(
    "plain",
    [
        "Your claim is under review. You will not be paid until a colleague has decided.",
        "Nothing is refunded now. A colleague will review your claim before we settle it.",
        "You paid for four biryanis; a colleague will review the missing ones.",
    ],
)
def test_with_nothing_approved_payment_words_that_promise_nothing_pass(plain: str) -> None:
    assert check_reply(plain, 0, "INR", ["your whole claim"]) == (), plain


@pytest.mark.parametrize(
    "more",
    [
        "We have refunded INR 689. Your whole order will be refunded.",
        "We have refunded INR 689 to your card. You'll get double that tomorrow.",
        "We have refunded INR 689 and will double the amount as goodwill.",
        "We have refunded INR 689. The entire order will be credited back.",
        "We have refunded INR 689 and will match that amount as goodwill.",
        "We have refunded INR 689; we will match it with a goodwill refund.",
        "We have refunded INR 689; the same will follow next week.",
        "We have refunded INR 689; the same amount again will follow next week.",
        "We have refunded INR 689 and will double your compensation.",
        "We have refunded INR 689. We can refund double the price tomorrow.",
    ],
)
def test_a_promise_of_the_whole_order_or_a_multiple_of_the_amount_fails(more: str) -> None:
    assert check_reply(more, 68900, "INR", []) != (), more


def test_the_whole_order_may_be_said_refunded_when_the_amount_is_its_whole_price() -> None:
    reply = "We have refunded INR 1340. Your whole order will be refunded to your card."
    assert check_reply(reply, 134000, "INR", [], whole_order=True) == ()
    assert check_reply(reply, 134000, "INR", []) != ()
    again = "We have refunded INR 1340. We will also refund your entire order."
    assert check_reply(again, 134000, "INR", [], whole_order=True) != ()


@pytest.mark.parametrize(
    "plain",
    [
        "We have refunded INR 689. Please double-check your card statement in a few days.",
        "We have refunded INR 689. It should reach your card within a week.",
        "We have refunded INR 689 for the missing biryanis and the delay.",
        "We have refunded INR 689; the same card you paid with will show it.",
        # "The same" for "it", as replies in Indian English often say.
        "We have refunded INR 689. The same will be credited to your card in 5-7 working days.",
        "We have refunded INR 689; the same will reflect in your account in 5-7 days.",
        "We have refunded INR 689; it will match the charge on your card statement.",
        "We have refunded INR 689. We're sorry your order took double the promised time.",
        "As per our policy, we have refunded INR 689 to your original payment method.",
        "We check every order with care, and we have refunded INR 689 to your card.",
        "For each issue you raised we are sorry. We have refunded INR 689 to your card.",
        "We have refunded INR 689/- to your original payment method.",
        "We have refunded INR 689 to your card, and we check every day that refunds go through.",
        "We know you order from us every day, and we have refunded INR 689 to your card.",
        "We have refunded INR 689 to your card, which you can track daily in the app.",
        "We have refunded INR 689 for the missing Daily Special Thali.",
        "We have refunded INR 689 for the Every Day Value Meal that did not arrive.",
    ],
)
def test_ordinary_words_near_the_amount_still_pass(plain: str) -> None:
    assert check_reply(plain, 68900, "INR", []) == (), plain


def test_an_amount_that_matches_what_was_paid_for_is_no_second_amount() -> None:
    reply = "We have refunded INR 689, which matches the price of the missing biryanis."
    assert check_reply(reply, 68900, "INR", []) == ()


HIDDEN = ["\u200b", "\u2060", "\u00ad", "\ufeff", "\u202e", "\ufe0f"]
"""A zero-width space, word joiner, soft hyphen, byte order mark, right-to-left override and
variation selector."""


@pytest.mark.parametrize("hidden", HIDDEN)
def test_a_character_that_does_not_show_fails_the_reply_wherever_it_hides(hidden: str) -> None:
    """The customer sees "INR 6890" where the guard would read INR 689 and a count of 0, and
    "refu-nded" hides a promise from every word the guard looks for."""
    for text, approved in [
        (f"We have refunded INR 689{hidden}0 to your original payment method.", 68900),
        (f"We have refu{hidden}nded the full amount of your order.", 0),
        (f"{GOOD[:30]}{hidden}{GOOD[30:]}", 68900),
    ]:
        failures = check_reply(text, approved, "INR", ["the raita"])
        assert any(f.startswith("holds characters that do not show") for f in failures), text
    assert check_reply(GOOD, 68900, "INR", ["the raita"]) == ()


@pytest.mark.parametrize("mark", ["\u20e3", "\u0301", "\ufe0f\u20e3"])
def test_a_mark_on_a_digit_fails_the_reply(mark: str) -> None:
    """A keycap ("6⃣") or an accent on a digit: a number the customer may read otherwise."""
    failures = check_reply(f"We have refunded INR 689{mark}0 to your card.", 68900, "INR", [])
    assert any(f.startswith("holds characters that do not show") for f in failures), failures


def test_an_emoji_in_its_emoji_form_is_no_hidden_character() -> None:
    """A variation selector after a symbol picks its emoji form ("❤️", "🌶️"): it shows."""
    hearts = GOOD.replace("We're sorry", "\u2764\ufe0f We're sorry").replace(
        "biryanis", "\U0001f336\ufe0f biryanis"
    )
    assert check_reply(hearts, 68900, "INR", ["the raita"]) == ()


def test_joiners_that_indic_words_need_are_kept_and_read_past() -> None:
    """Zero-width joiners may be part of a word in an Indic script (an item's name here); the
    guard reads past them, so that they cannot split a number either."""
    named = GOOD.replace("the missing biryanis", "the missing क्\u200dष")
    assert check_reply(named, 68900, "INR", ["the raita"], item_names=["क्\u200dष"]) == ()
    split = GOOD.replace("INR 689", "INR 689\u200d0")
    assert any(
        f.startswith("does not state the approved")
        for f in check_reply(split, 68900, "INR", ["the raita"])
    )


@pytest.mark.parametrize(
    "text",
    [
        "We have refunded INR 689 to your original payment method\nThe delivery fee will also be"
        " refunded separately",
        "Hi,\n\nWe have refunded INR 689 to your card.\n\nYour delivery fee will be refunded as"
        " well",
    ],
)
def test_a_promise_on_a_line_of_its_own_is_read_as_its_own_sentence(text: str) -> None:
    failures = check_reply(text, 68900, "INR", [])
    assert any(f.startswith("promises money besides the approved") for f in failures), failures


@pytest.mark.parametrize(
    ("text", "held", "failure"),
    [
        ("We will credit INR 689 to your wallet\nfor every item in the order.", [], "multiplies"),
        ("We will credit INR 689 to your wallet\ndaily until it is fixed.", [], "multiplies"),
        ("We have refunded INR 689 to your card\nagain, as we did last week.", [], "repeats"),
        (
            "We have refunded INR 689 to your original payment method for:\n- the missing"
            " Biryani\n- the Raita.\nA colleague will review your other concerns.",
            ["the Raita"],
            "covers",
        ),
        (
            "We have refunded INR 689, which covers:\n- everything you ordered.\nA colleague"
            " will review the Raita.",
            ["the Raita"],
            "covers",
        ),
    ],
)
def test_a_line_break_does_not_part_what_a_sentence_says_together(
    text: str, held: list[str], failure: str
) -> None:
    """A list laid out in lines is one sentence: the amount spread over items or days, said
    again, or covering a held item, on the line after it, is read as before."""
    failures = check_reply(text, 68900, "INR", held, held_names=["Raita"] if held else [])
    assert any(failure in f for f in failures), failures


@pytest.mark.parametrize(
    ("text", "approved", "held", "failure"),
    [
        (
            "The amount approved for this order is INR 0\nWe will refund your delivery fee by"
            " Friday",
            0,
            [],
            "promises money",
        ),
        (
            "We have reviewed your complaint\nYour refund of the order value is on the way",
            0,
            [],
            "promises money",
        ),
        (
            "Sorry, we are not able to find an issue\nRefund approved for your Raita",
            0,
            [],
            "promises money",
        ),
        (
            "We have refunded INR 689 for the missing Biryani.\nA colleague will review your"
            " order\nThis covers the Raita as well",
            68900,
            ["the Raita"],
            "covers",
        ),
    ],
)
def test_a_line_of_its_own_is_not_excused_by_the_line_before(
    text: str, approved: int, held: list[str], failure: str
) -> None:
    """A zero amount, a review or a negation on one line says nothing of the next line's
    promise: a line that begins a new sentence is read as one."""
    failures = check_reply(text, approved, "INR", held, held_names=["Raita"] if held else [])
    assert any(failure in f for f in failures), failures


@pytest.mark.parametrize(
    "text",
    [
        "We have refunded INR 689 for the Biryani.\nThe Raita is under review.",
        "Hi Priya,\nWe have refunded INR 689 for the missing Biryani.\nA colleague will review"
        " the Raita.\nWarm regards,\nCustomer care",
        "We have refunded INR 689 to your card.\r\nThank you for your patience.\r\nA colleague"
        " will review the Raita.",
    ],
)
def test_a_reply_laid_out_in_lines_of_whole_sentences_passes(text: str) -> None:
    assert check_reply(text, 68900, "INR", ["the Raita"], held_names=["Raita"]) == ()


@pytest.mark.parametrize(
    ("text", "approved", "held"),
    [
        ("We are not able to\nrefund this order. We are sorry.", 0, []),
        (
            "We have refunded INR 689 for the missing Biryani, and the Raita\nis under review.",
            68900,
            ["the Raita"],
        ),
        (
            "We have refunded INR 689 for the Biryani\nThe Raita is under review",
            68900,
            ["the Raita"],
        ),
        ("We have refunded INR 689 for:\n1. the Biryani\n2. the Raita", 68900, ["the Raita"]),
    ],
)
def test_a_sentence_across_lines_that_either_reading_fails_gets_the_template(
    text: str, approved: int, held: list[str]
) -> None:
    """A line break read as a space joins what the lines say; read as a sentence's end, it
    parts them. The guard fails a reply that either reading fails: a wrapped line that only one
    reading excuses costs a template reply, never a promise sent."""
    names = ["Raita"] if held else []
    assert check_reply(text, approved, "INR", held, held_names=names) != ()


def test_a_phrase_the_template_quotes_loses_its_hidden_characters() -> None:
    assert safe_phrase("the Rai\u200bta\u00ad box", "INR") == "the Raita box"


CHICKEN_65 = (
    "We have refunded INR 289 to your original payment method for the missing Chicken 65. "
    "We're sorry about your evening."
)


def test_the_digits_of_an_item_the_round_names_are_its_name_not_an_amount() -> None:
    """ "Chicken 65" is a dish: named by the round's lines, the reply may quote it."""
    assert check_reply(CHICKEN_65, 28900, "INR", [], item_names=["Chicken 65"]) == ()
    unnamed = check_reply(CHICKEN_65, 28900, "INR", [])
    assert any(f.startswith("names an amount other than") for f in unnamed), unnamed
    spaced = CHICKEN_65.replace("Chicken 65", "chicken  65")
    assert check_reply(spaced, 28900, "INR", [], item_names=["Chicken 65"]) == ()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("We have refunded INR 289, and INR 65 for the Chicken.", ["Chicken 65"]),
        ("We have refunded INR 289 for the Chicken 650.", ["Chicken 65"]),
        ("We have refunded INR 289 and 65 more.", ["65"]),
    ],
)
def test_an_item_name_hides_no_amount_beside_it(text: str, names: list[str]) -> None:
    """Only the name as a whole, and only one with a letter in it, is read as a name."""
    assert check_reply(text, 28900, "INR", [], item_names=names) != ()


@pytest.mark.parametrize(
    "held",
    ["Chicken 65", "\u0d1a\u0d3f\u0d15\u0d4d\u0d15\u0d28\u0d4d\u200d \u0d15\u0d31\u0d3f"],
)
def test_a_held_item_is_found_as_the_guard_reads_the_reply(held: str) -> None:
    """A held name with digits (masked in the reply) or a joiner (read past in the reply) is
    read the same way, so a claim on it still fails."""
    text = (
        f"We have refunded INR 689 for the missing Biryani and the {held}. A colleague will"
        " review the rest of your complaint."
    )
    failures = check_reply(
        text, 68900, "INR", [f"the {held}"], held_names=[held], item_names=[held, "Biryani"]
    )
    assert f"says the refund covers {held!r}, which is held for review" in failures, failures


def test_the_template_quotes_an_item_name_with_its_digits() -> None:
    reply = template_reply(28900, "INR", ["the missing Chicken 65"], [], item_names=["Chicken 65"])
    assert "the missing Chicken 65" in reply
    assert check_reply(reply, 28900, "INR", [], item_names=["Chicken 65"]) == ()
    assert "Chicken 65" not in template_reply(28900, "INR", ["the missing Chicken 65"], [])


@given(
    st.integers(min_value=1, max_value=10**9),
    st.integers(min_value=1, max_value=10**9),
    st.sampled_from(["INR", "USD", "EUR", "GBP", "JPY", "KWD"]),
    st.sampled_from(["{said}", "{said} more", "another {said}", "{said} as a voucher"]),
)
def test_a_reply_naming_any_other_amount_fails_whatever_items_the_round_names(
    approved: int, other: int, currency: str, wording: str
) -> None:
    """The approved amount alone passes; any other amount beside it fails, even where an item
    the round names holds that amount's digits ("Chicken 65" does not hide "INR 65")."""
    stated, said = format_amount(approved, currency), format_amount(other, currency)
    alone = f"We have refunded {stated} to your original payment method."
    digits = said.split()[-1]
    names = [f"Chicken {digits}", digits]
    assert check_reply(alone, approved, currency, [], item_names=names) == ()
    if other == approved:
        return
    text = f"{alone} You may also get {wording.format(said=said)} later."
    failures = check_reply(text, approved, currency, [], item_names=names)
    assert any(f.startswith("names an amount other than") for f in failures), failures


@pytest.mark.parametrize(
    ("text", "approved", "held"),
    [
        (
            "We have refunded INR 689 for\nYour missing Biryani and the Raita. A colleague will"
            " review the Raita.",
            68900,
            ["the Raita"],
        ),
        (
            "We have refunded\nINR 689 for the Biryani and the Raita. A colleague will review"
            " the Raita.",
            68900,
            ["the Raita"],
        ),
        (
            "We have refunded INR 689 for:\n1. the Biryani\n2. the Raita\nA colleague will"
            " review the rest.",
            68900,
            ["the Raita"],
        ),
        ("We will credit INR 689 to your wallet\r\nfor every item in the order.", 68900, []),
        (
            "We have refunded INR 689 to your card.\r\nWe will also refund\r\nthe rest later.",
            68900,
            [],
        ),
        ("Sorry about that, for every missing biryani\nWe have refunded INR 689.", 68900, []),
        ("We have refunded INR 689, and we will credit it\nAgain next week.", 68900, []),
        ("We are sending the\nAmount to your card.", 0, []),
        (
            "Your delivery fee will be refunded separately\nand INR 689 has been refunded for the"
            " Biryani.",
            68900,
            [],
        ),
    ],
)
def test_what_a_line_break_splits_or_wraps_is_read_as_said(
    text: str, approved: int, held: list[str]
) -> None:
    """Each of these passed one of the rules tried for line breaks in this release: a claim on
    a held item wrapped onto a line that begins with a capital or a number, Windows line ends,
    an amount spread or repeated across lines, a promise before the amount on the line above."""
    names = ["Raita"] if held else []
    assert check_reply(text, approved, "INR", held, held_names=names) != ()


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        ("We have refúnded the full amount of your order.", "promises money"),  # an accent
        ("We have re\u0301funded the full amount of your order.", "promises money"),  # combining
        ("We have r\u0435funded the full amount of your order.", "writes letters"),  # Cyrillic
        ("Your order has been pa\u0131d back in full.", "writes letters"),  # a dotless "i"
        ("आपको पूरा पैसा वापस मिलेगा।", "writes letters"),  # "you will get all your money back"
    ],
)
def test_a_promise_in_letters_the_guard_does_not_read_as_english_fails(
    text: str, failure: str
) -> None:
    """With nothing approved, a promise must fail however its letters are written: an accent
    is read past, another script's letters refuse the reply."""
    assert any(f.startswith(failure) for f in check_reply(text, 0, "INR", []))


def test_accents_on_letters_and_an_items_name_in_another_script_pass() -> None:
    """ "café" is read as "cafe"; an item's name in its own script is the item's name."""
    accented = GOOD.replace("your evening", "your evening at the café")
    assert check_reply(accented, 68900, "INR", ["the raita"]) == ()
    named = GOOD.replace("the missing biryanis", "the missing पनीर टिक्का")
    assert check_reply(named, 68900, "INR", ["the raita"], item_names=["पनीर टिक्का"]) == ()
    failures = check_reply(named, 68900, "INR", ["the raita"])
    assert failures == ("writes letters the guard does not read: 'पनरटक'",)  # each once


def test_the_template_names_an_item_in_another_script_only_as_a_quoted_name() -> None:
    """The template passes its own guard: it quotes an item's name in another script when the
    round's lines name it, and uses plainer words when they do not."""
    resolved, held = ["the missing पनीर टिक्का"], ["the Raita"]
    quoted = template_reply(68900, "INR", resolved, held, item_names=["पनीर टिक्का", "Raita"])
    assert "पनीर टिक्का" in quoted
    unquoted = template_reply(68900, "INR", resolved, held)
    assert "पनीर" not in unquoted
    assert check_reply(unquoted, 68900, "INR", held) == ()


@pytest.mark.parametrize(
    "text",
    [
        # "We are able to offer a refund", as the customer reads it; "not" to the guard.
        "We are n\u0336o\u0336t\u0336 able to offer a refund for this order.",
        "N\u0338o\u0338t\u0338h\u0338i\u0338n\u0338g\u0338 will be refunded for this order.",
        "We are n\u20ddot able to offer a refund for this order.",  # an enclosing circle
    ],
)
def test_a_struck_through_or_enclosed_letter_fails_the_reply(text: str) -> None:
    """Accents are read past, but a mark that crosses a letter out or encloses it changes the
    word the customer reads: the reply is refused."""
    failures = check_reply(text, 0, "INR", [])
    assert any(f.startswith("holds characters that do not show") for f in failures), failures


def test_an_items_name_in_another_script_with_a_digit_is_quoted_whole() -> None:
    """ "चिकन 65" is the item's name: its letters are the name's, its digits no amount."""
    named = GOOD.replace("the missing biryanis", "the missing चिकन 65")
    assert check_reply(named, 68900, "INR", ["the raita"], item_names=["चिकन 65"]) == ()
