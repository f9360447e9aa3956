"""The reply guard against promises without a refund verb, several apologies in other words, and
a zero written in more than one digit."""

from __future__ import annotations

import pytest

from services.llm_standin.reply import write_reply
from services.settler.guard import check_reply
from services.settler.template import template_reply

PAID = "We have refunded INR 689 to your original payment method for the missing biryanis."


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        ("You won't be charged for the missing biryanis.", "promises money"),
        ("You will not be charged for the Raita.", "promises money"),
        ("You don't need to pay for the missing biryanis.", "promises money"),
        ("We have waived the cost of the missing biryanis.", "promises something besides"),
        ("We'll cover the cost of the missing biryanis.", "promises money"),
        ("The charge for the missing biryanis will be cancelled.", "promises money"),
        ("We have voided the charge for the biryanis.", "promises money"),
        ("We'll add it to your wallet.", "promises money"),
        ("We will top up your wallet today.", "promises something besides"),
        ("We will redeliver the biryanis tonight.", "promises something besides"),
    ],
)
def test_with_nothing_approved_a_charge_lifted_or_goods_promised_fail(
    text: str, failure: str
) -> None:
    failures = check_reply(text, 0, "INR", [])
    assert any(f.startswith(failure) for f in failures), failures


@pytest.mark.parametrize(
    "text",
    [
        "We are unable to cover the cost of the biryanis.",
        "We are not able to cancel the charge for the Raita.",
        "We have not cancelled the charge for this order.",
        "We checked the payment on your card and it was charged only once, so no refund is due.",
    ],
)
def test_with_nothing_approved_a_charge_not_lifted_passes(text: str) -> None:
    assert check_reply(text, 0, "INR", []) == ()


@pytest.mark.parametrize(
    ("more", "failure"),
    [
        ("We have also credited your wallet.", "promises money besides the approved INR 689"),
        ("Also, we have credited your wallet.", "promises money besides the approved INR 689"),
        ("I have also put it in your account.", "promises money besides the approved INR 689"),
        ("We will also add it to your wallet.", "promises money besides the approved INR 689"),
        ("We will also cover the delivery fee.", "promises money besides the approved INR 689"),
        (
            "Also, we will waive the delivery fee on your next order.",
            "promises something besides the amount",
        ),
        ("We'll also top up your wallet.", "promises something besides the amount"),
        ("We will add a tenner to your wallet.", "names money in slang"),
        ("Here are five bucks for the trouble.", "names money in slang"),
        ("We will also send you a replacement Raita.", "promises something besides the amount"),
        ("We will resend the Raita tonight.", "promises something besides the amount"),
    ],
)
def test_with_an_amount_approved_something_more_promised_fails(more: str, failure: str) -> None:
    failures = check_reply(f"{PAID} {more}", 68900, "INR", [])
    assert any(f.startswith(failure) for f in failures), failures


def test_also_after_the_amount_in_its_sentence_adds_to_it() -> None:
    text = "We have refunded INR 689 to your card and also credited your wallet."
    assert check_reply(text, 68900, "INR", []) == (
        "promises money besides the approved INR 689: 'also credited your wallet'",
    )


@pytest.mark.parametrize(
    "text",
    [
        f"{PAID} This covers the cost of the missing biryanis.",
        f"{PAID} It will also show in your account within five working days.",
        f"{PAID} You will also get an e-mail once it is on its way.",
        f"{PAID} We will also keep an eye on your next order.",
        f"{PAID} The refund will also reach your card within five days.",
        f"{PAID} We are also sorry for the wait.",
        "We have refunded INR 689, so you won't be charged for the missing biryanis.",
    ],
)
def test_with_an_amount_approved_more_words_about_it_pass(text: str) -> None:
    assert check_reply(text, 68900, "INR", []) == ()


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("We are so sorry. We regret the trouble and beg your pardon. Please forgive us.", 4),
        ("Please excuse us for the delay. We are sorry about your evening.", 2),
        ("We regret the delay, and we apologise for the cold food.", 2),
    ],
)
def test_an_apology_in_other_words_counts(text: str, count: int) -> None:
    assert check_reply(text, 0, "INR", []) == (f"apologises {count} times (at most once)",)


@pytest.mark.parametrize(
    "text",
    [
        "Please excuse the delay in our reply; we are sorry about your evening.",
        "We regret that we cannot offer a refund for this order.",
    ],
)
def test_one_apology_in_any_words_passes(text: str) -> None:
    assert check_reply(text, 0, "INR", []) == ()


@pytest.mark.parametrize(
    ("approved", "resolved", "held", "earlier"),
    [
        (68900, ["the missing biryanis"], ["the Raita"], False),
        (68900, ["the late delivery"], [], True),
        (0, [], ["the Raita"], False),
        (0, ["the late delivery"], [], False),
        (0, [], [], True),
    ],
)
def test_the_template_and_the_standin_still_pass(
    approved: int, resolved: list[str], held: list[str], earlier: bool
) -> None:
    """Both apologise once, state the amount once and promise nothing else, under every rule
    above."""
    names = [name.removeprefix("the ") for name in held]
    template = template_reply(
        approved, "INR", resolved, held, earlier_refund=earlier, held_names=names
    )
    assert (
        check_reply(template, approved, "INR", held, earlier_refund=earlier, held_names=names) == ()
    )
    amount = f"INR {approved // 100}"
    entries = [{"category": "MISSING_ITEM", "outcome": "PAY"}] if approved else []
    holding = [{"category": "PACKAGING"}] if held else []
    standin = write_reply("The raita leaked.", amount, entries, holding, earlier)["reply"]
    assert (
        check_reply(
            standin, approved, "INR", ["the packaging"] if held else [], earlier_refund=earlier
        )
        == ()
    )


@pytest.mark.parametrize(
    ("text", "other"),
    [
        ("Your wallet now holds 2 000 for you.", "'000'"),
        ("Your wallet now holds 2 000 INR for you.", "'000 INR'"),
        ("Your wallet now holds 00 for you.", "'00'"),
        ("Your wallet now holds 0.00 for you.", "'0.00'"),
    ],
)
def test_a_zero_in_more_than_one_digit_is_another_amount(text: str, other: str) -> None:
    """ "2 000" is read as a count of 2 and 000: a zero so written is not the stated "INR 0"."""
    assert check_reply(text, 0, "INR", []) == (
        f"names an amount other than the approved INR 0: {other}",
    )


@pytest.mark.parametrize("currency", ["INR", "USD", "JPY"])
def test_the_zero_amount_as_stated_passes(currency: str) -> None:
    text = f"The amount approved for refund at this stage is {currency} 0."
    assert check_reply(text, 0, currency, []) == ()


def test_the_template_names_items_whose_names_hold_an_apology_word() -> None:
    """The template leaves an apology word out of an item's name, as it does "sorry", instead
    of falling back to a reply that names no item."""
    names = ["Regret-less Brownie", "Pardon Pie"]
    reply = template_reply(
        68900,
        "INR",
        ["the missing Regret-less Brownie"],
        ["the leaking Pardon Pie"],
        held_names=["Pardon Pie"],
        item_names=names,
    )
    assert "Brownie" in reply
    assert "review the leaking Pie" in reply
    assert "the rest of your complaint" not in reply
    held = ["the leaking Pardon Pie"]
    assert check_reply(reply, 68900, "INR", held, held_names=["Pardon Pie"]) == ()
