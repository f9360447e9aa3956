"""Extraction answers that are not whole: their cache mark, and the grievances they hold."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.extractor.not_whole import CachedAnswer, mark, read, whole, whole_grievances

LATE = {"text": "It came late.", "category": "LATE_DELIVERY", "span_start": 0, "span_end": 4}
MISSING = {"text": "Two biryanis were missing.", "category": "MISSING_ITEM", "item_quantity": 2}
RUDE = {"text": 'The rider was rude, he said "[bad words]" ]}.', "category": "PARTNER_CONDUCT"}
WHOLE = json.dumps({"grievances": [LATE, MISSING, RUDE]}, indent=1)


@given(st.text(), st.text(min_size=1, max_size=200))
def test_a_marked_answer_reads_back_as_it_came_with_its_reason(text: str, reason: str) -> None:
    marked = read(mark(text, reason))
    assert marked.text == text
    assert marked.not_whole is not None


@pytest.mark.parametrize(
    "value",
    [WHOLE, "", "not-whole=", "not-whole=[1]\n{}", 'not-whole="no newline"', '{"a": 1}'],
)
def test_any_other_cache_value_is_a_whole_answer(value: str) -> None:
    assert read(value) == CachedAnswer(value, None)


def test_a_whole_answer_holds_all_its_grievances() -> None:
    assert whole_grievances(WHOLE) == [LATE, MISSING, RUDE]
    assert whole_grievances('{"grievances": []}') == []


@pytest.mark.parametrize("cut", range(1, 40))
def test_an_answer_cut_short_holds_the_grievances_before_the_cut(cut: int) -> None:
    """Cut anywhere in its last grievance (even inside a string that holds brackets), it holds
    the two before; a cut in the closing brackets after it, all three."""
    text = WHOLE[: WHOLE.index('"The rider') + cut]
    assert whole_grievances(text) == [LATE, MISSING]
    assert whole_grievances(WHOLE[: len(WHOLE) - cut % 3 - 1]) == [LATE, MISSING, RUDE]


@pytest.mark.parametrize(
    "text",
    ["", "I am sorry, I cannot help with that.", '{"grievances": ', '{"grievances": [', "[[[[["],
)
def test_an_answer_with_no_grievance_whole_holds_none(text: str) -> None:
    assert whole_grievances(text) == []


def test_a_grievance_nested_too_deep_to_read_ends_what_is_held() -> None:
    deep = '{"grievances": [' + json.dumps(LATE) + ", " + "[" * 100_000
    assert whole_grievances(deep) == [LATE]


@pytest.mark.parametrize(
    "text", [WHOLE, 'not-whole="cut short"\n{"grievances": []}', "whole:\nwhole:\n", ""]
)
def test_a_whole_answer_reads_back_whole_whatever_it_begins_with(text: str) -> None:
    """A model can be made to begin its answer as a marked one: it is escaped, not misread."""
    assert read(whole(text)) == CachedAnswer(text, None)
