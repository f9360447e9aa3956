"""Typed views of the Avro contracts in ``schemas/avro/`` (one model per topic).

The ``.avsc`` files are the contract; these models mirror them field for field (a unit test
keeps the two in step) so handlers work with types instead of dicts. Timestamps are aware
datetimes (Avro ``timestamp-millis``); money is ``int`` minor units.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from refund_bench.errors import InvalidInput

ID_PATTERN = r"^[\x21-\x7e]{1,128}$"
"""Dispute, order, customer, review and review-item ids: 1-128 printable ASCII characters, no
spaces. The API and the review desk accept no other; in the events other services publish it
bounds what a stage copies into keys, events, cache keys and indexed columns."""
MAX_NOTE_CHARS = 2000
"""A reviewer's note, at most."""
MAX_NAME_CHARS = 128
"""A reviewer's name, at most."""

Id = Annotated[str, Field(pattern=ID_PATTERN)]
SHA256_PATTERN = r"^[0-9a-f]{64}$"
Sha256 = Annotated[str, Field(pattern=SHA256_PATTERN)]
"""An evidence snapshot's content hash as the extractor writes it: 64 lower-case hex digits.
Stages look the snapshot up by it in PostgreSQL, which refuses a NUL in a query: any other value
is invalid at parse, and its record goes to the dead-letter topic instead of stopping the stage
at every redelivery."""
_REFUSED = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
"""Control characters other than tab and line breaks (NUL: PostgreSQL text cannot hold one), and
the bidirectional overrides that can make a reviewer read the text in another order."""
_INVISIBLE = r"\s\u200b-\u200d\u2060\ufeff"
TEXT_PATTERN = rf"^[^{_REFUSED}]*[^{_REFUSED}{_INVISIBLE}][^{_REFUSED}]*$"
"""Complaint text: none of the refused characters, and something visible (zero-width characters
alone are blank; inside text they stay, as in emoji sequences). The API and the event alike."""


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_avro(self) -> dict[str, Any]:
        """The value to Avro-encode."""
        return self.model_dump()


E = TypeVar("E", bound=Event)


def parse(model: type[E], value: Mapping[str, Any]) -> E:
    """Validate a decoded value; a value that breaks the contract is :class:`InvalidInput`."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise InvalidInput(
            f"{model.__name__} failed validation: {validation_reason(exc, whole='the event')}"
        ) from exc


def validation_reason(exc: ValidationError, where: str = "", whole: str = "the value") -> str:
    """A pydantic validation error as a dead letter's reason may hold it: the first error's
    field (under ``where``, if given; ``whole`` for the value as a whole) and rule, and how many
    more there are; never the input. The reason is logged and kept with the dead letter, and a
    value may be a customer's words (``str(exc)`` quotes each input)."""
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    field = ".".join(str(part) for part in (where, *first["loc"]) if part != "") or whole
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{field}: {first['msg']}{more}"


K = TypeVar("K", bound=StrEnum)


def known(kind: type[K], value: str, where: str) -> K:
    """``value`` as a term of ``kind``; :class:`InvalidInput` (naming ``where``) for a term this
    version does not know, from a newer or faulty producer."""
    try:
        return kind(value)
    except ValueError as exc:
        raise InvalidInput(f"{where}: {exc}") from exc


def agrees(facts: Mapping[str, Any], first: Mapping[str, Any], what: str) -> None:
    """:class:`InvalidInput` (``what`` disagrees with ..., naming each fact) unless every fact
    in ``facts`` equals the one in ``first``: what an earlier record of the same dispute or
    grievance said of it."""
    differ = [
        f"{name} {value!r}, not {first.get(name)!r}"
        for name, value in facts.items()
        if value != first.get(name)
    ]
    if differ:
        raise InvalidInput(f"{what}: {'; '.join(differ)}")


def now() -> datetime:
    """The current instant, truncated to milliseconds as Avro stores it."""
    instant = datetime.now(UTC)
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def _without_nul(value: str | None) -> str | None:
    """A text field of an event other services publish: PostgreSQL text cannot store NUL."""
    if value is not None and "\x00" in value:
        raise ValueError("holds a NUL character, which PostgreSQL text cannot store")
    return value


_REFUSED_CHAR = re.compile(f"[{_REFUSED}]")
_VISIBLE_CHAR = re.compile(f"[^{_REFUSED}{_INVISIBLE}]")


def readable_text(value: str) -> str:
    """``value`` if it is text as :data:`TEXT_PATTERN` has it; else ``ValueError`` with a reason
    that says what is wrong and where, never the words."""
    _without_nul(value)
    refused = _REFUSED_CHAR.search(value)
    if refused:
        raise ValueError(
            f"holds U+{ord(refused.group()):04X} at position {refused.start()}: a control"
            " character or a bidirectional override"
        )
    if not _VISIBLE_CHAR.search(value):
        raise ValueError("is blank")
    return value


class ComplaintReceived(Event):
    """What an upstream service publishes. Its ids follow :data:`ID_PATTERN` and its text
    :data:`TEXT_PATTERN`, as the API's do (its length is the extractor's ``MAX_COMPLAINT_CHARS``
    to check). Its text fields go to PostgreSQL as they are, so one that holds a NUL character
    (which PostgreSQL text cannot store) is invalid here, where it goes to the dead-letter topic
    alone, not in the database call it shares with other complaints."""

    dispute_id: Id
    order_id: Id
    customer_id: Id
    text: str
    received_at: datetime
    channel: str = "api"

    _storable = field_validator("dispute_id", "order_id", "customer_id", "channel")(_without_nul)
    _readable = field_validator("text")(readable_text)


class ExtractorAnswer(Event):
    """One model answer a complaint's extraction was read from (``complaint.extracted``)."""

    attempt: int
    raw_answer: str
    problems: list[str]
    model: str | None = None
    prompt_version: str | None = None
    served_model: str | None = None
    system_fingerprint: str | None = None

    # Kept in a jsonb column, which cannot hold NUL either: refused here, dead-lettered alone.
    _storable = field_validator(
        "raw_answer", "model", "prompt_version", "served_model", "system_fingerprint"
    )(_without_nul)

    @field_validator("problems")
    @classmethod
    def _problems_storable(cls, value: list[str]) -> list[str]:
        for problem in value:
            _without_nul(problem)
        return value


class ComplaintExtracted(Event):
    """What the extractor made of one complaint, with the answers it read, for audit."""

    dispute_id: str
    order_id: str
    snapshot_sha256: Sha256
    complaint_sha256: str
    outcome: str
    """An :class:`~refund_bench.domain.ExtractionOutcome`."""
    grievance_total: int
    reason: str | None = None
    answers: list[ExtractorAnswer]
    extracted_at: datetime

    _storable = field_validator("dispute_id", "order_id", "outcome", "reason")(_without_nul)


class GrievanceExtracted(Event):
    dispute_id: str
    order_id: str
    grievance_id: str
    grievance_total: int
    category: str
    text: str
    span_start: int
    span_end: int
    span_text: str | None = None
    item_name: str | None = None
    item_quantity: int | None = None
    snapshot_sha256: Sha256
    snapshot_json: str
    extractor_model: str
    extractor_prompt_version: str
    extracted_at: datetime


class RulingCast(Event):
    dispute_id: str
    order_id: str
    grievance_id: str
    grievance_total: int
    category: str
    item_name: str | None = None
    item_quantity: int | None = None
    judge_seat: int
    judge_count: int
    ruling: str
    model_ruling: str
    confidence: float
    evidence_cited: list[str]
    reasoning: str
    model: str
    prompt_version: str
    snapshot_sha256: Sha256
    raw_response: str
    cast_at: datetime
    seed: int | None = None
    cites_missing_evidence: bool = False
    temperature: float | None = None
    served_model: str | None = None
    system_fingerprint: str | None = None


class RulingSummary(Event):
    judge_seat: int
    ruling: str
    model_ruling: str
    confidence: float
    evidence_cited: list[str]
    reasoning: str
    model: str
    prompt_version: str
    cites_missing_evidence: bool = False


class VerdictDecided(Event):
    dispute_id: str
    order_id: str
    grievance_id: str
    grievance_total: int
    category: str
    item_name: str | None = None
    item_quantity: int | None = None
    snapshot_sha256: Sha256
    outcome: str
    votes_upheld: int
    votes_rejected: int
    votes_escalate: int
    split: str
    unanimous: bool
    rulings: list[RulingSummary]
    decided_at: datetime


class ReviewDecided(Event):
    """What the review desk publishes, held to the desk's own limits: ids that follow
    :data:`ID_PATTERN`, a reviewer's name and a note of bounded length. Its text fields go to
    PostgreSQL (the recorder), so one that holds a NUL character is invalid here, as in
    :class:`ComplaintReceived`."""

    dispute_id: Id
    review_id: Id
    kind: str
    grievance_id: Id | None = None
    decision: str
    reviewer: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    note: Annotated[str, Field(max_length=MAX_NOTE_CHARS)] = ""
    decided_at: datetime
    item_key: Id | None = None

    _storable = field_validator(
        "dispute_id",
        "review_id",
        "kind",
        "grievance_id",
        "decision",
        "reviewer",
        "note",
        "item_key",
    )(_without_nul)


class PricedLineEvent(Event):
    grievance_id: str
    category: str
    outcome: str
    status: str
    amount_minor: int
    proposed_minor: int = 0
    rule: str
    item_name: str | None = None
    quantity: int | None = None


class RefundPriced(Event):
    dispute_id: str
    order_id: str
    round: int
    pricing_version: str
    currency: str
    order_total_minor: int
    lines: list[PricedLineEvent]
    total_minor: int
    already_paid_minor: int = 0
    payable_minor: int
    cap_minor: int
    decision: str
    held_grievances: list[str] = []
    reason: str = ""
    snapshot_sha256: Sha256
    payment_reference: str | None = None
    """From the evidence snapshot; ``None`` in events written before the field existed."""
    priced_at: datetime


class ReplyPublished(Event):
    dispute_id: str
    round: int
    text: str
    amount_minor: int
    currency: str
    source: str
    guard_failures: list[str] = []
    model: str
    prompt_version: str
    published_at: datetime


class PayoutRequested(Event):
    dispute_id: str
    order_id: str
    round: int
    amount_minor: int
    currency: str
    payment_reference: str
    requested_at: datetime


class PayoutCompleted(Event):
    dispute_id: str
    round: int
    amount_minor: int
    currency: str
    stripe_refund_id: str
    idempotency_key: str
    completed_at: datetime
    revision: int = 0


class PayoutFailed(Event):
    dispute_id: str
    round: int
    amount_minor: int
    currency: str
    error_code: str
    reason: str
    idempotency_key: str
    failed_at: datetime
    revision: int = 0
    item_key: Id | None = None


TOPIC_MODELS: dict[str, type[Event]] = {
    "complaint.received": ComplaintReceived,
    "grievance.extracted": GrievanceExtracted,
    "complaint.extracted": ComplaintExtracted,
    "ruling.cast": RulingCast,
    "verdict.decided": VerdictDecided,
    "review.decided": ReviewDecided,
    "refund.priced": RefundPriced,
    "reply.published": ReplyPublished,
    "payout.requested": PayoutRequested,
    "payout.completed": PayoutCompleted,
    "payout.failed": PayoutFailed,
}
