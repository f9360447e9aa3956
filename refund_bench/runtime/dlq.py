"""Dead-letter records and the budget that stops a stage when most of its input is failing."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from refund_bench.errors import DlqLimitExceeded

MAX_REASON_CHARS = 4000
MAX_REASON_BYTES = 4100
"""The reason is written twice (the envelope and the ``dlq.reason`` header): cut to this many
bytes of UTF-8 too, so that one of wide characters cannot push a full dead letter past a record."""
MAX_KEY_BYTES = 1024
"""Of a source key, at most this much is kept (the envelope's ``original_key`` and the dead
letter's own key). Keys are dispute ids of at most 128 characters; a longer one is bad input."""
MAX_ORIGINAL_BYTES = 900_000
"""Below the producer's default ``message.max.bytes`` (1,000,000) with room for the rest of the
envelope, its key and its headers."""
MAX_ORIGINAL_HEADER_BYTES = 64 * 1024
"""Of the source record's headers, at most this much is kept (as the envelope encodes them):
with :data:`MAX_ORIGINAL_BYTES` and two keys, the dead letter still fits in one record."""
HEADER_FRAMING_BYTES = 11
"""What the envelope adds to each kept header beyond its name and value, at most: two Avro
length prefixes (up to 5 bytes each) and the value's union branch. So a great many empty headers
count too, not as nothing."""

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class DeadLetter:
    """One dead-letter record: its key, its envelope (to encode) and its headers."""

    key: bytes
    envelope: dict[str, Any]
    headers: dict[str, bytes]


def dead_letter(
    *,
    stage: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    reason: str,
    error_type: str,
    timestamp_ms: int | None = None,
    original_headers: Sequence[Header] | None = None,
) -> DeadLetter:
    """The dead letter for one unprocessable record, keyed by its source key.

    It must fit in one Kafka record even when the input nearly filled one, with its key in it
    twice (the record's key and ``original_key``): a reason longer than
    :data:`MAX_REASON_CHARS` characters or :data:`MAX_REASON_BYTES` bytes is cut; a key longer
    than :data:`MAX_KEY_BYTES` and a value longer than :data:`MAX_ORIGINAL_BYTES` are kept in
    part (the reason says so, and the headers
    ``dlq.original.key.bytes`` and ``dlq.original.bytes`` give their full sizes). The source
    record's ``timestamp_ms`` and ``original_headers`` are kept in the envelope, the headers up to
    :data:`MAX_ORIGINAL_HEADER_BYTES` in order. The whole record stays in its source topic at
    ``offset`` until that topic's retention, for a replay from there.
    """
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    if len(reason.encode()) > MAX_REASON_BYTES:  # "…" is 3 bytes; a cut character is dropped
        reason = reason.encode()[: MAX_REASON_BYTES - 3].decode(errors="ignore") + "…"
    key_size = len(key) if key is not None else 0
    if key is not None and key_size > MAX_KEY_BYTES:
        key = key[:MAX_KEY_BYTES]
        reason += f" [original key cut to {MAX_KEY_BYTES} of {key_size} bytes]"
    size = len(value) if value is not None else 0
    if value is not None and size > MAX_ORIGINAL_BYTES:
        value = value[:MAX_ORIGINAL_BYTES]
        reason += f" [original value cut to {MAX_ORIGINAL_BYTES} of {size} bytes]"
    kept, dropped = _headers_within_budget(original_headers or [])
    if dropped:
        total = len(original_headers or [])
        reason += f" [{dropped} of {total} original headers left out: over 64 KiB]"
    envelope = {
        "stage": stage,
        "source_topic": topic,
        "source_partition": partition,
        "source_offset": offset,
        "reason": reason,
        "error_type": error_type,
        "original_key": key,
        "original_value": value,
        "failed_at": int(time.time() * 1000),
        "original_timestamp": timestamp_ms,
        "original_headers": [{"name": name, "value": value} for name, value in kept],
    }
    headers = {
        "dlq.reason": reason.encode(),
        "dlq.error_type": error_type.encode(),
        "dlq.stage": stage.encode(),
        "dlq.source.topic": topic.encode(),
        "dlq.source.partition": str(partition).encode(),
        "dlq.source.offset": str(offset).encode(),
        "dlq.original.key.bytes": str(key_size).encode(),
        "dlq.original.bytes": str(size).encode(),
    }
    return DeadLetter(key or b"", envelope, headers)


def _headers_within_budget(headers: Sequence[Header]) -> tuple[list[Header], int]:
    """The headers kept (the first ones, in order, while they fit) and how many were not."""
    kept: list[Header] = []
    used = 0
    for name, value in headers:
        size = len(name.encode()) + (len(value) if value is not None else 0) + HEADER_FRAMING_BYTES
        if used + size > MAX_ORIGINAL_HEADER_BYTES:
            break
        used += size
        kept.append((name, value))
    return kept, len(headers) - len(kept)


@dataclass
class DlqBudget:
    """Raises :class:`DlqLimitExceeded` when, of the last ``window`` records, more than
    ``max_fraction`` of ``window`` went to the DLQ (and at least ``min_failures`` did).

    A bad deploy or a poisoned upstream then stops the stage loudly instead of draining the
    whole topic into its DLQ. The share is of the whole window even before a process has read
    that many records, so a restarted process, whose window starts empty, trips on what one that
    ran for long would trip on: a run of 30 bad records at its committed offset is
    dead-lettered, not a crash on every restart. A record read again (its batch put back after a
    failed commit) counts once, by its ``position``, while it is among the last ``remembered``
    records counted: more than a stage puts back at once (its pending records and a batch,
    2,500 by default; a stage's settings raise it with them), which is more than the window
    holds.
    """

    window: int = 200
    max_fraction: float = 0.5
    min_failures: int = 20
    remembered: int = 10_000
    _recent: deque[bool] = field(default_factory=deque)
    _failures: int = 0
    _seen: OrderedDict[Hashable, None] = field(default_factory=OrderedDict)

    def record(self, failed: bool, position: Hashable | None = None) -> None:
        """Count one record's outcome; ``position`` names the record (topic, partition,
        offset), ``None`` a record counted without one (never seen before)."""
        if position is not None:
            if position in self._seen:
                return
            self._seen[position] = None
            if len(self._seen) > self.remembered:
                self._seen.popitem(last=False)
        self._recent.append(failed)
        self._failures += failed
        if len(self._recent) > self.window:
            self._failures -= self._recent.popleft()
        if self._failures >= self.min_failures and self._failures > self.max_fraction * self.window:
            raise DlqLimitExceeded(
                f"{self._failures} of the last {len(self._recent)} records went to the DLQ"
            )
