"""Frozen evidence snapshots and disputes in PostgreSQL.

Snapshots are content-addressed (sha256 of canonical JSON) and immutable, so any stage may read
one by hash and cache it forever; the first snapshot frozen for a dispute is the one it keeps.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from refund_bench.errors import InvalidInput
from services.extractor.evidence import load_snapshot


async def freeze_for_dispute(
    pool: AsyncConnectionPool[Any],
    *,
    dispute_id: str,
    order_id: str,
    customer_id: str,
    complaint_text: str,
    received_at: datetime,
    snapshot_json: str,
    snapshot_sha256: str,
) -> tuple[str, str]:
    """Store the snapshot and the dispute once; return the dispute's frozen (json, sha256).

    A redelivered complaint gets the snapshot frozen the first time, even if the order's
    evidence changed since.
    """
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO evidence_snapshots (sha256, snapshot) VALUES (%s, %s)"
            " ON CONFLICT (sha256) DO NOTHING",
            (snapshot_sha256, snapshot_json),
        )
        await conn.execute(
            "INSERT INTO disputes (dispute_id, order_id, customer_id, complaint_text,"
            " received_at, snapshot_sha256) VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (dispute_id) DO NOTHING",
            (dispute_id, order_id, customer_id, complaint_text, received_at, snapshot_sha256),
        )
        cur = await conn.execute(
            "SELECT s.snapshot, s.sha256 FROM disputes d"
            " JOIN evidence_snapshots s ON s.sha256 = d.snapshot_sha256 WHERE d.dispute_id = %s",
            (dispute_id,),
        )
        row = await cur.fetchone()
    if row is None:
        raise RuntimeError(f"dispute {dispute_id} was not stored")
    return str(row[0]), str(row[1])


async def complaint_text(pool: AsyncConnectionPool[Any], dispute_id: str) -> str | None:
    """The complaint as received, or ``None`` for an unknown dispute."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT complaint_text FROM disputes WHERE dispute_id = %s", (dispute_id,)
        )
        row = await cur.fetchone()
    return None if row is None else str(row[0])


_SNAPSHOT_SQL = "SELECT snapshot FROM evidence_snapshots WHERE sha256 = %s"


def _verified(row: Any, sha256: str) -> dict[str, Any]:
    if row is None:
        raise InvalidInput(f"no evidence snapshot {sha256}")
    return load_snapshot(str(row[0]), sha256)


async def read_snapshot(pool: AsyncConnectionPool[Any], sha256: str) -> dict[str, Any]:
    """The snapshot stored under ``sha256``, checked against it; InvalidInput if absent."""
    async with pool.connection() as conn:
        cur = await conn.execute(_SNAPSHOT_SQL, (sha256,))
        row = await cur.fetchone()
    return _verified(row, sha256)


class SnapshotReader:
    """Reads snapshots by hash (verified against it), cached: they never change."""

    def __init__(self, conn: psycopg.Connection[Any], cache_size: int = 4096) -> None:
        self._conn = conn
        self.get = lru_cache(maxsize=cache_size)(self._load)

    def _load(self, sha256: str) -> dict[str, Any]:
        return _verified(self._conn.execute(_SNAPSHOT_SQL, (sha256,)).fetchone(), sha256)
