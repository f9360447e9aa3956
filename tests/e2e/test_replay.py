"""Replay: every service killed and every input re-delivered costs nothing and changes nothing."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from refund_bench import topics as t
from refund_bench.codec import Codec, framing_from_registry_url
from refund_bench.launcher import SERVICES
from refund_bench.samples import SAMPLE_COMPLAINTS
from tests.e2e.conftest_api import end_offsets
from tests.e2e.drain import wait_drained
from tests.e2e.pipeline import Pipeline
from tests.kafka_helpers import read_to_end

pytestmark = [pytest.mark.stack, pytest.mark.slow]


def _input_ends(kafka: str) -> dict[tuple[str, int], int]:
    """The end offset of every partition the stages read: where this test's records begin."""
    return {
        (topic.name, p): offset
        for topic in t.STAGE_INPUTS
        for p, offset in end_offsets(kafka, topic.name).items()
    }


def _rewind_groups(kafka: str, starts: dict[tuple[str, int], int], timeout_s: float = 60) -> None:
    """Move every stage's committed offsets back to ``starts``, so the stages receive again
    every record this test produced (and nothing older: a long-lived local stack holds the
    history of many runs, which a restart from the first offset would replay).

    Offsets can only be changed in a group without members, and a killed static member stays
    in its group until its session times out: retry until each group takes the change.
    """
    admin = AdminClient({"bootstrap.servers": kafka})
    pending = list(SERVICES)
    deadline = time.monotonic() + timeout_s
    while pending:
        failed = []
        for group in pending:
            try:
                [listing] = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=30
                ).values()
                committed = listing.result(30).topic_partitions or []
                rewound = [
                    TopicPartition(
                        tp.topic,
                        tp.partition,
                        min(tp.offset, starts[(tp.topic, tp.partition)]),
                    )
                    for tp in committed
                    if tp.offset >= 0
                ]
                assert rewound, f"{group} has no committed offsets to rewind"
                [change] = admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group, rewound)], request_timeout=30
                ).values()
                # A group with members refuses each partition's change (UNKNOWN_MEMBER_ID): the
                # errors come per partition, not as an exception.
                if any(tp.error is not None for tp in change.result(30).topic_partitions or []):
                    failed.append(group)
            except KafkaException:
                failed.append(group)
        pending = failed
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"could not rewind consumer groups {pending}")
        if pending:
            time.sleep(1.0)


def _counter(metrics_port: int, name: str, **labels: str) -> float:
    """The sum of counter ``name``'s samples that carry ``labels``, as a stage exposes it."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == f"{name}_total"
        and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _ledger_attempts(database_url: str, disputes: list[str]) -> tuple[int, int]:
    """The disputes' ledger rows and the provider calls counted on them."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*), coalesce(sum(attempts), 0) FROM payout_ledger"
            " WHERE dispute_id = ANY(%s)",
            (disputes,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _llm_calls(pipeline: Pipeline, disputes: list[str]) -> int:
    """The LLM calls the stand-in answered for the disputes."""
    by_dispute = pipeline.llm_stats()["by_dispute"]
    return sum(int(by_dispute.get(dispute, 0)) for dispute in disputes)


def test_replaying_every_input_makes_no_new_calls_payments_or_verdicts(pipeline: Pipeline) -> None:
    starts = _input_ends(pipeline.stack.kafka)
    disputes = [pipeline.submit(s.order_id, s.customer_id, s.text) for s in SAMPLE_COMPLAINTS]
    for dispute in disputes:
        pipeline.wait_final(dispute)
    wait_drained(pipeline.stack.kafka)
    calls_before = _llm_calls(pipeline, disputes)
    ledger_before = _ledger_attempts(pipeline.database_url, disputes)
    refunds_before = len(pipeline.stripe_refunds())
    replies_before = {d: pipeline.story(d).replies for d in disputes}

    pipeline.launcher.stop(kill=True)
    _rewind_groups(pipeline.stack.kafka, starts)
    pipeline.launcher.start()
    pipeline.launcher.wait_ready()
    wait_drained(pipeline.stack.kafka, timeout_s=300)

    # The replay happened: the restarted stages received this test's records again, and the
    # extractor and the judge answered them from the cache.
    ports = {name: launched.metrics_port for name, launched in pipeline.launcher.running.items()}
    stories = [pipeline.story(d) for d in disputes]
    rulings = sum(len(story.rulings) for story in stories)
    assert _counter(ports["extractor"], "refund_bench_records_in") >= len(disputes)
    assert _counter(ports["extractor"], "refund_bench_llm_calls", kind="cached") >= len(disputes)
    assert _counter(ports["judge"], "refund_bench_llm_calls", kind="cached") >= rulings > 0
    for name in SERVICES:
        assert _counter(ports[name], "refund_bench_records_in") > 0, f"{name} received nothing"
    assert calls_before > 0
    assert _llm_calls(pipeline, disputes) == calls_before, "replay made new LLM calls"
    assert len(pipeline.stripe_refunds()) == refunds_before, "replay reached Stripe"
    assert _ledger_attempts(pipeline.database_url, disputes) == ledger_before, "the ledger agrees"
    for dispute in disputes:
        assert pipeline.story(dispute).replies == replies_before[dispute]

    wanted = set(disputes)
    verdicts = Counter(
        (v["dispute_id"], v["grievance_id"])
        for v in _values(pipeline, t.VERDICT_DECIDED)
        if v["dispute_id"] in wanted
    )
    assert verdicts, "the disputes' verdicts are on the topic"
    assert set(verdicts.values()) == {1}, "each grievance has exactly one verdict"

    # The settler is at-least-once: a redelivered round may publish its reply again, but only
    # the reply it stored the first time, word for word (a customer-facing consumer drops the
    # repeat by dispute and round).
    published: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for reply in _values(pipeline, t.REPLY_PUBLISHED):
        if reply["dispute_id"] in wanted:
            published[(reply["dispute_id"], reply["round"])].append(reply)
    stored_rounds = {(r["dispute_id"], r["round"]) for d in disputes for r in replies_before[d]}
    assert set(published) == stored_rounds
    for (dispute, round_), copies in published.items():
        [stored] = [r for r in replies_before[dispute] if r["round"] == round_]
        assert all(copy == copies[0] for copy in copies), (dispute, round_)
        assert (copies[0]["text"], copies[0]["amount_minor"]) == (
            stored["text"],
            stored["amount_minor"],
        )


def _values(pipeline: Pipeline, topic: t.Topic) -> list[dict[str, Any]]:
    """Every committed record's value on ``topic``, decoded."""
    codec = Codec(
        framing_from_registry_url(pipeline.stack.registry_url), {topic.name: topic.schema}
    )
    records = read_to_end(
        pipeline.stack.kafka,
        topic.name,
        timeout_s=120,
        decode=lambda raw: codec.decode(topic.name, raw),
    )
    return [r.value for r in records]
