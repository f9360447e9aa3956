"""The OpenAI-compatible chat-completions adapter for one role (or one judge seat).

:class:`LlmClient` sends one structured-output request and returns the raw answer text, with
the model the endpoint says served it and its ``system_fingerprint`` (:class:`LlmAnswer`). It owns
the retry policy for the endpoint's transient failures (429, 5xx, timeouts, connection errors)
and takes a rate-limiter token before every attempt, so retries are paced like first tries. A
429 or 503 that says how long to wait (``Retry-After``: seconds or an HTTP-date) is waited for
at least that long before the next attempt, but no longer than the policy's cap (60 s) or the
endpoint's ``attempt_deadline_seconds``, whichever is less.
The openai client's own retries are switched off (``max_retries=0``): there is one retry loop,
:class:`refund_bench.retry.RetryPolicy`.

Error policy (by type, see :mod:`refund_bench.errors`):

- :class:`LlmUnavailable` (a :class:`TransientError`): 429, 408, 5xx, timeout, connection
  failure; raised only after the retry policy gave up.
- the rate limiter's :class:`TransientError` (``dependency="redis"``: its Redis out of reach) is
  retried by the same policy, before the next attempt, and raised as it is when it gives up.
- :class:`LlmRejected`: any other 4xx; the request itself is wrong (bad schema, temperature 0
  for a judge, auth). Not retried.
- :class:`LlmFailedAlone`: the endpoint failed this one request on every call while it
  answered the others (:mod:`refund_bench.llm.lone_failures`): not retried, since asking again
  fails again; the stages treat it like a refusal of the input.
- :class:`refund_bench.llm.roles.MalformedAnswer`: a 200 completion whose answer is empty,
  cut short or withheld (finish reason ``length`` or ``content_filter``; no other finish
  reason, nor none, makes an answer malformed), or holds a lone surrogate (no text at all). A
  200 that is no chat completion at all (a gateway's page, a cut-off body) is
  :class:`LlmUnavailable` instead: it says nothing about the model's answer, so it is retried,
  and never cached as one.

Each attempt has a deadline (``attempt_deadline_seconds``) besides the per-phase timeout, so an
answer that trickles in cannot hold a call past it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, NamedTuple, Protocol

import httpx2
import openai
import orjson
from openai._models import FinalRequestOptions
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.shared_params import ResponseFormatJSONSchema
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from typing_extensions import override

from refund_bench.errors import RefundBenchError, TransientError
from refund_bench.llm.http import AioHttpClient
from refund_bench.llm.lone_failures import CallMark, LoneFailures
from refund_bench.llm.ratelimit import RateLimiter, UnlimitedRateLimiter
from refund_bench.llm.roles import ChatMessage, MalformedAnswer
from refund_bench.retry import AsyncSleep, OnRetry, RetryPolicy, retry_after_seconds
from refund_bench.storable import storable
from refund_bench.urls import printable_url, without_credentials

log = logging.getLogger(__name__)

DISPUTE_HEADER = "X-Refund-Bench-Dispute"
"""Request header carrying the dispute id (lets the stand-in and proxies count calls)."""

UnavailableKind = Literal["rate_limited", "timeout", "connection", "server_error"]

_OMITTED_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
    "X-Stainless-Retry-Count",
    "X-Stainless-Read-Timeout",
)
"""The client's telemetry headers (its platform, its retry count and read timeout), left out.

No OpenAI-compatible endpoint needs them, and the client copies and merges every header several
times per request: nine fewer headers is about a tenth less CPU per call."""
_OMIT: dict[str, str | openai.Omit] = {name: openai.Omit() for name in _OMITTED_HEADERS}

_COMPLETION_POST = FinalRequestOptions.construct(method="post", url="/chat/completions")
"""What every completion request shares; a call copies it with its body and headers.

Copying built options costs about a tenth of building them from their defaults, as ``post``
does (2.4 against 27.7 us)."""


class LlmEndpoint(BaseModel):
    """Where and how one role calls its model. ``api_key`` is never logged or printed, and
    ``base_url`` is printed without user name, password and query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    api_key: SecretStr
    model: str
    temperature: float = Field(ge=0.0, le=2.0)
    timeout_seconds: float = Field(gt=0.0)
    """Per phase: connecting, waiting for a pooled connection, each read of the answer."""
    attempt_deadline_seconds: float | None = Field(default=None, gt=0.0)
    """Each attempt from start to the answer's last byte; ``None``: no bound but the phases'."""

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, printable_url(value) if name == "base_url" else value


class LlmUnavailable(TransientError):  # noqa: N818 - named for the policy
    """The endpoint failed transiently (``kind``); ``status`` is the HTTP status, if any, and
    ``retry_after_seconds`` the wait its ``Retry-After`` asked for, if it did. The message,
    which is logged, shows every URL it quotes without credentials."""

    def __init__(
        self,
        kind: UnavailableKind,
        message: str,
        status: int | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(
            f"{kind}: {without_credentials(message)}",
            dependency=f"llm_{kind}",
            retry_after_seconds=retry_after_seconds,
        )
        self.kind: UnavailableKind = kind
        self.status = status


RETRY_AFTER_STATUSES = frozenset({429, 503})
"""The statuses whose ``Retry-After`` the retry honours: too many requests, unavailable."""


def _retry_after(response: httpx2.Response, longest: float | None) -> float | None:
    """The wait ``response``'s ``Retry-After`` asks for (seconds or an HTTP-date), at most
    ``longest``; ``None`` when it asks for none that reads."""
    asked = retry_after_seconds(response.headers.get("retry-after"), time.time())
    return asked if asked is None or longest is None else min(asked, longest)


REFUSED_INPUT_STATUSES = frozenset({400, 413, 422})
"""The statuses with which an endpoint refuses one request for what it carries (too long for
the context window, blocked by a content policy, unprocessable), not for who sent it."""
SETTING_PARAMS = frozenset(
    {
        "model",
        "temperature",
        "top_p",
        "seed",
        "n",
        "stop",
        "stream",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "tools",
        "tool_choice",
        "logprobs",
        "reasoning_effort",
    }
)
"""Request settings an error's ``param`` may name: the same for every request of a role, so
a 400 naming one would refuse every input (OpenAI names ``messages`` for an input too long)."""
SETTING_CODES = frozenset(
    {"unsupported_parameter", "unsupported_value", "model_not_found", "invalid_api_key"}
)
"""Error codes that are about the settings or the account, never one input."""


class LlmRejected(RefundBenchError):  # noqa: N818 - named for the policy
    """The endpoint refused the request (a 4xx other than 408/429). Retrying cannot help.

    ``code`` and ``param`` are the error body's (OpenAI's shape), when it has them. ``message``
    is the endpoint's, with every URL in it shown without credentials
    (:func:`~refund_bench.urls.without_credentials`): it is logged, cached as a refusal's
    reason and shown to reviewers, and an endpoint may echo the URL it was called at."""

    def __init__(
        self, status: int, message: str, code: str | None = None, param: str | None = None
    ) -> None:
        message = without_credentials(message)
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.code = code
        self.param = param

    @property
    def refused_input(self) -> bool:
        """True when this one request was refused for its content (400, 413, 422): the stage
        sends that input to a person, and caches the refusal. False for 401, 403, 404 and the
        like, and for a 400 whose ``param`` or ``code`` is about a setting (a temperature the
        model does not take, a schema it cannot honour): the settings are wrong for every
        request, and the stage stops so that its alerts fire, instead of sending every input
        to a person."""
        if self.status not in REFUSED_INPUT_STATUSES:
            return False
        return self.param not in SETTING_PARAMS and self.code not in SETTING_CODES


FAILED_ALONE = "no answer from the endpoint: "
"""How the reason of an :class:`LlmFailedAlone` begins (and the reason cached for it)."""


class LlmFailedAlone(RefundBenchError):  # noqa: N818 - named for the policy
    """The endpoint failed this one request on every call, while it answered the others
    (:class:`~refund_bench.llm.lone_failures.LoneFailures` says when). Retrying cannot help,
    and an outage does not raise it. The stages handle it like a request refused for its
    content: the input goes to a person, and the outcome is cached, so a redelivery does not
    ask again. ``str()`` begins with :data:`FAILED_ALONE` and holds no credentials."""

    def __init__(self, reason: str, last: LlmUnavailable) -> None:
        super().__init__(f"{FAILED_ALONE}{reason}; the last failure: {last}")


def failed_alone(reason: str) -> bool:
    """Whether a cached refusal's ``reason`` is an :class:`LlmFailedAlone`'s."""
    return reason.startswith(FAILED_ALONE)


MAX_SERVED_CHARS = 200
"""An answer keeps this much of the served model's name, and of the system fingerprint."""


class LlmAnswer(NamedTuple):
    """One completion's answer and what the endpoint says produced it."""

    text: str
    """The first choice's text, unparsed."""
    served_model: str | None
    """The model the endpoint names in its response (a dated snapshot where the request named
    an alias), cut to :data:`MAX_SERVED_CHARS` (:func:`storable`); ``None`` when it names
    none (or names it with no text)."""
    system_fingerprint: str | None
    """The backend configuration the endpoint reports (OpenAI's ``system_fingerprint``), cut
    the same way; ``None`` when it reports none."""


class JsonCompleter(Protocol):
    """The port the stage handlers depend on; :class:`LlmClient` is the real adapter."""

    @property
    def model(self) -> str:
        """The model name to record in events."""
        ...

    @property
    def temperature(self) -> float:
        """The sampling temperature sent with every request."""
        ...

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema_name: str,
        schema: Mapping[str, Any],
        seed: int | None,
        dispute_id: str,
    ) -> LlmAnswer:
        """The answer of one structured-output completion."""
        ...


class _AnswerMessage(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _AnswerMessage
    finish_reason: str | None = None


class _Completion(BaseModel):
    """The part of the chat-completion response this adapter reads (the rest is ignored)."""

    choices: list[_Choice]
    # Informational: a value of another type is read as none, never as a failed call.
    model: object = None
    system_fingerprint: object = None

    def served(self, text: str) -> LlmAnswer:
        """``text`` with what this completion says produced it, each bounded."""
        return LlmAnswer(text, _served(self.model), _served(self.system_fingerprint))


def _served(value: object) -> str | None:
    return storable(value, MAX_SERVED_CHARS) if isinstance(value, str) and value else None


UNFINISHED_REASONS: Mapping[str, str] = {"length": "cut short", "content_filter": "withheld"}
"""The finish reasons that say the answer's text is not the whole answer: cut short at the
token limit, or withheld (in whole or part) by a content filter; each with what became of it.
Any other reason, or none, says nothing against the text: endpoints name a normal end in
their own words (``stop``, TGI's ``eos_token``, ``stop_sequence``, or no reason at all), and
the answer is read like any other (an incomplete one does not parse)."""


def _answer(raw: bytes) -> LlmAnswer:
    """The first choice's text from a 200 response body, with its provenance.
    :class:`LlmUnavailable` when the body is not a chat completion (it came from something
    other than the model: retry it); :class:`MalformedAnswer` when the completion holds no
    usable answer."""
    try:
        completion = _Completion.model_validate_json(raw)
    except ValidationError as exc:
        lenient = _lenient_completion(raw)
        if lenient is None:
            raise LlmUnavailable(
                "server_error",
                f"HTTP 200 whose body is not a chat completion ({exc.error_count()} errors)",
                200,
            ) from exc
        completion = lenient
        text = completion.choices[0].message.content if completion.choices else None
        kept = None if text is None else text.encode("utf-8", "replace").decode("utf-8")
        if kept != text:  # (the strict parser never gives a lone surrogate)
            named = completion.served(kept or "")
            raise MalformedAnswer(
                "the answer holds a lone surrogate, which is no text",
                named.text,
                served_model=named.served_model,
                system_fingerprint=named.system_fingerprint,
            ) from exc
    choice = completion.choices[0] if completion.choices else None
    content = (choice.message.content if choice else None) or ""
    answer = completion.served(content)
    served = {"served_model": answer.served_model, "system_fingerprint": answer.system_fingerprint}
    if choice is None:
        raise MalformedAnswer("the completion has no choices", "", **served)
    unfinished = UNFINISHED_REASONS.get(choice.finish_reason or "")
    if unfinished is not None:
        raise MalformedAnswer(
            f"the answer was {unfinished} (finish_reason is {choice.finish_reason!r})",
            content,
            **served,
        )
    if not content:
        raise MalformedAnswer("the answer is empty", content, **served)
    return answer


def _lenient_completion(raw: bytes) -> _Completion | None:
    """``raw`` read as a chat completion by the standard library's JSON parser, which keeps a
    lone surrogate escape (``"\\ud83d"``) that the strict parser refuses, in the answer's
    text or in a field this adapter ignores (``model``, ``refusal``); ``None`` when it is no
    chat completion even so. Read only when the strict parse failed."""
    try:
        return _Completion.model_validate(json.loads(raw))
    except (ValueError, ValidationError, RecursionError):
        return None


def _to_openai(message: ChatMessage) -> ChatCompletionMessageParam:
    if message["role"] == "system":
        system: ChatCompletionSystemMessageParam = {
            "role": "system",
            "content": message["content"],
        }
        return system
    user: ChatCompletionUserMessageParam = {"role": "user", "content": message["content"]}
    return user


_SHORTEST_KEY_SCRUBBED = 8
"""A key shorter than this (a local stand-in's placeholder) is not looked for in messages."""


def _without_key(message: str, api_key: str) -> str:
    """``message`` with every copy of ``api_key`` replaced: an endpoint or proxy may echo the
    key it was sent ("invalid key sk-..."), and the message is logged, cached as a refusal's
    reason and shown to reviewers."""
    if len(api_key) < _SHORTEST_KEY_SCRUBBED:
        return message
    return message.replace(api_key, "[API key]")


def _classify(exc: openai.APIError, longest_wait: float | None, api_key: str) -> RefundBenchError:
    """Map an openai error onto the project's policy types; a wait a 429 or 503 asks for is
    kept, at most ``longest_wait``; the endpoint's message is kept without ``api_key``."""
    if isinstance(exc, openai.APITimeoutError):
        return LlmUnavailable("timeout", "request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return LlmUnavailable("connection", type(exc.__cause__ or exc).__name__)
    message = _without_key(exc.message, api_key)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        wait = _retry_after(exc.response, longest_wait) if status in RETRY_AFTER_STATUSES else None
        if status == 429:
            return LlmUnavailable("rate_limited", message, status, wait)
        if status == 408:
            return LlmUnavailable("timeout", message, status)
        if status >= 500:
            return LlmUnavailable("server_error", message, status, wait)
        return LlmRejected(status, message, _text(exc.code), _text(exc.param))
    return LlmRejected(0, f"{type(exc).__name__}: {message}")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


class _OpenAIClient(openai.AsyncOpenAI):
    """The openai client, with what is the same for every request computed once: the URL each
    path resolves to under the base URL, the default headers, the check that requests carry
    credentials and how they are authenticated. A role posts to one path, and the client would
    otherwise parse the merged URL (a twentieth of the judge's CPU) and rebuild its default
    headers on every request. No role streams an answer, so none is asked whether to.

    Its idempotency keys come from a counter after a random prefix instead of a fresh uuid4
    each: just as unique across replicas and restarts, at a fraction of the cost. (The client
    makes one for every request; it sends it only to endpoints that declare an idempotency
    header, and OpenAI's declares none.)"""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._urls: dict[str, httpx2.URL] = {}
        self._headers: dict[str, str | openai.Omit] | None = None
        self._key_prefix = f"refund-bench-{uuid.uuid4().hex}-"
        self._keys = itertools.count(1)
        self._authenticated = False
        # A client with a fixed API key (no provider runtime, no API-key provider; the base
        # constructor has set both): the options hook would return its options unchanged.
        self._fixed_key = self._provider_runtime is None and self._api_key_provider is None
        self._auth: httpx2.Auth | None = None
        self._auth_known = False

    @override
    def _validate_headers(self, headers: Any, custom_headers: Any) -> None:
        # The client checks that every request carries credentials by walking all its headers
        # (about 4% of the judge's CPU). Here every request has the same header names and the
        # client's own key, so the first request's check holds for all.
        if not self._authenticated:
            super()._validate_headers(headers, custom_headers)
            self._authenticated = True

    @override
    async def _prepare_options(self, options: FinalRequestOptions) -> FinalRequestOptions:
        # The client's hook imports its auth module on every request, to let a provider runtime
        # or an API-key provider rewrite the options; with a fixed key it returns them as they
        # are (1.6% of the judge's CPU), so it is not run.
        if self._fixed_key:
            return options
        return await super()._prepare_options(options)

    @property
    @override
    def custom_auth(self) -> httpx2.Auth | None:
        # Asked on every request, for any client; what it answers depends on how the client
        # authenticates, which is set when it is built.
        if not self._auth_known:
            self._auth = super().custom_auth
            self._auth_known = True
        return self._auth

    @override
    def _should_stream_response_body(self, request: httpx2.Request) -> bool:
        # The client looks for a header only its ``with_streaming_response`` sets, and each
        # lookup in httpx2's headers decodes all of them first (3% of the judge's CPU). No
        # role streams: every answer is read whole.
        return False

    @override
    def _idempotency_key(self) -> str:
        return f"{self._key_prefix}{next(self._keys)}"

    @override
    def _prepare_url(self, url: str) -> httpx2.URL:
        prepared = self._urls.get(url)
        if prepared is None:  # URLs are immutable: one per path is shared by every request
            prepared = self._urls[url] = super()._prepare_url(url)
        return prepared

    @property
    @override
    def default_headers(self) -> dict[str, str | openai.Omit]:
        if self._headers is None:
            self._headers = super().default_headers
        return self._headers


class LlmClient:
    """One role's (or one seat's) client of an OpenAI-compatible endpoint.

    Safe for many concurrent calls from one event loop. Close it with :meth:`aclose` or use it
    as an async context manager. ``on_inflight`` is called with the number of
    :meth:`complete_json` calls in progress (rate-limit waits and backoff included) each time
    it changes; wire it to a gauge. ``on_retry`` is called with each transient failure that is
    retried; wire it to a counter.
    """

    def __init__(
        self,
        endpoint: LlmEndpoint,
        *,
        rate_limiter: RateLimiter | None = None,
        retry: RetryPolicy | None = None,
        sleep: AsyncSleep = asyncio.sleep,
        on_inflight: Callable[[int], None] | None = None,
        on_retry: OnRetry | None = None,
        max_connections: int = 128,
        lone_failures: LoneFailures | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._lone = lone_failures if lone_failures is not None else LoneFailures()
        self._limiter: RateLimiter = rate_limiter or UnlimitedRateLimiter()
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._on_inflight = on_inflight
        self._on_retry = on_retry
        self._inflight = 0
        # Connections are capped and all kept alive: hundreds of concurrent calls then reuse
        # warm connections instead of opening (and closing) one per request. The requests go
        # to aiohttp with nothing in between (see refund_bench.llm.http): CPU per call is what
        # limits a judge replica.
        self._openai = _OpenAIClient(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key.get_secret_value(),
            timeout=endpoint.timeout_seconds,
            max_retries=0,
            http_client=AioHttpClient(
                max_connections=max_connections,
                total_seconds=endpoint.attempt_deadline_seconds,
            ),
        )

    @property
    def model(self) -> str:
        """The model name sent with every request (record it in events)."""
        return self._endpoint.model

    @property
    def temperature(self) -> float:
        """The sampling temperature sent with every request."""
        return self._endpoint.temperature

    def __repr__(self) -> str:
        """The endpoint without user name, password and query, which may hold credentials."""
        return (
            f"LlmClient(base_url={printable_url(self._endpoint.base_url)!r}, model={self.model!r})"
        )

    async def __aenter__(self) -> LlmClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._openai.close()

    def _track(self, delta: int) -> None:
        self._inflight += delta
        if self._on_inflight is not None:
            self._on_inflight(self._inflight)

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema_name: str,
        schema: Mapping[str, Any],
        seed: int | None,
        dispute_id: str,
    ) -> LlmAnswer:
        """Send one strict structured-output request and return the answer text, unparsed, with
        the served model and system fingerprint the response names.

        Transient failures are retried by the retry policy, each attempt after a fresh
        rate-limiter token (a failed take is retried too). Raises :class:`LlmUnavailable` when
        retries are exhausted (the limiter's :class:`TransientError` when it failed last),
        :class:`LlmFailedAlone` instead when this request has failed so on every call while
        the endpoint answered others, :class:`LlmRejected` on other 4xx,
        :class:`MalformedAnswer` on an empty or truncated answer. The answer is not cached
        here: see :func:`refund_bench.llm.cache.cached_call`.
        """
        params: list[ChatCompletionMessageParam] = [_to_openai(m) for m in messages]
        response_format: ResponseFormatJSONSchema = {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "strict": True, "schema": dict(schema)},
        }
        body: dict[str, object] = {
            "model": self._endpoint.model,
            "messages": params,
            "temperature": self._endpoint.temperature,
            "response_format": response_format,
        }
        if seed is not None:
            body["seed"] = seed
        # Encoded once per call, not once per attempt: retries resend the same bytes. orjson
        # writes the same compact UTF-8 as json.dumps(..., ensure_ascii=False) in a twelfth of
        # the time (about 30 us of a judge call's 0.6 ms).
        content = orjson.dumps(body)
        options = _COMPLETION_POST.model_copy(
            update={
                "content": content,
                "headers": {**_OMIT, DISPUTE_HEADER: dispute_id},
            }
        )

        first_failure: CallMark | None = None

        async def attempt() -> LlmAnswer:
            nonlocal first_failure
            try:
                return await attempt_once()
            except LlmUnavailable:
                if first_failure is None:  # the window of lone failures opens here
                    first_failure = self._lone.mark(dispute_id)
                raise

        async def attempt_once() -> LlmAnswer:
            # A TransientError of the limiter (Redis out of reach) is retried as a failed call.
            await self._limiter.acquire()
            try:
                # The client's generic request method with the options of the endpoint
                # ``chat.completions.create`` posts to, the body already JSON, and the answer
                # read from the raw body. ``create`` would run its recursive parameter
                # transform over messages and schema, and the client would build its full
                # response model; together they cost half the CPU of a call and change nothing
                # here. The client copies ``options`` before using them, so every attempt
                # sends the same request.
                response = await self._openai.request(httpx2.Response, options)
            except openai.APIError as exc:
                mapped = _classify(
                    exc,
                    self._endpoint.attempt_deadline_seconds,
                    self._endpoint.api_key.get_secret_value(),
                )
                if isinstance(mapped, TransientError):
                    log.info(
                        "llm %s for dispute %s (%s): %s",
                        schema_name,
                        dispute_id,
                        self.model,
                        mapped,
                    )
                # An error with a status holds the endpoint's message as it came, and a
                # traceback would print it: not chained (``mapped`` holds it without
                # credentials). Others are chained: their causes print URLs cleaned (http.py).
                cause = None if isinstance(exc, openai.APIStatusError) else exc
                raise mapped from cause
            return _answer(response.content)

        self._track(+1)
        try:
            answer = await self._retry.run_async(
                attempt, sleep=self._sleep, on_retry=self._on_retry
            )
        except LlmUnavailable as exc:
            mark = first_failure if first_failure is not None else self._lone.mark(dispute_id)
            alone = self._lone.failed(content, dispute_id, mark)
            if alone is None:
                raise
            log.warning(
                "llm %s for dispute %s (%s): no answer to this request alone: %s",
                schema_name,
                dispute_id,
                self.model,
                alone,
            )
            raise LlmFailedAlone(alone, exc) from exc
        except (LlmRejected, MalformedAnswer):
            self._lone.answered(content, dispute_id)  # the endpoint answered, if not usefully
            raise
        finally:
            self._track(-1)
        self._lone.answered(content, dispute_id)
        return answer
