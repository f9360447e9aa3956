"""The stand-in's call counts by dispute stay bounded: the disputes called longest ago go."""

from __future__ import annotations

from services.llm_standin.app import Stats


def test_calls_are_counted_per_dispute() -> None:
    stats = Stats()
    for dispute in ("d1", "d2", "d1", "d1"):
        stats.count_dispute(dispute)
    assert stats.as_json()["by_dispute"] == {"d1": 3, "d2": 1}
    assert stats.as_json()["disputes_forgotten"] == 0


def test_the_dispute_called_longest_ago_is_forgotten_at_the_limit() -> None:
    stats = Stats(dispute_limit=2)
    for dispute in ("a", "b", "a", "c"):  # "a" called again after "b": "b" goes
        stats.count_dispute(dispute)
    assert stats.as_json()["by_dispute"] == {"a": 2, "c": 1}
    assert stats.as_json()["disputes_forgotten"] == 1
