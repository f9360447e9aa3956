"""The LLM adapters against real servers: Redis (REDIS_URL), the stand-in on a loopback port
(both from ``tests/integration/conftest.py``), and small fixed-answer HTTP servers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from email.utils import formatdate
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from redis.asyncio import Redis

from refund_bench import llm_setup
from refund_bench.domain import Category, LineItem, OrderRecord, Ruling
from refund_bench.errors import TransientError
from refund_bench.llm import roles
from refund_bench.llm.cache import (
    CallOutcome,
    RedisResponseCache,
    RefusedBefore,
    cached_call,
    judge_cache_key,
    sha256_hex,
)
from refund_bench.llm.client import (
    LlmClient,
    LlmEndpoint,
    LlmRejected,
    LlmUnavailable,
)
from refund_bench.llm.ratelimit import RedisTokenBucket
from refund_bench.retry import RetryPolicy
from refund_bench.runtime.metrics import PrometheusMetrics, retry_counter
from refund_bench.samples import ARTICLE_COMPLAINT
from services.extractor.evidence import freeze
from tests.fakes.chat_completion import FixedAnswerServer, completion
from tests.fakes.loopback import JsonAnswerHandler, LoopbackServer
from tests.standin import Standin

T = TypeVar("T")

ORDER = OrderRecord(
    order_id="order-1840",
    customer_id="customer-7",
    placed_at="2026-09-01T20:15:00+05:30",
    delivered_at="2026-09-01T21:40:00+05:30",
    delivery_sla_minutes=45,
    line_items=(
        LineItem(name="Hyderabadi Biryani", quantity=4, unit_price_minor=32000, unit_weight_g=550),
        LineItem(name="Raita", quantity=1, unit_price_minor=6000, unit_weight_g=150),
    ),
    charged_total_minor=134000,
    pickup_weight_expected_g=2400,
    pickup_weight_actual_g=1200,
    partner_rating_at_handover=5,
)
SEATS = (1000, 1001, 1002)


def run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    return asyncio.run(main())


def endpoint(standin: Standin, *, temperature: float = 0.7, timeout: float = 5.0) -> LlmEndpoint:
    return LlmEndpoint(
        base_url=standin.base_url,
        api_key=SecretStr("stand-in-key"),
        model="standin-judge",
        temperature=temperature,
        timeout_seconds=timeout,
    )


def endpoint_at(port: int, *, timeout: float) -> LlmEndpoint:
    """An endpoint on a loopback port that is not the stand-in's."""
    return LlmEndpoint(
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key=SecretStr("k"),
        model="m",
        temperature=0.7,
        timeout_seconds=timeout,
    )


class CountingLimiter:
    """A real (trivial) RateLimiter that counts acquisitions."""

    def __init__(self) -> None:
        self.acquired = 0

    async def acquire(self) -> None:
        self.acquired += 1


class RecordedSleep:
    """An injected sleep that records the delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def judge_request(category: str = "PACKAGING") -> roles.LlmRequest:
    grievance = roles.GrievanceForJudge(
        grievance_id="g3",
        category=Category(category),
        text="The Raita container leaked inside the delivery bag.",
        item_name="Raita",
        item_quantity=1,
    )
    return roles.build_judge_request(
        grievance, freeze(ORDER).data, prompt=roles.load_prompt(roles.JUDGE_PROMPT_VERSION)
    )


async def ask(client: LlmClient, request: roles.LlmRequest, seed: int | None, dispute: str) -> str:
    answer = await client.complete_json(
        request.messages, request.schema_name, request.schema, seed, dispute
    )
    return answer.text


# --------------------------------------------------------------------------- cache


def test_put_if_absent_race_has_one_winner(redis_url: str) -> None:
    prefix = f"test-llm-cache-{uuid.uuid4().hex}:"

    async def scenario() -> list[tuple[str, str, str | None]]:
        replica_a, replica_b = Redis.from_url(redis_url), Redis.from_url(redis_url)
        cache_a = RedisResponseCache(replica_a, prefix=prefix, ttl_seconds=60)
        cache_b = RedisResponseCache(replica_b, prefix=prefix, ttl_seconds=60)
        try:
            outcomes = []
            for index in range(25):
                key = f"k{index}"
                won_a, won_b = await asyncio.gather(
                    cache_a.put_if_absent(key, f"answer-a-{index}"),
                    cache_b.put_if_absent(key, f"answer-b-{index}"),
                )
                outcomes.append((won_a, won_b, await cache_a.get(key)))
            return outcomes
        finally:
            keys = [key async for key in replica_a.scan_iter(match=f"{prefix}*")]
            if keys:
                await replica_a.delete(*keys)
            await replica_a.aclose()
            await replica_b.aclose()

    for index, (won_a, won_b, stored) in enumerate(run(scenario)):
        assert won_a == won_b == stored
        assert stored in (f"answer-a-{index}", f"answer-b-{index}")


def test_racing_replicas_may_both_compute_but_keep_one_answer_and_a_replay_computes_nothing(
    redis_url: str,
) -> None:
    prefix = f"test-llm-cache-{uuid.uuid4().hex}:"
    key = judge_cache_key("dispute:1", "g1", 2, "m", sha256_hex("snapshot"), "judge/v1", "i")
    computed: list[str] = []
    outcomes: list[CallOutcome] = []

    async def scenario() -> tuple[list[tuple[str, bool]], tuple[str, bool]]:
        both_missed = asyncio.Event()

        def compute_as(value: str) -> Callable[[], Awaitable[str]]:
            async def compute() -> str:
                computed.append(value)
                if len(computed) == 2:
                    both_missed.set()
                # Neither replica stores before both have missed (a call is only computed
                # after a miss): the race is on the store, whichever task the loop runs first.
                async with asyncio.timeout(10):
                    await both_missed.wait()
                return value

            return compute

        replica_a, replica_b = Redis.from_url(redis_url), Redis.from_url(redis_url)
        cache_a = RedisResponseCache(replica_a, prefix=prefix, ttl_seconds=60)
        cache_b = RedisResponseCache(replica_b, prefix=prefix, ttl_seconds=60)
        try:
            racing = await asyncio.gather(
                cached_call(cache_a, key, compute_as("ruling-a"), outcomes.append),
                cached_call(cache_b, key, compute_as("ruling-b"), outcomes.append),
            )
            replay = await cached_call(cache_a, key, compute_as("ruling-c"), outcomes.append)
            return list(racing), replay
        finally:
            await replica_a.delete(prefix + key)
            await replica_a.aclose()
            await replica_b.aclose()

    racing, replay = run(scenario)
    assert racing[0][0] == racing[1][0] == replay[0]
    assert sorted(from_cache for _, from_cache in racing) == [False, True]
    assert replay[1] is True
    assert sorted(computed) == ["ruling-a", "ruling-b"]  # the replay did not compute
    # Both answers were paid for, the one thrown away too; the replay drew none.
    assert sorted(outcomes) == ["cached", "made", "made"]


@pytest.mark.parametrize("first", ["refusal", "answer"])
def test_a_refusal_and_an_answer_racing_for_one_key_end_the_same_for_both(
    redis_url: str, first: str
) -> None:
    """One replica's request is refused while another's is answered (a rebalance handed the
    batch over mid-call): whichever is stored first is what both callers end with."""
    prefix = f"test-llm-cache-{uuid.uuid4().hex}:"
    key = judge_cache_key("dispute:1", "g1", 0, "m", sha256_hex("snapshot"), "judge/v2", "i")

    async def scenario() -> list[str]:
        redis = Redis.from_url(redis_url)
        cache = RedisResponseCache(redis, prefix=prefix, ttl_seconds=60)
        both_missed, first_done = asyncio.Event(), asyncio.Event()
        started: list[str] = []

        async def compute(outcome: str) -> str:
            started.append(outcome)
            if len(started) == 2:
                both_missed.set()
            await (both_missed.wait() if outcome == first else first_done.wait())
            if outcome == "refusal":
                raise LlmRejected(400, "prompt too long for the context window")
            return "ruling-b"

        async def call(outcome: str) -> str:
            try:
                answer, _ = await cached_call(
                    cache, key, lambda: compute(outcome), keep_refusals=True
                )
                return answer
            except RefusedBefore as exc:
                return f"refused: {exc}"
            finally:
                if outcome == first:
                    first_done.set()

        try:
            return list(await asyncio.gather(call("refusal"), call("answer")))
        finally:
            await redis.delete(prefix + key)
            await redis.aclose()

    ended = run(scenario)
    expected = "refused: HTTP 400" if first == "refusal" else "ruling-b"
    assert [e[: len(expected)] for e in ended] == [expected, expected]


# --------------------------------------------------------------------------- rate limiter


class CallersSleep:
    """An injected sleep that really sleeps, recording the delays each caller (task) asked for."""

    def __init__(self) -> None:
        self.by_caller: dict[int, list[float]] = {}

    async def __call__(self, seconds: float) -> None:
        self.by_caller.setdefault(id(asyncio.current_task()), []).append(seconds)
        await asyncio.sleep(seconds)

    def longest_total(self) -> float:
        """The most any one caller was told to wait, all its sleeps added up."""
        return max((sum(delays) for delays in self.by_caller.values()), default=0.0)


def _bucket_elapsed(redis_url: str, acquisitions: int, replicas: int, **options: Any) -> float:
    name = f"test-bucket-{uuid.uuid4().hex}"

    async def scenario() -> float:
        clients = [Redis.from_url(redis_url) for _ in range(replicas)]
        buckets = [
            RedisTokenBucket(client, name, rate_per_second=10, burst=5, **options)
            for client in clients
        ]
        try:
            started = time.monotonic()
            await asyncio.gather(
                *(buckets[index % replicas].acquire() for index in range(acquisitions))
            )
            return time.monotonic() - started
        finally:
            await clients[0].delete(buckets[0].key)
            for client in clients:
                await client.aclose()

    return run(scenario)


# 20 tokens at 10/s with a burst of 5: 5 at once, then 15 more at 0.1 s each, so the last
# caller waits about 1.5 s. The wall clock bounds only from below (a slow machine makes it
# longer, never shorter). That the bucket makes no caller wait longer than that is read from the
# sleeps it asked for (1.7 s: rounding and the polls' margin), which a slow machine only shortens,
# as the bucket refills while the callers are late.


def test_token_bucket_limits_the_rate_across_replicas(redis_url: str) -> None:
    sleep = CallersSleep()
    elapsed = _bucket_elapsed(redis_url, acquisitions=20, replicas=2, sleep=sleep)
    assert elapsed >= 1.4
    assert 0 < sleep.longest_total() <= 1.7, sleep.by_caller


def test_token_bucket_without_credit_polls_and_still_limits(redis_url: str) -> None:
    sleep = CallersSleep()
    elapsed = _bucket_elapsed(
        redis_url, acquisitions=20, replicas=1, max_wait_seconds=0, sleep=sleep
    )
    assert elapsed >= 1.4
    assert 0 < sleep.longest_total() <= 1.7, sleep.by_caller


def test_token_bucket_serves_the_burst_at_once(redis_url: str) -> None:
    sleep = RecordedSleep()
    _bucket_elapsed(redis_url, acquisitions=5, replicas=1, sleep=sleep)
    assert sleep.delays == [], "the burst's tokens were there: no acquisition had to wait"


def test_acquire_sleeps_what_the_bucket_says(redis_url: str) -> None:
    name = f"test-bucket-{uuid.uuid4().hex}"
    sleep = RecordedSleep()

    async def scenario() -> None:
        client = Redis.from_url(redis_url)
        bucket = RedisTokenBucket(client, name, rate_per_second=10, burst=1, sleep=sleep)
        try:
            await bucket.acquire()
            await bucket.acquire()
        finally:
            await client.delete(bucket.key)
            await client.aclose()

    run(scenario)
    assert len(sleep.delays) == 1
    assert 0.05 <= sleep.delays[0] <= 0.1


# --------------------------------------------------------------------------- client


def test_client_retries_429_then_succeeds(standin: Standin) -> None:
    """Each retry is counted for the SREs by what failed (``llm_rate_limited``)."""
    standin.faults(next_faults=["429", "429"])
    limiter, sleep = CountingLimiter(), RecordedSleep()
    dispute = f"d-{uuid.uuid4().hex[:8]}"
    registry = CollectorRegistry()

    async def scenario() -> str:
        async with LlmClient(
            endpoint(standin),
            rate_limiter=limiter,
            retry=RetryPolicy(attempts=5),
            sleep=sleep,
            on_retry=retry_counter(PrometheusMetrics("judge", registry)),
        ) as client:
            return await ask(client, judge_request(), 1000, dispute)

    ruling = roles.parse_judge_ruling(run(scenario))
    assert ruling.ruling == Ruling.ESCALATE
    stats = standin.stats()
    assert stats["by_dispute"][dispute] == 3
    assert stats["faults_injected"] == {"429": 2}
    assert limiter.acquired == 3  # a token before every attempt
    assert len(sleep.delays) == 2
    assert 1.0 <= sleep.delays[0] <= 1.5
    assert 2.0 <= sleep.delays[1] <= 2.5
    retries = {"stage": "judge", "topic": "", "kind": "llm_rate_limited"}
    assert registry.get_sample_value("refund_bench_retries_total", retries) == 2


def test_client_gives_up_on_persistent_429_with_a_transient_error(standin: Standin) -> None:
    standin.faults(rate_429=1.0)
    sleep = RecordedSleep()

    async def scenario() -> str:
        async with LlmClient(
            endpoint(standin), retry=RetryPolicy(attempts=3), sleep=sleep
        ) as client:
            return await ask(client, judge_request(), 1000, "d-429")

    with pytest.raises(LlmUnavailable) as caught:
        run(scenario)
    assert isinstance(caught.value, TransientError)
    assert (caught.value.kind, caught.value.status) == ("rate_limited", 429)
    assert standin.stats()["by_dispute"]["d-429"] == 3


def _retried_after(
    status: int, retry_after: str, policy: RetryPolicy, attempt_deadline: float | None = None
) -> float:
    """Seconds (on a real clock) a call takes whose first attempt gets ``status`` with
    ``Retry-After: retry_after`` and whose second gets an answer; with ``policy``'s backoff."""
    target = endpoint_at(0, timeout=5)

    async def scenario(port: int) -> str:
        at = target.model_copy(
            update={
                "base_url": f"http://127.0.0.1:{port}/v1",
                "attempt_deadline_seconds": attempt_deadline,
            }
        )
        async with LlmClient(at, retry=policy) as client:
            return await ask(client, judge_request(), 1000, "d-retry-after")

    body = completion('{"ruling": "ESCALATE"}')
    headers = {"Retry-After": retry_after}
    with FixedAnswerServer(body, statuses=[status], status_headers=headers) as server:
        started = time.monotonic()
        run(lambda: scenario(server.port))
        elapsed = time.monotonic() - started
    assert len(server.requests) == 2
    return elapsed


QUICK = RetryPolicy(attempts=2, base_seconds=0.01, max_seconds=0.01, jitter_seconds=0.01)
"""Backoff of a hundredth of a second: a longer wait is the Retry-After's."""


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_waits_as_long_as_the_endpoint_asks(status: int) -> None:
    """``Retry-After: 1`` on a 429 or 503: the next attempt comes a second later, not after
    the backoff's hundredth of one. The wait was ignored, so a rate-limited endpoint was asked
    again at once, and a call used up its attempts while the limit still held."""
    elapsed = _retried_after(status, "1", QUICK)
    assert 1.0 <= elapsed < 3.0


def test_a_retry_after_given_as_a_date_is_waited_for() -> None:
    """An HTTP-date two seconds ahead (dates have whole seconds): more than a second."""
    elapsed = _retried_after(429, formatdate(time.time() + 2, usegmt=True), QUICK)
    assert 1.0 <= elapsed < 4.0


@pytest.mark.parametrize(
    ("policy", "deadline", "least"),
    [
        pytest.param(replace(QUICK, max_retry_after_seconds=0.6), None, 0.6, id="policy cap"),
        pytest.param(QUICK, 0.6, 0.6, id="attempt deadline"),
    ],
)
def test_a_retry_after_beyond_the_cap_waits_the_cap(
    policy: RetryPolicy, deadline: float | None, least: float
) -> None:
    """An hour asked for is waited no longer than the policy's cap, nor than an attempt may
    take: a stage never sits on a call for the endpoint's whole hour."""
    elapsed = _retried_after(429, "3600", policy, deadline)
    assert least <= elapsed < least + 2.0


def test_a_retry_after_on_another_status_or_unreadable_is_backoff_only() -> None:
    # Obeyed, "5" would take 5 s: a bound well under it, with room for a busy machine.
    assert _retried_after(500, "5", QUICK) < 3.0
    assert _retried_after(429, "soon", QUICK) < 3.0


def test_server_errors_are_transient_and_retried(standin: Standin) -> None:
    standin.faults(next_faults=["5xx"])
    sleep = RecordedSleep()

    async def scenario() -> str:
        async with LlmClient(endpoint(standin), sleep=sleep) as client:
            return await ask(client, judge_request(), 1001, "d-5xx")

    roles.parse_judge_ruling(run(scenario))
    assert standin.stats()["faults_injected"] == {"5xx": 1}
    assert len(sleep.delays) == 1


HANG_S = 60.0
"""How long the stand-in's 'timeout' fault hangs here: far beyond the clients' own timeouts,
so that a bound well below it tells a client that gave up from one that waited the hang out,
however slow the machine."""


def test_timeouts_become_transient_errors(standin: Standin) -> None:
    standin.faults(next_faults=["timeout"], timeout_seconds=HANG_S)

    async def scenario() -> str:
        async with LlmClient(
            endpoint(standin, timeout=0.3), retry=RetryPolicy(attempts=1)
        ) as client:
            return await ask(client, judge_request(), 1000, "d-timeout")

    started = time.monotonic()
    with pytest.raises(TransientError) as caught:
        run(scenario)
    assert time.monotonic() - started < HANG_S / 2, "the client gave up at its own 0.3 s timeout"
    assert isinstance(caught.value, LlmUnavailable)
    assert caught.value.kind == "timeout"


def test_a_timeout_is_retried_like_any_transient_error(standin: Standin) -> None:
    standin.faults(next_faults=["timeout"], timeout_seconds=HANG_S)

    async def scenario() -> str:
        # 1 s: the retry, which the stand-in answers, must be answered within it
        async with LlmClient(
            endpoint(standin, timeout=1.0), retry=RetryPolicy(attempts=2), sleep=sleep
        ) as client:
            return await ask(client, judge_request(), 1000, "d-timeout-2")

    sleep = RecordedSleep()
    started = time.monotonic()
    roles.parse_judge_ruling(run(scenario))
    assert time.monotonic() - started < HANG_S / 2, "the client gave up at its own 1 s timeout"
    assert len(sleep.delays) == 1, "one backoff before the second attempt"
    assert standin.stats()["by_dispute"]["d-timeout-2"] == 2


def test_connection_refused_is_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = endpoint_at(port, timeout=2)

    async def scenario() -> str:
        async with LlmClient(dead, retry=RetryPolicy(attempts=2), sleep=RecordedSleep()) as c:
            return await ask(c, judge_request(), 1000, "d-dead")

    with pytest.raises(LlmUnavailable) as caught:
        run(scenario)
    assert caught.value.kind == "connection"


def test_a_judge_at_temperature_zero_is_rejected_without_retry(standin: Standin) -> None:
    sleep = RecordedSleep()

    async def scenario() -> str:
        async with LlmClient(endpoint(standin, temperature=0.0), sleep=sleep) as client:
            return await ask(client, judge_request(), 1000, "d-temp0")

    with pytest.raises(LlmRejected) as caught:
        run(scenario)
    assert caught.value.status == 400
    assert "temperature > 0" in caught.value.message
    assert not isinstance(caught.value, TransientError)
    assert sleep.delays == []
    assert standin.stats()["by_dispute"]["d-temp0"] == 1


def test_a_malformed_answer_raises_on_parse(standin: Standin) -> None:
    standin.faults(next_faults=["malformed"])

    async def scenario() -> str:
        async with LlmClient(endpoint(standin)) as client:
            return await ask(client, judge_request(), 1000, "d-malformed")

    raw = run(scenario)
    with pytest.raises(roles.MalformedAnswer) as caught:
        roles.parse_judge_ruling(raw)
    assert caught.value.raw == raw
    assert "not JSON" in caught.value.reason


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"choices": []}', "no choices"),
        (completion('{"ruling": "UP', "length"), "cut short (finish_reason is 'length')"),
        (completion('{"ruling": "UPHELD"}', "content_filter"), "withheld"),
        (completion(None, "stop"), "empty"),
        (completion(None, "eos_token"), "empty"),
    ],
)
def test_a_200_that_is_no_usable_completion_is_malformed_and_not_retried(
    body: bytes, reason: str
) -> None:
    sleep = RecordedSleep()

    async def scenario(target: LlmEndpoint) -> str:
        async with LlmClient(target, sleep=sleep) as client:
            return await ask(client, judge_request(), 1000, "d-200")

    with FixedAnswerServer(body) as server, pytest.raises(roles.MalformedAnswer) as caught:
        run(lambda: scenario(endpoint_at(server.server_address[1], timeout=5)))
    assert reason in caught.value.reason
    assert sleep.delays == []
    assert len(server.requests) == 1
    path, content_type, sent = server.requests[0]
    assert path == "/v1/chat/completions", "the endpoint under the base URL, as the client's own"
    assert content_type == "application/json"
    request = json.loads(sent)
    assert request["seed"] == 1000
    assert request["response_format"]["json_schema"]["strict"] is True


@pytest.mark.parametrize("finish_reason", ["stop", "eos_token", "stop_sequence", "end_turn", None])
def test_a_whole_answer_is_read_whatever_else_ends_it(finish_reason: str | None) -> None:
    """Endpoints name a normal end in their own words (TGI's ``eos_token``, a gateway's
    ``null``): only ``length`` and ``content_filter`` say the text is not the whole answer, so
    any other answer is read at its one call, by every role alike."""
    content = '{"ruling": "UPHELD", "confidence": 0.9}'
    sleep = RecordedSleep()

    async def scenario(target: LlmEndpoint) -> str:
        async with LlmClient(target, sleep=sleep) as client:
            return await ask(client, judge_request(), 1000, "d-200-ended")

    with FixedAnswerServer(completion(content, finish_reason)) as server:
        answer = run(lambda: scenario(endpoint_at(server.server_address[1], timeout=5)))
    assert answer == content
    assert len(server.requests) == 1
    assert sleep.delays == []


@pytest.mark.parametrize("body", [b"<html>gateway</html>", b'{"object": "chat.completion"}'])
def test_a_200_that_is_no_chat_completion_is_transient_and_retried(body: bytes) -> None:
    """A gateway's page or a cut-off body says nothing of the model's answer: retried, and in
    the end a transient error (which nothing caches), never a malformed answer."""
    sleep = RecordedSleep()

    async def scenario(target: LlmEndpoint) -> str:
        async with LlmClient(target, retry=RetryPolicy(attempts=3), sleep=sleep) as client:
            return await ask(client, judge_request(), 1000, "d-200-page")

    with FixedAnswerServer(body) as server, pytest.raises(LlmUnavailable) as caught:
        run(lambda: scenario(endpoint_at(server.server_address[1], timeout=5)))
    assert caught.value.kind == "server_error"
    assert caught.value.status == 200
    assert "not a chat completion" in str(caught.value)
    assert len(server.requests) == 3, "every attempt was made"
    assert len(sleep.delays) == 2


class _TrickledAnswer(JsonAnswerHandler):
    """Answers a POST with a whole completion, one byte every ``server.pace`` seconds: each
    read is quick, the whole answer is not."""

    server: _TrickleServer

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = completion('{"ruling": "ESCALATE"}', "stop")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for byte in body:
                if self.server.done.wait(self.server.pace):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:  # the client gave up and closed the connection
            return


class _TrickleServer(LoopbackServer):
    def __init__(self, pace: float) -> None:
        super().__init__(_TrickledAnswer)
        self.pace = pace
        self.done = threading.Event()

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        super().__exit__(*exc)


def test_an_answer_trickling_in_is_cut_off_at_the_attempt_deadline() -> None:
    """Each byte comes well within the 2 s read timeout, but the whole answer would take over
    10 s: the attempt's 1 s deadline ends it as a transient timeout."""

    async def scenario(target: LlmEndpoint) -> str:
        async with LlmClient(target, retry=RetryPolicy(attempts=1)) as client:
            return await ask(client, judge_request(), 1000, "d-trickle")

    with _TrickleServer(pace=0.1) as server:
        target = endpoint_at(server.server_address[1], timeout=2.0).model_copy(
            update={"attempt_deadline_seconds": 1.0}
        )
        started = time.monotonic()
        with pytest.raises(LlmUnavailable) as caught:
            run(lambda: scenario(target))
        took = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert took < 8, f"gave up after {took:.1f} s, not at the 1 s deadline"


@pytest.mark.parametrize("status", [401, 400, 503])
def test_an_api_key_the_endpoint_echoes_is_not_in_the_error(status: int) -> None:
    """A proxy that quotes the key it was sent ("invalid key sk-...") in its error: the error
    the stage logs, caches as a refusal's reason and shows to reviewers holds no copy of it."""
    key = "sk-live-" + uuid.uuid4().hex
    body = json.dumps({"error": {"message": f"invalid key {key} for this project"}}).encode()

    async def scenario(target: LlmEndpoint) -> str:
        async with LlmClient(target, retry=RetryPolicy(attempts=1)) as client:
            return await ask(client, judge_request(), 1000, "d-echo")

    with FixedAnswerServer(body, statuses=[status]) as server:
        target = endpoint_at(server.server_address[1], timeout=5).model_copy(
            update={"api_key": SecretStr(key)}
        )
        with pytest.raises((LlmRejected, LlmUnavailable)) as caught:
            run(lambda: scenario(target))
    assert server.credentials == [f"Bearer {key}"]
    assert key not in str(caught.value)
    assert "invalid key [API key] for this project" in str(caught.value)
    if isinstance(caught.value, LlmRejected):
        assert key not in caught.value.message


def test_a_retried_call_sends_the_same_request_each_attempt() -> None:
    answer = completion('{"ruling": "ESCALATE"}', "stop")
    sleep = RecordedSleep()

    async def scenario(target: LlmEndpoint) -> list[str]:
        async with LlmClient(target, retry=RetryPolicy(attempts=3), sleep=sleep) as client:
            first = await ask(client, judge_request(), 1000, "d-retried")
            second = await ask(client, judge_request(), 1001, "d-next")
            return [first, second]

    with FixedAnswerServer(answer, statuses=[503, 502]) as server:
        answers = run(lambda: scenario(endpoint_at(server.server_address[1], timeout=5)))
    assert answers == ['{"ruling": "ESCALATE"}'] * 2
    assert len(sleep.delays) == 2, "two server errors, two backoffs"
    assert len(server.requests) == 4
    first, second, third, fourth = server.requests
    assert first == second == third, "every attempt of a call resends its request unchanged"
    assert json.loads(third[2])["seed"] == 1000
    assert json.loads(fourth[2])["seed"] == 1001, "the next call sends its own body"
    assert server.disputes == ["d-retried"] * 3 + ["d-next"]
    assert server.credentials == ["Bearer k"] * 4, "the key goes with every request"


class _HeldAnswer(JsonAnswerHandler):
    """Keeps connections alive (HTTP/1.1) and answers a POST only once ``server.together``
    requests are inside at the same time; records the client port of each request."""

    protocol_version = "HTTP/1.1"
    server: _HeldAnswerServer

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.ports.append(self.client_address[1])
        self.server.together.wait()  # raises BrokenBarrierError after its timeout
        self.answer_json(200, completion('{"ruling": "ESCALATE"}', "stop"))


class _HeldAnswerServer(LoopbackServer):
    def __init__(self, together: int) -> None:
        super().__init__(_HeldAnswer)
        self.together = threading.Barrier(together, timeout=10)
        self.ports: list[int] = []


def test_llm_max_connections_caps_the_connections_a_client_opens(redis_url: str) -> None:
    """12 concurrent calls through a client built from settings with LLM_MAX_CONNECTIONS=3:
    three at a time reach the server (it answers only when three are inside), over exactly
    three kept-alive connections. The default (128) would open twelve."""

    async def scenario(port: int) -> list[str]:
        settings = llm_setup.JudgePanelSettings.model_validate(
            {
                "llm_base_url": f"http://127.0.0.1:{port}/v1",
                "llm_max_connections": 3,
                "redis_url": redis_url,
                "llm_rate_limit_name": f"test-{uuid.uuid4().hex}",
            }
        )
        redis = Redis.from_url(redis_url)
        try:
            async with llm_setup.client(settings, model="m", temperature=0.7, redis=redis) as llm:
                request = judge_request()
                calls = (ask(llm, request, seed, f"d-pool-{seed}") for seed in range(12))
                return list(await asyncio.gather(*calls))
        finally:
            await redis.aclose()

    with _HeldAnswerServer(together=3) as server:
        answers = run(lambda: scenario(server.server_address[1]))
    assert answers == ['{"ruling": "ESCALATE"}'] * 12
    assert len(server.ports) == 12
    assert len(set(server.ports)) == 3


def test_inflight_gauge_rises_and_returns_to_zero(standin: Standin) -> None:
    standin.faults(latency_ms=100)
    seen: list[int] = []

    async def scenario() -> list[str]:
        async with LlmClient(endpoint(standin), on_inflight=seen.append) as client:
            request = judge_request()
            return list(
                await asyncio.gather(*(ask(client, request, seed, "d-gauge") for seed in range(8)))
            )

    assert len(run(scenario)) == 8
    assert max(seen) >= 2
    assert seen[-1] == 0


def test_the_standin_gives_the_articles_answers_to_the_real_prompts(standin: Standin) -> None:
    """The article's dispute asked role by role with the shipped prompts: four grievances, the
    2-1 split on g3 and a reply naming the amount once (the stages' own count of 14 calls is
    the end-to-end test's)."""
    dispute = f"d-article-{uuid.uuid4().hex[:8]}"
    snapshot = freeze(ORDER)

    async def scenario() -> tuple[roles.Extraction, dict[str, list[roles.JudgeAnswer]], str]:
        judge_endpoint = endpoint(standin)
        settler_endpoint = endpoint(standin, temperature=0.2)
        async with LlmClient(judge_endpoint) as judges, LlmClient(settler_endpoint) as settler:
            extraction_request = roles.build_extractor_request(
                ARTICLE_COMPLAINT,
                ORDER.line_items,
                prompt=roles.load_prompt(roles.EXTRACTOR_PROMPT_VERSION),
            )
            extraction = roles.parse_extraction(
                await ask(settler, extraction_request, None, dispute),
                complaint_text=ARTICLE_COMPLAINT,
                line_item_names=[item.name for item in ORDER.line_items],
            )
            judge_prompt = roles.load_prompt(roles.JUDGE_PROMPT_VERSION)
            rulings: dict[str, list[roles.JudgeAnswer]] = {}
            for index, found in enumerate(extraction.grievances, start=1):
                request = roles.build_judge_request(
                    roles.GrievanceForJudge(
                        grievance_id=f"g{index}",
                        category=found.category,
                        text=found.text,
                        item_name=found.item_name,
                        item_quantity=found.item_quantity,
                    ),
                    snapshot.data,
                    prompt=judge_prompt,
                )
                answers = await asyncio.gather(
                    *(ask(judges, request, seed, dispute) for seed in SEATS)
                )
                rulings[f"g{index}"] = [roles.parse_judge_ruling(raw) for raw in answers]
            reply_request = roles.build_settler_request(
                ARTICLE_COMPLAINT,
                "INR 689",
                [
                    roles.ResolvedForReply(
                        category=Category.MISSING_ITEM, text="g2", outcome="PAY"
                    ),
                    roles.ResolvedForReply(
                        category=Category.LATE_DELIVERY, text="g1", outcome="PAY"
                    ),
                ],
                [roles.HeldForReply(category=Category.PACKAGING, text="g3")],
                prompt=roles.load_prompt(roles.SETTLER_PROMPT_VERSION),
            )
            reply = roles.parse_customer_reply(await ask(settler, reply_request, None, dispute))
            return extraction, rulings, reply.reply

    extraction, rulings, reply = run(scenario)
    assert [g.category.value for g in extraction.grievances] == [
        "LATE_DELIVERY",
        "MISSING_ITEM",
        "PACKAGING",
        "PARTNER_CONDUCT",
    ]
    assert [r.ruling.value for r in rulings["g1"]] == ["UPHELD"] * 3
    assert [r.ruling.value for r in rulings["g2"]] == ["UPHELD"] * 3
    assert [r.ruling.value for r in rulings["g3"]] == ["ESCALATE", "ESCALATE", "UPHELD"]
    assert reply.count("INR 689") == 1
    stats = standin.stats()
    assert stats["by_dispute"][dispute] == 14
    assert stats["by_role"] == {"extractor": 1, "judge": 12, "settler": 1}


def test_standin_speaks_enough_openai_for_plain_http(standin: Standin) -> None:
    request = judge_request()
    body = {
        "model": "m",
        "messages": list(request.messages),
        "temperature": 0.5,
        "seed": 1000,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": request.schema_name, "strict": True, "schema": request.schema},
        },
    }
    response = standin.admin.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    completion = response.json()
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["choices"][0]["message"]["role"] == "assistant"
    assert json.loads(completion["choices"][0]["message"]["content"])["ruling"] == "ESCALATE"
    assert set(completion["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert standin.admin.get("/v1/models").json()["data"][0]["object"] == "model"

    standin.admin.post("/admin/reset").raise_for_status()
    assert standin.stats()["total_calls"] == 0
