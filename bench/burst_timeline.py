"""When a burst's records reach each topic: the burst's fill, its middle and its drain.

A burst's rate is set by the judge in its middle, and by how long the first payouts take to
come out (the fill) and the last ones to finish (the drain). This script runs bursts at 0 ms,
one replica per stage, and prints for each topic of the pipeline when the burst's records were
produced: the first, the 10th, 50th and 90th percentile and the last, in seconds after the
first complaint. The times are the records' own timestamps (the producing stage's clock when it
handed the record to its producer); every stage runs on this machine, so the clocks agree.

``python -m bench.burst_timeline`` (stack up, ``. .stack/env.sh``); not part of ``make bench``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bench import cli
from bench import pipeline_throughput as pt
from refund_bench import topics as t
from refund_bench.launcher import end_offsets as topic_end_offsets

TOPICS: tuple[t.Topic, ...] = (
    t.COMPLAINT_RECEIVED,
    t.GRIEVANCE_EXTRACTED,
    t.RULING_CAST,
    t.VERDICT_DECIDED,
    t.REFUND_PRICED,
    t.PAYOUT_REQUESTED,
    t.PAYOUT_COMPLETED,
)
QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)

Offsets = dict[tuple[str, int], int]


def end_offsets(kafka: str) -> Offsets:
    """The end offset of every partition of :data:`TOPICS`."""
    ends = topic_end_offsets(kafka, *(topic.name for topic in TOPICS))
    return {(tp.topic, tp.partition): tp.offset for tp in ends}


def timestamps(kafka: str, start: Offsets, stop: Offsets) -> dict[str, list[float]]:
    """Per topic, the timestamps (seconds) of the committed records between ``start`` and
    ``stop``."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: dict[str, list[float]] = {topic.name: [] for topic in TOPICS}
    pending = {where for where, end in stop.items() if end > start[where]}
    try:
        consumer.assign([TopicPartition(topic, p, start[(topic, p)]) for topic, p in pending])
        while pending:
            for msg in consumer.consume(1000, 1.0):
                topic, partition = msg.topic(), msg.partition()
                if topic is None or partition is None:
                    continue
                err = msg.error()
                if err is None:
                    found[topic].append(msg.timestamp()[1] / 1000)
                    # A transaction's marker can be the partition's last offset: stop at the
                    # last record before ``stop``, or at the end of the partition.
                    offset = msg.offset()
                    if offset is not None and offset + 1 >= stop[(topic, partition)]:
                        pending.discard((topic, partition))
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard((topic, partition))
                else:
                    raise RuntimeError(err)
    finally:
        consumer.close()
    return found


def quantiles(values: Sequence[float], origin: float) -> list[float]:
    """:data:`QUANTILES` of ``values`` (nearest rank), less ``origin``."""
    ranked = sorted(values)
    return [pt.nearest_rank(ranked, q) - origin for q in QUANTILES]


def main(bursts: int = 3, complaints: int = 1200) -> None:
    with pt.running_pipeline() as stack:
        pt.warm_up(stack, complaints, bursts=1)
        for _ in range(bursts):
            start = end_offsets(stack.kafka)
            run = stack.burst(0, complaints)
            found = timestamps(stack.kafka, start, end_offsets(stack.kafka))
            origin = min(found[t.COMPLAINT_RECEIVED.name])
            print(
                f"burst of {complaints} at 0 ms: {run.rate:.1f}/s, middle 80%"
                f" {run.steady_rate:.1f}/s; seconds after the first complaint:"
            )
            print(f"  {'topic':22s} {'records':>7s}   first   10%   50%   90%  last")
            for topic in TOPICS:
                values = found[topic.name]
                cells = " ".join(f"{v:5.2f}" for v in quantiles(values, origin)) if values else "-"
                print(f"  {topic.name:22s} {len(values):7d}   {cells}", flush=True)


if __name__ == "__main__":
    cli.run(main)
