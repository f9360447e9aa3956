"""A keyed state store per input partition, backed by a compacted changelog topic.

Writes are staged per record, then per batch, and reach the changelog inside the same Kafka
transaction as the batch's outputs and offsets; only after the commit do they become the
committed view. On partition assignment the committed view is rebuilt by reading the changelog
partition (read_committed) from the beginning, so a restarted or rebalanced instance resumes
with exactly the state that matches its committed input offsets.

Retention: a store may keep a key for at most ``retention_s`` after its last write; a write
may set its own retention instead (``put(key, value, retention_s=...)``). Each batch deletes
(with a changelog tombstone, in the batch's transaction) the keys that have been untouched
longer, oldest first. The time of a write is the commit time of its batch, and on restore the
changelog record's timestamp; a write's own retention travels in the record's
``state.retention.s`` header. So expiry survives restarts. Without retention the store keeps
every key until its stage deletes it.

Values are JSON documents: the changelog is internal to its stage, not a published contract.
They are held encoded (the changelog bytes), from the moment they are written: a read decodes a
private copy, a write encodes a snapshot, and the changelog record and the committed view reuse
those bytes. That is cheaper than copying the documents, and a restore installs the changelog
bytes as they are.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from refund_bench.topics import restore_group

JsonValue = Any
_DELETED = object()
RETENTION_HEADER = "state.retention.s"
"""Changelog record header: the retention (seconds) a write set for its key, if it set one."""


def _check_retention(retention_s: float | None) -> None:
    if retention_s is not None and retention_s <= 0:
        raise ValueError(f"retention must be positive, not {retention_s}")


@dataclass(frozen=True, slots=True)
class _Put:
    """A staged write: the encoded value and its own retention (``None``: the store's)."""

    data: bytes
    retention_s: float | None = None


def encode_state(value: JsonValue | None) -> bytes | None:
    """Changelog value bytes (compact JSON, keys sorted); ``None`` is a tombstone."""
    if value is None:
        return None
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def decode_state(data: bytes | None) -> JsonValue | None:
    return None if data is None else orjson.loads(data)


class RecordState:
    """The state one record sees: its own staged writes over the batch's over the committed."""

    def __init__(self, batch: BatchState, partition: int) -> None:
        self._batch = batch
        self._partition = partition
        self._staged: dict[str, _Put | object] = {}

    def get(self, key: str) -> JsonValue | None:
        """A private copy of the value: mutating it changes nothing until :meth:`put`."""
        if key in self._staged:
            staged = self._staged[key]
            return orjson.loads(staged.data) if isinstance(staged, _Put) else None
        return decode_state(self._batch.get(self._partition, key))

    def put(self, key: str, value: JsonValue, *, retention_s: float | None = None) -> None:
        """Write ``value`` as it is now; ``retention_s`` replaces the store's retention for
        this key. Raises ``TypeError`` if ``value`` is not a JSON document."""
        _check_retention(retention_s)
        self._staged[key] = _Put(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), retention_s)

    def delete(self, key: str) -> None:
        self._staged[key] = _DELETED

    def discard(self) -> None:
        """Drop this record's staged writes: a retried handler starts from what it first saw."""
        self._staged.clear()

    def largest_write(self) -> tuple[str, int] | None:
        """The key of this record's largest staged write and its size in the changelog (key and
        value bytes); ``None`` when it staged no value."""
        sizes = [
            (key, len(key.encode()) + len(write.data))
            for key, write in self._staged.items()
            if isinstance(write, _Put)
        ]
        return max(sizes, key=lambda size: size[1]) if sizes else None

    def merge_into_batch(self) -> None:
        """Keep this record's writes (it succeeded)."""
        for key, value in self._staged.items():
            self._batch.stage(self._partition, key, value)
        self._staged.clear()


@dataclass
class BatchState:
    """Writes staged by the records of one transaction, per partition."""

    store: StateStore
    pending: dict[int, dict[str, _Put | object]] = field(default_factory=dict)

    def get(self, partition: int, key: str) -> bytes | None:
        """The encoded value this batch sees: its own write, else the committed one."""
        staged = self.pending.get(partition, {})
        if key in staged:
            write = staged[key]
            return write.data if isinstance(write, _Put) else None
        return self.store.committed(partition).get(key)

    def stage(self, partition: int, key: str, write: _Put | object) -> None:
        """Stage a write (a ``_Put``) or a delete (``_DELETED``)."""
        self.pending.setdefault(partition, {})[key] = write

    def expire(self, limit: int) -> int:
        """Stage deletes for up to ``limit`` keys past their retention that this batch did not
        write; returns how many. Call after the batch's records were handled."""
        staged = 0
        for partition, key in self.store.expired(limit + self._writes()):
            if staged == limit:
                break
            if key not in self.pending.get(partition, {}):
                self.stage(partition, key, _DELETED)
                staged += 1
        return staged

    def _writes(self) -> int:
        return sum(len(writes) for writes in self.pending.values())

    def changelog_records(self) -> Iterator[tuple[int, str, bytes | None, dict[str, bytes]]]:
        """(partition, key, value-or-tombstone, headers) for every staged write."""
        for partition, writes in self.pending.items():
            for key, write in writes.items():
                if not isinstance(write, _Put):
                    yield partition, key, None, {}
                    continue
                headers: dict[str, bytes] = {}
                if write.retention_s is not None:
                    headers[RETENTION_HEADER] = repr(write.retention_s).encode()
                yield partition, key, write.data, headers

    def apply(self) -> None:
        """Make the staged writes committed (call only after the transaction committed)."""
        now = self.store.clock()
        for partition, writes in self.pending.items():
            for key, write in writes.items():
                if isinstance(write, _Put):
                    self.store.install(partition, key, write.data, now, write.retention_s)
                else:
                    self.store.install(partition, key, None, now)
        self.pending.clear()


class StateStore:
    """Committed state of the partitions this instance owns, restored from ``changelog``.

    ``retention_s``: how long a key outlives its last write (``None``: until deleted).
    ``clock``: wall-clock seconds (``time.time``), the time of writes and of expiry.
    """

    def __init__(
        self,
        name: str,
        changelog: str,
        *,
        retention_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_retention(retention_s)
        self.name = name
        self.changelog = changelog
        self.retention_s = retention_s
        self.clock = clock
        self._partitions: dict[int, dict[str, bytes]] = {}
        """Per partition, key -> encoded value."""
        self._written: dict[int, dict[float, OrderedDict[str, float]]] = {}
        """Per partition, per retention: key -> time of its last write, least recently written
        first. Keys that never expire are not indexed."""

    def committed(self, partition: int) -> dict[str, bytes]:
        """The committed view of ``partition``: key -> encoded value. Do not modify it."""
        view = self._partitions.get(partition)
        if view is None:
            raise RuntimeError(f"state of partition {partition} is not restored")
        return view

    def values(self, partition: int) -> dict[str, JsonValue]:
        """A decoded copy of the committed view of ``partition`` (tests and diagnostics)."""
        return {key: orjson.loads(data) for key, data in self.committed(partition).items()}

    def owned(self) -> list[int]:
        return sorted(self._partitions)

    def size(self) -> int:
        """Keys held, over every owned partition."""
        return sum(len(view) for view in self._partitions.values())

    def open(self, partition: int) -> None:
        """Own ``partition`` with an empty view (restore fills it from the changelog)."""
        self._partitions[partition] = {}
        self._written[partition] = {}

    def install(
        self,
        partition: int,
        key: str,
        data: bytes | None,
        written_at: float,
        retention_s: float | None = None,
    ) -> None:
        """Set one committed key to the encoded value ``data`` (``None``: delete it), written
        at ``written_at``, kept for ``retention_s`` (``None``: the store's retention) after."""
        view = self.committed(partition)
        classes = self._written[partition]
        for written in classes.values():
            written.pop(key, None)
        if data is None:
            view.pop(key, None)
            return
        view[key] = data
        keep = self.retention_s if retention_s is None else retention_s
        if keep is not None:
            classes.setdefault(keep, OrderedDict())[key] = written_at

    def expired(self, limit: int) -> Iterator[tuple[int, str]]:
        """Up to ``limit`` (partition, key) pairs past their retention, least recently written
        first within each partition and retention."""
        now = self.clock()
        found = 0
        for partition, classes in self._written.items():
            for keep, written in classes.items():
                for key, at in written.items():
                    if found == limit:
                        return
                    if at > now - keep:
                        break
                    yield partition, key
                    found += 1

    def drop(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self._partitions.pop(partition, None)
            self._written.pop(partition, None)

    def restore(
        self,
        consumer_conf: dict[str, Any],
        partitions: Iterable[int],
        stall_timeout_s: float = 120.0,
        on_progress: Callable[[], None] | None = None,
    ) -> int:
        """Rebuild the committed view of ``partitions`` from the changelog; returns records read.

        Reads read_committed until every partition reports end-of-partition with no
        transaction open after it (:func:`_at_the_log_end`), however long that takes while
        records keep coming; raises ``TimeoutError`` after ``stall_timeout_s`` without a record
        or such an end (an open transaction ends within the producers' transaction timeout).
        ``on_progress`` is called after each fetch (wire it to the liveness heartbeat: a long
        restore is not a wedged loop).
        """
        wanted = sorted(set(partitions))
        if not wanted:
            return 0
        conf = {
            **consumer_conf,
            "group.id": restore_group(self.changelog),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
        restorer = Consumer(conf)
        for p in wanted:
            self.open(p)
        try:
            restorer.assign([TopicPartition(self.changelog, p, OFFSET_BEGINNING) for p in wanted])
            remaining = set(wanted)
            read = 0
            deadline = time.monotonic() + stall_timeout_s
            while remaining:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"restoring {self.changelog} {sorted(remaining)}: nothing read for "
                        f"{stall_timeout_s:.0f} s"
                    )
                fetched = restorer.consume(num_messages=1000, timeout=0.5)
                if fetched:
                    deadline = time.monotonic() + stall_timeout_s
                if on_progress is not None:
                    on_progress()
                for msg in fetched:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if _at_the_log_end(restorer, msg):
                                remaining.discard(msg.partition())
                            continue
                        raise KafkaException(err)
                    raw_key, partition = msg.key(), msg.partition()
                    if raw_key is None or partition is None:
                        continue
                    kind, stamp_ms = msg.timestamp()
                    at = self.clock() if kind == TIMESTAMP_NOT_AVAILABLE else stamp_ms / 1000
                    self.install(partition, raw_key.decode(), msg.value(), at, _retention(msg))
                    read += 1
        except BaseException:
            self.drop(wanted)
            raise
        finally:
            restorer.close()
        return read


def _at_the_log_end(restorer: Consumer, eof: Message) -> bool:
    """Whether the end-of-partition ``eof`` is the end of its changelog partition, not just of
    what read_committed may read yet.

    A read_committed reader stops at the last stable offset: before the first record of a
    transaction still open on the partition. Such a transaction may be an earlier owner's whose
    input offsets are committed already, for the coordinator ends a transaction by writing its
    marker to each partition apart (the group's offsets and the changelog may even sit on
    different brokers). Its state writes are then part of the committed view and must be read.
    So an end short of the high watermark (the one the same fetch brought) is not the end:
    another end-of-partition follows once that transaction has committed or aborted. Unknown
    watermarks count as the end."""
    topic, partition, offset = eof.topic(), eof.partition(), eof.offset()
    if topic is None or partition is None or offset is None:
        return True
    _low, high = restorer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    return high < 0 or offset >= high


def _retention(msg: Any) -> float | None:
    """The retention a changelog record's write set for its key, from its header, if any."""
    for name, raw in msg.headers() or ():
        if name == RETENTION_HEADER and raw:
            return float(raw.decode())
    return None
