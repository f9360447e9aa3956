"""The judge through Redis blips, against the stack's Redis and the LLM stand-in.

The judge is wired as its stage wires it (:mod:`refund_bench.llm_setup`: its Redis client, the
rate limiter on it) and run as the runtime runs a handler (retried on ``TransientError``). Redis
closing the client's connections while grievances are judged (a restart, a failover, an idle
timeout) costs no grievance and no second call; Redis gone for longer than the client's own
retries is a retry of the handler, counted as ``kind="redis"``, and the answers already drawn
are stored by it instead of being drawn and paid for again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from redis.asyncio import Redis

from refund_bench import llm_setup
from refund_bench.llm.cache import CallOutcome, RedisResponseCache
from refund_bench.llm.client import LlmClient, LlmEndpoint
from refund_bench.llm.ratelimit import RateLimiter
from refund_bench.llm.roles import JUDGE_PROMPT_VERSION, load_prompt
from refund_bench.retry import RetryPolicy
from refund_bench.runtime import Context, Message
from refund_bench.runtime.metrics import PrometheusMetrics, retry_counter
from services.judge.handler import JudgeHandler, Seat
from tests.fakes.tcp_proxy import TcpProxy
from tests.grievances import grievance_message
from tests.standin import Standin

pytestmark = pytest.mark.stack

WAIT_SECONDS = 30.0
"""The longest any condition of these tests is waited for."""


def _ruled(ruling: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a ruling decides and says, without the time it was cast."""
    return tuple(
        ruling[field]
        for field in ("judge_seat", "ruling", "model_ruling", "confidence", "reasoning", "seed")
    )


class TellingLimiter:
    """The stage's rate limiter, telling :attr:`taken` once ``seats`` tokens were taken."""

    def __init__(self, limiter: RateLimiter, seats: int) -> None:
        self._limiter = limiter
        self._seats = seats
        self.taken = asyncio.Event()

    async def acquire(self) -> None:
        await self._limiter.acquire()
        self._seats -= 1
        if self._seats <= 0:
            self.taken.set()


class Judge:
    """A three-seat judge as its stage wires it (its Redis client, its cache, its account's
    rate limiter), on the Redis at ``redis_url``, calling the stand-in; its retries counted in
    :attr:`registry`, its calls' outcomes in :attr:`outcomes`."""

    def __init__(self, redis_url: str, standin: Standin) -> None:
        self.name = f"test-blip-{uuid.uuid4().hex[:12]}"
        """The name of its Redis connections (``CLIENT LIST``), and of its rate-limit bucket."""
        self.settings = llm_setup.LlmStageSettings(
            redis_url=SecretStr(_named(redis_url, self.name)),
            llm_base_url=standin.base_url,
            llm_api_key=SecretStr("stand-in"),
            llm_rate_limit_name=self.name,
            redis_max_connections=8,
        )
        self.registry = CollectorRegistry()
        self.metrics = PrometheusMetrics("judge", self.registry)
        self.outcomes: list[CallOutcome] = []
        self.limiter: TellingLimiter | None = None
        """The limiter of the latest delivery: its ``taken`` is set once every seat of a
        grievance has its token, and their calls are under way."""

    async def deliver(
        self,
        messages: Sequence[Message],
        *,
        retry_sleep: Callable[[float], Awaitable[None]] | None = None,
        while_judging: Callable[[Judge], Awaitable[None]] | None = None,
    ) -> list[list[Mapping[str, Any]]]:
        """The rulings of each message, each handled as the runtime handles it (retried on
        TransientError with ``retry_sleep``), with ``while_judging`` run alongside."""
        redis = llm_setup.redis_client(self.settings)
        cache = RedisResponseCache(redis, f"{self.name}:", 600)
        access = self.settings.shared_access()
        self.limiter = TellingLimiter(llm_setup.rate_limiter(self.settings, redis, access), 3)
        endpoint = LlmEndpoint(
            base_url=access.base_url,
            api_key=access.api_key,
            model="standin-judge",
            temperature=0.7,
            timeout_seconds=10,
        )
        on_retry = retry_counter(self.metrics)
        llm = LlmClient(endpoint, rate_limiter=self.limiter, on_retry=on_retry)
        seats = [Seat(index=i, llm=llm, seed=1000 + i) for i in range(3)]
        handler = JudgeHandler(
            seats, cache, load_prompt(JUDGE_PROMPT_VERSION), self.outcomes.append
        )
        policy = RetryPolicy(attempts=5)

        async def no_wait(_: float) -> None:
            return None

        async def one(message: Message) -> list[Mapping[str, Any]]:
            emits = await policy.run_async(
                lambda: handler.handle(message, Context(None)),
                sleep=retry_sleep or no_wait,
                on_retry=on_retry,
            )
            return [e.value for e in emits]

        try:
            judged = asyncio.gather(*(one(m) for m in messages))
            if while_judging is not None:
                await asyncio.wait_for(while_judging(self), WAIT_SECONDS)
            return list(await asyncio.wait_for(judged, WAIT_SECONDS))
        finally:
            await llm.aclose()
            await redis.aclose()

    def redis_retries(self) -> float:
        labels = {"stage": "judge", "topic": "", "kind": "redis"}
        return self.registry.get_sample_value("refund_bench_retries_total", labels) or 0.0


async def _their_ids(admin: Redis, name: str) -> set[int]:
    """The ids of the Redis connections named ``name``."""
    return {int(c["id"]) for c in await admin.client_list() if c.get("name") == name}


def _named(redis_url: str, name: str) -> str:
    """``redis_url`` with ``client_name=name``: every connection of its client is so named."""
    parts = urlsplit(redis_url)
    query = f"{parts.query}&client_name={name}" if parts.query else f"client_name={name}"
    return urlunsplit(parts._replace(query=query))


def test_redis_closing_the_judges_connections_while_it_works_costs_nothing(
    redis_url: str, standin: Standin
) -> None:
    """Every connection of the judge's Redis client is closed by Redis (``CLIENT KILL``) while
    a first grievance is judged, and again while ten more are (some calls under way, their
    cache writes and most token takes still to come). Every grievance is judged, each
    seat once (no call paid twice), every ruling is stored: a redelivery casts the same ones
    with no call."""
    standin.faults(latency_ms=150)
    judge = Judge(redis_url, standin)
    disputes = [f"d-{uuid.uuid4().hex[:12]}" for _ in range(11)]
    killed: list[set[int]] = []

    async def kill_them(judge: Judge) -> None:
        admin = Redis.from_url(redis_url)
        try:
            assert judge.limiter is not None
            await judge.limiter.taken.wait()
            ids = await _their_ids(admin, judge.name)
            for client_id in ids:
                await admin.client_kill_filter(_id=str(client_id))
            killed.append(ids)
        finally:
            await admin.aclose()

    async def go() -> tuple[list[list[Mapping[str, Any]]], ...]:
        first = await judge.deliver([grievance_message(disputes[0])], while_judging=kill_them)
        rest = await judge.deliver(
            [grievance_message(d) for d in disputes[1:]], while_judging=kill_them
        )
        made = list(judge.outcomes)
        judge.outcomes.clear()
        again = await judge.deliver([grievance_message(d) for d in disputes])
        assert made == ["made"] * 33, made
        return first + rest, again

    judged, again = asyncio.run(go())

    assert len(killed) == 2
    assert all(killed), "the judge's connections were there to kill"
    assert judge.redis_retries() == 0, "the client's own retries rode it out"
    assert [len(rulings) for rulings in judged] == [3] * 11
    assert [[_ruled(r) for r in rulings] for rulings in again] == [
        [_ruled(r) for r in rulings] for rulings in judged
    ]
    assert judge.outcomes == ["cached"] * 33
    by_dispute = standin.stats()["by_dispute"]
    assert [by_dispute[d] for d in disputes] == [3] * 11


def test_redis_gone_longer_than_the_clients_retries_is_a_retry_of_the_handler(
    redis_url: str, standin: Standin
) -> None:
    """Redis is cut off (through a proxy) while the seats' calls are under way, so their cache
    writes fail even after redis-py's own retries: the handler fails with Redis's
    TransientError, the runtime's retry is counted as ``kind="redis"``, and Redis is back when
    the retry runs. The retry stores the three answers already drawn: no seat is drawn twice,
    and a redelivery casts the same rulings from the cache."""
    standin.faults(latency_ms=300)
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    parts = urlsplit(redis_url)

    async def go() -> tuple[
        Judge, TcpProxy, list[list[Mapping[str, Any]]], list[Any], list[CallOutcome]
    ]:
        async with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
            through = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
            judge = Judge(through, standin)

            async def cut_while_calling(judge: Judge) -> None:
                assert judge.limiter is not None
                await judge.limiter.taken.wait()
                proxy.cut()

            async def back_when_retried(_: float) -> None:
                proxy.restore()

            judged = await judge.deliver(
                [grievance_message(dispute)],
                retry_sleep=back_when_retried,
                while_judging=cut_while_calling,
            )
            made = list(judge.outcomes)
            judge.outcomes.clear()
            again = await judge.deliver([grievance_message(dispute)])
            return judge, proxy, judged, again, made

    judge, proxy, judged, again, made = asyncio.run(go())

    assert proxy.refused > 0, "the client tried to reconnect while Redis was cut off"
    assert judge.redis_retries() >= 1
    # A seat whose write was still being retried when the handler was retried is joined by
    # it: that join is counted as cached, the draw as made, once.
    assert made.count("made") == 3, made
    assert set(made) <= {"made", "cached"}, made
    assert standin.stats()["by_dispute"][dispute] == 3, "no seat was drawn twice"
    assert judge.outcomes == ["cached"] * 3
    assert [_ruled(r) for r in again[0]] == [_ruled(r) for r in judged[0]]
