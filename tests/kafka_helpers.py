"""Producing to and reading from the real broker in tests, waiting on conditions, not sleeps."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from refund_bench.codec import Codec, Framing

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Read:
    key: str | None
    value: Any
    partition: int
    offset: int
    headers: dict[str, bytes]


def produce_values(
    kafka: str,
    topic: str,
    records: Iterable[tuple[str, Mapping[str, Any]]],
    codec: Codec,
) -> int:
    """Produce (key, value) pairs Avro-encoded with ``codec``; returns how many."""
    producer = Producer(
        {"bootstrap.servers": kafka, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    count = 0
    for key, value in records:
        _produce(producer, topic, key.encode(), codec.encode(topic, value))
        count += 1
    assert producer.flush(30) == 0
    return count


def produce_raw(
    kafka: str,
    topic: str,
    records: Iterable[tuple[bytes, bytes | None]],
    **extra: Any,
) -> None:
    """Produce raw bytes (for poison input); ``extra``: more ``produce`` arguments for every
    record (``headers``, ``timestamp``)."""
    producer = Producer({"bootstrap.servers": kafka, "partitioner": "murmur2_random"})
    for key, value in records:
        _produce(producer, topic, key, value, **extra)
    assert producer.flush(30) == 0


def _produce(producer: Producer, topic: str, key: bytes, value: bytes | None, **extra: Any) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value, **extra)
            return
        except BufferError:
            producer.poll(0.05)


def read_committed(
    kafka: str,
    topic: str,
    *,
    until: Callable[[list[Read]], bool],
    timeout_s: float,
    decode: Callable[[bytes | None], Any] | None = None,
    settle_s: float = 0.0,
) -> list[Read]:
    """Read ``topic`` from the start with read_committed until ``until(records)`` holds.

    Raises ``TimeoutError`` (with what was read) if it does not within ``timeout_s``. With
    ``settle_s`` it keeps reading that long after the condition first holds, so late
    duplicates would be seen.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    records: list[Read] = []
    deadline = time.monotonic() + timeout_s
    settled_at: float | None = None
    try:
        while True:
            for msg in consumer.consume(num_messages=5000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                records.append(_to_read(msg, decode))
            now = time.monotonic()
            if settled_at is None and until(records):
                settled_at = now
            if settled_at is not None and now - settled_at >= settle_s:
                return records
            if now > deadline:
                raise TimeoutError(
                    f"{topic}: condition not met in {timeout_s}s; read {len(records)}"
                )
    finally:
        consumer.close()


def read_to_end(
    kafka: str,
    topic: str,
    *,
    timeout_s: float,
    decode: Callable[[bytes | None], Any] | None = None,
) -> list[Read]:
    """Every committed record of ``topic``, from the start to the end of each partition.

    "The end" is the last stable offset when the reader gets there: call it once the writers
    are idle. Raises ``TimeoutError`` if the ends are not reached within ``timeout_s``.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        at_end: set[int] = set()
        records: list[Read] = []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {len(at_end)}/{len(partitions)} partitions read")
            for msg in consumer.consume(num_messages=5000, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition() or 0)
                        continue
                    raise KafkaException(err)
                at_end.discard(msg.partition() or 0)
                records.append(_to_read(msg, decode))
        return records
    finally:
        consumer.close()


def wait_consumed(kafka: str, group: str, topic: str, *, timeout_s: float) -> None:
    """Until ``group`` has committed, on every partition of ``topic``, the offset after the
    last record a read_committed reader finds there when this is called: every such record is
    consumed, and what a stage produced for it committed (:func:`read_to_end` then reads all of
    it). The offsets are read without joining the group. Raises ``TimeoutError`` after
    ``timeout_s``."""
    wanted: dict[int, int] = {}
    for record in read_to_end(kafka, topic, timeout_s=timeout_s):
        wanted[record.partition] = max(wanted.get(record.partition, 0), record.offset + 1)
    admin = AdminClient({"bootstrap.servers": kafka})
    asked = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in wanted])
    deadline = time.monotonic() + timeout_s
    while True:
        [future] = admin.list_consumer_group_offsets([asked], request_timeout=10).values()
        committed = {tp.partition: tp.offset for tp in future.result().topic_partitions or []}
        if all(committed.get(p, -1) >= end for p, end in wanted.items()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{group} committed {committed} of {topic}, whose ends are {wanted}")
        time.sleep(0.05)  # a poll interval, not a wait for something to happen


def _to_read(msg: Any, decode: Callable[[bytes | None], Any] | None) -> Read:
    key = msg.key()
    raw = msg.value()
    return Read(
        key=key.decode(errors="replace") if key is not None else None,
        value=decode(raw) if decode else raw,
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        headers=headers_of(msg),
    )


def headers_of(msg: Any) -> dict[str, bytes]:
    """A record's headers as str -> bytes."""
    out: dict[str, bytes] = {}
    for name, value in msg.headers() or []:
        out[name] = value.encode() if isinstance(value, str) else (value or b"")
    return out


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.1
) -> None:
    """Poll ``condition`` until true; raise ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(poll_s)


def bench_codec(framing: Framing, *topics: str) -> Codec:
    return Codec(framing, {t: "bench.record" for t in topics})


def start_selftest(
    kind: str,
    *args: str,
    kafka: str,
    registry_url: str,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a selftest stage (``passthrough``/``counter``) as its own process (``env``: more
    of its environment, e.g. how it signs in)."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka,
        "SCHEMA_REGISTRY_URL": registry_url,
        **(env or {}),
    }
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "refund_bench.runtime.selftest", kind, *args],
        cwd=REPO,
        env=env,
        stdout=out,
        stderr=out,
    )


class StageThread:
    """Runs a :class:`StageRunner` in a thread; ``stop()`` joins and returns its exception."""

    def __init__(self, runner: Any) -> None:
        import threading

        self.runner = runner
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self.runner.run()
        except BaseException as exc:
            self.error = exc

    def start(self) -> StageThread:
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> BaseException | None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError("stage thread did not stop")
        return self.error

    def stop(self, timeout_s: float = 30.0) -> BaseException | None:
        self.runner.stop()
        return self.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
