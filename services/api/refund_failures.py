"""Refunds Stripe took on and later reported failed: from its webhook event to ``payout.failed``.

The payout stage counts a refund Stripe answers ``pending`` as paid, and the customer's reply
has promised the money. When Stripe later reports that refund failed, canceled or waiting for
the customer (``refund.failed``, ``refund.updated``, ``charge.refund.updated``), no money went
back: :meth:`RefundFailures.record` marks the round FAILED in the payout ledger and writes a
``refund_failures`` row in the same transaction, and that row is the outbox of a ``payout.failed``
for the round (error code ``refund_<status>``, as the payout stage uses for a refund refused at
once). The recorder puts it in the review queue for a payment operator.

Stripe delivers an event at least once and may report one failure in several events; the round
is recorded and published once. A refund that waited for the customer (``requires_action``) may
still refund, so the desk does not pay its round again; when Stripe later reports that refund
failed or canceled, the ledger's error code says so instead, and the desk offers REPAY. A
refund not made by the payout stage (no ``dispute_id`` and ``round`` in its metadata, or
another refund id than the ledger's) changes nothing.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field

from refund_bench import events as ev
from refund_bench.db.payout_rounds import NOT_REFUNDED_STATUSES, not_refunded_code
from services.api.store import OutboxTable

REFUND_EVENT_TYPES = frozenset({"refund.failed", "refund.updated", "charge.refund.updated"})
"""The Stripe event types whose object is a refund that may have stopped being paid."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class StripeRefund(_Loose):
    id: str = Field(min_length=1)
    object: str
    status: str | None = None
    failure_reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class _EventData(_Loose):
    object: dict[str, Any]


class StripeEvent(_Loose):
    """The fields of a Stripe event this service reads; the rest are ignored."""

    id: str = Field(min_length=1)
    type: str
    data: _EventData


@dataclass(frozen=True)
class RefundFailureReport:
    """What a Stripe event says of one of the payout stage's refunds: it did not pay."""

    stripe_event_id: str
    stripe_refund_id: str
    refund_status: str
    failure_reason: str | None
    dispute_id: str
    round: int


def refund_failure_of(event: StripeEvent) -> RefundFailureReport | str:
    """The failure ``event`` reports of a payout round, or why it reports none (a short reason
    for the answer and the logs). Raises ``ValueError`` for a refund event whose object is not
    a refund."""
    if event.type not in REFUND_EVENT_TYPES:
        return f"event type {event.type} is not about a refund's status"
    refund = StripeRefund.model_validate(event.data.object)
    if refund.object != "refund":
        raise ValueError(f"a {event.type} event whose object is a {refund.object}, not a refund")
    if refund.status not in NOT_REFUNDED_STATUSES:
        return f"refund status {refund.status} is not a failure"
    dispute_id = refund.metadata.get("dispute_id")
    round_ = refund.metadata.get("round")
    if not (
        isinstance(dispute_id, str)
        and re.fullmatch(ev.ID_PATTERN, dispute_id)
        and isinstance(round_, str)
        and _ROUND.fullmatch(round_)
    ):
        return "the refund carries no dispute_id and round: not made by the payout stage"
    return RefundFailureReport(
        stripe_event_id=event.id,
        stripe_refund_id=refund.id,
        refund_status=refund.status,
        failure_reason=refund.failure_reason,
        dispute_id=dispute_id,
        round=int(round_),
    )


_ROUND = re.compile(r"[1-9][0-9]{0,8}")
"""A settlement round as the payout stage writes it in a refund's metadata."""


class Outcome(enum.StrEnum):
    """What recording a report did (also the metric's label)."""

    RECORDED = "recorded"
    """The round was paid in the ledger; it is FAILED now, and its payout.failed is queued."""
    ALREADY_FAILED = "already_failed"
    """The round was FAILED before (by an earlier event, or by the payout stage itself)."""
    NOW_FINAL = "now_final"
    """The round was FAILED with its refund waiting for the customer, which may still have
    refunded; Stripe now reports that refund failed or canceled: no money went back, so the
    ledger says so, and a payment operator may pay the round again."""
    NOT_SETTLED = "not_settled"
    """The payout stage has not recorded the refund yet: Stripe should deliver again later."""
    UNKNOWN_ROUND = "unknown_round"
    """No such round in the ledger."""
    OTHER_REFUND = "other_refund"
    """The ledger paid the round with another refund: this one was made by someone else."""


@dataclass(frozen=True)
class RefundFailureRecord:
    """A ``refund_failures`` row: one round whose refund Stripe reported failed."""

    dispute_id: str
    round: int
    stripe_refund_id: str
    refund_status: str
    failure_reason: str | None
    stripe_event_id: str
    amount_minor: int
    currency: str
    idempotency_key: str
    error_code: str
    error_message: str
    reported_at: datetime
    published: bool = False


REFUND_FAILURES = OutboxTable(
    "refund_failures",
    "dispute_id, round, stripe_refund_id, refund_status, failure_reason, stripe_event_id,"
    " amount_minor, currency, idempotency_key, error_code, error_message, reported_at, published",
    key="stripe_refund_id",
    oldest="reported_at",
    make=lambda row: RefundFailureRecord(**row),
)
_LEDGER_ROW = """
SELECT status, error_code, stripe_refund_id, amount_minor, currency, idempotency_key
FROM payout_ledger WHERE dispute_id = %s AND round = %s FOR UPDATE
"""
_WAITING = not_refunded_code("requires_action")
_FINAL_STATUSES = NOT_REFUNDED_STATUSES - {"requires_action"}
_LEDGER_FINAL = """
UPDATE payout_ledger SET error_code = %s, error_message = %s, updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'FAILED' AND error_code = %s
"""
_LEDGER_FAIL = """
UPDATE payout_ledger SET status = 'FAILED', error_code = %s, error_message = %s,
                         updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'SUCCEEDED'
"""
_INSERT = f"""
INSERT INTO refund_failures ({REFUND_FAILURES.columns})
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false)
"""  # noqa: S608 - the column list is a constant


def _error_message(report: RefundFailureReport) -> str:
    why = f" ({report.failure_reason})" if report.failure_reason else ""
    return (
        f"Stripe reported refund {report.stripe_refund_id} {report.refund_status}{why} after it"
        " had taken the refund on: no money went back for this round, though the customer's"
        " reply said it would. Pay it another way or contact the customer."
    )


class RefundFailures:
    """Records Stripe's reports in the ``refund_failures`` table (:data:`REFUND_FAILURES`, the
    outbox of their ``payout.failed`` events)."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def record(self, report: RefundFailureReport, at: datetime) -> Outcome:
        """Mark the round FAILED in the ledger and queue its ``payout.failed``, in one
        transaction, if the ledger paid it with this refund; record a refund that waited for
        the customer as failed for good once Stripe reports so (:attr:`Outcome.NOW_FINAL`, no
        second ``payout.failed``: the desk reads the ledger); otherwise change nothing."""
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(_LEDGER_ROW, (report.dispute_id, report.round))
                ledger = await cur.fetchone()
            if ledger is None:
                return Outcome.UNKNOWN_ROUND
            paid_with = ledger["stripe_refund_id"]
            if paid_with is not None and paid_with != report.stripe_refund_id:
                return Outcome.OTHER_REFUND
            code, message = not_refunded_code(report.refund_status), _error_message(report)
            if ledger["status"] == "FAILED":
                if ledger["error_code"] != _WAITING or report.refund_status not in _FINAL_STATUSES:
                    return Outcome.ALREADY_FAILED
                await conn.execute(
                    _LEDGER_FINAL, (code, message, report.dispute_id, report.round, _WAITING)
                )
                return Outcome.NOW_FINAL
            if ledger["status"] != "SUCCEEDED":
                return Outcome.NOT_SETTLED
            await conn.execute(_LEDGER_FAIL, (code, message, report.dispute_id, report.round))
            await conn.execute(
                _INSERT,
                (
                    report.dispute_id,
                    report.round,
                    report.stripe_refund_id,
                    report.refund_status,
                    report.failure_reason,
                    report.stripe_event_id,
                    ledger["amount_minor"],
                    ledger["currency"],
                    ledger["idempotency_key"],
                    code,
                    message,
                    at,
                ),
            )
        return Outcome.RECORDED


def payout_failed(row: RefundFailureRecord) -> tuple[str, Mapping[str, Any]]:
    """The ``payout.failed`` record of a round whose refund Stripe reported failed."""
    failed = ev.PayoutFailed(
        dispute_id=row.dispute_id,
        round=row.round,
        amount_minor=row.amount_minor,
        currency=row.currency,
        error_code=row.error_code,
        reason=row.error_message,
        idempotency_key=row.idempotency_key,
        failed_at=row.reported_at,
    )
    return failed.dispute_id, failed.to_avro()
