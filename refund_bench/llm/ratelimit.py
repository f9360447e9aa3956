"""Rate limiting of LLM calls, shared by every replica through Redis.

:class:`RedisTokenBucket` is one token bucket per key name: ``rate_per_second`` tokens refill
continuously up to ``burst``. Taking tokens is ONE atomic Lua script that reads the clock with
Redis ``TIME`` (so replicas with skewed clocks agree), refills by the elapsed time and takes the
tokens asked for, or as many as it can and answers how long the rest must wait. All the
acquisitions of one event-loop iteration share one such call
(:class:`refund_bench.coalesce.TickBatcher`).

A token may be taken on credit: when the bucket is empty, the caller still gets a token but is
told to wait until it has been earned (the bucket goes negative, by at most
``rate_per_second * max_wait_seconds`` tokens). Within that credit, waiters are thereby served
in the order they asked and each acquisition costs one round trip, instead of every waiter
polling Redis. Once the credit is used up the script takes nothing and returns the wait until
a token is free again; :meth:`RedisTokenBucket.acquire` sleeps it and tries again, and all those
turned away then race again with the callers that came since (across replicas too): past the
credit, order is not kept, and a call may wait longer than others that asked after it. The rate
holds either way.

Redis out of reach is ``TransientError(dependency="redis")``: the LLM client retries it, like a
failed call, before its next attempt. A take redis-py sent again after a broken connection may
have taken its tokens twice, which only paces the calls a little slower.
"""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

from redis.asyncio import Redis

from refund_bench.coalesce import TickBatcher
from refund_bench.llm.redis_errors import redis_unreachable_is_transient
from refund_bench.retry import AsyncSleep

_TAKE_SCRIPT = """
-- KEYS[1]: the bucket; ARGV: rate per second, burst, max debt (tokens), ttl (ms), count.
-- Takes up to `count` tokens, as many as the credit allows. Returns {taken, balance, retry_ms}:
-- `balance` is the bucket (as a string) before the take, from which the caller works out each
-- taken token's wait; the `count - taken` not taken are to be asked for again after retry_ms.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local max_debt = tonumber(ARGV[3])
local count = tonumber(ARGV[5])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate / 1000000)
local balance = tokens
local taken = math.min(count, math.floor(tokens + max_debt))
if taken < 0 then taken = 0 end
tokens = tokens - taken
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local retry_ms = 0
if taken < count then
  retry_ms = math.ceil((-max_debt + 1 - tokens) * 1000 / rate)
end
return {taken, tostring(balance), retry_ms}
"""


class RateLimiter(Protocol):
    """Paces calls to a dependency."""

    async def acquire(self) -> None:
        """Return when the caller may make one call (possibly after waiting)."""
        ...


class UnlimitedRateLimiter:
    """A limiter that never waits (tests, tools, endpoints with no quota)."""

    async def acquire(self) -> None:
        return None


class RedisTokenBucket:
    """A token bucket shared by every process that uses the same Redis and ``name``.

    ``max_wait_seconds`` bounds the credit a caller can take (see the module docstring); a
    caller that finds it used up polls again after the wait the script returns.
    """

    def __init__(
        self,
        redis: Redis,
        name: str,
        rate_per_second: float,
        burst: int,
        *,
        max_wait_seconds: float = 1.0,
        sleep: AsyncSleep = asyncio.sleep,
        key_prefix: str = "refund-bench:ratelimit:",
    ) -> None:
        if rate_per_second <= 0:
            raise ValueError("rate_per_second must be > 0")
        if burst < 1:
            raise ValueError("burst must be >= 1")
        if max_wait_seconds < 0:
            raise ValueError("max_wait_seconds must be >= 0")
        self._key = f"{key_prefix}{name}"
        self._rate = rate_per_second
        self._burst = burst
        self._max_debt = rate_per_second * max_wait_seconds
        # An idle bucket is full again after (burst + debt) / rate: let Redis forget it then.
        self._ttl_ms = math.ceil((burst + self._max_debt) / rate_per_second * 1000) + 1000
        self._sleep = sleep
        self._script = redis.register_script(_TAKE_SCRIPT)
        self._takes: TickBatcher[None, tuple[bool, float]] = TickBatcher(self._take_many)

    @property
    def key(self) -> str:
        """The Redis key of the bucket."""
        return self._key

    @property
    def rate_per_second(self) -> float:
        """The rate the bucket refills at: tokens per second."""
        return self._rate

    async def acquire(self) -> None:
        """Take one token, sleeping (with the injected sleep) as long as the bucket says.
        ``TransientError(dependency="redis")`` when Redis is out of reach."""
        while True:
            taken, wait = await self._takes.submit(None)
            if wait > 0:
                await self._sleep(wait)
            if taken:
                return

    async def _take_many(self, requests: list[None]) -> list[tuple[bool, float]]:
        """One atomic script call for ``len(requests)`` tokens: (taken, seconds to wait) each.

        The i-th token taken leaves the bucket at ``balance - (i + 1)``; below zero it was
        taken on credit and waits until that debt has been earned back.
        """
        count = len(requests)
        with redis_unreachable_is_transient(f"rate-limit take of {count} tokens"):
            result = await self._script(
                keys=[self._key],
                args=[repr(self._rate), self._burst, repr(self._max_debt), self._ttl_ms, count],
            )
        taken, balance, retry_ms = int(result[0]), float(result[1]), int(result[2])
        waits = [(True, max(0.0, index + 1 - balance) / self._rate) for index in range(taken)]
        return waits + [(False, retry_ms / 1000)] * (count - taken)
