"""Refunds Stripe took on and later reported failed, or reported refunded after a wait for the
customer: from its webhook event to ``payout.failed`` or ``payout.completed``.

The payout stage counts a refund Stripe answers ``pending`` as paid, and the customer's reply
has promised the money. Stripe reports a refund's changes in events (``refund.failed``,
``refund.updated``, ``charge.refund.updated``) that it delivers at least once, late, and in no
particular order, so the status an event carries may be stale. An event about one of the
payout stage's refunds (its metadata names ``dispute_id`` and ``round``) is therefore only a
cue: :meth:`RefundFailures.settle` locks the round's ledger row, reads the refund back from
Stripe and acts on the status Stripe holds now.

- Failed, canceled or waiting for the customer (``requires_action``): no money went back. The
  round turns FAILED in the payout ledger and a ``refund_failures`` row is written in the same
  transaction; that row is the outbox of a ``payout.failed`` for the round (error code
  ``refund_<status>``, as the payout stage uses for a refund refused at once). The recorder puts
  it in the review queue for a payment operator. One failure is recorded and published once.
- A round FAILED with a code of :data:`~refund_bench.db.payout_rounds.MAY_HAVE_REFUNDED` may
  still refund: its refund waits for the customer, or the payout stage could not tell whether
  Stripe made it (``STALE_PENDING``, ``IdempotencyError``, ``STRIPE_SAVED_SERVER_ERROR``). The
  desk does not pay such a round again, and Stripe's word on the round's refund settles it.
  When Stripe holds that refund failed or canceled, no money went back: the ledger's error code
  says so instead, and the desk offers REPAY on the round's open item; a round a payment
  operator settled another way meanwhile (PAID_ELSEWHERE, its item decided) has its
  ``payout.failed`` queued again, naming an item of its own, so that the operator learns that
  the refund they may have counted on failed. When Stripe holds it succeeded (or pending), the
  money went back: the round turns SUCCEEDED, a ``refund_completions`` row is written in the
  same transaction (the outbox of the round's ``payout.completed``, so that the audit record
  and analysts see it paid again), and the desk lets the operator close its item. Those are
  the only FAILED rounds that turn back; a round FAILED for any other reason stays FAILED.
- Succeeded or pending for a round the ledger counts paid: nothing changes.
- Anything, for a round the payout stage has not settled yet (PENDING): nothing changes, and
  Stripe is asked to deliver the event again (the payout may yet settle the round FAILED from
  Stripe's first answer, and a refund that then succeeded sends no further event).

Each change that publishes counts up the round's ``revision`` in the ledger, and the event
carries the new count, so the recorder keeps the round's latest outcome whichever of the two
topics it reads first, and a redelivered older event changes nothing.

A refund not made by the payout stage (no ``dispute_id`` and ``round`` in its metadata, or
another refund id than the ledger's), or one Stripe does not know, changes nothing.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field

from refund_bench import events as ev
from refund_bench.db.payout_rounds import (
    MAY_HAVE_REFUNDED,
    NOT_REFUNDED_STATUSES,
    REFUNDED_STATUSES,
    UNMENDABLE_FAILURES,
    WAITING_FOR_CUSTOMER,
    not_refunded_code,
    payout_again_item,
)
from services.api.store import OutboxTable
from services.payout.payments import RefundNotFound, RefundReader, RetrievedRefund

log = logging.getLogger(__name__)

REFUND_EVENT_TYPES = frozenset({"refund.failed", "refund.updated", "charge.refund.updated"})
"""The Stripe event types whose object is a refund whose status may have changed."""


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
class PayoutRefundEvent:
    """A Stripe event about one of the payout stage's refunds: the round its metadata names.
    ``event_status`` is the status the event carried, which may be stale: only logged."""

    stripe_event_id: str
    stripe_refund_id: str
    event_status: str | None
    dispute_id: str
    round: int


@dataclass(frozen=True)
class RefundFailureReport:
    """One of the payout stage's refunds, read back from Stripe: it did not pay."""

    stripe_event_id: str
    stripe_refund_id: str
    refund_status: str
    failure_reason: str | None
    dispute_id: str
    round: int


def payout_refund_of(event: StripeEvent) -> PayoutRefundEvent | str:
    """The payout round whose refund ``event`` is about, or why it is about none (a short reason
    for the answer and the logs). Raises ``ValueError`` for a refund event whose object is not
    a refund."""
    if event.type not in REFUND_EVENT_TYPES:
        return f"event type {event.type} is not about a refund's status"
    refund = StripeRefund.model_validate(event.data.object)
    if refund.object != "refund":
        raise ValueError(f"a {event.type} event whose object is a {refund.object}, not a refund")
    dispute_id = refund.metadata.get("dispute_id")
    round_ = refund.metadata.get("round")
    if not (
        isinstance(dispute_id, str)
        and re.fullmatch(ev.ID_PATTERN, dispute_id)
        and isinstance(round_, str)
        and _ROUND.fullmatch(round_)
    ):
        return "the refund carries no dispute_id and round: not made by the payout stage"
    return PayoutRefundEvent(
        stripe_event_id=event.id,
        stripe_refund_id=refund.id,
        event_status=refund.status,
        dispute_id=dispute_id,
        round=int(round_),
    )


def failure_report(event: PayoutRefundEvent, retrieved: RetrievedRefund) -> RefundFailureReport:
    """The failure of ``event``'s round, as Stripe holds its refund (``retrieved``)."""
    return RefundFailureReport(
        stripe_event_id=event.stripe_event_id,
        stripe_refund_id=event.stripe_refund_id,
        refund_status=retrieved.status,
        failure_reason=retrieved.failure_reason,
        dispute_id=event.dispute_id,
        round=event.round,
    )


_ROUND = re.compile(r"[1-9][0-9]{0,8}")
"""A settlement round as the payout stage writes it in a refund's metadata."""


class Outcome(enum.StrEnum):
    """What settling an event did (also the metric's label)."""

    RECORDED = "recorded"
    """The round was paid in the ledger; it is FAILED now, and its payout.failed is queued."""
    ALREADY_FAILED = "already_failed"
    """The round was FAILED before (by an earlier event, or by the payout stage itself)."""
    NOW_FINAL = "now_final"
    """The round was FAILED with a code under which its refund may still have refunded
    (:data:`~refund_bench.db.payout_rounds.MAY_HAVE_REFUNDED`: waiting for the customer, or
    not known to exist); Stripe now reports that refund failed or canceled: no money went back,
    so the ledger says so, and a payment operator may pay the round again."""
    NOT_SETTLED = "not_settled"
    """The payout stage has not recorded the refund yet (the round is PENDING), whatever Stripe
    holds: Stripe should deliver again later. A refund Stripe holds succeeded may be one the
    payout then records FAILED from Stripe's first answer (``requires_action``): only the event
    delivered again turns that round SUCCEEDED."""
    UNKNOWN_ROUND = "unknown_round"
    """No such round in the ledger."""
    OTHER_REFUND = "other_refund"
    """The ledger paid the round with another refund: this one was made by someone else."""
    NOW_REFUNDED = "now_refunded"
    """The round was FAILED with a code under which its refund may still have refunded
    (:data:`~refund_bench.db.payout_rounds.MAY_HAVE_REFUNDED`); Stripe now holds that refund
    succeeded (or pending): the money went back, so the round is SUCCEEDED, its
    ``payout.completed`` is queued, and a payment operator closes its review item."""
    ALREADY_PAID = "already_paid"
    """Stripe holds the refund succeeded or pending, and the ledger counts the round paid, or
    FAILED for a reason under which no refund was made: nothing changes."""
    REFUND_NOT_FOUND = "refund_not_found"
    """Stripe has no refund of that id, and the round is FAILED with none (no refund was made
    for it): nothing changes."""
    OWN_REFUND_NOT_FOUND = "own_refund_not_found"
    """Stripe, read with ``STRIPE_API_KEY``, has no refund of that id, yet the ledger paid the
    round with it, or is paying it (PENDING: a refund of a round the payout has not recorded
    yet). Stripe signed the event about that refund, so the key is of another Stripe account
    than the payout's (one of the other mode is refused as such: ``stripe_key_refused``).
    Nothing changes; the webhook answers 503 (Stripe delivers the
    event again) and logs an error, for the round's failures reach nobody until the key is
    right."""
    IGNORED = "ignored"
    """Not about a payout round, or a refund status that is neither paid nor failed."""
    FAILED_AGAIN = "failed_again"
    """The round failed with a refund that might still go through, was then refunded
    (:attr:`NOW_REFUNDED`), and now failed after all: the round is FAILED again and its
    ``payout.failed`` is published again, naming the review item ``payout:round<n>:again``: the
    round's own item may have been decided when Stripe refunded it, and the desk takes one
    decision per item, so the failure reaches a payment operator's queue as an item of its own
    (if the round's own item is still open, both are, and the desk tells the operator to decide
    the round on one of them)."""
    REFUNDED_AFTER_SETTLED = "refunded_after_settled"
    """As :attr:`NOW_REFUNDED` (its ``payout.completed`` queued too), for a round a payment
    operator had meanwhile settled another way (PAID_ELSEWHERE): the customer may have been paid
    twice; no review item opens for it, and an alert (``RefundBenchRefundNeedsOperator``) asks
    a payment operator to check."""
    NOW_WAITING = "now_waiting"
    """The round was FAILED not knowing whether Stripe had made its refund
    (``STALE_PENDING``, ``IdempotencyError``, ``STRIPE_SAVED_SERVER_ERROR``); Stripe now holds
    that refund waiting for the customer: the ledger records it so (with the refund's id), and
    the desk tells the operator to wait instead of looking for a refund."""
    FAILED_AFTER_SETTLED = "failed_after_settled"
    """As :attr:`NOW_FINAL`, for a round a payment operator had meanwhile settled another way
    (PAID_ELSEWHERE), perhaps counting on the refund that has now failed: the round's
    ``payout.failed`` is queued again, naming the review item ``payout:round<n>:again``, so that
    the operator finds out what the customer has been paid."""


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
    revision: int
    """The round's ledger revision after this failure (the event's ``revision``)."""
    item_key: str | None
    """The review item the failure opens when not the round's own (the event's ``item_key``):
    :func:`~refund_bench.db.payout_rounds.payout_again_item` for a failure after a refund."""
    published: bool = False


@dataclass(frozen=True)
class RefundCompletionRecord:
    """A ``refund_completions`` row: one round whose refund Stripe reported refunded after it
    had waited for the customer."""

    dispute_id: str
    round: int
    stripe_refund_id: str
    stripe_event_id: str
    amount_minor: int
    currency: str
    idempotency_key: str
    revision: int
    """The round's ledger revision after the refund (the event's ``revision``)."""
    reported_at: datetime
    published: bool = False


REFUND_FAILURES = OutboxTable(
    "refund_failures",
    "dispute_id, round, stripe_refund_id, refund_status, failure_reason, stripe_event_id,"
    " amount_minor, currency, idempotency_key, error_code, error_message, reported_at, revision,"
    " item_key, published",
    key="stripe_refund_id",
    oldest="reported_at",
    make=lambda row: RefundFailureRecord(**row),
)
REFUND_COMPLETIONS = OutboxTable(
    "refund_completions",
    "dispute_id, round, stripe_refund_id, stripe_event_id, amount_minor, currency,"
    " idempotency_key, revision, reported_at, published",
    key="stripe_refund_id",
    oldest="reported_at",
    make=lambda row: RefundCompletionRecord(**row),
)
_LEDGER_ROW = """
SELECT status, error_code, error_message, stripe_refund_id, amount_minor, currency,
       idempotency_key, paid_elsewhere
FROM payout_ledger WHERE dispute_id = %s AND round = %s FOR UPDATE
"""
_WAITING = WAITING_FOR_CUSTOMER
_MAY_HAVE_REFUNDED = sorted(MAY_HAVE_REFUNDED)
_WAITING_ADVICE = UNMENDABLE_FAILURES[_WAITING][0].upper() + UNMENDABLE_FAILURES[_WAITING][1:]
_LEDGER_REFUNDED = """
UPDATE payout_ledger SET status = 'SUCCEEDED', stripe_refund_id = %s, error_code = NULL,
                         error_message = %s, revision = revision + 1, updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'FAILED' AND error_code = %s
RETURNING revision
"""
_LEDGER_FINAL = """
UPDATE payout_ledger SET error_code = %s, error_message = %s,
                         stripe_refund_id = COALESCE(stripe_refund_id, %s), updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'FAILED' AND error_code = %s
"""
"""A round whose refund might still go through, now known: Stripe's status of it, and its id
(a round the payout failed not knowing whether the refund exists kept none)."""
_LEDGER_FINAL_AGAIN = """
UPDATE payout_ledger SET error_code = %s, error_message = %s,
                         stripe_refund_id = COALESCE(stripe_refund_id, %s), revision = revision + 1,
                         updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'FAILED' AND error_code = %s
RETURNING revision
"""
_LEDGER_FAIL = """
UPDATE payout_ledger SET status = 'FAILED', error_code = %s, error_message = %s,
                         revision = revision + 1, updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'SUCCEEDED'
RETURNING revision
"""
_INSERT = f"""
INSERT INTO refund_failures ({REFUND_FAILURES.columns})
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, false)
ON CONFLICT (dispute_id, round) DO UPDATE
SET refund_status = EXCLUDED.refund_status, failure_reason = EXCLUDED.failure_reason,
    stripe_event_id = EXCLUDED.stripe_event_id, error_code = EXCLUDED.error_code,
    error_message = EXCLUDED.error_message, reported_at = EXCLUDED.reported_at,
    revision = EXCLUDED.revision, item_key = EXCLUDED.item_key, published = false
WHERE refund_failures.stripe_refund_id = EXCLUDED.stripe_refund_id
RETURNING stripe_refund_id
"""  # noqa: S608 - the column list is a constant
"""Returns the row written, none if the round's row names another refund. A round that waited
for the customer, was refunded, and then failed after all has its row from the first failure
(if the webhook recorded it): it is brought up to date and queued again, so that its new
``payout.failed`` is published (naming its own review item)."""
_INSERT_COMPLETION = f"""
INSERT INTO refund_completions ({REFUND_COMPLETIONS.columns})
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, false)
ON CONFLICT (dispute_id, round) DO UPDATE
SET stripe_event_id = EXCLUDED.stripe_event_id, revision = EXCLUDED.revision,
    reported_at = EXCLUDED.reported_at, published = false
WHERE refund_completions.stripe_refund_id = EXCLUDED.stripe_refund_id
RETURNING stripe_refund_id
"""  # noqa: S608 - the column list is a constant
"""Returns the row written, none if the round's row names another refund. A round turns back
to SUCCEEDED from a failure that might still have refunded (:data:`MAY_HAVE_REFUNDED`); should
it do so again (Stripe reported the refund waiting for the customer after it had succeeded, and
then succeeded again), its row is brought up to date and queued again."""


def _refunded_message(refund_id: str, error_code: str) -> str:
    """The ledger's note on a round of ``error_code`` (one of :data:`MAY_HAVE_REFUNDED`) that
    turned SUCCEEDED when Stripe reported its refund succeeded."""
    if error_code == _WAITING:
        after = f"after it had waited for the customer ({_WAITING})"
    else:
        after = (
            f"after the round had failed with {error_code}, the payout not knowing whether"
            " Stripe had made it"
        )
    return (
        f"Stripe reported refund {refund_id} succeeded {after}: the money went back, and the"
        " round is paid. Close its review item as settled; do not pay it another way."
    )


def _turned_back(ledger: Mapping[str, Any], refund_id: str) -> bool:
    """Whether the SUCCEEDED round ``ledger`` is paid only since Stripe reported its refund
    ``refund_id`` succeeded after the round had failed (:meth:`RefundFailures._refunded`)."""
    return any(
        ledger["error_message"] == _refunded_message(refund_id, code) for code in _MAY_HAVE_REFUNDED
    )


def _error_message(report: RefundFailureReport, *, settled_elsewhere: bool = False) -> str:
    """The failure's reason, as the review item and ``payout.failed`` carry it: what happened,
    and what a payment operator may do about it (``settled_elsewhere``: the round was settled
    another way while its refund might still go through)."""
    why = f" ({report.failure_reason})" if report.failure_reason else ""
    reported = f"Stripe reported refund {report.stripe_refund_id} {report.refund_status}{why}"
    if settled_elsewhere:
        return (
            f"{reported} after a payment operator had settled this round another way while the"
            " refund might still go through: no money went back through it. Find out what the"
            " customer has been paid, and pay by hand only what is still owed."
        )
    if not_refunded_code(report.refund_status) == _WAITING:
        # It may still go through: paying another way now could pay the customer twice.
        return (
            f"{reported} after it had taken the refund on: no money has gone back for this"
            f" round yet, though the customer's reply said it would. {_WAITING_ADVICE}."
        )
    return (
        f"{reported} after it had taken the refund on: no money went back for this round,"
        " though the customer's reply said it would. Pay it another way or contact the customer."
    )


class RefundFailures:
    """Records Stripe's reports in the ``refund_failures`` table (:data:`REFUND_FAILURES`, the
    outbox of their ``payout.failed`` events)."""

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def settle(
        self, event: PayoutRefundEvent, refunds: RefundReader, at: datetime
    ) -> tuple[Outcome, RetrievedRefund | None]:
        """Act on the refund of ``event`` as Stripe holds it now; returns the outcome and the
        refund as read (``None`` when it was not read). One transaction, with the round's
        ledger row locked while Stripe is read, so that two events of one refund are settled
        one after the other, each on a status read after the other's change.

        A status in :data:`NOT_REFUNDED_STATUSES`: mark the round FAILED and queue its
        ``payout.failed`` if the ledger paid it with this refund. For a round FAILED with a
        refund that might still go through (:data:`MAY_HAVE_REFUNDED`), record what Stripe
        holds: waiting for the customer (:attr:`Outcome.NOW_WAITING`), or failed for good
        (:attr:`Outcome.NOW_FINAL`; no second ``payout.failed``: the desk reads the ledger; but
        :attr:`Outcome.FAILED_AFTER_SETTLED`, one naming an item of its own, when the round was
        settled another way meanwhile). A status in :data:`REFUNDED_STATUSES`: turn such a
        round SUCCEEDED (:attr:`Outcome.NOW_REFUNDED`, or
        :attr:`Outcome.REFUNDED_AFTER_SETTLED`) and queue its ``payout.completed``. A round the
        payout has not settled (PENDING), whatever Stripe holds: :attr:`Outcome.NOT_SETTLED`.
        Otherwise change nothing. Each change that queues an event counts up the round's
        ``revision``, which the event carries. Stripe's errors propagate (the transaction rolls
        back): ``TransientError`` and ``PaymentsRefusedUs``; a refund Stripe does not know is
        :attr:`Outcome.REFUND_NOT_FOUND`, or :attr:`Outcome.OWN_REFUND_NOT_FOUND` when the
        ledger paid or failed the round with it, is paying it, or failed it with a refund that
        may still go through."""
        async with self._pool.connection() as conn, conn.transaction():
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(_LEDGER_ROW, (event.dispute_id, event.round))
                ledger = await cur.fetchone()
            if ledger is None:
                return Outcome.UNKNOWN_ROUND, None
            paid_with = ledger["stripe_refund_id"]
            if paid_with is not None and paid_with != event.stripe_refund_id:
                return Outcome.OTHER_REFUND, None
            try:
                retrieved = await refunds.retrieve_refund(event.stripe_refund_id)
            except RefundNotFound:
                if (
                    paid_with is not None
                    or ledger["status"] == "PENDING"
                    or ledger["error_code"] in MAY_HAVE_REFUNDED
                ):
                    return Outcome.OWN_REFUND_NOT_FOUND, None
                return Outcome.REFUND_NOT_FOUND, None
            if retrieved.status in NOT_REFUNDED_STATUSES:
                report = failure_report(event, retrieved)
                return await self._failed(conn, ledger, report, at), retrieved
            if retrieved.status in REFUNDED_STATUSES:
                return await self._refunded(conn, ledger, event, at), retrieved
            return Outcome.IGNORED, retrieved

    @staticmethod
    async def _failed(
        conn: Any, ledger: Mapping[str, Any], report: RefundFailureReport, at: datetime
    ) -> Outcome:
        code, message = not_refunded_code(report.refund_status), _error_message(report)
        where = (report.dispute_id, report.round)
        refund_id = report.stripe_refund_id
        if ledger["status"] == "FAILED":
            was = ledger["error_code"]
            if was not in MAY_HAVE_REFUNDED or code == was:
                return Outcome.ALREADY_FAILED
            if code == _WAITING:  # it exists, and waits: the desk's advice is to wait
                await conn.execute(_LEDGER_FINAL, (code, message, refund_id, *where, was))
                return Outcome.NOW_WAITING
            if not ledger["paid_elsewhere"]:  # its item is open: the desk reads the ledger
                await conn.execute(_LEDGER_FINAL, (code, message, refund_id, *where, was))
                return Outcome.NOW_FINAL
            # Settled another way, perhaps counting on this refund: the operator must know.
            message = _error_message(report, settled_elsewhere=True)
            failed = await conn.execute(
                _LEDGER_FINAL_AGAIN, (code, message, refund_id, *where, was)
            )
            again = True
        elif ledger["status"] == "SUCCEEDED":
            # SUCCEEDED only since Stripe refunded it after it failed: its item was decided then.
            again = _turned_back(ledger, report.stripe_refund_id)
            failed = await conn.execute(_LEDGER_FAIL, (code, message, *where))
        else:
            return Outcome.NOT_SETTLED
        (revision,) = await _one(failed)
        queued = await conn.execute(
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
                revision,
                payout_again_item(report.round) if again else None,
            ),
        )
        if await queued.fetchone() is None:
            # A refund_failures row of this round names another refund: nothing is queued, so
            # the round must not stay FAILED unreported (rolled back; Stripe delivers again).
            raise RuntimeError(
                f"{report.dispute_id} round {report.round} has a refund failure recorded for"
                f" another refund than {report.stripe_refund_id}"
            )
        if ledger["status"] == "FAILED":
            return Outcome.FAILED_AFTER_SETTLED
        return Outcome.FAILED_AGAIN if again else Outcome.RECORDED

    @staticmethod
    async def _refunded(
        conn: Any, ledger: Mapping[str, Any], event: PayoutRefundEvent, at: datetime
    ) -> Outcome:
        where = f"{event.dispute_id} round {event.round}"
        if ledger["status"] == "PENDING":
            # The payout may yet settle the round FAILED from Stripe's first answer (waiting
            # for the customer), and Stripe sends no further event: it must deliver this again.
            return Outcome.NOT_SETTLED
        if ledger["status"] != "FAILED":
            return Outcome.ALREADY_PAID
        was = ledger["error_code"]
        if was not in MAY_HAVE_REFUNDED:
            log.warning(
                "Stripe holds refund %s paid, and %s is FAILED (%s): a payment operator should"
                " check it before paying the round another way",
                event.stripe_refund_id,
                where,
                ledger["error_code"],
            )
            return Outcome.ALREADY_PAID
        refund_id = event.stripe_refund_id
        refunded = await conn.execute(
            _LEDGER_REFUNDED,
            (refund_id, _refunded_message(refund_id, was), event.dispute_id, event.round, was),
        )
        (revision,) = await _one(refunded)
        queued = await conn.execute(
            _INSERT_COMPLETION,
            (
                event.dispute_id,
                event.round,
                refund_id,
                event.stripe_event_id,
                ledger["amount_minor"],
                ledger["currency"],
                ledger["idempotency_key"],
                revision,
                at,
            ),
        )
        if await queued.fetchone() is None:
            # As for a failure: nothing queued, so the round must not turn SUCCEEDED unreported.
            raise RuntimeError(
                f"{where} has a refund completion recorded for another refund than {refund_id}"
            )
        if ledger["paid_elsewhere"]:
            log.error(
                "Stripe reported refund %s succeeded after %s had failed (%s), and it was settled"
                " another way meanwhile: the customer may have been paid twice",
                refund_id,
                where,
                was,
            )
            return Outcome.REFUNDED_AFTER_SETTLED
        return Outcome.NOW_REFUNDED


async def _one(cur: Any) -> tuple[Any, ...]:
    """The one row a statement returned: the ledger row it changed, which is locked."""
    row: tuple[Any, ...] | None = await cur.fetchone()
    if row is None:
        raise RuntimeError("the locked ledger row was not changed")
    return row


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
        revision=row.revision,
        item_key=row.item_key,
    )
    return failed.dispute_id, failed.to_avro()


def payout_completed(row: RefundCompletionRecord) -> tuple[str, Mapping[str, Any]]:
    """The ``payout.completed`` record of a round whose refund Stripe reported refunded after
    it had waited for the customer."""
    completed = ev.PayoutCompleted(
        dispute_id=row.dispute_id,
        round=row.round,
        amount_minor=row.amount_minor,
        currency=row.currency,
        stripe_refund_id=row.stripe_refund_id,
        idempotency_key=row.idempotency_key,
        completed_at=row.reported_at,
        revision=row.revision,
    )
    return completed.dispute_id, completed.to_avro()
