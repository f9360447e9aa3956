"""Exactly-once vs at-least-once throughput of the runtime's pass-through stage.

Both modes run the same stage as its own process on the same broker, alternating
(EOS, ALO, EOS, ALO, ...) so machine noise hits both alike. Throughput is measured from the
output records' timestamps (first to last), which leaves out process start-up and group join.
One unmeasured run of each mode comes first, and ``make bench`` runs this last, after the
pipeline benchmark: run first, right after the stack started, the measured runs ranged over
12,000-57,000 records/s, against 50,000-56,000 on a broker that had been working for a while.
Each run's two topics are deleted after it, so that runs do not pile partitions on the broker.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from bench import cli
from refund_bench.codec import Codec, framing_from_registry_url
from refund_bench.topics import TopicSpec, ensure_topics

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Run:
    mode: str
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def _produce(kafka: str, topic: str, codec: Codec, n: int) -> None:
    producer = Producer(
        {"bootstrap.servers": kafka, "linger.ms": 20, "partitioner": "murmur2_random"}
    )
    for i in range(n):
        value = codec.encode(topic, {"id": f"r{i}", "seq": i, "payload": "x" * 64})
        while True:
            try:
                producer.produce(topic, key=f"d{i % 5000}".encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def _drain(kafka: str, topic: str, n: int, timeout_s: float) -> tuple[int, int]:
    """Read ``n`` committed records; return (first, last) output timestamps in ms."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen, first, last = 0, None, 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {seen}/{n} from {topic}")
            for msg in consumer.consume(10000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(err)
                ts = msg.timestamp()[1]
                first = ts if first is None else min(first, ts)
                last = max(last, ts)
                seen += 1
    finally:
        consumer.close()
    return int(first or 0), last


def one_run(kafka: str, registry: str, mode: str, n: int, partitions: int) -> Run:
    tag = uuid.uuid4().hex[:8]
    source, sink = f"bench-in-{tag}", f"bench-out-{tag}"
    ensure_topics(kafka, [TopicSpec(source), TopicSpec(sink)], partitions=partitions)
    codec = Codec(
        framing_from_registry_url(registry), {source: "bench.record", sink: "bench.record"}
    )
    _produce(kafka, source, codec, n)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "refund_bench.runtime.selftest",
            "passthrough",
            "--input",
            source,
            "--output",
            sink,
            "--group",
            f"bench-{tag}",
            "--txn-id",
            f"bench-{tag}",
            "--guarantee",
            mode,
            "--batch",
            "2000",
        ],
        cwd=REPO,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka, "SCHEMA_REGISTRY_URL": registry},
    )
    try:
        first, last = _drain(kafka, sink, n, timeout_s=300)
    finally:
        proc.terminate()
        proc.wait(30)
        _delete_topics(kafka, [source, sink])
    return Run(mode, n, max(last - first, 1) / 1000)


def _delete_topics(kafka: str, names: list[str]) -> None:
    """Delete the run's topics and wait until the broker has."""
    admin = AdminClient({"bootstrap.servers": kafka})  # must outlive the futures
    futures = admin.delete_topics(names, operation_timeout=30)
    for future in futures.values():
        future.result(timeout=60)


def main(records: int = 50_000, rounds: int = 3, partitions: int = 12) -> list[tuple[str, str]]:
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    registry = os.environ.get("SCHEMA_REGISTRY_URL", "")
    for mode in ("exactly-once", "at-least-once"):
        run = one_run(kafka, registry, mode, records, partitions)
        print(f"  {mode:14s} warm-up: {run.rate:8.0f}/s (not counted)", flush=True)
    runs: list[Run] = []
    for _ in range(rounds):
        for mode in ("exactly-once", "at-least-once"):
            run = one_run(kafka, registry, mode, records, partitions)
            print(
                f"  {mode:14s} {run.records} records in {run.seconds:6.2f}s = {run.rate:8.0f}/s",
                flush=True,
            )
            runs.append(run)
    eos = statistics.median(r.rate for r in runs if r.mode == "exactly-once")
    alo = statistics.median(r.rate for r in runs if r.mode == "at-least-once")
    rows = [
        ("pass-through exactly-once (median records/s)", f"{eos:,.0f}"),
        ("pass-through at-least-once (median records/s)", f"{alo:,.0f}"),
        ("exactly-once / at-least-once", f"{eos / alo:.2f}x"),
    ]
    return rows


if __name__ == "__main__":
    cli.run(main)
