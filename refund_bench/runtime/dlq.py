"""Dead-letter records and the budget that stops a stage when most of its input is failing."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from refund_bench.errors import DlqLimitExceeded

MAX_REASON_CHARS = 4000
MAX_ORIGINAL_BYTES = 900_000
"""Below the producer's default ``message.max.bytes`` (1,000,000) with room for the rest of the
envelope and its headers."""


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
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The DLQ envelope value and its headers for one unprocessable record.

    The envelope must fit in one Kafka record even when the input nearly filled one: a reason
    longer than :data:`MAX_REASON_CHARS` is cut, and an original value longer than
    :data:`MAX_ORIGINAL_BYTES` is kept in part (the reason says so, and the header
    ``dlq.original.bytes`` gives its full size). The whole record stays in its source topic
    at ``offset`` until that topic's retention, for a replay from there.
    """
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    size = len(value) if value is not None else 0
    if value is not None and size > MAX_ORIGINAL_BYTES:
        value = value[:MAX_ORIGINAL_BYTES]
        reason += f" [original value cut to {MAX_ORIGINAL_BYTES} of {size} bytes]"
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
    }
    headers = {
        "dlq.reason": reason.encode(),
        "dlq.error_type": error_type.encode(),
        "dlq.stage": stage.encode(),
        "dlq.source.topic": topic.encode(),
        "dlq.source.partition": str(partition).encode(),
        "dlq.source.offset": str(offset).encode(),
        "dlq.original.bytes": str(size).encode(),
    }
    return envelope, headers


@dataclass
class DlqBudget:
    """Raises :class:`DlqLimitExceeded` when, over the last ``window`` records, more than
    ``max_fraction`` went to the DLQ (and at least ``min_failures`` did).

    A bad deploy or a poisoned upstream then stops the stage loudly instead of draining the
    whole topic into its DLQ.
    """

    window: int = 200
    max_fraction: float = 0.5
    min_failures: int = 20
    _recent: deque[bool] = field(default_factory=deque)
    _failures: int = 0

    def record(self, failed: bool) -> None:
        self._recent.append(failed)
        self._failures += failed
        if len(self._recent) > self.window:
            self._failures -= self._recent.popleft()
        if self._failures >= self.min_failures and self._failures > self.max_fraction * len(
            self._recent
        ):
            raise DlqLimitExceeded(
                f"{self._failures} of the last {len(self._recent)} records went to the DLQ"
            )
