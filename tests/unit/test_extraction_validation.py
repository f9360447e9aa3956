"""Validation of the extraction model's answer: shape, spans, items, quantities, duplicates."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench.domain import Category, LineItem
from refund_bench.errors import InvalidInput
from services.extractor.validation import (
    Claim,
    ExtractedGrievance,
    ExtractionInvalid,
    claims_left_out,
    counts_named,
    quantities_changed,
    resolve_item,
    validate_extraction,
)
from tests.unit.orders import ARTICLE_COMPLAINT, ARTICLE_ORDER, BIRYANI, RAITA, span_of

ITEMS = ARTICLE_ORDER.line_items


def grievance(
    phrase: str,
    category: str,
    text: str | None = None,
    item_name: str | None = None,
    item_quantity: int | None = None,
) -> dict[str, Any]:
    start, end = span_of(ARTICLE_COMPLAINT, phrase)
    return {
        "text": text or phrase,
        "category": category,
        "span_start": start,
        "span_end": end,
        "item_name": item_name,
        "item_quantity": item_quantity,
    }


ARTICLE_ANSWER: dict[str, Any] = {
    "grievances": [
        # Deliberately not in span order: ids follow the complaint, not the model's list.
        grievance(
            "The raita had leaked all over the inside of the bag",
            "PACKAGING",
            "The raita container leaked inside the delivery bag.",
            item_name="raita",
        ),
        grievance(
            "Ordered at 8:15pm and the food showed up at 9:40pm",
            "LATE_DELIVERY",
            "The order was delivered 85 minutes after it was placed.",
        ),
        grievance(
            "Two of the four were missing completely",
            "MISSING_ITEM",
            "Two of the four Hyderabadi Biryani units ordered were not delivered.",
            item_name="biryani",
            item_quantity=2,
        ),
        grievance(
            "the delivery guy was rude when I asked him about it",
            "PARTNER_CONDUCT",
            "The delivery partner behaved rudely when asked about the missing items.",
        ),
    ]
}


def problems_of(answer: object, items: tuple[LineItem, ...] = ITEMS) -> tuple[str, ...]:
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction(answer, ARTICLE_COMPLAINT, items)
    return caught.value.problems


def test_article_answer_gives_four_grievances_in_span_order() -> None:
    result = validate_extraction(ARTICLE_ANSWER, ARTICLE_COMPLAINT, ITEMS)
    assert [(g.grievance_id, g.category) for g in result] == [
        ("g1", Category.LATE_DELIVERY),
        ("g2", Category.MISSING_ITEM),
        ("g3", Category.PACKAGING),
        ("g4", Category.PARTNER_CONDUCT),
    ]
    missing = result[1]
    assert missing == ExtractedGrievance(
        grievance_id="g2",
        category=Category.MISSING_ITEM,
        text="Two of the four Hyderabadi Biryani units ordered were not delivered.",
        span_start=missing.span_start,
        span_end=missing.span_end,
        item_name=BIRYANI,
        item_quantity=2,
    )
    assert ARTICLE_COMPLAINT[missing.span_start : missing.span_end] == (
        "Two of the four were missing completely"
    )
    assert result[2].item_name == RAITA
    assert result[0].item_name is None


def test_an_empty_list_means_nothing_checkable() -> None:
    assert validate_extraction({"grievances": []}, ARTICLE_COMPLAINT, ITEMS) == ()


def test_extra_keys_such_as_a_model_grievance_id_are_ignored() -> None:
    answer = {"grievances": [{**ARTICLE_ANSWER["grievances"][1], "grievance_id": "x9"}]}
    assert validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS)[0].grievance_id == "g1"


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([], "must be an object"),
        ("grievances", "must be an object"),
        ({}, "missing the key 'grievances'"),
        ({"grievances": {"text": "x"}}, "not a list"),
    ],
)
def test_wrong_top_level_shape(answer: object, message: str) -> None:
    (problem,) = problems_of(answer)
    assert message in problem


def test_every_problem_is_reported_at_once() -> None:
    late = ARTICLE_ANSWER["grievances"][1]
    answer = {
        "grievances": [
            "not an object",
            {"text": "x", "category": "BILLING"},
            {**late, "category": "COLD_FOOD"},
            {**late, "span_start": 0, "span_end": 10_000},
            {**late, "span_start": 20, "span_end": 10},
            {**late, "span_start": 5, "span_end": 5},
            {**late, "item_name": "Pizza"},
            {**late, "text": 7, "span_start": "0", "item_quantity": 1.5},
        ]
    }
    problems = problems_of(answer)
    expected = [
        "grievance 1 is not an object",
        "grievance 2 is missing keys: span_start, span_end, item_name, item_quantity",
        "grievance 3: unknown category 'COLD_FOOD'",
        "grievance 4: span 0..10000 is outside the complaint",
        "grievance 5: span_start 20 is after span_end 10",
        "grievance 6: span 5..5 is empty",
        "grievance 7: item_name 'Pizza' is not on the order",
        "grievance 8: text must be a string",
        "grievance 8: span_start and span_end must be integers",
        "grievance 8: item_quantity must be an integer or null",
    ]
    for fragment in expected:
        assert any(fragment in p for p in problems), (fragment, problems)
    assert len(problems) == len(expected)
    caught = ExtractionInvalid(problems)
    assert isinstance(caught, InvalidInput)
    assert caught.reason == "; ".join(problems)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Delivered late\u202e", "text holds U+202E at position 14"),
        ("Delivered \x1b[2Jlate", "text holds U+001B at position 10"),
        ("\u200b\u200b", "text is blank"),
        ("late " * 101, "text is 505 characters, more than the 500 of one short statement"),
    ],
)
def test_a_grievance_text_a_reader_could_be_misled_by_or_lost_in_is_a_problem(
    text: str, problem: str
) -> None:
    """The text goes to the judges, the review desk and the reply: it follows the rule a
    complaint's text does (no control characters or bidirectional overrides), and is one
    short statement (a runaway one would not fit the event)."""
    late = {**ARTICLE_ANSWER["grievances"][1], "text": text}
    (found,) = problems_of({"grievances": [late]})
    assert found.startswith(f"grievance 1: {problem}"), found


def test_whitespace_only_span_is_empty() -> None:
    late = ARTICLE_ANSWER["grievances"][1]
    gap = ARTICLE_COMPLAINT.index(" ")
    (problem,) = problems_of({"grievances": [{**late, "span_start": gap, "span_end": gap + 1}]})
    assert "is empty" in problem


@pytest.mark.parametrize("category", ["MISSING_ITEM", "WRONG_ITEM"])
def test_missing_and_wrong_item_need_an_item(category: str) -> None:
    bad = grievance("Two of the four were missing completely", category)
    (problem,) = problems_of({"grievances": [bad]})
    assert f"{category} needs the item_name" in problem


@pytest.mark.parametrize("quantity", [0, 5, -1])
def test_quantity_must_be_within_what_was_ordered(quantity: int) -> None:
    bad = grievance(
        "Two of the four were missing completely",
        "MISSING_ITEM",
        item_name=BIRYANI,
        item_quantity=quantity,
    )
    (problem,) = problems_of({"grievances": [bad]})
    assert "out of range 1..4" in problem


def test_an_item_named_without_a_number_is_all_its_units() -> None:
    """As the prompt asks and the judges read it: not one unit, which pricing would pay."""
    answer = {
        "grievances": [
            grievance(
                "Two of the four were missing completely",
                "MISSING_ITEM",
                "The Hyderabadi Biryani was not delivered.",
                item_name="biryanis",
            )
        ]
    }
    (missing,) = validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS)
    assert (missing.item_name, missing.item_quantity) == (BIRYANI, 4)


@pytest.mark.parametrize("item_name", ["2 biryanis", "two of the biryanis", "biryani x2"])
def test_an_item_named_with_a_number_but_no_quantity_is_a_claim_to_repair(item_name: str) -> None:
    """The model put the count in the name and left item_quantity null: read as "named
    without a number", it would claim all four biryanis where the customer said two. The repair
    gives the count; the claim on the biryanis is one it must keep."""
    missing = grievance(
        "Two of the four were missing completely", "MISSING_ITEM", item_name=item_name
    )
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction({"grievances": [missing]}, ARTICLE_COMPLAINT, ITEMS)
    (problem,) = caught.value.problems
    assert problem.startswith(f"grievance 1: item_name {item_name!r} says how many (")
    assert caught.value.passed == (((Category.MISSING_ITEM, BIRYANI),),)
    with_count = {**missing, "item_quantity": 2}
    (kept,) = validate_extraction({"grievances": [with_count]}, ARTICLE_COMPLAINT, ITEMS)
    assert (kept.item_name, kept.item_quantity) == (BIRYANI, 2)


@pytest.mark.parametrize(
    ("claimed", "name", "counts"),
    [
        ("2 biryanis", BIRYANI, ["2"]),
        ("half the biryanis", BIRYANI, ["half"]),
        ("one of my biryanis", BIRYANI, ["one"]),
        ("the biryanis", BIRYANI, []),
        ("7 Up", "7 Up", []),
        ("two 7 Ups", "7 Up", ["two"]),
        ("Cola 500ml", "Cola 500ml", []),
        ("Two-Cheese Pizza", "Two-Cheese Pizza", []),
    ],
)
def test_the_count_a_claimed_name_gives_is_what_the_items_own_name_does_not(
    claimed: str, name: str, counts: list[str]
) -> None:
    assert counts_named(claimed, LineItem(name=name, quantity=4, unit_price_minor=100)) == counts


@pytest.mark.parametrize(
    ("claimed", "names", "expected", "counts"),
    [
        ("half tandoori chicken", ["Tandoori Chicken (Half)", "Tandoori Chicken (Full)"], 0, []),
        ("the half chicken", ["Half Chicken", "Chicken Biryani"], 0, []),
        ("the couple combo", ["Couple Combo", "Family Combo"], 0, []),
        ("the coke 500ml", ["Coke 500ml", "Coke 1.25L"], 0, []),
        ("Coca-Cola 500ml", ["Coca-Cola (500 ml)", "Raita"], 0, []),
        ("two diet cokes", ["Coke", "Diet Coke"], 1, ["two"]),
        ("diet coke x2", ["Coke", "Diet Coke"], 1, ["x2"]),
        ("half butter naan", ["Naan", "Butter Naan"], 1, ["half"]),
        ("two pizzas", ["Pizza", "Two-Cheese Pizza"], 0, ["two"]),
    ],
)
def test_count_words_tell_items_apart_as_names_and_are_counts_only_when_they_name_none(
    claimed: str, names: list[str], expected: int, counts: list[str]
) -> None:
    """Menus name portions and sizes with the words a count is said in: they are read as the
    name while they pick out one item; a count the claim wraps around a name is left out
    when it does not, and is then a count the claim gives."""
    items = [LineItem(name=name, quantity=2, unit_price_minor=100) for name in names]
    item, problem = resolve_item(claimed, items)
    assert (item, problem) == (items[expected], "")
    assert counts_named(claimed, items[expected]) == counts


@pytest.mark.parametrize(
    ("claimed", "names"),
    [
        ("two cheese pizzas", ["Two-Cheese Pizza", "Cheese Pizza"]),
        ("half of the tandoori chicken", ["Tandoori Chicken", "Tandoori Chicken (Half)"]),
    ],
)
def test_a_claim_that_picks_one_item_with_its_count_and_another_without_is_ambiguous(
    claimed: str, names: list[str]
) -> None:
    """Is "two" the count or the name? The repair is asked, rather than the claim taking all
    the units of whichever item its words happened to pick."""
    items = [LineItem(name=name, quantity=2, unit_price_minor=100) for name in names]
    item, problem = resolve_item(claimed, items)
    assert item is None
    assert problem.startswith(f"item_name {claimed!r} is ambiguous: it matches "), problem


def test_an_answer_that_is_not_whole_is_invalid_and_what_it_holds_is_kept() -> None:
    """Cut short or withheld, an answer is not the model's whole answer however it reads: it
    is repaired, and the claims it holds are what the repair must keep."""
    late, missing = ARTICLE_ANSWER["grievances"][1], ARTICLE_ANSWER["grievances"][2]
    why = "the answer was cut short (finish_reason is 'length')"
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction(
            {"grievances": [late, missing]}, ARTICLE_COMPLAINT, ITEMS, not_whole=why
        )
    assert caught.value.problems == (why,)
    assert caught.value.passed == (
        ((Category.LATE_DELIVERY, None),),
        ((Category.MISSING_ITEM, BIRYANI),),
    )
    with pytest.raises(ExtractionInvalid) as empty:
        validate_extraction({"grievances": []}, ARTICLE_COMPLAINT, ITEMS, not_whole=why)
    assert (empty.value.problems, empty.value.passed) == ((why,), ())


def test_a_repair_keeps_the_units_of_each_claim_without_fault() -> None:
    late, missing = ARTICLE_ANSWER["grievances"][1], ARTICLE_ANSWER["grievances"][2]
    two = {**missing, "item_quantity": 2}
    bad_span = {**late, "span_end": 10_000}
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction({"grievances": [bad_span, two]}, ARTICLE_COMPLAINT, ITEMS)
    assert caught.value.quantities == {(Category.MISSING_ITEM, BIRYANI): 2}
    kept = validate_extraction({"grievances": [late, two]}, ARTICLE_COMPLAINT, ITEMS)
    assert quantities_changed(caught.value.quantities, kept) == ()
    unnumbered = {**missing, "item_quantity": None}  # all the units ordered: four
    all_four = validate_extraction({"grievances": [late, unnumbered]}, ARTICLE_COMPLAINT, ITEMS)
    assert quantities_changed(caught.value.quantities, all_four) == (
        f"MISSING_ITEM for {BIRYANI!r}: 2 units in the first answer, 4 in the repair",
    )
    # A claim made twice, whole or at fault for its span, says no one quantity: the repair
    # merges them as it will.
    with pytest.raises(ExtractionInvalid) as merged:
        validate_extraction(
            {"grievances": [two, {**two, "text": "One more.", "span_end": 10_000}]},
            ARTICLE_COMPLAINT,
            ITEMS,
        )
    assert merged.value.quantities == {}
    with pytest.raises(ExtractionInvalid) as twice:
        validate_extraction(
            {"grievances": [two, {**two, "text": "Two naans."}]}, ARTICLE_COMPLAINT, ITEMS
        )
    assert twice.value.quantities == {}


def test_quantity_without_an_item_is_a_problem() -> None:
    bad = grievance("Ordered at 8:15pm", "LATE_DELIVERY", item_quantity=1)
    (problem,) = problems_of({"grievances": [bad]})
    assert "item_name is null" in problem


def test_booleans_are_not_integers() -> None:
    bad = {**ARTICLE_ANSWER["grievances"][2], "item_quantity": True}
    (problem,) = problems_of({"grievances": [bad]})
    assert "item_quantity must be an integer" in problem


def test_duplicates_by_category_and_item_and_by_text() -> None:
    first = grievance("Two of the four were missing completely", "MISSING_ITEM", item_name=BIRYANI)
    same_claim = grievance(
        "were missing", "MISSING_ITEM", text="Biryani missing", item_name="hyderabadi biryani"
    )
    late = grievance("Ordered at 8:15pm", "LATE_DELIVERY", text="It was late.")
    late_again = grievance("showed up at 9:40pm", "LATE_DELIVERY", text="Late again")
    same_text = grievance(
        "The raita had leaked", "PACKAGING", text="  it was LATE ", item_name=RAITA
    )
    problems = problems_of({"grievances": [first, same_claim, late, late_again, same_text]})
    assert problems == (
        "grievance 2 duplicates grievance 1: same category MISSING_ITEM for 'Hyderabadi Biryani'",
        "grievance 4 duplicates grievance 3: same category LATE_DELIVERY without an item",
        "grievance 5 duplicates grievance 3: same text",
    )


def test_the_prompt_asks_for_what_the_duplicate_check_enforces() -> None:
    """Two claims of one category about one item are a duplicate to the check: the model is told
    to merge them, so such a complaint does not cost a repair call, or a reviewer's time."""
    from refund_bench.llm.roles import EXTRACTOR_PROMPT_VERSION, load_prompt

    text = " ".join(load_prompt(EXTRACTOR_PROMPT_VERSION).text.split())
    assert "At most one grievance per `category` and `item_name`" in text
    assert "write one grievance whose `text` states both" in text


def test_too_many_grievances() -> None:
    answer = {"grievances": [ARTICLE_ANSWER["grievances"][1]] * 3}
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS, max_grievances=2)
    assert "more than the limit of 2" in caught.value.problems[0]


@pytest.mark.parametrize(
    ("claimed", "expected"),
    [
        ("Hyderabadi Biryani", BIRYANI),
        ("  hyderabadi   BIRYANI ", BIRYANI),
        ("biryani", BIRYANI),
        ("biryanis", BIRYANI),
        ("the Hyderabadi Biryani box", BIRYANI),
        ("RAITA", RAITA),
        ("the raita container", RAITA),
        ("Raitas", RAITA),
    ],
)
def test_item_names_resolve_to_the_exact_line_item(claimed: str, expected: str) -> None:
    item, problem = resolve_item(claimed, ITEMS)
    assert item is not None
    assert item.name == expected
    assert problem == ""


def test_a_name_in_another_unicode_form_resolves_to_the_same_item() -> None:
    """A model may write "é" as e + combining accent where the order store has one code point
    (or the other way round): the same name, so the same item."""
    composed, decomposed = "Cr\u00e8me Br\u00fbl\u00e9e", "Cre\u0300me Bru\u0302le\u0301e"
    items = (
        LineItem(name=composed, quantity=1, unit_price_minor=1),
        LineItem(name="Raita", quantity=1, unit_price_minor=1),
    )
    assert resolve_item(decomposed, items) == (items[0], "")
    assert resolve_item("the cre\u0300me bru\u0302le\u0301es", items) == (items[0], "")


def test_ambiguous_unknown_and_empty_item_names() -> None:
    items = (
        LineItem(name="Chicken Biryani", quantity=1, unit_price_minor=1),
        LineItem(name="Veg Biryani", quantity=1, unit_price_minor=1),
        LineItem(name="Raita", quantity=1, unit_price_minor=1),
        LineItem(name="Boondi Raita", quantity=1, unit_price_minor=1),
    )
    assert "ambiguous" in resolve_item("biryani", items)[1]
    assert resolve_item("raita", items)[0] == items[2]  # an exact name beats containment
    assert "not on the order" in resolve_item("naan", items)[1]
    assert "empty" in resolve_item("  ", items)[1]


@pytest.mark.parametrize(
    ("claimed", "expected"),
    [("the biryani", 0), ("my Biryanis", 0), ("chicken biryanis", 1), ("teas", 2)],
)
def test_the_item_the_claim_names_and_no_more_beats_a_longer_name(
    claimed: str, expected: int
) -> None:
    """Both names hold the claim's words, but one holds nothing else: that is the item the
    claim names (an item that adds a word is another dish)."""
    items = (
        LineItem(name="Biryani", quantity=1, unit_price_minor=1),
        LineItem(name="Chicken Biryani", quantity=1, unit_price_minor=1),
        LineItem(name="Tea", quantity=1, unit_price_minor=1),
        LineItem(name="Iced Tea", quantity=1, unit_price_minor=1),
    )
    assert resolve_item(claimed, items) == (items[expected], "")


@pytest.mark.parametrize("claimed", ["Steak", "Instead", "Biryan", "ai", "the", "2"])
def test_part_of_a_word_is_not_an_item(claimed: str) -> None:
    """Only whole words match: an item that was never ordered must not become one that was."""
    items = (
        LineItem(name="Tea", quantity=1, unit_price_minor=1),
        LineItem(name="Hyderabadi Biryani", quantity=1, unit_price_minor=1),
    )
    item, problem = resolve_item(claimed, items)
    assert item is None
    assert "not on the order" in problem


@pytest.mark.parametrize(
    ("claimed", "expected"),
    [("नान", None), ("बिरयानी", 0), ("चिकन बिरयानी", 0), ("रायता", 1)],
)
def test_words_with_vowel_signs_are_whole_words(claimed: str, expected: int | None) -> None:
    """A Devanagari vowel sign is a combining mark, not a letter: "बिरयानी" is one word, not
    the fragments "ब", "रय", "न". Naan, not on the order, must not become its biryani."""
    items = (
        LineItem(name="चिकन बिरयानी", quantity=2, unit_price_minor=35000),
        LineItem(name="रायता", quantity=1, unit_price_minor=5000),
    )
    item, _ = resolve_item(claimed, items)
    assert item == (None if expected is None else items[expected])


def test_plurals_of_both_kinds_resolve() -> None:
    items = (
        LineItem(name="Paneer Sandwich", quantity=2, unit_price_minor=1),
        LineItem(name="Masala Fries", quantity=1, unit_price_minor=1),
    )
    assert resolve_item("sandwiches", items)[0] == items[0]
    potato = LineItem(name="Potato", quantity=1, unit_price_minor=1)
    assert resolve_item("potatoes", (potato,))[0] == potato
    assert resolve_item("the fries", items)[0] == items[1]
    assert resolve_item("both of my 2 sandwiches", items)[0] == items[0]


# --- properties ---------------------------------------------------------------------------


@st.composite
def valid_answers(draw: st.DrawFn) -> tuple[str, list[dict[str, Any]]]:
    complaint = draw(st.text(alphabet="abcdefgh .", min_size=20, max_size=80))
    categories = draw(
        st.lists(
            st.sampled_from([c for c in Category if c.value not in ("MISSING_ITEM", "WRONG_ITEM")]),
            unique=True,
        )
    )
    grievances = []
    for n, category in enumerate(categories):
        start = draw(st.integers(min_value=0, max_value=len(complaint) - 1))
        end = draw(st.integers(min_value=start + 1, max_value=len(complaint)))
        if not complaint[start:end].strip():
            continue
        grievances.append(
            {
                "text": f"claim {n}",
                "category": category.value,
                "span_start": start,
                "span_end": end,
                "item_name": None,
                "item_quantity": None,
            }
        )
    return complaint, draw(st.permutations(grievances))


@given(valid_answers())
def test_valid_answers_get_ids_g1_to_gn_in_span_order(
    case: tuple[str, list[dict[str, Any]]],
) -> None:
    complaint, grievances = case
    result = validate_extraction({"grievances": grievances}, complaint, ITEMS)
    assert [g.grievance_id for g in result] == [f"g{i}" for i in range(1, len(grievances) + 1)]
    spans = [(g.span_start, g.span_end) for g in result]
    assert spans == sorted(spans)
    assert all(0 <= s < e <= len(complaint) for s, e in spans)


def _nested(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(inner) | st.dictionaries(st.text(max_size=12), inner)


@given(st.recursive(st.none() | st.integers() | st.text(max_size=5), _nested, max_leaves=12))
def test_arbitrary_json_never_crashes_only_validates_or_lists_problems(answer: object) -> None:
    problems: tuple[str, ...] = ()
    try:
        result = validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS)
    except ExtractionInvalid as invalid:
        problems = invalid.problems
        result = ()
        assert problems
    assert isinstance(result, tuple)
    assert all(isinstance(p, str) and p for p in problems)


def test_a_reviewer_sees_the_first_problems_of_an_answer_still_invalid_cut_short() -> None:
    from services.extractor.handler import PROBLEM_CHARS, _problems_in_short

    problems = [
        "grievance 1: unknown category " + repr("X" * 500),
        "grievance 2: span 4..4 is empty",
        "grievance 3: text is empty",
        "grievance 4: text is empty",
        "grievance 5: text is empty",
    ]
    short = _problems_in_short(problems)
    first, second, third = short.split("; ")
    assert len(first) == PROBLEM_CHARS
    assert first.endswith("…")
    assert second == "grievance 2: span 4..4 is empty"
    assert third == "grievance 3: text is empty (and 2 more)"
    assert _problems_in_short(["the answer is not JSON: x"]) == "the answer is not JSON: x"


def test_an_invalid_answer_names_the_claims_of_its_grievances_without_fault() -> None:
    """What a repair must keep: the claims (category, item in the order's spelling) that passed
    their own checks, once each, though the answer failed for another grievance or for a
    duplicate."""
    late, missing = ARTICLE_ANSWER["grievances"][1], ARTICLE_ANSWER["grievances"][2]
    answer = {"grievances": [missing, late, {**late, "span_end": 10_000}, {**missing}]}
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS)
    assert caught.value.passed == (
        ((Category.MISSING_ITEM, BIRYANI),),
        ((Category.LATE_DELIVERY, None),),
    )
    with pytest.raises(ExtractionInvalid) as shapeless:
        validate_extraction({"grievances": "none"}, ARTICLE_COMPLAINT, ITEMS)
    assert shapeless.value.passed == ()


def test_a_repair_that_leaves_out_a_claim_without_fault_is_told_apart() -> None:
    """Only the two answers are compared, by category and item: a repair may word a claim
    otherwise, name its item otherwise, or add one, but not drop one that was valid."""
    passed: list[list[Claim]] = [
        [(Category.LATE_DELIVERY, None)],
        [(Category.MISSING_ITEM, BIRYANI)],
    ]
    full = validate_extraction(ARTICLE_ANSWER, ARTICLE_COMPLAINT, ITEMS)
    assert claims_left_out(passed, full) == ()
    assert claims_left_out(passed, ()) == ("LATE_DELIVERY", f"MISSING_ITEM for {BIRYANI!r}")
    raita = [g for g in full if g.item_name == RAITA or g.category is Category.LATE_DELIVERY]
    assert claims_left_out(passed, raita) == (f"MISSING_ITEM for {BIRYANI!r}",)
    wrong_item = [g.model_copy(update={"item_name": RAITA}) for g in full]
    assert f"MISSING_ITEM for {BIRYANI!r}" in claims_left_out(passed, wrong_item)


def test_grievances_at_fault_with_each_other_are_claims_a_repair_keeps_one_of() -> None:
    """One text said as two claims: the repair asked for keeps either, not neither. An answer
    over the limit: the repair drops some, not all (an empty repair of either would close the
    complaint as nothing to pay, unreviewed)."""
    late, missing = ARTICLE_ANSWER["grievances"][1], ARTICLE_ANSWER["grievances"][2]
    as_quality = {**missing, "category": "QUALITY"}
    with pytest.raises(ExtractionInvalid) as same_text:
        validate_extraction({"grievances": [missing, as_quality, late]}, ARTICLE_COMPLAINT, ITEMS)
    biryani = [(Category.MISSING_ITEM, BIRYANI), (Category.QUALITY, BIRYANI)]
    assert same_text.value.passed == (tuple(biryani), ((Category.LATE_DELIVERY, None),))
    full = validate_extraction(ARTICLE_ANSWER, ARTICLE_COMPLAINT, ITEMS)
    kept_one = [g for g in full if g.category is not Category.PACKAGING]
    assert claims_left_out(same_text.value.passed, kept_one) == ()
    assert claims_left_out(same_text.value.passed, ()) == (
        f"one of MISSING_ITEM for {BIRYANI!r}, QUALITY for {BIRYANI!r}",
        "LATE_DELIVERY",
    )
    with pytest.raises(ExtractionInvalid) as too_many:
        validate_extraction(
            {"grievances": [missing, late]}, ARTICLE_COMPLAINT, ITEMS, max_grievances=1
        )
    assert len(too_many.value.passed) == 1, "one group: the repair keeps one of them"
    assert set(too_many.value.passed[0]) == {
        (Category.MISSING_ITEM, BIRYANI),
        (Category.LATE_DELIVERY, None),
    }
    assert claims_left_out(too_many.value.passed, full[:1]) == ()
    assert claims_left_out(too_many.value.passed, ()) != ()


def test_a_grievance_at_fault_for_its_span_is_a_claim_the_repair_still_makes() -> None:
    """A span off the end of the text (the usual slip) says nothing against the claim: its
    category and item still say what the customer said. A repair that drops it, even to
    nothing at all, leaves out a grievance, and a person reads the complaint."""
    late, missing = ARTICLE_ANSWER["grievances"][1], ARTICLE_ANSWER["grievances"][2]
    past_the_end = {**missing, "span_end": len(ARTICLE_COMPLAINT) + 3}
    with pytest.raises(ExtractionInvalid) as alone:
        validate_extraction({"grievances": [past_the_end]}, ARTICLE_COMPLAINT, ITEMS)
    assert alone.value.passed == (((Category.MISSING_ITEM, BIRYANI),),)
    assert claims_left_out(alone.value.passed, ()) == (f"MISSING_ITEM for {BIRYANI!r}",)
    with pytest.raises(ExtractionInvalid) as beside:
        validate_extraction({"grievances": [late, past_the_end]}, ARTICLE_COMPLAINT, ITEMS)
    full = validate_extraction(ARTICLE_ANSWER, ARTICLE_COMPLAINT, ITEMS)
    only_late = [g for g in full if g.category is Category.LATE_DELIVERY]
    assert claims_left_out(beside.value.passed, only_late) == (f"MISSING_ITEM for {BIRYANI!r}",)
    assert claims_left_out(beside.value.passed, full) == ()
    # An empty text says nothing, whatever its category: no claim is read from it.
    with pytest.raises(ExtractionInvalid) as blank:
        validate_extraction(
            {"grievances": [late, {**past_the_end, "text": " "}]}, ARTICLE_COMPLAINT, ITEMS
        )
    assert blank.value.passed == (((Category.LATE_DELIVERY, None),),)


def test_two_items_said_in_one_text_are_two_claims_to_keep() -> None:
    """One sentence for two missing items ("Items were missing") is at fault for its repeated
    text, but it is two claims: a repair that keeps one item's drops the other's. One item said
    under two categories in one text stays a claim the repair keeps one of."""
    missing = ARTICLE_ANSWER["grievances"][2]
    text = "Items were missing from the order."
    biryani = {**missing, "text": text}
    raita = {**missing, "text": text, "item_name": RAITA, "item_quantity": 1}
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction({"grievances": [biryani, raita]}, ARTICLE_COMPLAINT, ITEMS)
    assert caught.value.passed == (
        ((Category.MISSING_ITEM, BIRYANI),),
        ((Category.MISSING_ITEM, RAITA),),
    )
    full = validate_extraction(ARTICLE_ANSWER, ARTICLE_COMPLAINT, ITEMS)
    only_biryani = [g for g in full if g.item_name == BIRYANI]
    assert claims_left_out(caught.value.passed, only_biryani) == (f"MISSING_ITEM for {RAITA!r}",)


def test_a_grievance_at_fault_for_its_item_alone_is_a_claim_the_repair_still_makes() -> None:
    """A claim whose item is not on the order (or is ambiguous, or missing) is still the
    customer's grievance: the repair must make a claim of its category that no claim without
    fault holds, or a person reads the complaint. One whose quantity alone is wrong names its
    item: the repair keeps that claim, as it keeps one without fault."""
    late, missing = ARTICLE_ANSWER["grievances"][1], ARTICLE_ANSWER["grievances"][2]
    garlic_bread = {**missing, "text": "The garlic bread was missing.", "item_name": "Garlic Bread"}
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction({"grievances": [late, missing, garlic_bread]}, ARTICLE_COMPLAINT, ITEMS)
    invalid = caught.value
    assert invalid.unresolved == (
        (Category.MISSING_ITEM, "for 'Garlic Bread', which names no one item of the order"),
    )
    assert invalid.passed == (
        ((Category.LATE_DELIVERY, None),),
        ((Category.MISSING_ITEM, BIRYANI),),
    )
    full = validate_extraction(ARTICLE_ANSWER, ARTICLE_COMPLAINT, ITEMS)
    biryani_and_late = [
        g for g in full if g.category in (Category.MISSING_ITEM, Category.LATE_DELIVERY)
    ]
    dropped = "MISSING_ITEM for 'Garlic Bread', which names no one item of the order"
    # Dropped, with another claim of its category still made: the other one is not it.
    assert claims_left_out(invalid.passed, biryani_and_late, invalid.unresolved) == (dropped,)
    # Placed on an item of the order that no claim without fault names: kept.
    biryani = next(g for g in full if g.category is Category.MISSING_ITEM)
    missing_raita = biryani.model_copy(update={"item_name": RAITA, "grievance_id": "g9"})
    placed = [*biryani_and_late, missing_raita]
    assert claims_left_out(invalid.passed, placed, invalid.unresolved) == ()
    # Without an item where its category needs one: the same.
    no_item = {**garlic_bread, "item_name": None}
    with pytest.raises(ExtractionInvalid) as without:
        validate_extraction({"grievances": [late, no_item]}, ARTICLE_COMPLAINT, ITEMS)
    assert without.value.unresolved == ((Category.MISSING_ITEM, "naming no item of the order"),)
    # Its quantity alone wrong: the claim on its item is one to keep.
    too_many = {**missing, "item_quantity": 5}
    with pytest.raises(ExtractionInvalid) as quantity:
        validate_extraction({"grievances": [late, too_many]}, ARTICLE_COMPLAINT, ITEMS)
    assert quantity.value.unresolved == ()
    assert ((Category.MISSING_ITEM, BIRYANI),) in quantity.value.passed
    assert claims_left_out(
        quantity.value.passed, [g for g in full if g.category is Category.LATE_DELIVERY]
    ) == (f"MISSING_ITEM for {BIRYANI!r}",)
    # A grievance with another fault besides its item's is none of these: nothing says what
    # it claims.
    also_no_text = {**garlic_bread, "text": " "}
    with pytest.raises(ExtractionInvalid) as shapeless:
        validate_extraction({"grievances": [late, also_no_text]}, ARTICLE_COMPLAINT, ITEMS)
    assert shapeless.value.unresolved == ()
    # A category that needs no item may take the claim about none, merged with one there was.
    box = {**ARTICLE_ANSWER["grievances"][0], "item_name": None}
    bag = {**box, "text": "The carry bag was torn.", "item_name": "carry bag"}
    with pytest.raises(ExtractionInvalid) as packaging:
        validate_extraction({"grievances": [box, bag]}, ARTICLE_COMPLAINT, ITEMS)
    merged = validate_extraction({"grievances": [box]}, ARTICLE_COMPLAINT, ITEMS)
    assert packaging.value.unresolved != ()
    assert claims_left_out(packaging.value.passed, merged, packaging.value.unresolved) == ()
    # Over the grievance limit the repair drops some: none is required.
    with pytest.raises(ExtractionInvalid) as over:
        validate_extraction(
            {"grievances": [late, garlic_bread]}, ARTICLE_COMPLAINT, ITEMS, max_grievances=1
        )
    assert over.value.unresolved == ()
