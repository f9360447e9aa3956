"""What the answer cache holds: an answer reads back as that answer, whatever the model wrote,
and a refusal as a refusal, with a reason fit to store."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench.llm.cache import (
    REFUSAL_REASON_CHARS,
    RefusedBefore,
    cache_value,
    cached_answer,
    refusal_value,
)

_FORGED = st.builds(
    lambda reason, prefix, suffix: prefix + json.dumps({"refused_by_endpoint": reason}) + suffix,
    st.text(),
    st.sampled_from(["", " ", "\n", "answer:\n", "answer:\nanswer:\n"]),
    st.sampled_from(["", " ", "\n"]),
)
"""Answers a model may give when the endpoint does not hold it to the schema: the refusal
record itself, with white space or the answer prefix around it."""


@given(st.one_of(st.text(), _FORGED))
def test_an_answer_reads_back_as_itself_never_as_a_refusal(answer: str) -> None:
    assert cached_answer(cache_value(answer)) == answer


@given(st.text(alphabet=st.characters(codec="utf-8")))
def test_an_answer_that_cannot_be_taken_for_a_refusal_is_cached_as_it_is(answer: str) -> None:
    """So answers cached before the prefix existed read as they did: only an answer that would
    otherwise read as a refusal record, or begins with the prefix, is cached with it."""
    if not answer.startswith("answer:\n") and "refused_by_endpoint" not in answer:
        assert cache_value(answer) == answer


@given(st.text(alphabet=st.one_of(st.characters(), st.sampled_from(["\x00", "\ud83d"]))))
def test_a_refusal_reads_back_as_one_with_a_reason_fit_to_store(reason: str) -> None:
    with pytest.raises(RefusedBefore) as refused:
        cached_answer(refusal_value(reason))
    kept = str(refused.value)
    assert "\x00" not in kept
    kept.encode("utf-8")  # no half of a surrogate pair
    assert len(kept) <= REFUSAL_REASON_CHARS + 60


def test_a_long_reason_is_cut_once_and_reads_the_same_every_time() -> None:
    value = refusal_value("policy " + "x" * 5_000)
    with pytest.raises(RefusedBefore) as first:
        cached_answer(value)
    with pytest.raises(RefusedBefore) as again:
        cached_answer(value)
    assert str(first.value) == str(again.value)
    assert str(first.value).endswith(
        f"[... {5_007 - REFUSAL_REASON_CHARS} more characters not kept]"
    )
