"""Redis out of reach is a retryable failure of the dependency ``redis``, not a crash.

The cache's batched lookups and writes and the token bucket's take each raise redis-py's
connection errors and timeouts as ``TransientError(dependency="redis")``, which the runtime
retries; reply errors and refused sign-ins stay what they are. A drawn answer whose write
failed is stored by the next call of its key, not drawn again. The stages' Redis client sends a
command again on a fresh connection itself before any of that.
"""

from __future__ import annotations

import asyncio
import socket
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from refund_bench.errors import TransientError
from refund_bench.llm import cache as llm_cache
from refund_bench.llm.cache import CallOutcome, InFlight, RedisResponseCache, cached_call
from refund_bench.llm.ratelimit import RedisTokenBucket
from refund_bench.llm.roles import JUDGE_PROMPT_VERSION, load_prompt
from refund_bench.llm_setup import LlmStageSettings, redis_client, response_cache
from refund_bench.runtime import Context, Emit
from services.judge.handler import JudgeHandler, Seat
from tests.fakes.scripted_llm import ScriptedLlm
from tests.grievances import grievance_message

ADDRESS = "redis.internal.example:6379"
"""Where the fake's errors say Redis is: no TransientError's message may repeat it."""

Script = Callable[..., Awaitable[object]]


class FlakyRedis:
    """The part of a Redis client the cache and the token bucket use (``MGET``, scripts), on a
    dict. Each round trip first raises the next of ``failures``, if any is left."""

    def __init__(self, failures: Sequence[RedisError] = ()) -> None:
        self.failures = list(failures)
        self.values: dict[str, str] = {}
        self.round_trips = 0

    def _trip(self) -> None:
        self.round_trips += 1
        if self.failures:
            raise self.failures.pop(0)

    async def mget(self, keys: list[str]) -> list[bytes | None]:
        self._trip()
        return [None if key not in self.values else self.values[key].encode() for key in keys]

    def register_script(self, script: str) -> Script:
        take = "TIME" in script  # the token bucket's script reads Redis's clock

        async def run(keys: list[str], args: list[object]) -> object:
            self._trip()
            if take:  # a full bucket: every token asked for is taken, no wait
                return [int(cast(int, args[4])), "5", 0]
            answers: list[int | bytes] = []
            for key, value in zip(keys, args, strict=False):
                if key in self.values:
                    answers.append(self.values[key].encode())
                else:
                    self.values[key] = cast(bytes, value).decode()
                    answers.append(1)
            return answers

        return run

    def client(self) -> Redis:
        return cast(Redis, self)


UNREACHABLE: list[RedisError] = [
    RedisConnectionError(f"Error 111 connecting to {ADDRESS}. Connection refused."),
    RedisConnectionError("Connection closed by server."),
    RedisTimeoutError(f"Timeout reading from {ADDRESS}"),
    BusyLoadingError("Redis is loading the dataset in memory"),
]


def _transient(exc: BaseException, what: str) -> None:
    """``exc`` is Redis's TransientError, says ``what`` failed, and names no address."""
    assert isinstance(exc, TransientError), repr(exc)
    assert exc.dependency == "redis"
    assert what in str(exc)
    assert ADDRESS not in str(exc)


@pytest.mark.parametrize("error", UNREACHABLE, ids=lambda e: type(e).__name__)
def test_a_lookup_redis_cannot_answer_is_transient_and_the_next_one_works(
    error: RedisError,
) -> None:
    redis = FlakyRedis([error])
    redis.values["p:k"] = "stored"
    cache = RedisResponseCache(redis.client(), "p:", 60)

    async def go() -> tuple[BaseException, str | None]:
        with pytest.raises(TransientError) as failed:
            await cache.get("k")
        return failed.value, await cache.get("k")

    failure, again = asyncio.run(go())
    _transient(failure, "LLM cache lookup")
    assert failure.__cause__ is error, "the redis-py error is kept for the traceback"
    assert again == "stored"


@pytest.mark.parametrize("error", UNREACHABLE, ids=lambda e: type(e).__name__)
def test_a_write_redis_cannot_answer_is_transient_and_writing_again_stores_it(
    error: RedisError,
) -> None:
    redis = FlakyRedis([error])
    cache = RedisResponseCache(redis.client(), "p:", 60)

    async def go() -> tuple[BaseException, str]:
        with pytest.raises(TransientError) as failed:
            await cache.put_if_absent("k", "answer")
        return failed.value, await cache.put_if_absent("k", "answer")

    failure, stored = asyncio.run(go())
    _transient(failure, "LLM cache write")
    assert stored == "answer"
    assert redis.values == {"p:k": "answer"}


def test_every_caller_of_a_failed_batch_gets_the_transient_error() -> None:
    """Lookups of one event-loop iteration are one MGET: its failure is each caller's."""
    redis = FlakyRedis([RedisConnectionError("Connection reset by peer")])
    cache = RedisResponseCache(redis.client(), "p:", 60)

    async def go() -> list[object]:
        return await asyncio.gather(*(cache.get(f"k{i}") for i in range(3)), return_exceptions=True)

    outcomes = asyncio.run(go())
    assert redis.round_trips == 1
    for outcome in outcomes:
        _transient(cast(BaseException, outcome), "LLM cache lookup of 3 keys")


@pytest.mark.parametrize("error", UNREACHABLE, ids=lambda e: type(e).__name__)
def test_a_token_take_redis_cannot_answer_is_transient_and_the_next_one_works(
    error: RedisError,
) -> None:
    redis = FlakyRedis([error])
    bucket = RedisTokenBucket(redis.client(), "b", rate_per_second=10, burst=5)

    async def go() -> BaseException:
        with pytest.raises(TransientError) as failed:
            await bucket.acquire()
        await bucket.acquire()
        return failed.value

    _transient(asyncio.run(go()), "rate-limit take")
    assert redis.round_trips == 2


@pytest.mark.parametrize(
    "error",
    [
        ResponseError("ERR Error running script: attempt to compare nil with number"),
        NoScriptError("NOSCRIPT No matching script."),
        AuthenticationError("invalid username-password pair"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_reply_errors_and_a_refused_sign_in_stay_what_they_are(error: RedisError) -> None:
    """A script's bug or wrong credentials are not a blip: retrying would not heal them."""

    def cache() -> RedisResponseCache:
        return RedisResponseCache(FlakyRedis([error]).client(), "p:", 60)

    def bucket() -> RedisTokenBucket:
        return RedisTokenBucket(FlakyRedis([error]).client(), "b", rate_per_second=1, burst=1)

    attempts: list[Callable[[], Awaitable[object]]] = [
        lambda: cache().get("k"),
        lambda: cache().put_if_absent("k", "v"),
        lambda: bucket().acquire(),
    ]

    async def go() -> None:
        for attempt in attempts:
            with pytest.raises(type(error)) as raised:
                await attempt()
            assert raised.value is error

    asyncio.run(go())


def test_an_answer_whose_write_failed_is_stored_by_the_retry_not_drawn_again() -> None:
    """The handler's retry (same process) stores the answer already paid for, and counts it as
    made once; nothing is drawn twice."""
    redis = FlakyRedis()
    cache = RedisResponseCache(redis.client(), "p:", 60)
    in_flight = InFlight()
    draws: list[str] = []
    outcomes: list[CallOutcome] = []

    async def draw() -> str:
        draws.append(f"answer {len(draws) + 1}")
        redis.failures.append(RedisConnectionError("Connection closed by server."))
        return draws[-1]

    async def go() -> tuple[str, bool]:
        with pytest.raises(TransientError):
            await cached_call(cache, "k", draw, outcomes.append, in_flight=in_flight)
        assert in_flight.unwritten("k") == "answer 1"
        return await cached_call(cache, "k", draw, outcomes.append, in_flight=in_flight)

    assert asyncio.run(go()) == ("answer 1", False)
    assert draws == ["answer 1"]
    assert outcomes == ["made"]
    assert redis.values == {"p:k": "answer 1"}
    assert in_flight.unwritten("k") is None, "a stored answer is no longer kept"


def test_a_kept_answer_gives_way_to_one_another_writer_stored() -> None:
    """Another instance stored its answer for the key meanwhile: that one is used."""
    redis = FlakyRedis()
    cache = RedisResponseCache(redis.client(), "p:", 60)
    in_flight = InFlight()
    in_flight.keep_unwritten("k", "mine")
    redis.values["p:k"] = "theirs"

    async def never() -> str:
        raise AssertionError("nothing is drawn when an answer is stored")

    assert asyncio.run(cached_call(cache, "k", never, in_flight=in_flight)) == ("theirs", True)
    assert in_flight.unwritten("k") is None


def test_kept_answers_are_bounded_the_oldest_forgotten() -> None:
    in_flight, limit = InFlight(), llm_cache.UNWRITTEN_LIMIT
    for index in range(limit + 1):
        in_flight.keep_unwritten(f"k{index}", f"v{index}")
    assert in_flight.unwritten("k0") is None
    assert in_flight.unwritten("k1") == "v1"
    assert in_flight.unwritten(f"k{limit}") == f"v{limit}"


def test_the_stages_redis_client_retries_broken_connections_itself() -> None:
    """redis-py's retry on the stages' pool sends a command again after a connection error or
    a timeout (not after a reply error), and the pool bounds every wait."""
    client = redis_client(LlmStageSettings(redis_url=SecretStr("redis://127.0.0.1:1/0")))
    options = client.connection_pool.connection_kwargs
    retry = options["retry"]
    assert retry.get_retries() == 3
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 5
    assert options["health_check_interval"] == 30

    def failing_once(error: RedisError) -> Callable[[], Awaitable[str]]:
        errors = [error]

        async def do() -> str:
            if errors:
                raise errors.pop()
            return "answered"

        return do

    async def closed(_: Exception) -> None:
        return None

    async def go() -> None:
        for error in (RedisConnectionError("reset"), RedisTimeoutError("timed out")):
            assert await retry.call_with_retry(failing_once(error), closed) == "answered"
        with pytest.raises(ResponseError):
            await retry.call_with_retry(failing_once(ResponseError("ERR")), closed)
        await client.aclose()

    asyncio.run(go())


def test_a_redis_nobody_answers_is_transient_and_its_password_is_not_told() -> None:
    """The stages' client, against a port nothing listens on: after redis-py's own retries, the
    cache's lookup is Redis's TransientError, and neither it nor its traceback shows the
    password of ``REDIS_URL``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    password = "s3cret-redis-password"
    settings = LlmStageSettings(redis_url=SecretStr(f"redis://:{password}@127.0.0.1:{port}/0"))

    async def go() -> BaseException:
        client = redis_client(settings)
        try:
            with pytest.raises(TransientError) as failed:
                await response_cache(settings, client).get("k")
            return failed.value
        finally:
            await client.aclose()

    failure = asyncio.run(go())
    _transient(failure, "LLM cache lookup")
    assert isinstance(failure.__cause__, RedisConnectionError)
    assert password not in "".join(traceback.format_exception(failure))


class WritesRefused(FlakyRedis):
    """Lookups answered; every cache write refused while ``down``."""

    down = True

    def register_script(self, script: str) -> Script:
        run = super().register_script(script)

        async def refused_while_down(keys: list[str], args: list[object]) -> object:
            if self.down:
                raise RedisConnectionError("Connection closed by server.")
            return await run(keys, args)

        return refused_while_down


UPHELD_ON_THE_TIMES = {
    "ruling": "UPHELD",
    "confidence": 0.9,
    "evidence_cited": ["order.delivered_at"],
    "reasoning": "Delivered after the SLA.",
}


def test_a_bench_of_many_seats_keeps_every_answer_whose_write_failed_for_the_retry() -> None:
    """Five seats of 256 records in flight draw 1,280 answers, more than the default room for
    answers not written: the judge keeps room for all of them, so the retry after Redis is back
    stores each one instead of drawing, and paying, again."""
    redis = WritesRefused()
    bench = ScriptedLlm([UPHELD_ON_THE_TIMES], model="judge-model")
    handler = JudgeHandler(
        [Seat(index=seat, llm=bench, seed=1000 + seat) for seat in range(5)],
        RedisResponseCache(redis.client(), "p:", 60),
        load_prompt(JUDGE_PROMPT_VERSION),
        max_inflight=256,
    )
    messages = [grievance_message(f"d-{number}") for number in range(256)]
    assert 5 * len(messages) > llm_cache.UNWRITTEN_LIMIT

    async def go() -> list[Sequence[Emit]]:
        first = await asyncio.gather(
            *(handler.handle(m, Context(None)) for m in messages), return_exceptions=True
        )
        assert all(isinstance(result, TransientError) for result in first)
        redis.down = False  # Redis is back: the runtime retries each handler
        return list(await asyncio.gather(*(handler.handle(m, Context(None)) for m in messages)))

    emitted = asyncio.run(go())
    assert sum(len(emits) for emits in emitted) == 5 * len(messages)
    assert bench.draws == 5 * len(messages), "an answer drawn again was paid for twice"
