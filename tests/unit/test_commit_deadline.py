"""A commit's transactional calls share one deadline, retries included: a broker that keeps
timing out holds a batch (and a stopping pod) for ``commit_timeout_s``, not ten times that."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from refund_bench.errors import Fenced
from refund_bench.runtime.runner import (
    TXN_CALL_MIN_S,
    RuntimeConfig,
    retry_transactional,
    txn_call_timeout,
)

COMMIT_S = RuntimeConfig("", "", "").commit_timeout_s
TIMEOUT = KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Call:
    """A transactional call against a broker on ``clock``: its first ``fails`` attempts fail
    with ``error`` after ``takes`` seconds (or the whole timeout they are given, if shorter, as
    a timeout does); the next one succeeds at once."""

    def __init__(
        self, clock: _Clock, fails: int = 1_000, takes: float = 1e9, error: KafkaError = TIMEOUT
    ) -> None:
        self.clock = clock
        self.timeouts: list[float] = []
        self._fails = fails
        self._takes = takes
        self._error = error

    def __call__(self, timeout: float) -> None:
        self.timeouts.append(timeout)
        if len(self.timeouts) > self._fails:
            return
        self.clock.now += min(timeout, self._takes)
        raise KafkaException(self._error)


def test_a_call_timing_out_again_and_again_is_given_up_at_the_commit_deadline() -> None:
    clock = _Clock()
    call = _Call(clock)
    retries: list[None] = []
    with pytest.raises(KafkaException, match="timed out"):
        retry_transactional(call, COMMIT_S, on_retry=lambda: retries.append(None), clock=clock)
    assert call.timeouts == [COMMIT_S]  # the first attempt used it all: no retry after it
    assert clock.now == COMMIT_S
    assert retries == []


def test_the_offsets_and_the_commit_together_take_one_commit_timeout_at_most() -> None:
    """Sending the offsets fails once after 10 s, then succeeds; the commit has what is left
    for its attempts (each failing after 8 s) and is given up at the deadline: the error is
    raised, and the runtime aborts the batch and exits, so that it is redelivered."""
    clock = _Clock()
    offsets = _Call(clock, fails=1, takes=10.0)
    commit = _Call(clock, takes=8.0)
    retries: list[None] = []
    retry_transactional(offsets, COMMIT_S, on_retry=lambda: retries.append(None), clock=clock)
    with pytest.raises(KafkaException, match="timed out"):
        retry_transactional(commit, COMMIT_S, on_retry=lambda: retries.append(None), clock=clock)
    assert offsets.timeouts == [COMMIT_S, COMMIT_S - 10]
    assert commit.timeouts == [COMMIT_S - 10, COMMIT_S - 18, COMMIT_S - 26]
    assert clock.now == COMMIT_S
    assert len(retries) == 3


def test_a_retriable_error_is_retried_at_most_ten_times_even_within_the_deadline() -> None:
    clock = _Clock()
    call = _Call(clock, takes=0.0)
    with pytest.raises(KafkaException):
        retry_transactional(call, COMMIT_S, clock=clock)
    assert len(call.timeouts) == 10


def test_each_attempt_is_given_the_time_left_and_a_late_one_a_little() -> None:
    assert txn_call_timeout(30.0, 0.0) == 30.0
    assert txn_call_timeout(30.0, 12.5) == 17.5
    assert txn_call_timeout(30.0, 29.9) == TXN_CALL_MIN_S
    assert txn_call_timeout(30.0, 45.0) == TXN_CALL_MIN_S


def test_a_fatal_error_is_raised_as_fencing_at_once() -> None:
    clock = _Clock()
    call = _Call(clock, takes=0.5, error=KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    with pytest.raises(Fenced, match="fenced"):
        retry_transactional(call, COMMIT_S, clock=clock)
    assert len(call.timeouts) == 1
