"""The payout ledger in PostgreSQL: one row per (dispute, settlement round).

The row is written (PENDING) before the provider is called; a round already SUCCEEDED or
FAILED is answered from the ledger without calling the provider again. ``attempts`` counts the
provider calls begun for the round: the insert that opens the round counts the first, and each
later call (a retry, or a replay of a round found PENDING after a crash) is counted before it
is made. A first call the provider refused for our key is not counted
(:meth:`PayoutLedger.forget_refused_call`).

One order, one automatic payout: a round of a second dispute of the same payment is recorded
FAILED (``ORDER_ALREADY_REFUNDED``) and goes to review instead of to the provider. The settler
usually opens the row first, with no provider call (see :mod:`refund_bench.db.payout_rounds`),
before its reply promises the money; the payout's first call then takes that row as opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

Status = Literal["PENDING", "SUCCEEDED", "FAILED"]


@dataclass(frozen=True)
class LedgerRow:
    dispute_id: str
    round: int
    amount_minor: int
    currency: str
    payment_reference: str
    """The payment the round was recorded for: the only one its idempotency key refunds."""
    idempotency_key: str
    status: Status
    stripe_refund_id: str | None
    error_code: str | None
    error_message: str | None
    opened: bool = field(default=False, compare=False)
    """True when :meth:`PayoutLedger.open_round` just opened the row for its first provider call
    (inserted it, or found it reserved by the settler with no call yet), that call counted."""
    age_s: float = field(default=0.0, compare=False)
    """Seconds since the round's first provider call began, by the database's clock (from
    ``open_round``); since the row was opened when no first call is recorded (a row an earlier
    release opened). A round the settler reserved ages only once the payout calls for it."""
    updated_at: datetime | None = field(default=None, compare=False)
    """When the row last changed (the database's clock): when the round got the outcome it
    holds, for the events answered from the ledger."""
    revision: int = 0
    """How many times the round's outcome changed after the payout settled it (the Stripe
    webhook's changes, :mod:`services.api.refund_failures`): the events about the round carry
    it, so that the audit record keeps the latest outcome and no outcome twice."""


_OPEN_SQL = """
SELECT * FROM payout_claim_round(%(dispute_id)s, %(round)s, %(amount_minor)s, %(currency)s,
                                 %(payment_reference)s, %(idempotency_key)s, true)
"""
_RECORDED_SQL = """
SELECT payment_reference, status, stripe_refund_id, error_code, error_message, revision,
       updated_at
FROM payout_ledger WHERE dispute_id = %s AND round = %s
"""
"""The payment a round was recorded for and its outcome, read after ``_OPEN_SQL`` (the
function returns neither the payment nor the revision: payouts of the earlier release read its
rows as they are); the outcome with its revision, as the webhook may have changed both."""
_GET_SQL = """
SELECT dispute_id, round, amount_minor, currency, payment_reference, idempotency_key, status,
       stripe_refund_id, error_code, error_message, revision, updated_at
FROM payout_ledger WHERE dispute_id = %s AND round = %s
"""
_SETTLE_SQL = """
UPDATE payout_ledger SET status = %s, stripe_refund_id = %s, error_code = %s,
                         error_message = %s, updated_at = now()
WHERE dispute_id = %s AND round = %s AND status = 'PENDING'
RETURNING dispute_id, round, amount_minor, currency, payment_reference, idempotency_key, status,
          stripe_refund_id, error_code, error_message, revision, updated_at
"""


class PayoutLedger:
    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self._pool = pool

    async def open_round(
        self,
        *,
        dispute_id: str,
        round_: int,
        amount_minor: int,
        currency: str,
        payment_reference: str,
        idempotency_key: str,
    ) -> LedgerRow:
        """Insert the round as PENDING, its first provider call counted, unless it exists (a
        row the settler reserved with no call yet, for this amount, currency and payment, gets
        its first call counted); return the row as stored (``opened`` tells whether this call is
        the round's first).

        A new round of a dispute whose payment (order) already has a round of another dispute
        that is not FAILED is inserted FAILED instead (``ORDER_ALREADY_REFUNDED``, naming that
        round): a second dispute of one order is not paid automatically. One call of the
        database function ``payout_claim_round`` with a provider call
        (refund_bench/db/schema.sql), which opens the rounds of one payment one at a time.
        """
        params = {
            "dispute_id": dispute_id,
            "round": round_,
            "amount_minor": amount_minor,
            "currency": currency,
            "payment_reference": payment_reference,
            "idempotency_key": idempotency_key,
        }
        async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_OPEN_SQL, params)
            row = await cur.fetchone()
            if row is None:
                raise RuntimeError(f"payout_claim_round returned no row for {dispute_id}/{round_}")
            await cur.execute(_RECORDED_SQL, (dispute_id, round_))
            recorded = await cur.fetchone()
        if recorded is None:
            raise RuntimeError(f"ledger row {dispute_id}/{round_} vanished")
        return LedgerRow(**{**row, **recorded})

    async def _get(self, conn: Any, dispute_id: str, round_: int) -> LedgerRow:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(_GET_SQL, (dispute_id, round_))
            row = await cur.fetchone()
        if row is None:
            raise RuntimeError(f"ledger row {dispute_id}/{round_} vanished")
        return LedgerRow(**row)

    async def record_attempt(self, dispute_id: str, round_: int) -> None:
        """Count one more provider call for a round that was already open; a round whose calls
        were all counted as never begun (:meth:`forget_refused_call`, by a concurrent handler)
        gets this call's time as its first. A round with calls counted keeps its first call's
        time, even none (a row of a release that did not record it: its age then counts from
        its opening, never from a later call)."""
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE payout_ledger SET attempts = attempts + 1, first_call_at = CASE"
                " WHEN attempts = 0 THEN now() ELSE first_call_at END, updated_at = now()"
                " WHERE dispute_id = %s AND round = %s",
                (dispute_id, round_),
            )

    async def forget_refused_call(self, dispute_id: str, round_: int) -> None:
        """Count a PENDING round's one provider call as never begun (``attempts`` 0, no
        ``first_call_at``), as after the settler's reservation: the provider refused that call
        for our key, so it took nothing under the round's idempotency key. The next call opens
        the round again. A round with more calls is left as it is."""
        async with self._pool.connection() as conn:
            await conn.execute(
                "UPDATE payout_ledger SET attempts = 0, first_call_at = NULL, updated_at = now()"
                " WHERE dispute_id = %s AND round = %s AND status = 'PENDING' AND attempts = 1",
                (dispute_id, round_),
            )

    async def settle(
        self,
        dispute_id: str,
        round_: int,
        *,
        refund_id: str | None = None,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> LedgerRow:
        """Move a PENDING round to SUCCEEDED (with ``refund_id``) or, with an ``error_code``,
        FAILED (with the ``refund_id`` Stripe made and answered as not refunded, if any: the
        webhook then knows Stripe's later reports of it as the round's own); returns the row.

        A round that is no longer PENDING keeps its first outcome.
        """
        if error_code is None and refund_id is None:
            raise ValueError("a round is settled with a refund, an error code, or both")
        status: Status = "FAILED" if error_code is not None else "SUCCEEDED"
        async with self._pool.connection() as conn:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(
                    _SETTLE_SQL,
                    (status, refund_id, error_code, error_message, dispute_id, round_),
                )
                row = await cur.fetchone()
            return (
                LedgerRow(**row) if row is not None else await self._get(conn, dispute_id, round_)
            )
