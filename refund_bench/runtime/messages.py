"""What a stage's handler receives and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from refund_bench.errors import InvalidInput
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

    def require_key(self, dispute_id: str) -> None:
        """Raise :class:`InvalidInput` unless the record is keyed by ``dispute_id``.

        A stateful stage keeps a dispute's state in the partition its key maps to; a record
        keyed otherwise would be counted in another partition's state, apart from the rest of
        its dispute, and never complete it."""
        if self.key != dispute_id:
            raise InvalidInput(
                f"record key {self.key!r} is not its dispute id {dispute_id!r}: a dispute's"
                " records must be keyed by its id"
            )


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
