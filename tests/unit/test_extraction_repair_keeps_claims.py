"""What a repair must keep of an invalid first answer: every claim its grievances make, also of
one that leaves keys out, names a category not of the fixed set, or comes in the wrong shape.

A repair that drops such a claim, or all of them, reads the complaint otherwise: the complaint
goes to a person (``LEFT_OUT_REASON``), never closed as nothing to pay unread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest
from psycopg_pool import AsyncConnectionPool

from refund_bench import events as ev
from refund_bench.domain import Category
from refund_bench.llm.roles import EXTRACTOR_PROMPT_VERSION, load_prompt
from services.extractor.handler import LEFT_OUT_REASON, ExtractorHandler
from services.extractor.validation import (
    ExtractedGrievance,
    ExtractionInvalid,
    claims_left_out,
    validate_extraction,
)
from tests.fakes.scripted_llm import ScriptedLlm
from tests.grievances import complaint_message
from tests.unit.orders import ARTICLE_COMPLAINT, ARTICLE_ORDER, BIRYANI, RAITA, span_of

ITEMS = ARTICLE_ORDER.line_items


def grievance(phrase: str, category: str, text: str, item: str | None = None) -> dict[str, Any]:
    start, end = span_of(ARTICLE_COMPLAINT, phrase)
    return {
        "text": text,
        "category": category,
        "span_start": start,
        "span_end": end,
        "item_name": item,
        "item_quantity": None if item is None else 2,
    }


MISSING = grievance(
    "Two of the four were missing completely",
    "MISSING_ITEM",
    "Two of the four biryanis were not delivered.",
    BIRYANI,
)
LATE = grievance(
    "Ordered at 8:15pm and the food showed up at 9:40pm",
    "LATE_DELIVERY",
    "The order arrived 85 minutes after it was placed.",
)
LATE_UNCATEGORISED = {**LATE, "category": "DELIVERY_DELAY"}
LATE_KEYS_LEFT_OUT = {key: value for key, value in LATE.items() if value is not None}


def first_answer(answer: object) -> ExtractionInvalid:
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS)
    return caught.value


def valid(*grievances: Mapping[str, Any]) -> tuple[ExtractedGrievance, ...]:
    return validate_extraction({"grievances": list(grievances)}, ARTICLE_COMPLAINT, ITEMS)


def left_out(first: ExtractionInvalid, repaired: Sequence[ExtractedGrievance]) -> tuple[str, ...]:
    return claims_left_out(first.passed, repaired, first.unresolved, first.uncategorised)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param([MISSING, LATE], id="a bare list"),
        pytest.param({"result": {"grievances": [MISSING, LATE]}}, id="wrapped in another object"),
    ],
)
def test_a_first_answer_of_the_wrong_shape_is_read_for_the_claims_a_repair_keeps(
    answer: object,
) -> None:
    first = first_answer(answer)
    (problem,) = first.problems  # the shape alone, as before
    assert "'grievances'" in problem
    assert first.passed == (((Category.MISSING_ITEM, BIRYANI),), ((Category.LATE_DELIVERY, None),))
    assert left_out(first, ()) == (f"MISSING_ITEM for {BIRYANI!r}", "LATE_DELIVERY")
    assert left_out(first, valid(MISSING, LATE)) == ()


def test_the_one_grievance_an_answer_gives_instead_of_a_list_is_a_claim() -> None:
    first = first_answer({"grievances": LATE})
    assert first.passed == (((Category.LATE_DELIVERY, None),),)


def test_a_grievance_missing_keys_claims_what_it_would_with_them_null() -> None:
    """An endpoint without the strict schema leaves null keys out: the grievance is at fault,
    but its category and text say what the customer claimed."""
    first = first_answer({"grievances": [LATE_KEYS_LEFT_OUT]})
    assert first.problems == ("grievance 1 is missing keys: item_name, item_quantity",)
    assert first.passed == (((Category.LATE_DELIVERY, None),),)
    assert left_out(first, ()) == ("LATE_DELIVERY",)
    # Without the item its category needs: a grievance whose item could not be placed.
    no_item = {key: value for key, value in MISSING.items() if key != "item_name"}
    assert first_answer({"grievances": [no_item]}).unresolved == (
        (Category.MISSING_ITEM, "naming no item of the order"),
    )
    # Without a text, or with a category that is no string, nothing says what it claims.
    no_text = {key: value for key, value in LATE.items() if key != "text"}
    null_category = {**LATE_KEYS_LEFT_OUT, "category": None}
    for shapeless in (no_text, null_category):
        invalid = first_answer({"grievances": [shapeless]})
        assert (invalid.passed, invalid.unresolved, invalid.uncategorised) == ((), (), ())
    # Without a category: one of none of the fixed set.
    no_category = {key: value for key, value in LATE.items() if key != "category"}
    assert left_out(first_answer({"grievances": [no_category]}), ()) == (
        "a grievance of no category, none of the fixed set:"
        " 'The order arrived 85 minutes after it was placed.'",
    )


def test_a_grievance_of_a_category_not_of_the_fixed_set_needs_a_new_claim_in_the_repair() -> None:
    """Which category was meant cannot be told: the repair must make a claim no other claim of
    the first answer makes, about the item it named if it placed one."""
    first = first_answer({"grievances": [MISSING, LATE_UNCATEGORISED]})
    dropped = (
        "a grievance of category 'DELIVERY_DELAY', none of the fixed set:"
        " 'The order arrived 85 minutes after it was placed.'"
    )
    assert left_out(first, valid(MISSING)) == (dropped,)
    assert left_out(first, ()) == (f"MISSING_ITEM for {BIRYANI!r}", dropped)
    assert left_out(first, valid(MISSING, LATE)) == ()

    on_biryani = first_answer({"grievances": [{**MISSING, "category": "MISSING_ITEMS"}]})
    raita = {**MISSING, "item_name": RAITA, "item_quantity": 1}
    assert left_out(on_biryani, valid(raita)) != ()
    assert left_out(on_biryani, valid(MISSING)) == ()


def test_a_claim_said_again_is_kept_once() -> None:
    """A grievance under a category of none of the fixed set, in the text and about the item
    of a valid claim, is that claim said again; two of one category label and item are one
    claim, as two of one category and item are."""
    same_text = first_answer({"grievances": [LATE, LATE_UNCATEGORISED]})
    assert same_text.uncategorised == ()
    assert left_out(same_text, valid(LATE)) == ()
    again = {**LATE_UNCATEGORISED, "text": "The food came late."}
    twice = first_answer({"grievances": [MISSING, LATE_UNCATEGORISED, again]})
    assert len(twice.uncategorised) == 1
    assert left_out(twice, valid(MISSING, LATE)) == ()


def test_one_new_claim_stands_for_one_grievance_left_unplaced() -> None:
    garlic_bread = {**MISSING, "text": "The garlic bread was missing.", "item_name": "Garlic Bread"}
    first = first_answer({"grievances": [garlic_bread, LATE_UNCATEGORISED]})
    raita = {**MISSING, "item_name": RAITA, "item_quantity": 1}
    assert left_out(first, valid(raita)) != ()
    assert left_out(first, valid(raita, LATE)) == ()


def test_an_answer_over_the_limit_of_no_category_of_the_fixed_set_keeps_one_claim() -> None:
    answer = {"grievances": [LATE_UNCATEGORISED, {**MISSING, "category": "MISSING_ITEMS"}]}
    with pytest.raises(ExtractionInvalid) as caught:
        validate_extraction(answer, ARTICLE_COMPLAINT, ITEMS, max_grievances=1)
    assert left_out(caught.value, ()) != ()
    assert left_out(caught.value, valid(LATE)) == ()


def test_the_reason_says_a_claim_left_out_may_have_been_at_fault() -> None:
    """It used to say "without fault" of a claim whose span, length or quantity was wrong."""
    assert "without fault, or at fault only for its span" in LEFT_OUT_REASON


class Cache:
    """A first-writer-wins store on a dict."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def put_if_absent(self, key: str, value: str) -> str:
        return self.values.setdefault(key, value)


@pytest.mark.parametrize(
    ("first", "repair"),
    [
        pytest.param([MISSING, LATE], {"grievances": []}, id="bare list, repaired to none"),
        pytest.param(
            {"grievances": [MISSING, LATE_UNCATEGORISED]},
            {"grievances": [MISSING]},
            id="late delivery of no known category, dropped",
        ),
        pytest.param(
            {"grievances": [LATE_KEYS_LEFT_OUT]},
            {"grievances": []},
            id="null keys left out, repaired to none",
        ),
    ],
)
def test_a_repair_that_drops_what_the_first_answer_claimed_holds_the_complaint(
    first: object, repair: object
) -> None:
    """Through the stage's extraction: the complaint is held for review with the reason, not
    closed as nothing to pay or judged without the dropped claim."""
    pool = cast(AsyncConnectionPool[Any], None)  # extraction alone reads no database
    prompt = load_prompt(EXTRACTOR_PROMPT_VERSION)
    handler = ExtractorHandler(pool, ScriptedLlm([first, repair]), Cache(), prompt)
    complaint = ev.parse(ev.ComplaintReceived, complaint_message("d-repair").value)
    answers: list[ev.ExtractorAnswer] = []
    outcome, _ = asyncio.run(handler._extract(complaint, "0" * 64, list(ITEMS), answers))
    assert isinstance(outcome, str), outcome
    assert outcome.startswith(f"{LEFT_OUT_REASON}: "), outcome
    assert [answer.attempt for answer in answers] == [1, 2]
    assert answers[1].problems, "the repair is recorded with what it left out"
