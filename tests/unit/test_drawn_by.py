"""What drew each answer a process drew: kept for the answer drawn, the most recent ones."""

from __future__ import annotations

from refund_bench.llm.provenance import DrawnBy, Provenance

DRAWN = Provenance("judge-2026-11-01", "fp_1", 0.7)


def test_what_drew_an_answer_is_named_for_that_answer_only() -> None:
    drawn = DrawnBy()
    drawn.keep("k", "seed=1000\n{}", DRAWN)
    assert drawn.get("k", "seed=1000\n{}") == DRAWN
    assert drawn.get("k", "seed=1000\n{ }") is None, "another process's answer, stored first"
    assert drawn.get("other", "seed=1000\n{}") is None


def test_the_most_recent_are_kept() -> None:
    drawn = DrawnBy(limit=2)
    drawn.keep("a", "1", DRAWN)
    drawn.keep("b", "2", DRAWN)
    drawn.keep("a", "1", DRAWN)  # drawn again: the most recent
    drawn.keep("c", "3", DRAWN)
    assert [drawn.get(k, v) for k, v in (("a", "1"), ("b", "2"), ("c", "3"))] == [
        DRAWN,
        None,
        DRAWN,
    ]
