"""What a stage's handler receives and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from refund_bench.runtime.state import RecordState

Guarantee = Literal["exactly-once", "at-least-once"]


@dataclass(frozen=True)
class Message:
    """One decoded input record."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: dict[str, Any]
    headers: Mapping[str, bytes]
    timestamp_ms: int


@dataclass(frozen=True)
class Emit:
    """One output record. ``key`` is the dispute id for every flow topic."""

    topic: str
    key: str
    value: Mapping[str, Any]
    headers: Mapping[str, bytes] = field(default_factory=dict)


@dataclass
class Context:
    """Per-record context: the stage's state for the record's partition (if it has a store)."""

    state: RecordState | None

    def store(self) -> RecordState:
        """The record's state view; raises if the stage declared no store."""
        if self.state is None:
            raise RuntimeError("this stage has no state store")
        return self.state


SyncHandler = Callable[[Message, Context], Sequence[Emit]]
AsyncHandler = Callable[[Message, Context], Awaitable[Sequence[Emit]]]
