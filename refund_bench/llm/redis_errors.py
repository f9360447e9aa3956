"""Redis out of reach, as the error policy reads it (see :mod:`refund_bench.errors`).

The LLM answer cache and the rate limiter keep their state in Redis. A Redis that restarts,
fails over or closes a pooled connection is gone for a moment: redis-py's own retries
(configured in :func:`refund_bench.llm_setup.redis_client`) ride out most of it, and what they
give up on is raised as :class:`~refund_bench.errors.TransientError` with
``dependency="redis"``, which the LLM client and the runtime retry with backoff and count in
``refund_bench_retries_total{kind="redis"}``. Each Redis-facing component maps its round trip
in one place, with :func:`redis_unreachable_is_transient`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from redis.exceptions import AuthenticationError, AuthorizationError, ReadOnlyError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from refund_bench.errors import TransientError

REDIS_DEPENDENCY = "redis"
"""The ``dependency`` (and ``kind`` of ``refund_bench_retries_total``) of Redis failures."""

REDIS_UNREACHABLE: tuple[type[RedisError], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
)
"""What redis-py raises when Redis cannot be reached or does not answer in time: a refused or
broken connection, a connection the server closed, no pooled connection free in time, a Redis
still loading its data after a restart (``BusyLoadingError``), a socket timeout; and a write
answered ``READONLY``: the connection leads to a replica, the primary it reached before a
failover (redis-py drops that connection, and the next one reaches whatever the address leads
to now: the new primary, once the failover has moved it)."""

SIGN_IN_REFUSED: tuple[type[RedisError], ...] = (AuthenticationError, AuthorizationError)
"""Connection errors that no retry heals (wrong user name or password, an ACL that refuses
the command): raised as they are, so that the stage stops and says why."""


@contextlib.contextmanager
def redis_unreachable_is_transient(what: str) -> Iterator[None]:
    """Run the block; a :data:`REDIS_UNREACHABLE` error in it is raised as
    ``TransientError(dependency="redis")``, whose message names ``what`` failed and the error's
    type, never Redis's address or credentials (the redis-py error is its cause, for the
    traceback). :data:`SIGN_IN_REFUSED` and reply errors (a script's bug, ``NOSCRIPT``, which
    redis-py answers by loading the script) are raised as they are."""
    try:
        yield
    except SIGN_IN_REFUSED:
        raise
    except REDIS_UNREACHABLE as exc:
        raise TransientError(
            f"redis unavailable: {what} failed ({type(exc).__name__})",
            dependency=REDIS_DEPENDENCY,
        ) from exc
