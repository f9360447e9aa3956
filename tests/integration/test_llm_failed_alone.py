"""A request the endpoint keeps failing while it answers the others, against the real LLM stand-in
(``fail_disputes``: every request of one role for one dispute answered 500), Redis and
PostgreSQL.

Such a request is given up on, after three calls, as failing alone: the judge's seat rules
ESCALATE (``NO_ANSWER``), the extractor holds the complaint for review, and the outcome is
cached, so a redelivery neither asks again nor decides otherwise. An outage, where nothing
else is answered either, is raised as the endpoint's failure on every call, as before: the
stage pauses instead of sending every input to a person.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from refund_bench import topics as t
from refund_bench.domain import Category
from refund_bench.errors import TransientError
from refund_bench.llm import roles
from refund_bench.llm.cache import (
    CallOutcome,
    InFlight,
    RedisResponseCache,
    RefusedBefore,
    cached_call,
)
from refund_bench.llm.client import (
    DISPUTE_HEADER,
    FAILED_ALONE,
    LlmClient,
    LlmEndpoint,
    LlmFailedAlone,
    LlmUnavailable,
    failed_alone,
)
from refund_bench.resources import pg_pool
from refund_bench.retry import RetryPolicy
from refund_bench.runtime import Context, Emit, Message
from refund_bench.samples import ARTICLE_ORDER
from services.extractor.evidence import freeze
from services.extractor.handler import NO_ANSWER_REASON, ExtractorHandler
from services.judge.handler import JudgeHandler, Seat
from tests.fakes.chat_completion import completion
from tests.fakes.loopback import JsonAnswerHandler, LoopbackServer
from tests.fakes.tcp_proxy import TcpProxy
from tests.grievances import complaint_message, grievance_message
from tests.standin import Standin

pytestmark = pytest.mark.stack

T = TypeVar("T")

DELIVERIES = 6
"""Deliveries a test makes at most before the handler must have given up (it takes three
calls of each request, one per delivery)."""


def _request() -> roles.LlmRequest:
    """A judge's request about the article's order (any request the stand-in answers)."""
    grievance = roles.GrievanceForJudge(
        grievance_id="g1",
        category=Category.LATE_DELIVERY,
        text="The order arrived well after the promised time.",
        item_name=None,
        item_quantity=None,
    )
    prompt = roles.load_prompt(roles.JUDGE_PROMPT_VERSION)
    return roles.build_judge_request(grievance, freeze(ARTICLE_ORDER).data, prompt=prompt)


class AnswerOthersWhileWaiting:
    """The client's wait between attempts: instead of sleeping, it asks ``per_wait`` requests
    of other disputes through the same client, which the stand-in answers. So while a failing
    request is retried, the endpoint answers others, as it would under real traffic. A wait
    inside one of those requests' own retries asks nothing (no recursion)."""

    def __init__(self, per_wait: int) -> None:
        self.per_wait = per_wait
        self.client: LlmClient | None = None
        self.asked = 0
        self.then: Callable[[], None] | None = None
        """Called once, after the next wait's requests (then forgotten)."""
        self._asking = False

    async def __call__(self, _seconds: float) -> None:
        if self.client is None or self._asking:
            return
        self._asking = True
        request = _request()
        try:
            for _ in range(self.per_wait):
                self.asked += 1
                await self.client.complete_json(
                    request.messages,
                    request.schema_name,
                    request.schema,
                    self.asked,
                    f"d-other-{uuid.uuid4().hex[:8]}",
                )
        finally:
            self._asking = False
        then, self.then = self.then, None
        if then is not None:
            then()


async def _noop_sleep(_seconds: float) -> None:
    return None


def _endpoint(base_url: str) -> LlmEndpoint:
    """A judge seat's endpoint at ``base_url``."""
    return LlmEndpoint(
        base_url=base_url,
        api_key=SecretStr("stand-in"),
        model="standin-judge",
        temperature=0.7,
        timeout_seconds=5,
    )


async def _asked(client: LlmClient, dispute: str, times: int) -> list[BaseException]:
    """What each of ``times`` calls of the judge request of ``dispute`` raised, in order
    (nothing for a call answered)."""
    request = _request()
    raised: list[BaseException] = []
    for _ in range(times):
        try:
            await client.complete_json(
                request.messages, request.schema_name, request.schema, 7, dispute
            )
        except (LlmUnavailable, LlmFailedAlone) as exc:
            raised.append(exc)
    return raised


def _client_of(standin: Standin, sleep: Callable[[float], Awaitable[None]]) -> LlmClient:
    """A client of the stand-in whose retries (two attempts per call) wait with ``sleep``."""
    client = LlmClient(_endpoint(standin.base_url), retry=RetryPolicy(attempts=2), sleep=sleep)
    if isinstance(sleep, AnswerOthersWhileWaiting):
        sleep.client = client
    return client


def _dispute() -> str:
    return f"d-poison-{uuid.uuid4().hex[:8]}"


def _run(coro: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro()

    return asyncio.run(main())


async def _cached_calls(
    cache: RedisResponseCache,
    client: LlmClient,
    dispute: str,
    calls: int,
    outcomes: list[CallOutcome],
    before: Callable[[int], None] = lambda _call: None,
    in_flight: InFlight | None = None,
) -> list[BaseException]:
    """What each of ``calls`` cached calls of one judge request of ``dispute`` raised (after
    ``before(n)`` for the n-th), refusals kept."""
    request = _request()

    async def compute() -> str:
        answer = await client.complete_json(
            request.messages, request.schema_name, request.schema, 1000, dispute
        )
        return answer.text

    raised: list[BaseException] = []
    for call in range(calls):
        before(call)
        try:
            await cached_call(
                cache,
                "judge-key",
                compute,
                outcomes.append,
                keep_refusals=True,
                in_flight=in_flight,
            )
        except (TransientError, RefusedBefore) as exc:
            raised.append(exc)
    return raised


def test_a_request_failed_alone_is_given_up_on_its_third_call_and_cached(
    redis_url: str, standin: Standin
) -> None:
    dispute = _dispute()
    standin.faults(fail_disputes={dispute: "judge"})
    outcomes: list[CallOutcome] = []

    async def go() -> list[BaseException]:
        redis = Redis.from_url(redis_url)
        cache = RedisResponseCache(redis, f"test-failed-alone-{uuid.uuid4().hex}:", 600)
        try:
            async with _client_of(standin, AnswerOthersWhileWaiting(per_wait=2)) as client:
                return await _cached_calls(cache, client, dispute, 4, outcomes)
        finally:
            await redis.aclose()

    raised = _run(go)

    assert [type(exc) for exc in raised] == [
        LlmUnavailable,
        LlmUnavailable,
        RefusedBefore,
        RefusedBefore,
    ]
    reason = str(raised[2])
    assert failed_alone(reason), reason
    assert "failed on 3 calls in a row" in reason
    assert "server_error: Error code: 500" in reason, "the last failure is named"
    assert str(raised[3]) == reason, "the cached reason, the same on every later call"
    assert outcomes == ["failed_alone", "cached"]
    assert standin.stats()["by_dispute"][dispute] == 6, "three calls of two attempts, no more"


def test_a_request_failed_alone_is_not_asked_again_when_its_outcome_could_not_be_stored(
    redis_url: str, standin: Standin
) -> None:
    """Redis is cut off (through a proxy) during the third failing call, so the write of its
    outcome fails and the call raises Redis's TransientError. The client has forgotten the
    request's count by then; the next call stores the outcome kept in the process instead of
    asking again, and it is counted once."""
    dispute = _dispute()
    standin.faults(fail_disputes={dispute: "judge"})
    outcomes: list[CallOutcome] = []
    parts = urlsplit(redis_url)

    async def go() -> list[BaseException]:
        async with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
            redis = Redis.from_url(urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}")))
            cache = RedisResponseCache(redis, f"test-failed-alone-{uuid.uuid4().hex}:", 600)
            sleep = AnswerOthersWhileWaiting(per_wait=2)

            def before(call: int) -> None:
                if call == 2:
                    sleep.then = proxy.cut  # during the third call
                if call == 3:
                    proxy.restore()

            try:
                async with _client_of(standin, sleep) as client:
                    return await _cached_calls(
                        cache, client, dispute, 4, outcomes, before, in_flight=InFlight()
                    )
            finally:
                await redis.aclose()

    raised = _run(go)

    assert [type(exc) for exc in raised] == [
        LlmUnavailable,
        LlmUnavailable,
        TransientError,
        RefusedBefore,
    ], raised
    assert getattr(raised[2], "dependency", None) == "redis"
    assert failed_alone(str(raised[3]))
    assert outcomes == ["failed_alone"]
    assert standin.stats()["by_dispute"][dispute] == 6, "not asked again after the third call"


class AnswerOthersBeforeTheFirstAttempt:
    """A rate limiter that, the first time it is asked for a token, first has ``count``
    requests of other disputes answered through the client: answers that come after the call
    began, but before its first attempt failed (as before an outage that begins just then)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.client: LlmClient | None = None
        self._used = False

    async def acquire(self) -> None:
        if self._used or self.client is None:
            return
        self._used = True
        request = _request()
        for n in range(self.count):
            await self.client.complete_json(
                request.messages, request.schema_name, request.schema, n, f"d-before-{n}"
            )


def test_answers_before_a_calls_first_failed_attempt_say_nothing_about_its_failure(
    standin: Standin,
) -> None:
    """Ten answers after the first call began, then none: the request's failures are an
    outage's for all the client can tell, and never counted as its own."""
    dispute = _dispute()
    standin.faults(fail_disputes={dispute: "judge"})

    async def go() -> list[BaseException]:
        limiter = AnswerOthersBeforeTheFirstAttempt(count=10)
        async with LlmClient(
            _endpoint(standin.base_url),
            rate_limiter=limiter,
            retry=RetryPolicy(attempts=2),
            sleep=_noop_sleep,
        ) as client:
            limiter.client = client
            return await _asked(client, dispute, 4)

    raised = _run(go)

    assert [type(exc) for exc in raised] == [LlmUnavailable] * 4
    assert standin.stats()["by_dispute"]["d-before-9"] == 1, "the ten were answered"


class _OneDisputeRefused(JsonAnswerHandler):
    """Answers every request, except those of ``server.dispute``, which get ``server.status``."""

    server: _OneDisputeRefusedServer

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get(DISPUTE_HEADER) == self.server.dispute:
            error = {"error": {"message": "try again later", "type": "server_error"}}
            self.answer_json(self.server.status, json.dumps(error).encode())
        else:
            self.answer_json(200, completion('{"ruling": "ESCALATE"}', "stop"))


class _OneDisputeRefusedServer(LoopbackServer):
    def __init__(self, dispute: str, status: int) -> None:
        super().__init__(_OneDisputeRefused)
        self.dispute = dispute
        self.status = status


@pytest.mark.parametrize("status", [500, 429])
def test_a_request_refused_on_every_attempt_while_others_are_answered_fails_alone(
    status: int,
) -> None:
    """One dispute's request answered 500, or 429 (OpenAI's "Request too large" for the
    account's tokens per minute is a 429 that no wait mends), on every attempt while the
    endpoint answers the others: the endpoint's failure on the first two calls, and given up
    on at the third, so that its partition does not wait for it for ever."""
    dispute = _dispute()

    async def go(base_url: str) -> list[BaseException]:
        waits = AnswerOthersWhileWaiting(per_wait=1)
        async with LlmClient(
            _endpoint(base_url), retry=RetryPolicy(attempts=2), sleep=waits
        ) as client:
            waits.client = client
            return await _asked(client, dispute, 3)

    with _OneDisputeRefusedServer(dispute, status) as server:
        raised = _run(lambda: go(f"http://127.0.0.1:{server.server_address[1]}/v1"))

    assert [type(exc) for exc in raised] == [LlmUnavailable, LlmUnavailable, LlmFailedAlone]


def test_the_client_raises_failed_alone_with_the_last_failure(standin: Standin) -> None:
    dispute = _dispute()
    standin.faults(fail_disputes={dispute: "judge"})

    async def go() -> list[BaseException]:
        async with _client_of(standin, AnswerOthersWhileWaiting(per_wait=1)) as client:
            return await _asked(client, dispute, 3)

    raised = _run(go)

    assert [type(exc) for exc in raised] == [LlmUnavailable, LlmUnavailable, LlmFailedAlone]
    assert str(raised[2]).startswith(FAILED_ALONE)
    assert isinstance(raised[2].__cause__, LlmUnavailable)


@pytest.mark.parametrize("outage", ["every request fails", "nothing else is asked"])
def test_an_outage_or_an_idle_stage_never_makes_a_request_fail_alone(
    standin: Standin, outage: str
) -> None:
    """Every request failing (the stand-in's 5xx rate at 1), four disputes asked at once, five
    rounds; or the failing request asked alone, five times: the endpoint's failure each time."""
    disputes = [_dispute() for _ in range(4)]
    if outage == "every request fails":
        standin.faults(rate_5xx=1.0)
    else:
        standin.faults(fail_disputes={disputes[0]: "judge"})
        disputes = disputes[:1]
    request = _request()

    async def go() -> list[BaseException]:
        async with _client_of(standin, _noop_sleep) as client:

            async def ask(dispute: str) -> str:
                answer = await client.complete_json(
                    request.messages, request.schema_name, request.schema, 7, dispute
                )
                return answer.text

            raised: list[BaseException] = []
            for _ in range(5):
                results = await asyncio.gather(*(ask(d) for d in disputes), return_exceptions=True)
                raised.extend(r for r in results if isinstance(r, BaseException))
            return raised

    raised = _run(go)

    assert len(raised) == 5 * len(disputes)
    assert all(type(exc) is LlmUnavailable for exc in raised), {type(e) for e in raised}


HandlerOf = Callable[[LlmClient, Redis, AsyncExitStack], Awaitable[JudgeHandler | ExtractorHandler]]
"""Builds a stage's handler on a client and the cache's Redis; what else it opens, it closes
on the exit stack."""


def _deliveries(
    standin: Standin, redis_url: str, handler_of: HandlerOf, message: Message
) -> tuple[Sequence[Emit], int]:
    """``message`` delivered to one handler, on one client (as in one process: the client
    remembers the requests failing between deliveries) that answers others while it waits,
    until the handler stops raising the endpoint's failure. Its outputs, and how many
    deliveries that took (at most :data:`DELIVERIES`)."""

    async def go() -> tuple[Sequence[Emit], int]:
        async with AsyncExitStack() as opened:
            redis = Redis.from_url(redis_url)
            opened.push_async_callback(redis.aclose)
            client = _client_of(standin, AnswerOthersWhileWaiting(per_wait=3))
            opened.push_async_callback(client.aclose)
            handler = await handler_of(client, redis, opened)
            for delivery in range(1, DELIVERIES + 1):
                try:
                    return await handler.handle(message, Context(None)), delivery
                except LlmUnavailable:
                    continue  # the runtime's retry of the handler
            raise AssertionError(f"still failing after {DELIVERIES} deliveries")

    return asyncio.run(go())


def _redelivered(
    standin: Standin, redis_url: str, handler_of: HandlerOf, message: Message
) -> Sequence[Emit]:
    """``message`` delivered once more, to a fresh handler and client (another process)."""

    async def go() -> Sequence[Emit]:
        async with AsyncExitStack() as opened:
            redis = Redis.from_url(redis_url)
            opened.push_async_callback(redis.aclose)
            client = _client_of(standin, _noop_sleep)
            opened.push_async_callback(client.aclose)
            handler = await handler_of(client, redis, opened)
            return await handler.handle(message, Context(None))

    return asyncio.run(go())


def test_a_judge_seat_the_endpoint_fails_alone_rules_escalate_on_every_delivery(
    redis_url: str, standin: Standin
) -> None:
    """All three seats' requests for the grievance fail: each seat rules ESCALATE
    (``NO_ANSWER``), and so would a redelivery, without asking."""
    dispute = _dispute()
    standin.faults(fail_disputes={dispute: "judge"})
    message = grievance_message(dispute)
    prefix = f"test-failed-alone-judge-{uuid.uuid4().hex}:"
    outcomes: list[CallOutcome] = []

    async def judge(_client: LlmClient, redis: Redis, opened: AsyncExitStack) -> JudgeHandler:
        # A client of its own per seat, as the stage has: each counts its own calls.
        clients = [_client_of(standin, AnswerOthersWhileWaiting(per_wait=3)) for _ in range(3)]
        for client in clients:
            opened.push_async_callback(client.aclose)
        seats = [Seat(index=i, llm=clients[i], seed=1000 + i) for i in range(3)]
        prompt = roles.load_prompt(roles.JUDGE_PROMPT_VERSION)
        return JudgeHandler(seats, RedisResponseCache(redis, prefix, 600), prompt, outcomes.append)

    emits, deliveries = _deliveries(standin, redis_url, judge, message)

    rulings = [e.value for e in emits]
    assert deliveries == 3, "three failing calls of each seat's request, one per delivery"
    assert [(r["judge_seat"], r["ruling"], r["model_ruling"]) for r in rulings] == [
        (seat, "ESCALATE", "NO_ANSWER") for seat in range(3)
    ]
    assert all(
        r["reasoning"].startswith("The model endpoint gave no answer to the request")
        for r in rulings
    ), rulings[0]["reasoning"]
    assert all(r["evidence_cited"] == [] and r["seed"] is None for r in rulings)
    assert outcomes.count("failed_alone") == 3
    calls = standin.stats()["by_dispute"][dispute]

    again = _redelivered(standin, redis_url, judge, message)

    assert [e.value["reasoning"] for e in again] == [r["reasoning"] for r in rulings]
    assert [e.value["model_ruling"] for e in again] == ["NO_ANSWER"] * 3
    assert standin.stats()["by_dispute"][dispute] == calls, "a redelivery asks nothing"


def test_a_complaint_the_endpoint_fails_alone_is_held_for_review_on_every_delivery(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute = _dispute()
    standin.faults(fail_disputes={dispute: "extractor"})
    message = complaint_message(dispute)
    prefix = f"test-failed-alone-extractor-{uuid.uuid4().hex}:"

    async def extractor(
        client: LlmClient, redis: Redis, opened: AsyncExitStack
    ) -> ExtractorHandler:
        pool = pg_pool(database)
        await pool.open()
        opened.push_async_callback(pool.close)
        prompt = roles.load_prompt(roles.EXTRACTOR_PROMPT_VERSION)
        return ExtractorHandler(pool, client, RedisResponseCache(redis, prefix, 600), prompt)

    emits, deliveries = _deliveries(standin, redis_url, extractor, message)

    assert deliveries == 3
    assert [e.topic for e in emits] == [t.REFUND_PRICED.name, t.COMPLAINT_EXTRACTED.name]
    priced, record = emits[0].value, emits[1].value
    assert (priced["decision"], priced["lines"]) == ("HELD_FOR_REVIEW", [])
    assert priced["reason"].startswith(f"{NO_ANSWER_REASON} ({FAILED_ALONE}"), priced["reason"]
    assert (record["outcome"], record["reason"], record["answers"]) == (
        "REFUSED",
        priced["reason"],
        [],
    )
    calls = standin.stats()["by_dispute"][dispute]

    again, _ = _redelivered(standin, redis_url, extractor, message)

    assert (again.value["decision"], again.value["reason"]) == ("HELD_FOR_REVIEW", priced["reason"])
    assert standin.stats()["by_dispute"][dispute] == calls, "a redelivery asks nothing"
