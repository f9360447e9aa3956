"""Counting a bench's K rulings in code, and the per-grievance tally state.

A verdict needs a strict majority (more than K/2 seats) for UPHELD or REJECTED; anything else,
including a majority of ESCALATE, is ESCALATE. An UPHELD that cites evidence with no record
(``cites_missing_evidence``, set by the judge) counts in the split but not towards that
majority: missing evidence comes out ESCALATE, however many seats take the customer at their
word. An UPHELD or REJECTED that cites no evidence at all is counted as ESCALATE here too,
whoever wrote it. The split (3-0, 2-1, 1-1-1) is kept because a unanimous verdict is stronger
than a narrow one.

:class:`BenchState` is the bench the tally stores per grievance in its compacted changelog until
the last seat is in: the rulings seen so far (first ruling per seat wins, so redelivered
``ruling.cast`` records are harmless). Once the bench is complete the verdict is emitted and the
tally stores a ``decided_at`` marker instead (:mod:`services.tally.handler`), which is what
makes the verdict come out exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from refund_bench.domain import Ruling


@dataclass(frozen=True)
class VoteCount:
    """The counted outcome of one complete bench."""

    outcome: Ruling
    votes_upheld: int
    votes_rejected: int
    votes_escalate: int
    split: str
    unanimous: bool
    judge_count: int


def count_votes(
    rulings: Mapping[int, Ruling],
    judge_count: int,
    *,
    on_missing_evidence: frozenset[int] = frozenset(),
) -> VoteCount:
    """Count a complete bench: seats must be exactly ``0..judge_count-1``. The UPHELD rulings
    of the seats in ``on_missing_evidence`` count in the split, never towards an UPHELD
    majority.

    Raises ``ValueError`` for ``judge_count < 1``, a seat outside the range, a missing seat, or
    a value that is not a ruling.
    """
    if judge_count < 1:
        raise ValueError(f"judge_count must be at least 1, got {judge_count}")
    outside = sorted(seat for seat in rulings if not 0 <= seat < judge_count)
    if outside:
        raise ValueError(f"seats {outside} are outside 0..{judge_count - 1}")
    missing = sorted(set(range(judge_count)) - set(rulings))
    if missing:
        raise ValueError(f"bench incomplete: seats {missing} have not ruled")

    counts = Counter(Ruling(value) for value in rulings.values())
    upheld, rejected, escalate = (counts[r] for r in Ruling)
    grounded_upheld = sum(
        1
        for seat, value in rulings.items()
        if Ruling(value) is Ruling.UPHELD and seat not in on_missing_evidence
    )
    if 2 * grounded_upheld > judge_count:
        outcome = Ruling.UPHELD
    elif 2 * rejected > judge_count:
        outcome = Ruling.REJECTED
    else:
        outcome = Ruling.ESCALATE
    groups = sorted((n for n in (upheld, rejected, escalate) if n > 0), reverse=True)
    if len(groups) == 1:
        groups.append(0)
    return VoteCount(
        outcome=outcome,
        votes_upheld=upheld,
        votes_rejected=rejected,
        votes_escalate=escalate,
        split="-".join(str(n) for n in groups),
        unanimous=counts[outcome] == judge_count,  # every seat ruled what the verdict says
        judge_count=judge_count,
    )


class RulingSummary(BaseModel):
    """One seat's ruling as carried in ``verdict.decided.rulings`` (the Avro RulingSummary).

    ``confidence`` is model-reported and informational only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge_seat: int = Field(ge=0)
    ruling: Ruling
    model_ruling: str
    confidence: float
    evidence_cited: tuple[str, ...]
    reasoning: str
    model: str
    prompt_version: str
    cites_missing_evidence: bool = False
    """The judge found the ruling cites evidence with no record: an UPHELD then counts in the
    split, never towards an UPHELD majority."""

    @classmethod
    def from_ruling_cast(cls, value: Mapping[str, Any]) -> RulingSummary:
        """Pick the summary fields out of a decoded ``ruling.cast`` value (one written before
        a field existed takes its default). An UPHELD or REJECTED citing no evidence, and a
        REJECTED marked as citing missing evidence, are counted as ESCALATE, as the judge
        counts them: the rules hold whoever wrote the record."""
        summary = cls.model_validate({n: value[n] for n in cls.model_fields if n in value})
        unfounded = summary.ruling is not Ruling.ESCALATE and not summary.evidence_cited
        if unfounded or (summary.ruling is Ruling.REJECTED and summary.cites_missing_evidence):
            return summary.model_copy(update={"ruling": Ruling.ESCALATE})
        return summary


class BenchState(BaseModel):
    """The tally's stored state for one grievance; round-trips through JSON exactly."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge_count: int = Field(ge=1)
    rulings: tuple[RulingSummary, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _without_the_emitted_flag(cls, data: Any) -> Any:
        """Benches stored by earlier versions carry an ``emitted`` flag, no longer kept (a
        decided grievance is a ``decided_at`` marker, and a complete bench takes no new seat):
        it is read and dropped."""
        if isinstance(data, Mapping) and "emitted" in data:
            return {k: v for k, v in data.items() if k != "emitted"}
        return data

    @model_validator(mode="after")
    def _seats_are_valid(self) -> BenchState:
        seats = [r.judge_seat for r in self.rulings]
        if len(set(seats)) != len(seats):
            raise ValueError(f"duplicate seats in {seats}")
        if any(seat >= self.judge_count for seat in seats):
            raise ValueError(f"seats {seats} outside 0..{self.judge_count - 1}")
        if seats != sorted(seats):
            raise ValueError(f"rulings must be ordered by seat, got {seats}")
        return self

    def seats(self) -> frozenset[int]:
        """The seats that have ruled."""
        return frozenset(r.judge_seat for r in self.rulings)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict, e.g. a state-store value."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchState:
        """Inverse of :meth:`to_dict`; raises ``pydantic.ValidationError`` on a bad document."""
        return cls.model_validate(dict(data))

    def to_json(self) -> str:
        """The state as a JSON string."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> BenchState:
        """Inverse of :meth:`to_json`."""
        return cls.model_validate_json(text)


def add_ruling(
    state: BenchState | None, seat: int, ruling_summary: RulingSummary, judge_count: int
) -> tuple[BenchState, bool]:
    """Record one seat's ruling; returns ``(new_state, is_new_seat)``.

    A seat already recorded is ignored and the same state is returned with ``False``: the first
    ruling per seat wins. Raises ``ValueError`` if ``seat`` is outside ``0..judge_count-1``, does
    not match ``ruling_summary.judge_seat``, or ``judge_count`` differs from the stored bench's.
    """
    if judge_count < 1:
        raise ValueError(f"judge_count must be at least 1, got {judge_count}")
    if not 0 <= seat < judge_count:
        raise ValueError(f"seat {seat} is outside 0..{judge_count - 1}")
    if ruling_summary.judge_seat != seat:
        raise ValueError(
            f"seat {seat} does not match the summary's seat {ruling_summary.judge_seat}"
        )
    if state is None:
        state = BenchState(judge_count=judge_count)
    elif state.judge_count != judge_count:
        raise ValueError(f"judge_count {judge_count} differs from the bench's {state.judge_count}")
    if seat in state.seats():
        return state, False
    rulings = tuple(sorted((*state.rulings, ruling_summary), key=lambda r: r.judge_seat))
    return BenchState(judge_count=judge_count, rulings=rulings), True


def is_complete(state: BenchState) -> bool:
    """True when every seat of the bench has ruled."""
    return len(state.rulings) == state.judge_count


def tally(state: BenchState) -> VoteCount:
    """Count a complete bench; raises ``ValueError`` if it is not complete."""
    return count_votes(
        {r.judge_seat: r.ruling for r in state.rulings},
        state.judge_count,
        on_missing_evidence=frozenset(
            r.judge_seat for r in state.rulings if r.cites_missing_evidence
        ),
    )
