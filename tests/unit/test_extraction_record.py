"""What ``complaint.extracted`` keeps of an answer: all of a normal one, a bounded part of any."""

from __future__ import annotations

from refund_bench.llm.cache import MadeAnswer, Maker
from services.extractor.handler import (
    KEPT_PROBLEM_CHARS,
    MAX_KEPT_ANSWER_CHARS,
    MAX_KEPT_PROBLEMS,
    _kept,
)


def test_an_answer_and_its_problems_are_kept_as_they_came() -> None:
    made = MadeAnswer('{"grievances": []}', Maker("m", "extractor/v3", "m-2026", "fp_1"))
    kept = _kept(2, made, ["g1: span outside the text"])
    assert kept.model_dump() == {
        "attempt": 2,
        "raw_answer": '{"grievances": []}',
        "problems": ["g1: span outside the text"],
        "model": "m",
        "prompt_version": "extractor/v3",
        "served_model": "m-2026",
        "system_fingerprint": "fp_1",
    }


def test_a_runaway_answer_is_kept_bounded_and_says_how_much_more_there_was() -> None:
    answer = "\u0000" + "x" * (MAX_KEPT_ANSWER_CHARS + 5_000) + "\ud83d"
    problems = [f"problem {n}: " + "y" * 2_000 for n in range(MAX_KEPT_PROBLEMS + 10)]
    kept = _kept(1, MadeAnswer(answer), problems)

    assert kept.raw_answer.startswith("\ufffd" + "x" * (MAX_KEPT_ANSWER_CHARS - 1))
    assert kept.raw_answer.endswith("[... 5002 more characters not kept]")
    assert len(kept.problems) == MAX_KEPT_PROBLEMS
    assert kept.problems[-1] == "(and 11 more problems)"
    assert all(len(p) < KEPT_PROBLEM_CHARS + 60 for p in kept.problems)
    assert kept.problems[0].startswith("problem 0: yyy")
    assert (kept.model, kept.served_model) == (None, None), "an answer of an earlier release"


def test_exactly_the_most_problems_kept_needs_no_note() -> None:
    problems = [f"p{n}" for n in range(MAX_KEPT_PROBLEMS)]
    assert _kept(1, MadeAnswer("{}"), problems).problems == problems
