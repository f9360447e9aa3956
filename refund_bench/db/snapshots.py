"""Frozen evidence snapshots and disputes in PostgreSQL.

Snapshots are content-addressed (sha256 of canonical JSON) and immutable, so any stage may read
one by hash and cache it forever; the first snapshot frozen for a dispute is the one it keeps.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
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
    params = {
        "sha256": snapshot_sha256,
        "snapshot": snapshot_json,
        "dispute_id": dispute_id,
        "order_id": order_id,
        "customer_id": customer_id,
        "complaint_text": complaint_text,
        "received_at": received_at,
    }
    async with pool.connection() as conn:
        cur = await conn.execute(_FREEZE_SQL, params)
        row = await cur.fetchone()
        if row is None:
            # Another instance stored this dispute while the statement ran (a rebalance), so
            # the statement's snapshot of the tables could not see it; now it can.
            cur = await conn.execute(_FROZEN_SQL, params)
            row = await cur.fetchone()
    if row is None:
        raise RuntimeError(f"dispute {dispute_id} was not stored")
    return str(row[0]), str(row[1])


# One statement, one round trip: store the snapshot and the dispute if new, and answer with the
# snapshot the dispute keeps -- ours when this statement stored the dispute, else the one frozen
# the first time (read from the tables as they were when the statement started).
_FREEZE_SQL = """
WITH stored_snapshot AS (
    INSERT INTO evidence_snapshots (sha256, snapshot) VALUES (%(sha256)s, %(snapshot)s)
    ON CONFLICT (sha256) DO NOTHING
), stored_dispute AS (
    INSERT INTO disputes (dispute_id, order_id, customer_id, complaint_text, received_at,
                          snapshot_sha256)
    VALUES (%(dispute_id)s, %(order_id)s, %(customer_id)s, %(complaint_text)s,
            %(received_at)s, %(sha256)s)
    ON CONFLICT (dispute_id) DO NOTHING
    RETURNING snapshot_sha256
)
SELECT %(snapshot)s::text, snapshot_sha256 FROM stored_dispute
UNION ALL
SELECT s.snapshot::text, s.sha256 FROM disputes d
JOIN evidence_snapshots s ON s.sha256 = d.snapshot_sha256
WHERE d.dispute_id = %(dispute_id)s AND NOT EXISTS (SELECT 1 FROM stored_dispute)
"""
_FROZEN_SQL = """
SELECT s.snapshot::text, s.sha256 FROM disputes d
JOIN evidence_snapshots s ON s.sha256 = d.snapshot_sha256 WHERE d.dispute_id = %(dispute_id)s
"""


_SNAPSHOT_SQL = "SELECT snapshot FROM evidence_snapshots WHERE sha256 = %s"


def payment_reference(snapshot: Mapping[str, Any]) -> str | None:
    """The order's payment to refund against, as the snapshot froze it; ``None`` if none."""
    reference = snapshot["order"].get("payment_reference")
    return str(reference) if reference else None


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


class AsyncSnapshotReader:
    """:func:`read_snapshot` with a bounded LRU cache: snapshots never change, so a hit costs no
    query. Callers must treat the returned dict as read-only (it is shared)."""

    def __init__(self, pool: AsyncConnectionPool[Any], cache_size: int = 4096) -> None:
        self._pool = pool
        self._size = cache_size
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()

    async def get(self, sha256: str) -> dict[str, Any]:
        snapshot = self._cache.get(sha256)
        if snapshot is not None:
            self._cache.move_to_end(sha256)
            return snapshot
        snapshot = await read_snapshot(self._pool, sha256)
        self._cache[sha256] = snapshot
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return snapshot


class SnapshotReader:
    """Reads snapshots by hash (verified against it), cached: they never change."""

    def __init__(self, conn: psycopg.Connection[Any], cache_size: int = 4096) -> None:
        self._conn = conn
        self.get = lru_cache(maxsize=cache_size)(self._load)

    def _load(self, sha256: str) -> dict[str, Any]:
        return _verified(self._conn.execute(_SNAPSHOT_SQL, (sha256,)).fetchone(), sha256)
