"""Apply the schema files (idempotent DDL) to a database."""

from __future__ import annotations

from pathlib import Path

import psycopg

SCHEMA_DIR = Path(__file__).parent
"""``schema.sql`` first, then every ``schema_*.sql`` (e.g. ``schema_api.sql``) by name."""


def schema_files() -> list[Path]:
    return [SCHEMA_DIR / "schema.sql", *sorted(SCHEMA_DIR.glob("schema_*.sql"))]


def migrate(conninfo: str) -> None:
    """Create every table and index that does not exist yet. Safe to run on every start."""
    # A transaction-scoped advisory lock keeps concurrent starters from racing on DDL.
    with psycopg.connect(conninfo, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(4242)")
        for path in schema_files():
            conn.execute(path.read_text(encoding="utf-8").encode())
