"""The payout stage: payout.requested -> payout.completed / payout.failed.

At most one refund per (dispute, round): the ledger row is written before the provider is
called, a settled round never reaches the provider again, and every provider call for the round
carries the same idempotency key, so a crash between the call and the ledger update replays the
same refund instead of creating a second one. Only within Stripe's idempotency window, though: a
round still PENDING 23 hours after its first call is not called again but fails to review
(``STALE_PENDING``). The window counts from that call, not from the settler's reservation: a
round reserved during a long payout outage is still paid; nor from a first call Stripe refused
for our key (401, 403), which it did not take.

A request for a recorded round with another amount, currency or payment than the row's is
refused (``LEDGER_CONFLICT``) without a call: Stripe is only ever called with what the row
records, which is what the round's key stands for.

At most one dispute per order is paid automatically: a round of another dispute of the same
payment fails to review (``ORDER_ALREADY_REFUNDED``, recorded by the ledger) without a call.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.db.payout_rounds import (
    AMOUNT_NOT_PAYABLE,
    LEDGER_CONFLICT,
    STALE_PENDING,
    idempotency_key,
)
from refund_bench.errors import InvalidInput
from refund_bench.money import payable_step
from refund_bench.retry import OnRetry, RetryPolicy
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.stages import PAYOUT
from services.payout.ledger import LedgerRow, PayoutLedger
from services.payout.payments import PaymentRejected, Payments, PaymentsRefusedUs

IDEMPOTENCY_WINDOW_S = 23 * 3600.0
"""Stripe keeps an idempotency key for at least 24 hours; an hour's margin."""
STALE_PENDING_MESSAGE = (
    "the round's first call to Stripe began more than 23 hours ago and never settled: Stripe "
    "may no longer know "
    "its idempotency key, so calling again could refund twice. Look for a refund with this "
    "dispute_id and round in its metadata before paying by hand."
)


class PayoutHandler:
    def __init__(
        self,
        ledger: PayoutLedger,
        payments: Payments,
        retry: RetryPolicy,
        *,
        on_retry: OnRetry | None = None,
    ) -> None:
        """``retry``: how a refund call Stripe could not answer is made again (same key);
        ``on_retry`` is told of each such failure retried, to count it
        (``refund_bench_retries_total{kind="stripe"}``)."""
        self._ledger = ledger
        self._payments = payments
        self._retry = retry
        self._on_retry = on_retry

    def spec(self) -> StageSpec:
        return StageSpec.of(PAYOUT, self.handle)

    async def handle(self, message: Message, _ctx: Context) -> Sequence[Emit]:
        request = ev.parse(ev.PayoutRequested, message.value)
        if request.amount_minor <= 0:
            raise InvalidInput(f"payout amount must be positive, got {request.amount_minor}")
        if not request.payment_reference:
            raise InvalidInput("payout request has no payment reference")
        key = idempotency_key(request.dispute_id, request.round)
        row = await self._ledger.open_round(
            dispute_id=request.dispute_id,
            round_=request.round,
            amount_minor=request.amount_minor,
            currency=request.currency,
            payment_reference=request.payment_reference,
            idempotency_key=key,
        )
        conflict = _conflict(row, request)
        if conflict is not None:  # this request's outcome, now: not the round's
            return [_failed(row, LEDGER_CONFLICT, conflict, at=ev.now())]
        if row.status == "PENDING" and not row.opened and row.age_s > IDEMPOTENCY_WINDOW_S:
            row = await self._ledger.settle(
                request.dispute_id,
                request.round,
                error_code=STALE_PENDING,
                error_message=STALE_PENDING_MESSAGE,
            )
        elif row.status == "PENDING" and row.amount_minor % payable_step(row.currency):
            row = await self._not_payable(request, row)
        elif row.status == "PENDING":
            row = await self._pay(request, row)
        if row.status == "SUCCEEDED":
            return [_completed(row)]
        return [_failed(row, row.error_code or "FAILED", row.error_message or "")]

    async def _not_payable(self, request: ev.PayoutRequested, row: LedgerRow) -> LedgerRow:
        """Fail the PENDING round ``row``, whose amount Stripe would refuse in its currency
        (an amount priced before pricing rounded to the currency's step), without a call."""
        if row.opened:  # the open counted a call that is never made
            await self._ledger.forget_refused_call(request.dispute_id, request.round)
        step = payable_step(row.currency)
        return await self._ledger.settle(
            request.dispute_id,
            request.round,
            error_code=AMOUNT_NOT_PAYABLE,
            error_message=f"Stripe takes {row.currency} amounts only in multiples of {step} minor"
            f" units, and {row.amount_minor} is none: no refund was asked for",
        )

    async def _pay(self, request: ev.PayoutRequested, row: LedgerRow) -> LedgerRow:
        """Call Stripe for the PENDING round ``row`` (retrying with its key) and settle it: the
        payment, amount and currency the row records (``request`` agrees with them). Every call
        is counted in the ledger before it is made; the open that returned ``row`` counted the
        first when it ``opened`` the round."""
        calls = 0

        async def call() -> str:
            nonlocal calls
            if calls > 0 or not row.opened:
                await self._ledger.record_attempt(request.dispute_id, request.round)
            calls += 1
            return await self._payments.refund(
                payment_reference=row.payment_reference,
                amount_minor=row.amount_minor,
                currency=row.currency.lower(),
                idempotency_key=row.idempotency_key,
                metadata={"dispute_id": request.dispute_id, "round": str(request.round)},
            )

        try:
            refund_id = await self._retry.run_async(call, on_retry=self._on_retry)
        except PaymentRejected as exc:
            return await self._ledger.settle(
                request.dispute_id,
                request.round,
                refund_id=exc.refund_id,
                error_code=exc.code,
                error_message=exc.message,
            )
        except PaymentsRefusedUs:
            if row.opened and calls == 1:
                # Stripe refused the round's only call for our key, so it took no refund and
                # keeps no idempotency key: the round's 23 hours start with the first call it
                # takes, however long the key stays wrong.
                await self._ledger.forget_refused_call(request.dispute_id, request.round)
            raise
        return await self._ledger.settle(request.dispute_id, request.round, refund_id=refund_id)


def _conflict(row: LedgerRow, request: ev.PayoutRequested) -> str | None:
    """Why ``request`` is not the round ``row`` records (another amount, currency or payment),
    as the ``LEDGER_CONFLICT``'s reason; ``None`` when it is. Paid under the round's key, a
    request naming another payment would refund that payment instead."""
    if (row.amount_minor, row.currency, row.payment_reference) == (
        request.amount_minor,
        request.currency,
        request.payment_reference,
    ):
        return None
    recorded = (
        f"{row.status}, refund {row.stripe_refund_id}" if row.stripe_refund_id else row.status
    )
    ours = f"{row.amount_minor} {row.currency}"
    theirs = f"{request.amount_minor} {request.currency}"
    if row.payment_reference != request.payment_reference:
        ours += f" of payment {row.payment_reference}"
        theirs += f" of payment {request.payment_reference}"
    return f"round already recorded for {ours} ({recorded}); {theirs} requested, not paid"


def _completed(row: LedgerRow) -> Emit:
    event = ev.PayoutCompleted(
        dispute_id=row.dispute_id,
        round=row.round,
        amount_minor=row.amount_minor,
        currency=row.currency,
        stripe_refund_id=row.stripe_refund_id or "",
        idempotency_key=row.idempotency_key,
        completed_at=row.updated_at or ev.now(),
        revision=row.revision,
    )
    return Emit(t.PAYOUT_COMPLETED.name, row.dispute_id, event.to_avro())


def _failed(row: LedgerRow, code: str, reason: str, at: datetime | None = None) -> Emit:
    """The round's failure as the ledger records it, at the time it did (``at``: another)."""
    event = ev.PayoutFailed(
        dispute_id=row.dispute_id,
        round=row.round,
        amount_minor=row.amount_minor,
        currency=row.currency,
        error_code=code,
        reason=reason,
        idempotency_key=row.idempotency_key,
        failed_at=at or row.updated_at or ev.now(),
        revision=row.revision,
    )
    return Emit(t.PAYOUT_FAILED.name, row.dispute_id, event.to_avro())
