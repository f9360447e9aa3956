"""The services' PostgreSQL connections carry a statement timeout: a stuck statement fails (and
its batch is redelivered) instead of holding the stage."""

from __future__ import annotations

from urllib.parse import quote

import psycopg
import pytest
from pydantic import SecretStr

from refund_bench.config import StackSettings

pytestmark = pytest.mark.stack


def _settings(database: str, **kw: object) -> StackSettings:
    return StackSettings(database_url=SecretStr(database), **kw)  # type: ignore[arg-type]


def _timeout(conninfo: str) -> str:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SHOW statement_timeout").fetchone()
    assert row is not None
    return str(row[0])


def test_the_default_is_30_s_and_a_longer_statement_fails(database: str) -> None:
    assert _timeout(_settings(database).database_conninfo()) == "30s"
    short = _settings(database, pg_statement_timeout_ms=200).database_conninfo()
    with psycopg.connect(short) as conn, pytest.raises(psycopg.errors.QueryCanceled):
        conn.execute("SELECT pg_sleep(5)")


def test_a_timeout_the_url_sets_wins_and_0_sets_none(database: str) -> None:
    separator = "&" if "?" in database else "?"
    own = f"{database}{separator}options={quote('-c statement_timeout=5s')}"
    assert _timeout(_settings(own).database_conninfo()) == "5s"
    assert _timeout(_settings(database, pg_statement_timeout_ms=0).database_conninfo()) == "0"
