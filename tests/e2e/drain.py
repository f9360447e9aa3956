"""Waiting until the running pipeline has nothing left to do: every stage's consumer group has
consumed its inputs to the end. A test that asserts something did *not* happen (no third round,
no second payout) waits for this instead of for a while."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from refund_bench import topics as t
from refund_bench.stages import RECORDER, STAGES

GROUP_INPUTS = {s.name: list(s.inputs) for s in STAGES if s is not RECORDER}
"""The six stages' groups (each its stage's name) and what each consumes."""
WITH_RECORDER = {s.name: list(s.inputs) for s in STAGES}
"""Those and the recorder's: drained, the audit record in PostgreSQL shows everything too."""


def undelivered(kafka: str, group: str, topics: list[t.Topic]) -> list[tuple[int, int]]:
    """Per input partition: (end offset minus the group's committed offset, how many records
    past the committed offset a read_committed consumer still gets).

    The first is offsets, not records: transaction markers count in it, and a topic written by
    two transactional producers (refund.priced: the extractor and pricing) can end with two
    markers, one per producer's last transaction, that no consumer commits past.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = [
            TopicPartition(topic.name, p)
            for topic in topics
            for p in consumer.list_topics(topic.name, timeout=10).topics[topic.name].partitions
        ]
        committed = consumer.committed(partitions, timeout=10)
        lags = {}
        for tp in committed:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            lags[(tp.topic, tp.partition)] = high - max(tp.offset, 0)
        behind = [
            TopicPartition(tp.topic, tp.partition, max(tp.offset, 0))
            for tp in committed
            if lags[(tp.topic, tp.partition)] > 0
        ]
        records = dict.fromkeys(lags, 0)
        if behind:
            consumer.assign(behind)
            open_partitions = {(tp.topic, tp.partition) for tp in behind}
            deadline = time.monotonic() + 30
            while open_partitions:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no end of partition for {sorted(open_partitions)}")
                for msg in consumer.consume(500, 0.5):
                    topic, partition = msg.topic(), msg.partition()
                    if topic is None or partition is None:
                        continue  # a client-level event, about no partition
                    where = (topic, partition)
                    err = msg.error()
                    if err is not None and err.code() == KafkaError._PARTITION_EOF:
                        open_partitions.discard(where)
                    elif err is None:
                        records[where] += 1
        return [(lags[key], records[key]) for key in lags]
    finally:
        consumer.close()


def wait_drained(
    kafka: str, timeout_s: float = 180, groups: Mapping[str, list[t.Topic]] = GROUP_INPUTS
) -> None:
    """Every group of ``groups`` has consumed its inputs to the end: no record is left past any
    committed offset, and the offsets stood still for a second (no transaction was in flight)."""
    deadline = time.monotonic() + timeout_s
    previous: dict[str, list[tuple[int, int]]] | None = None
    while True:
        state = {g: undelivered(kafka, g, topics) for g, topics in groups.items()}
        drained = all(left == 0 for per_group in state.values() for _lag, left in per_group)
        if drained and state == previous:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"stages still lagging (offsets, records): {state}")
        previous = state if drained else None
        time.sleep(1.0)
