"""Which failed commits a stage puts back and goes on after, instead of exiting: only those
made after the group moved on without it, and not forever."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from refund_bench.runtime.runner import MAX_PUT_BACK_IN_A_ROW, may_put_back

LOST = (
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError._ASSIGNMENT_LOST,
)


@pytest.mark.parametrize("code", LOST)
def test_a_commit_after_the_group_moved_on_is_put_back(code: int) -> None:
    assert may_put_back(KafkaError(code, txn_requires_abort=True), eos=True, in_a_row=0)
    assert may_put_back(KafkaError(code), eos=False, in_a_row=0)


@pytest.mark.parametrize(
    "err",
    [
        # Abortable, but not the group's: a topic it may not write stays a crash (and an alert).
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, txn_requires_abort=True),
        # The group's, but the transaction cannot be aborted and go on.
        KafkaError(KafkaError.UNKNOWN_MEMBER_ID),
        KafkaError(KafkaError.UNKNOWN_MEMBER_ID, fatal=True),
        KafkaError(KafkaError._FENCED, fatal=True),
        KafkaError(KafkaError._TIMED_OUT, retriable=True),
    ],
)
def test_other_failed_commits_stop_the_stage(err: KafkaError) -> None:
    assert not may_put_back(err, eos=True, in_a_row=0)


def test_a_stage_whose_every_batch_outlasts_its_session_stops_after_a_few() -> None:
    err = KafkaError(KafkaError.UNKNOWN_MEMBER_ID, txn_requires_abort=True)
    allowed = [may_put_back(err, eos=True, in_a_row=n) for n in range(MAX_PUT_BACK_IN_A_ROW + 2)]
    assert allowed == [True] * MAX_PUT_BACK_IN_A_ROW + [False, False]
