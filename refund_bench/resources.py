"""Async resources a stage opens on its own event loop (see ``StageSpec.startup``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool, PoolTimeout


def pg_pool(conninfo: str, max_size: int = 10) -> AsyncConnectionPool[Any]:
    """A pool that is not opened yet: open it from the stage's startup hook.

    Its connections are in autocommit mode: each statement commits on its own, with no BEGIN
    and COMMIT round trips around it. Work that needs several statements to be atomic opens
    ``conn.transaction()``.
    """
    return AsyncConnectionPool(
        conninfo, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True}
    )


POOL_OPEN_TIMEOUT_S = 15.0


def opened(pool: AsyncConnectionPool[Any]) -> Callable[[], Awaitable[None]]:
    """A startup hook that opens ``pool`` and waits for its first connection: a stage whose
    ``DATABASE_URL`` is wrong or unreachable stops at start with that reason (and crash-loops
    until it is fixed) instead of turning ready and failing at its first record."""

    async def open_and_wait() -> None:
        try:
            await pool.open(wait=True, timeout=POOL_OPEN_TIMEOUT_S)
        except PoolTimeout as exc:
            raise RuntimeError(
                f"PostgreSQL (DATABASE_URL) gave no connection in {POOL_OPEN_TIMEOUT_S:g} s"
            ) from exc

    return open_and_wait


def lifecycle(
    *openers: Callable[[], Awaitable[Any]],
) -> Callable[[], Awaitable[None]]:
    """One startup/shutdown hook that awaits each callable in order."""

    async def run() -> None:
        for opener in openers:
            await opener()

    return run
