"""Settings and wiring for the LLM roles: endpoints and keys per role and per judge seat, the
rate limiters and the response cache. Used by the entry points of extractor, judge and settler.

Every role talks to an OpenAI-compatible endpoint; the defaults point at the project's
deterministic stand-in. A heterogeneous judge panel sets one model (and optionally one base
URL and key) per seat: ``JUDGE_MODELS=model-a,model-b,model-c``.

Keys: ``LLM_API_KEY`` is sent only to ``LLM_BASE_URL``. A role or seat with a base URL of its
own needs a key of its own (``EXTRACTOR_API_KEY``, ``SETTLER_API_KEY``, ``JUDGE_API_KEYS``), or
the settings refuse to load, naming the setting.

Rate limits: one Redis token bucket per provider account, that is per host and key
(:meth:`LlmStageSettings.bucket_name`). Calls to ``LLM_BASE_URL``'s host with ``LLM_API_KEY``
take from ``LLM_RATE_LIMIT_NAME``'s bucket, as they always did; other calls take from
``<LLM_RATE_LIMIT_NAME>:<host>:<account id>``, the account id a hash prefix of the key, so
seats of one account share a bucket and accounts do not throttle each other. Each bucket
refills at its endpoint's own rate (``EXTRACTOR_RATE_PER_SECOND``, ``SETTLER_RATE_PER_SECOND``,
``JUDGE_RATES_PER_SECOND``), or ``LLM_RATE_PER_SECOND`` when that is unset.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, ClassVar, Self
from urllib.parse import urlsplit

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from refund_bench.config import StageSettings
from refund_bench.domain import MAX_JUDGES
from refund_bench.llm.cache import CallOutcome, OnCall, RedisResponseCache
from refund_bench.llm.client import LlmClient, LlmEndpoint
from refund_bench.llm.ratelimit import RedisTokenBucket
from refund_bench.llm.redis_errors import REDIS_UNREACHABLE
from refund_bench.llm.roles import JUDGE_PROMPT_VERSION, JudgePromptVersion
from refund_bench.runtime.metrics import Metrics, retry_counter
from refund_bench.urls import base_url_problem, printable_url


@dataclass(frozen=True, repr=False)
class EndpointAccess:
    """Where one role or seat sends its calls (printed without user name, password and query),
    the key it sends there (printed masked), and the rate its rate-limit bucket refills at
    (calls per second)."""

    base_url: str
    api_key: SecretStr
    rate_per_second: float

    def __repr__(self) -> str:
        return (
            f"EndpointAccess(base_url={printable_url(self.base_url)!r},"
            f" api_key={self.api_key!r}, rate_per_second={self.rate_per_second!r})"
        )


def parse_rate(text: str, setting: str) -> float | None:
    """The rate ``text`` gives in ``setting`` (calls per second): ``None`` when blank, so that
    ``LLM_RATE_PER_SECOND`` applies. ``ValueError`` naming ``setting`` for text that is not a
    finite number above 0; the text is quoted only when it is a number."""
    entry = text.strip()
    if not entry:
        return None
    try:
        rate = float(entry)
    except ValueError:
        raise ValueError(f"{setting} must be a number of calls per second") from None
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(
            f"{setting} must be a finite number of calls per second above 0, got {entry}"
        )
    return rate


def _own_rate(value: object, info: ValidationInfo) -> object:
    """A role's own rate setting as loaded: blank is unset (``None``)."""
    if value is None:
        return None
    return parse_rate(str(value), (info.field_name or "rate").upper())


OwnRate = Annotated[float | None, BeforeValidator(_own_rate)]
"""A role's own rate setting (``EXTRACTOR_RATE_PER_SECOND``, ...): a finite number above 0, or
unset (blank): ``LLM_RATE_PER_SECOND``."""


def account_id(api_key: SecretStr) -> str:
    """A stable name of the account ``api_key`` signs in as, for rate-limit bucket names: 12
    hex digits of a sha256 of the key under a purpose prefix. Never the key, and no use in
    guessing one of realistic length."""
    digest = hashlib.sha256(b"refund-bench rate-limit account\0")
    digest.update(api_key.get_secret_value().encode("utf-8"))
    return digest.hexdigest()[:12]


def _endpoint_id(base_url: str) -> str:
    """What tells endpoints apart: the base URL, without a trailing slash."""
    return base_url.rstrip("/")


def _endpoint_host(base_url: str) -> str:
    """``base_url``'s host, lower-cased, with its port unless that is the scheme's default;
    never the user name or password a URL may carry. ``ValueError`` for a port out of range."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    port = parts.port
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return host if port is None or port == default else f"{host}:{port}"


class LlmStageSettings(StageSettings):
    """Settings every LLM-calling stage shares (``LLM_*`` environment variables)."""

    llm_base_url: str = "http://127.0.0.1:18090/v1"
    llm_api_key: SecretStr = SecretStr("stand-in")
    """The key of ``LLM_BASE_URL``, sent to no other endpoint."""
    llm_timeout_seconds: float = Field(default=20.0, gt=0)
    llm_attempt_deadline_seconds: float = Field(default=60.0, gt=0)
    """Each attempt of a call, from start (the wait for a pooled connection included) to the
    answer's last byte (the timeout above is per phase: an answer trickling in a byte at a time
    would never reach it). At least ``LLM_TIMEOUT_SECONDS``."""
    llm_rate_per_second: float = Field(default=2000.0, gt=0, allow_inf_nan=False)
    """The refill rate of every bucket whose endpoint sets no rate of its own, among them the
    bucket of ``LLM_BASE_URL`` with ``LLM_API_KEY``, which every LLM stage shares."""
    llm_burst: int = Field(default=500, ge=1)
    llm_rate_limit_name: str = "default"
    llm_cache_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    llm_max_connections: int = Field(default=128, ge=1)
    """Pooled HTTP connections per client (per judge seat, per extractor or settler), all kept
    alive. A call beyond them waits for one, so with a slow endpoint raise it together with
    ``MAX_INFLIGHT``."""
    redis_max_connections: int = Field(default=64, ge=1)

    @field_validator("llm_base_url")
    @classmethod
    def _usable_base_url(cls, value: str) -> str:
        """An http(s) URL with a host, and no credentials, query or fragment
        (:func:`~refund_bench.urls.base_url_problem`); the error never quotes it."""
        problem = base_url_problem(value)
        if problem is not None:
            raise ValueError(f"LLM_BASE_URL {problem}")
        return value

    @model_validator(mode="after")
    def _deadline_holds_a_timeout(self) -> Self:
        if self.llm_attempt_deadline_seconds < self.llm_timeout_seconds:
            raise ValueError(
                f"LLM_ATTEMPT_DEADLINE_SECONDS ({self.llm_attempt_deadline_seconds:g}) is below"
                f" LLM_TIMEOUT_SECONDS ({self.llm_timeout_seconds:g}): an attempt would be cut"
                " off before the model's answer may start; raise the deadline with the timeout"
            )
        return self

    def shared_access(self) -> EndpointAccess:
        """``LLM_BASE_URL`` with ``LLM_API_KEY``, at ``LLM_RATE_PER_SECOND``."""
        return EndpointAccess(self.llm_base_url, self.llm_api_key, self.llm_rate_per_second)

    def access(
        self,
        base_url: str,
        api_key: SecretStr,
        rate: float | None,
        *,
        who: str,
        url_setting: str,
        key_setting: str,
        rate_setting: str,
    ) -> EndpointAccess:
        """The endpoint, key and rate of a role or seat whose own settings are ``base_url``,
        ``api_key`` and ``rate`` (empty or ``None``: none of its own). Without a URL of its own
        it calls ``LLM_BASE_URL``; without a key of its own it sends ``LLM_API_KEY``, but only
        to ``LLM_BASE_URL``; without a rate of its own its bucket refills at
        ``LLM_RATE_PER_SECOND``. ``ValueError``, naming ``who`` and settings but never a key or
        a URL, for a URL of its own that cannot be a base URL
        (:func:`~refund_bench.urls.base_url_problem`) or has no key of its own, and for a rate
        of its own that
        differs from ``LLM_RATE_PER_SECOND`` on the bucket every stage shares at that rate
        (``LLM_BASE_URL``'s host with ``LLM_API_KEY``)."""
        problem = base_url_problem(base_url) if base_url else None
        if problem is not None:
            raise ValueError(f"{url_setting} gives {who} a base URL that {problem}")
        url = base_url or self.llm_base_url
        if api_key.get_secret_value():
            key = api_key
        elif _endpoint_id(url) == _endpoint_id(self.llm_base_url):
            key = self.llm_api_key
        else:
            raise ValueError(
                f"{url_setting} sends {who} to an endpoint other than LLM_BASE_URL, and"
                f" {key_setting} gives it no key: LLM_API_KEY is sent only to LLM_BASE_URL"
            )
        access = EndpointAccess(url, key, self.llm_rate_per_second if rate is None else rate)
        if rate is not None and rate != self.llm_rate_per_second and self._is_shared(access):
            raise ValueError(
                f"{rate_setting} gives {who} {rate:g} calls per second, but {who} calls"
                " LLM_BASE_URL's host with LLM_API_KEY, whose bucket every LLM stage shares at"
                f" LLM_RATE_PER_SECOND ({self.llm_rate_per_second:g}): set that instead"
            )
        return access

    def _is_shared(self, access: EndpointAccess) -> bool:
        """True when ``access`` takes from the bucket of ``LLM_BASE_URL``'s host and
        ``LLM_API_KEY``, named ``LLM_RATE_LIMIT_NAME`` alone."""
        return _endpoint_host(access.base_url) == _endpoint_host(self.llm_base_url) and (
            access.api_key.get_secret_value() == self.llm_api_key.get_secret_value()
        )

    def bucket_name(self, access: EndpointAccess) -> str:
        """The rate-limit bucket of calls made with ``access``: one per provider account, that
        is per host (with its port unless the scheme's default) and key. ``LLM_RATE_LIMIT_NAME``
        for ``LLM_BASE_URL``'s host with ``LLM_API_KEY`` (the single-endpoint default keeps its
        bucket and Redis key), ``<LLM_RATE_LIMIT_NAME>:<host>:<account id>`` for any other
        (:func:`account_id`). Never a key, user name or password."""
        if self._is_shared(access):
            return self.llm_rate_limit_name
        host = _endpoint_host(access.base_url)
        return f"{self.llm_rate_limit_name}:{host}:{account_id(access.api_key)}"


class SingleRoleSettings(LlmStageSettings):
    """Settings of a stage with one LLM role, ``ROLE``: its own endpoint is the fields
    ``<role>_base_url`` and ``<role>_api_key`` (``EXTRACTOR_BASE_URL``, ...), which a subclass
    declares. Loading refuses a base URL of its own without a key of its own."""

    ROLE: ClassVar[str]

    @model_validator(mode="after")
    def _endpoint_has_its_key(self) -> Self:
        self.endpoint()
        return self

    def endpoint(self) -> EndpointAccess:
        """Where the role calls, with which key and at which rate (see
        :meth:`LlmStageSettings.access`)."""
        role = self.ROLE
        return self.access(
            getattr(self, f"{role}_base_url"),
            getattr(self, f"{role}_api_key"),
            getattr(self, f"{role}_rate_per_second"),
            who=f"the {role}",
            url_setting=f"{role.upper()}_BASE_URL",
            key_setting=f"{role.upper()}_API_KEY",
            rate_setting=f"{role.upper()}_RATE_PER_SECOND",
        )


REDIS_RETRIES = 3
"""How many times redis-py sends a command again, on a fresh connection, after its connection
broke or timed out (a Redis restart, a failover, an idle connection the server closed)."""
REDIS_BACKOFF = ExponentialWithJitterBackoff(base=0.1, cap=1.0)
"""The wait before each of those: up to 0.2, 0.4 and 0.8 s, drawn at random."""
REDIS_TIMEOUT_SECONDS = 5.0
"""How long a connection may take to open, and a command to be answered, before it counts as
broken (redis-py waits forever by default: a Redis cut off by the network would hang the
stage)."""
REDIS_HEALTH_CHECK_SECONDS = 30
"""A pooled connection idle this long is checked (``PING``) before it is used again."""


def redis_client(settings: LlmStageSettings) -> Redis:
    """A client whose pool waits for a free connection instead of failing when hundreds of
    calls are in flight at once, and rides out a short Redis outage: a command whose connection
    breaks or times out, or whose write a replica refused (``READONLY``: a failover under way), is
    sent again on a fresh one (:data:`REDIS_RETRIES`, after
    :data:`REDIS_BACKOFF`), and an idle connection is checked before use. What that does not
    heal reaches the cache and the rate limiter as a redis-py error, which they raise as
    ``TransientError(dependency="redis")``. Query arguments of ``REDIS_URL``
    (``?socket_timeout=2``) override these settings."""
    pool = BlockingConnectionPool.from_url(
        settings.redis_url.get_secret_value(),
        max_connections=settings.redis_max_connections,
        timeout=30,
        retry=Retry(REDIS_BACKOFF, REDIS_RETRIES),
        retry_on_error=list(REDIS_UNREACHABLE),
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        health_check_interval=REDIS_HEALTH_CHECK_SECONDS,
    )
    return Redis(connection_pool=pool)


def response_cache(settings: LlmStageSettings, redis: Redis) -> RedisResponseCache:
    """Where answers are kept so a redelivered input reuses them instead of a new draw."""
    return RedisResponseCache(
        redis, prefix="refund-bench:llm:", ttl_seconds=settings.llm_cache_ttl_seconds
    )


def rate_limiter(
    settings: LlmStageSettings, redis: Redis, access: EndpointAccess
) -> RedisTokenBucket:
    """The token bucket of ``access``'s account (:meth:`LlmStageSettings.bucket_name`), at its
    rate, shared through Redis by every replica of every LLM stage that calls with it."""
    return RedisTokenBucket(
        redis,
        settings.bucket_name(access),
        access.rate_per_second,
        settings.llm_burst,
    )


def client(
    settings: LlmStageSettings,
    *,
    model: str,
    temperature: float,
    redis: Redis,
    access: EndpointAccess | None = None,
    on_inflight: Callable[[int], None] | None = None,
    metrics: Metrics | None = None,
) -> LlmClient:
    """The role's (or seat's) client of ``access`` (default: ``LLM_BASE_URL`` with
    ``LLM_API_KEY``), paced by its account's bucket; with ``metrics``, its retries are counted in
    ``retries`` by kind (``llm_rate_limited``, ``llm_server_error``, ...)."""
    if access is None:
        access = settings.shared_access()
    endpoint = LlmEndpoint(
        base_url=access.base_url,
        api_key=access.api_key,
        model=model,
        temperature=temperature,
        timeout_seconds=settings.llm_timeout_seconds,
        attempt_deadline_seconds=settings.llm_attempt_deadline_seconds,
    )
    return LlmClient(
        endpoint,
        rate_limiter=rate_limiter(settings, redis, access),
        on_inflight=on_inflight,
        on_retry=None if metrics is None else retry_counter(metrics),
        max_connections=settings.llm_max_connections,
    )


def split_list(value: str) -> list[str]:
    """The stripped entries of a comma-separated per-seat setting, in seat order. An empty
    entry stays, as an empty slot (``,https://b/v1``: seat 0 has no URL of its own), so that
    every entry keeps its seat; an empty setting is no entry at all."""
    if not value.strip():
        return []
    return [part.strip() for part in value.split(",")]


MAX_SEED_BASE = 2**62
"""The highest ``JUDGE_SEED_BASE``: with a seat's index and its redraws' strides added, every
seed still fits a signed 64-bit integer (the events' Avro ``long``)."""


class JudgePanelSettings(LlmStageSettings):
    """The bench: K seats, each with its model, seed and temperature (> 0: independent draws)."""

    judge_count: int = Field(default=3, ge=1, le=MAX_JUDGES)
    judge_models: str = "standin-judge"
    """Comma-separated: one model for every seat, or one per seat (``JUDGE_COUNT`` of them)."""
    judge_base_urls: str = ""
    """As ``JUDGE_MODELS``, or empty: every seat calls ``LLM_BASE_URL``. An empty entry of a
    per-seat list is that seat calling ``LLM_BASE_URL``."""
    judge_api_keys: SecretStr = SecretStr("")
    """As ``JUDGE_BASE_URLS``, aligned with the seats: the keys of the seats' endpoints, one
    secret split at use so that no key is ever printed. Empty: a seat on ``LLM_BASE_URL`` sends
    ``LLM_API_KEY``, and a seat with a base URL of its own refuses to start."""
    judge_rates_per_second: str = ""
    """As ``JUDGE_BASE_URLS``, aligned with the seats: the refill rate (calls per second) of the
    bucket of each seat's endpoint and key. Empty, or an empty entry: ``LLM_RATE_PER_SECOND``.
    Seats that share a bucket (one host, one key) must be given the same rate."""
    judge_temperature: float = Field(default=0.7, gt=0.0, le=2.0)
    judge_seed_base: int = Field(default=1000, ge=0, le=MAX_SEED_BASE)
    """Seat i sends seed ``base + i``; a redraw adds a stride (:mod:`services.judge.handler`).
    Bounded so that every seed sent fits the events' 64-bit ``seed``."""
    judge_prompt_version: JudgePromptVersion = JUDGE_PROMPT_VERSION
    batch_max_records: int = Field(default=200, ge=1)
    max_inflight: int = Field(default=256, ge=1)
    """Grievances in flight (at least 1: with 0 no handler would ever start, while the stage
    kept polling and looked healthy). A grievance holds its slot through its cache lookups and
    writes as well as its calls, so 256 keep each seat's 128 pooled connections busy; 512 only
    queue in the pool, which costs CPU (measured side by side: 128, 256, 512)."""

    @field_validator("judge_models")
    @classmethod
    def _some_model(cls, value: str) -> str:
        models = split_list(value)
        if not models:
            raise ValueError("JUDGE_MODELS needs at least one model")
        if not all(models):
            raise ValueError("JUDGE_MODELS has an empty entry: every seat needs a model")
        return value

    @model_validator(mode="after")
    def _seats_agree(self) -> Self:
        """Each list names one entry for every seat or one per seat, so a seat's model, URL,
        key and rate are the same position of each; one key is not sent to different
        endpoints; a seat with a URL of its own has a key of its own; every rate is a finite
        number above 0, and seats sharing a bucket have one rate. Errors name settings and
        seats, never a key or a URL."""
        urls = split_list(self.judge_base_urls)
        keys = self._seat_keys()
        for setting, count in (
            ("JUDGE_MODELS", len(split_list(self.judge_models))),
            ("JUDGE_BASE_URLS", len(urls)),
            ("JUDGE_API_KEYS", len(keys)),
            ("JUDGE_RATES_PER_SECOND", len(split_list(self.judge_rates_per_second))),
        ):
            if count not in (0, 1, self.judge_count):
                raise ValueError(
                    f"{setting} has {count} entries: give one for every seat, or"
                    f" JUDGE_COUNT={self.judge_count}, one per seat in seat order"
                )
        endpoints = {_endpoint_id(self.seat_endpoint(seat)) for seat in range(self.judge_count)}
        if len(keys) == 1 and len(endpoints) > 1:
            raise ValueError(
                "JUDGE_API_KEYS has one key for seats on different endpoints (JUDGE_BASE_URLS):"
                f" give JUDGE_COUNT={self.judge_count} keys, one per seat in seat order"
            )
        seats_of: dict[str, list[int]] = {}
        accesses = [self.seat_access(seat) for seat in range(self.judge_count)]
        for seat, access in enumerate(accesses):
            seats_of.setdefault(self.bucket_name(access), []).append(seat)
        for seats in seats_of.values():
            rates = [accesses[seat].rate_per_second for seat in seats]
            if len(set(rates)) > 1:
                raise ValueError(
                    f"JUDGE_RATES_PER_SECOND gives judge seats {', '.join(map(str, seats))}"
                    f" different rates ({', '.join(f'{rate:g}' for rate in rates)} calls per"
                    " second), but they share one rate-limit bucket (the same host and key):"
                    " give them the same rate"
                )
        return self

    def _seat_keys(self) -> list[str]:
        """``JUDGE_API_KEYS`` split: plain keys, to be wrapped again before they leave."""
        return split_list(self.judge_api_keys.get_secret_value())

    @staticmethod
    def _of_seat(entries: list[str], seat: int) -> str:
        """The seat's entry of a list with one entry for every seat or one per seat; empty for
        an empty list."""
        if len(entries) > 1:
            return entries[seat]
        return entries[0] if entries else ""

    def seat_model(self, seat: int) -> str:
        """The model seat ``seat`` asks."""
        return self._of_seat(split_list(self.judge_models), seat)

    def seat_base_url(self, seat: int) -> str:
        """The seat's own base URL; empty: ``LLM_BASE_URL``."""
        return self._of_seat(split_list(self.judge_base_urls), seat)

    def seat_endpoint(self, seat: int) -> str:
        """The base URL seat ``seat`` calls."""
        return self.seat_base_url(seat) or self.llm_base_url

    def seat_rate(self, seat: int) -> float | None:
        """The seat's own rate (``JUDGE_RATES_PER_SECOND``); ``None``: ``LLM_RATE_PER_SECOND``.
        ``ValueError`` naming the seat for an entry that is not a finite number above 0."""
        entry = self._of_seat(split_list(self.judge_rates_per_second), seat)
        return parse_rate(entry, f"JUDGE_RATES_PER_SECOND (judge seat {seat})")

    def seat_access(self, seat: int) -> EndpointAccess:
        """The endpoint seat ``seat`` calls, the key it sends there and its bucket's rate (see
        :meth:`LlmStageSettings.access`); ``ValueError`` naming the settings when a seat with
        a base URL of its own has no key of its own, or its rate is refused."""
        return self.access(
            self.seat_base_url(seat),
            SecretStr(self._of_seat(split_list(self.judge_api_keys.get_secret_value()), seat)),
            self.seat_rate(seat),
            who=f"judge seat {seat}",
            url_setting="JUDGE_BASE_URLS",
            key_setting="JUDGE_API_KEYS",
            rate_setting="JUDGE_RATES_PER_SECOND",
        )

    def seat_seed(self, seat: int) -> int:
        """The seed seat ``seat`` sends with its first draw."""
        return self.judge_seed_base + seat


def call_counter(metrics: Metrics) -> OnCall:
    """The handlers' ``on_call``: counts ``llm_calls`` by outcome (made, cached, refused,
    failed_alone, unreadable)."""

    def on_call(outcome: CallOutcome) -> None:
        metrics.incr("llm_calls", kind=outcome)

    return on_call


@dataclass(frozen=True)
class RoleWiring:
    """What one LLM role's stage needs: its client, the shared cache, and how to close them."""

    llm: LlmClient
    cache: RedisResponseCache
    redis: Redis

    def closers(self) -> tuple[Callable[[], Awaitable[None]], ...]:
        return (self.llm.aclose, self.redis.aclose)


def single_role(
    settings: LlmStageSettings,
    metrics: Metrics,
    *,
    model: str,
    temperature: float,
    access: EndpointAccess | None = None,
) -> RoleWiring:
    """Client of ``access`` (default: ``LLM_BASE_URL`` with ``LLM_API_KEY``; with its account's
    rate limiter), response cache and Redis for one role."""
    redis = redis_client(settings)
    llm = client(
        settings,
        model=model,
        temperature=temperature,
        redis=redis,
        access=access,
        on_inflight=lambda n: metrics.set("inflight_llm_calls", n),
        metrics=metrics,
    )
    return RoleWiring(llm=llm, cache=response_cache(settings, redis), redis=redis)
