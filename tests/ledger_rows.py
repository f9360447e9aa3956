"""Payout ledger rows as an earlier instance (or an earlier dispute) left them, for tests."""

from __future__ import annotations

import uuid

import psycopg

from refund_bench.db.payout_rounds import idempotency_key


def seed_round(
    database: str,
    dispute: str,
    *,
    status: str,
    amount: int = 68900,
    payment: str | None = None,
    attempts: int = 1,
    error_code: str | None = None,
    refund_id: str | None = None,
    age: str = "0 seconds",
    first_call: str | None = None,
    paid_elsewhere: bool = False,
) -> None:
    """Round 1 of ``dispute`` in the ledger, against the dispute's own payment unless
    ``payment`` is given, opened ``age`` ago; its first provider call began ``first_call`` ago
    (by default: when it was opened, if ``attempts`` counts any call)."""
    first_call = first_call or (age if attempts else None)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO payout_ledger (dispute_id, round, amount_minor, currency,"
            " payment_reference, idempotency_key, status, attempts, error_code,"
            " stripe_refund_id, created_at, first_call_at, paid_elsewhere)"
            " VALUES (%s, 1, %s, 'INR', %s, %s, %s, %s, %s, %s, now() - %s::interval,"
            " now() - %s::interval, %s)",
            (
                dispute,
                amount,
                payment or f"pi_{dispute}",
                idempotency_key(dispute, 1),
                status,
                attempts,
                error_code,
                refund_id,
                age,
                first_call,
                paid_elsewhere,
            ),
        )


def read_round(database: str, dispute: str) -> tuple[str, int, str | None] | None:
    """(status, attempts, error code) of round 1 of ``dispute`` in the ledger; ``None`` if it
    has no row."""
    with psycopg.connect(database, autocommit=True) as conn:
        row = conn.execute(
            "SELECT status, attempts, error_code FROM payout_ledger"
            " WHERE dispute_id = %s AND round = 1",
            (dispute,),
        ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def paid_round(database: str) -> tuple[str, str]:
    """A new dispute whose round 1 the ledger paid with a new refund: their ids."""
    dispute, refund_id = f"d-test-{uuid.uuid4().hex}", f"re_{uuid.uuid4().hex[:16]}"
    seed_round(database, dispute, status="SUCCEEDED", refund_id=refund_id)
    return dispute, refund_id
