"""PostgreSQL probes for tests that wait on a lock: each looks only at the sessions one given
session blocks or is blocked by, whatever else shares the database."""

from __future__ import annotations

import psycopg

WAITING_ON_SQL = "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
"""Sessions waiting for a lock the session whose pid is the parameter holds."""


def sessions_waiting_on(database_url: str, pid: int) -> int:
    """How many sessions wait for a lock the session ``pid`` holds."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(WAITING_ON_SQL, (pid,)).fetchone()
    return 0 if row is None else int(row[0])


def is_waiting(database_url: str, pid: int) -> bool:
    """Whether the session ``pid`` waits for a lock another session holds."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT cardinality(pg_blocking_pids(%s))", (pid,)).fetchone()
    return row is not None and row[0] > 0
