"""Apply the schema files (idempotent DDL) to a database."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import psycopg
from psycopg import errors as pg_errors

from refund_bench.retry import RetryPolicy, SyncSleep

log = logging.getLogger(__name__)

SCHEMA_DIR = Path(__file__).parent
"""``schema.sql`` first, then every ``schema_*.sql`` (e.g. ``schema_api.sql``) by name."""

DEFAULT_LOCK_TIMEOUT_MS = 5_000
"""How long one attempt waits for a table lock (PostgreSQL's ``lock_timeout``)."""
LOCK_RETRY = RetryPolicy(attempts=6)
"""Attempts of a migration that timed out waiting for a lock: waits of 1, 2, 4, 8 and 8 s
(plus jitter) between them."""


class MigrationBlockedError(RuntimeError):
    """Every attempt of the migration timed out waiting for a table lock."""


def schema_files() -> list[Path]:
    return [SCHEMA_DIR / "schema.sql", *sorted(SCHEMA_DIR.glob("schema_*.sql"))]


def migrate(
    conninfo: str,
    *,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
    retry: RetryPolicy = LOCK_RETRY,
    sleep: SyncSleep = time.sleep,
) -> None:
    """Create every table, column and index that does not exist yet. Safe to run on every start.

    All files are one transaction. Its DDL waits at most ``lock_timeout_ms`` (0: no limit) for
    each table lock, so that a long transaction holding a table cannot make it wait forever
    while every query on that table queues behind its waiting lock request; it then rolls
    back, and is tried again after ``retry``'s backoff. Raises :class:`MigrationBlockedError` when
    no attempt got its locks (nothing is changed then).
    """

    def retried(failure: BaseException) -> None:
        log.warning(
            "schema migration: a table lock was not granted within %d ms (%s); rolled back,"
            " trying again",
            lock_timeout_ms,
            failure,
        )

    try:
        retry.run(
            lambda: _apply(conninfo, lock_timeout_ms),
            sleep=sleep,
            retry_on=(pg_errors.LockNotAvailable,),
            on_retry=retried,
        )
    except pg_errors.LockNotAvailable as exc:
        raise MigrationBlockedError(
            f"schema migration: {retry.attempts} attempts each waited {lock_timeout_ms} ms for a"
            f" table lock and rolled back ({exc}); a long transaction holds a table it alters"
            " (see pg_stat_activity and pg_locks): end it, or run the migration again later"
        ) from exc


def _apply(conninfo: str, lock_timeout_ms: int) -> None:
    # A transaction-scoped advisory lock keeps concurrent starters from racing on DDL; it is
    # taken before the lock timeout applies, so a second starter waits for the first to finish.
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT set_config('lock_timeout', '0', true)")  # whatever the URL sets
        conn.execute("SELECT pg_advisory_xact_lock(4242)")
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{lock_timeout_ms}ms",))
        for path in schema_files():
            conn.execute(path.read_text(encoding="utf-8").encode())
