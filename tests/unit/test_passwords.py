"""Reviewer passwords: stored hashes, and sign-in work that does not depend on the name."""

from __future__ import annotations

import asyncio
import time
import traceback

import pytest

from services.api.passwords import (
    MIN_ITERATIONS,
    PasswordChecks,
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


GOOD = hash_password("bob-pw", iterations=MIN_ITERATIONS)
SECRET = hash_password("alice-pw", iterations=MIN_ITERATIONS)
_SCHEME, _ITERATIONS, SALT, DIGEST = SECRET.split(".")


@pytest.mark.parametrize(
    ("mistyped", "named"),
    [
        (f"alice={SECRET}", None),
        (f"alice {SECRET}", None),
        (SECRET, None),
        (f"alice:{SECRET}:extra", "alice"),
        (f"alice:{SECRET[:-3]}", "alice"),
        (f"alice:{_SCHEME}.{SALT}.{_ITERATIONS}.{DIGEST}", "alice"),
    ],
    ids=["equals-sign", "space", "hash-only", "colon-in-hash", "short-digest", "fields-swapped"],
)
def test_a_mistyped_reviewers_entry_is_named_by_position_never_by_its_hash(
    mistyped: str, named: str | None
) -> None:
    with pytest.raises(ValueError, match=r"^REVIEWERS entry ") as refused:
        parse_reviewers(f"bob:{GOOD},,{mistyped}")
    logged = "".join(traceback.format_exception(refused.value))  # with its causes, as logged
    assert SALT not in logged, logged
    assert DIGEST[:16] not in logged, logged
    message = str(refused.value)
    assert message.startswith("REVIEWERS entry 3 "), message
    if named is None:
        assert "alice" not in message
    else:
        assert repr(named) in message


def _cpu_seconds(directory: ReviewerDirectory, name: str) -> float:
    """The least CPU time of three sign-ins with a wrong password (the least is the least
    disturbed by other work on the machine)."""
    spent = []
    for _ in range(3):
        started = time.process_time()
        assert not directory.verify(name, "wrong password")
        spent.append(time.process_time() - started)
    return min(spent)


@pytest.mark.parametrize("other", ["Bob", "BOB", "bob"])
def test_two_reviewers_whose_names_differ_only_in_case_are_refused(other: str) -> None:
    """The desk counts failed sign-ins by the name case-folded: "bob" and "Bob" would share one
    count, and one's sign-in would clear the other's, lifting the limit for both."""
    with pytest.raises(ValueError, match=r"^REVIEWERS entry 2: reviewer ") as refused:
        parse_reviewers(f"bob:{GOOD},{other}:{GOOD}")
    assert GOOD not in str(refused.value)
    assert parse_reviewers(f"bob:{GOOD},bobby:{GOOD}").keys() == {"bob", "bobby"}


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


def _slow_directory() -> ReviewerDirectory:
    """One reviewer whose hash takes the default (OWASP) work: every check costs it."""
    return ReviewerDirectory(parse_reviewers(f"alice:{hash_password('pw')}"))


def test_checks_beyond_the_threads_and_queue_are_refused_at_once() -> None:
    checks = PasswordChecks(_slow_directory(), threads=1, waiting=1)

    async def flood() -> list[bool | None]:
        return list(
            await asyncio.gather(
                checks.verify("alice", "pw"),  # runs
                checks.verify("mallory", "x"),  # waits for the thread
                checks.verify("trudy", "y"),  # refused: nothing checked
            )
        )

    try:
        assert asyncio.run(flood()) == [True, False, None]
        assert not checks.busy, "every slot is free once the checks are done"
    finally:
        checks.close()


def test_a_caller_that_gives_up_keeps_its_slot_until_its_check_ends() -> None:
    """A client disconnecting mid-check cannot start more derivations than the bound."""
    checks = PasswordChecks(_slow_directory(), threads=1, waiting=0)

    async def give_up() -> tuple[bool, bool | None]:
        running = asyncio.ensure_future(checks.verify("mallory", "x"))
        await asyncio.sleep(0)  # let it take its slot
        running.cancel()
        still_busy = checks.busy
        refused = await checks.verify("trudy", "y")
        return still_busy, refused

    try:
        still_busy, refused = asyncio.run(give_up())
        assert still_busy
        assert refused is None
        deadline = time.monotonic() + 10
        while checks.busy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not checks.busy, "freed when the abandoned check ended"
    finally:
        checks.close()


def test_a_slot_taken_before_the_check_is_held_until_the_block_or_the_check_ends() -> None:
    """The desk takes a slot, then counts the attempt, then checks: while the slot is held no
    other check gets it, and one never used is given back when the block ends."""
    checks = PasswordChecks(_slow_directory(), threads=1, waiting=0)

    async def hold_then_check() -> tuple[bool | None, bool | None, bool]:
        with checks.slot() as check:
            assert check is not None
            elsewhere = await checks.verify("trudy", "y")  # the only slot is taken
            answer = await check("alice", "pw")
        return elsewhere, answer, checks.busy

    try:
        elsewhere, answer, busy_after = asyncio.run(hold_then_check())
        assert (elsewhere, answer, busy_after) == (None, True, False)
        with checks.slot() as unused:
            assert unused is not None
            with checks.slot() as second:
                assert second is None
        assert not checks.busy, "a slot never used is free again"
    finally:
        checks.close()
