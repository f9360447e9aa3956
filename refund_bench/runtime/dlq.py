"""Dead-letter records and the budget that stops a stage when most of its input is failing."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from refund_bench.errors import DlqLimitExceeded


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
    """The DLQ envelope value and its headers for one unprocessable record."""
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
