"""Request and response models of the JSON API; they are the OpenAPI document's schemas.

Money is ``int`` minor units everywhere; timestamps are RFC 3339 date-times.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from refund_bench import events as ev

ID_PATTERN = ev.ID_PATTERN
"""Order, customer and dispute ids: 1-128 printable ASCII characters, no spaces (the events'
own rule)."""
TEXT_PATTERN = ev.TEXT_PATTERN
"""Complaint text: no control characters or bidirectional overrides, and something visible (the
event's own rule). The request's JSON schema shows it; :func:`ev.readable_text` checks it, so
that a 422 names the character and its position (or says blank), not the regex or the text."""
KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
"""Idempotency keys: 1-255 printable ASCII characters (a UUID is a good choice)."""


class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """Every error answer: a sentence for people and, for validation errors, the fields."""

    detail: str
    errors: list[FieldError] = []


class ComplaintRequest(BaseModel):
    """Body of ``POST /complaints``. ``text`` is at most ``MAX_COMPLAINT_CHARS`` characters."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "order_id": "order-1840",
                    "customer_id": "cust-77",
                    "text": "Two of the four biryanis were missing.",
                }
            ]
        },
    )

    order_id: Annotated[str, Field(pattern=ID_PATTERN)]
    customer_id: Annotated[str, Field(pattern=ID_PATTERN)]
    text: Annotated[
        str,
        Field(min_length=1, json_schema_extra={"pattern": TEXT_PATTERN}),
        AfterValidator(ev.readable_text),
    ]


class ComplaintAccepted(BaseModel):
    """The dispute created for a complaint. ``replayed`` is true when an earlier request with
    the same Idempotency-Key created the dispute: a retry. The retry of a request that got 503
    publishes the complaint itself (202, ``replayed`` true); once published, a retry publishes
    nothing new (200)."""

    dispute_id: str
    status_url: str
    replayed: bool


class StripeEventReceived(BaseModel):
    """The answer to a Stripe webhook event that was taken (2xx): what it changed, if anything."""

    outcome: str = Field(
        description="recorded, already_failed, now_final, now_refunded, failed_again,"
        " refunded_after_settled, already_paid, refund_not_found, unknown_round, other_refund"
        " or ignored"
    )
    detail: str


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    checks: dict[str, str]


class Complaint(BaseModel):
    order_id: str
    customer_id: str
    text: str
    received_at: datetime
    channel: str = Field(
        description=(
            "Where the complaint came from: the API's channel for a complaint it took, else what"
            " its complaint.received event said (app, email, ...; its first 64 characters kept);"
            " `upstream` for an event that named none (its contract's default, `api`) and for a"
            " dispute stored before disputes kept it."
        )
    )
    accepted_via_api: bool
    published: bool | None = Field(
        description="For complaints taken by this API: whether complaint.received was published"
        " (confirmed by Kafka, or the extractor has the dispute); null for the others."
    )
    extracted_at: datetime | None = Field(
        description="When the extractor froze the evidence (null: not yet)."
    )


class EvidenceSnapshot(BaseModel):
    sha256: str = Field(description="Hex sha256 of the UTF-8 bytes of snapshot_json.")
    snapshot_json: str = Field(description="The canonical JSON exactly as hashed.")
    snapshot: dict[str, Any]
    created_at: datetime


class Grievance(BaseModel):
    grievance_id: str
    category: str
    text: str
    span_start: int
    span_end: int
    item_name: str | None
    item_quantity: int | None
    grievance_total: int
    model: str
    prompt_version: str
    extracted_at: datetime


class ExtractorAnswerRecord(BaseModel):
    """One model answer the extraction was read from, as it came (``complaint.extracted``)."""

    attempt: int = Field(description="1: the first answer; 2: the repair.")
    raw_answer: str
    problems: list[str] = Field(description="Why code found it invalid; empty when valid.")
    model: str | None = None
    prompt_version: str | None = None
    served_model: str | None = None
    system_fingerprint: str | None = None


class ExtractionRecord(BaseModel):
    """What the extractor made of the complaint, and the answers it read."""

    outcome: str = Field(description="EXTRACTED, NOTHING_CHECKABLE, HELD or REFUSED.")
    grievance_total: int
    reason: str | None
    complaint_sha256: str
    snapshot_sha256: str
    answers: list[ExtractorAnswerRecord]
    extracted_at: datetime


class RulingRecord(BaseModel):
    grievance_id: str
    judge_seat: int
    ruling: str
    model_ruling: str
    confidence: float
    evidence_cited: list[str]
    reasoning: str
    model: str
    prompt_version: str
    snapshot_sha256: str
    raw_response: str
    cast_at: datetime
    seed: int | None = None
    """The draw's seed; null when the endpoint refused the request, and in rulings cast before
    rulings carried it."""
    cites_missing_evidence: bool = False
    """The answer cites a field of the snapshot that holds no record (as in ``ruling.cast``):
    such an UPHELD never makes an UPHELD majority, and such a REJECTED is counted as ESCALATE."""
    temperature: float | None = None
    """The draw's sampling temperature; null when the endpoint refused the request, in rulings
    another judge process cast again from a cached answer, and in rulings cast before rulings
    carried it."""
    served_model: str | None = None
    """The model the endpoint's response said served the draw; null when it named none, and as
    ``temperature``."""
    system_fingerprint: str | None = None
    """The endpoint's system fingerprint for the draw; null likewise."""


class VerdictRecord(BaseModel):
    grievance_id: str
    category: str
    outcome: str
    votes_upheld: int
    votes_rejected: int
    votes_escalate: int
    split: str
    unanimous: bool
    decided_at: datetime


PricedLine = ev.PricedLineEvent
"""A priced line exactly as ``refund.priced`` carries it."""


class PricedRound(BaseModel):
    round: int
    pricing_version: str
    currency: str
    order_total_minor: int
    lines: list[PricedLine]
    total_minor: int
    already_paid_minor: int
    payable_minor: int
    cap_minor: int
    decision: str
    held_grievances: list[str]
    reason: str
    priced_at: datetime


class ReplyRecord(BaseModel):
    round: int
    text: str
    amount_minor: int
    currency: str
    source: str
    guard_failures: list[str]
    model: str
    prompt_version: str
    created_at: datetime
    model_answer: str | None = Field(
        default=None,
        description=(
            "The model's answer as it came (its JSON included, at most 16,000 characters) when"
            " the template replaced it (source TEMPLATE: the guard refused it, or it could not"
            " be read); null when the model's reply was sent, the model gave no answer, or the"
            " reply was stored before replies kept it."
        ),
    )
    served_model: str | None = Field(
        default=None,
        description=(
            "The model the endpoint's response named for the model's answer of the round, sent"
            " or replaced by the template (a dated snapshot where `model` names an alias), cut at"
            " 200 characters with a note of the cut; null when no answer came, the response"
            " named none, the process that wrote the reply did not draw the answer (a"
            " redelivery to another process found it in the cache, or another process's answer"
            " won it), or the reply was stored before replies kept it."
        ),
    )
    system_fingerprint: str | None = Field(
        default=None,
        description=(
            "The backend configuration the same response reported (OpenAI's"
            " `system_fingerprint`), bounded and null as `served_model` is."
        ),
    )


class LedgerRecord(BaseModel):
    round: int
    amount_minor: int
    currency: str
    payment_reference: str
    idempotency_key: str
    status: str
    stripe_refund_id: str | None
    error_code: str | None
    error_message: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime
    paid_elsewhere: bool = False
    """A payment operator recorded the FAILED round settled another way (PAID_ELSEWHERE)."""


class PayoutEventRecord(BaseModel):
    round: int
    revision: int
    """Orders a round's outcomes: Stripe's later word on a refund has a higher one."""
    outcome: str
    amount_minor: int
    stripe_refund_id: str | None
    error_code: str | None
    reason: str | None
    at: datetime


class Payouts(BaseModel):
    ledger: list[LedgerRecord]
    events: list[PayoutEventRecord]
    """Each round's outcome that stands: its event of the highest revision."""
    history: list[PayoutEventRecord]
    """Every outcome reported, by round in the order reported (a refund that waited for the
    customer shows as completed, failed, completed)."""


class ReviewItemRecord(BaseModel):
    item_key: str
    kind: str
    grievance_id: str | None
    reason: str
    status: str
    created_at: datetime
    decided_at: datetime | None


class ReviewDecisionRecord(BaseModel):
    review_id: str
    item_key: str
    kind: str
    grievance_id: str | None
    decision: str
    reviewer: str
    note: str
    decided_at: datetime
    published: bool


class Summary(BaseModel):
    grievances: int
    rounds: int
    open_review_items: int
    paid_minor: int = Field(description="Sum of the SUCCEEDED payout ledger rows.")
    currency: str | None


class DisputeStory(BaseModel):
    """The whole story of one dispute, from PostgreSQL: the audit record."""

    dispute_id: str
    summary: Summary
    complaint: Complaint
    evidence: EvidenceSnapshot | None
    extraction: ExtractionRecord | None = Field(
        default=None, description="Null until the extraction is recorded."
    )
    grievances: list[Grievance]
    rulings: list[RulingRecord]
    verdicts: list[VerdictRecord]
    priced_rounds: list[PricedRound]
    replies: list[ReplyRecord]
    payouts: Payouts
    review_items: list[ReviewItemRecord]
    review_decisions: list[ReviewDecisionRecord]
