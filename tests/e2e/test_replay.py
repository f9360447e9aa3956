"""Replay: every service killed and every input re-delivered costs nothing and changes nothing."""

from __future__ import annotations

import time
from collections import Counter

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from refund_bench import topics as t
from refund_bench.codec import Codec, framing_from_registry_url
from refund_bench.launcher import SERVICES
from refund_bench.samples import SAMPLE_COMPLAINTS
from tests.e2e.pipeline import Pipeline
from tests.kafka_helpers import read_to_end

pytestmark = [pytest.mark.stack, pytest.mark.slow]

GROUP_INPUTS = {
    "extractor": [t.COMPLAINT_RECEIVED],
    "judge": [t.GRIEVANCE_EXTRACTED],
    "tally": [t.RULING_CAST],
    "pricing": [t.VERDICT_DECIDED, t.REVIEW_DECIDED],
    "settler": [t.REFUND_PRICED],
    "payout": [t.PAYOUT_REQUESTED],
}


def _lags(kafka: str, group: str, topics: list[t.Topic]) -> list[int]:
    """Per input partition: end offset minus the group's committed offset."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})
    try:
        partitions = [
            TopicPartition(topic.name, p)
            for topic in topics
            for p in consumer.list_topics(topic.name, timeout=10).topics[topic.name].partitions
        ]
        lags = []
        for tp in consumer.committed(partitions, timeout=10):
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            lags.append(high - max(tp.offset, 0))
        return lags
    finally:
        consumer.close()


def _wait_drained(kafka: str, timeout_s: float = 180) -> None:
    """Every stage has consumed its inputs to the end, twice in a row a second apart.

    A transactional write ends with one commit marker after the data, which no consumer
    commits past: a lag of at most one per partition is drained.
    """
    deadline = time.monotonic() + timeout_s
    previous: dict[str, list[int]] | None = None
    while True:
        lags = {g: _lags(kafka, g, topics) for g, topics in GROUP_INPUTS.items()}
        drained = all(lag <= 1 for per_group in lags.values() for lag in per_group)
        if drained and lags == previous:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"stages still lagging: {lags}")
        previous = lags if drained else None
        time.sleep(1.0)


def _reset_groups(kafka: str, timeout_s: float = 60) -> None:
    """Delete the stages' consumer groups so they start again from the first offset.

    A killed static member stays in its group until its session times out: retry until the
    groups are empty and deleted.
    """
    admin = AdminClient({"bootstrap.servers": kafka})
    pending = list(SERVICES)
    deadline = time.monotonic() + timeout_s
    while pending:
        failed = []
        for group, future in admin.delete_consumer_groups(pending, request_timeout=30).items():
            try:
                future.result(30)
            except Exception as exc:
                if "GROUP_ID_NOT_FOUND" not in str(exc):
                    failed.append(group)
        pending = failed
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"could not reset consumer groups {pending}")
        if pending:
            time.sleep(1.0)


def _ledger_attempts(database_url: str) -> tuple[int, int]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*), coalesce(sum(attempts), 0) FROM payout_ledger"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_replaying_every_input_makes_no_new_calls_payments_or_verdicts(pipeline: Pipeline) -> None:
    disputes = [pipeline.submit(s.order_id, s.customer_id, s.text) for s in SAMPLE_COMPLAINTS]
    for dispute in disputes:
        pipeline.wait_final(dispute)
    _wait_drained(pipeline.stack.kafka)
    calls_before = pipeline.llm_stats()["total_calls"]
    ledger_before = _ledger_attempts(pipeline.database_url)
    replies_before = {d: pipeline.story(d).replies for d in disputes}

    pipeline.launcher.stop(kill=True)
    _reset_groups(pipeline.stack.kafka)
    pipeline.launcher.start()
    pipeline.launcher.wait_ready()
    _wait_drained(pipeline.stack.kafka, timeout_s=300)

    assert pipeline.llm_stats()["total_calls"] == calls_before, "replay made new LLM calls"
    assert _ledger_attempts(pipeline.database_url) == ledger_before, "replay reached Stripe"
    for dispute in disputes:
        assert pipeline.story(dispute).replies == replies_before[dispute]

    codec = Codec(
        framing_from_registry_url(pipeline.stack.registry_url),
        {t.VERDICT_DECIDED.name: t.VERDICT_DECIDED.schema},
    )
    wanted = set(disputes)
    records = read_to_end(
        pipeline.stack.kafka,
        t.VERDICT_DECIDED.name,
        timeout_s=120,
        decode=lambda raw: codec.decode(t.VERDICT_DECIDED.name, raw),
    )
    verdicts = Counter(
        (r.value["dispute_id"], r.value["grievance_id"])
        for r in records
        if r.value["dispute_id"] in wanted
    )
    assert verdicts, "the disputes' verdicts are on the topic"
    assert set(verdicts.values()) == {1}, "each grievance has exactly one verdict"
