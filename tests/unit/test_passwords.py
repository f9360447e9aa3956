"""Reviewer passwords: stored hashes, and sign-in work that does not depend on the name."""

from __future__ import annotations

import time

import pytest

from services.api.passwords import (
    MIN_ITERATIONS,
    PasswordHash,
    ReviewerDirectory,
    hash_password,
    parse_reviewers,
)


def test_a_hash_round_trips_and_checks_the_password() -> None:
    stored = PasswordHash.parse(hash_password("correct horse", iterations=MIN_ITERATIONS))
    assert stored.iterations == MIN_ITERATIONS
    assert stored.matches("correct horse")
    assert not stored.matches("correct horse ")


def test_a_weak_hash_is_refused_at_start_without_showing_it() -> None:
    weak = hash_password("pw", iterations=MIN_ITERATIONS - 1)
    with pytest.raises(ValueError, match=f"at least {MIN_ITERATIONS}") as refused:
        parse_reviewers(f"alice:{weak}")
    assert weak.split(".")[3] not in str(refused.value)


def _cpu_seconds(directory: ReviewerDirectory, name: str) -> float:
    """The least CPU time of three sign-ins with a wrong password (the least is the least
    disturbed by other work on the machine)."""
    spent = []
    for _ in range(3):
        started = time.process_time()
        assert not directory.verify(name, "wrong password")
        spent.append(time.process_time() - started)
    return min(spent)


def test_every_sign_in_costs_the_strongest_hashs_work_whoever_is_named() -> None:
    """An unknown name and a reviewer with an older, weaker hash cost what the strongest costs:
    timing tells neither which names exist nor whose hash is weaker."""
    directory = ReviewerDirectory(
        parse_reviewers(
            f"alice:{hash_password('a-pw', iterations=MIN_ITERATIONS)},"
            f"bob:{hash_password('b-pw', iterations=6 * MIN_ITERATIONS)}"
        )
    )
    assert directory.verify("alice", "a-pw")
    assert directory.verify("bob", "b-pw")
    assert not directory.verify("alice", "b-pw")
    strongest = _cpu_seconds(directory, "bob")
    for name in ("alice", "nobody"):
        assert _cpu_seconds(directory, name) > strongest / 2, name
