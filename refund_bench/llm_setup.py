"""Settings and wiring for the LLM roles: endpoints and keys per role and per judge seat, the
rate limiters and the response cache. Used by the entry points of extractor, judge and settler.

Every role talks to an OpenAI-compatible endpoint; the defaults point at the project's
deterministic stand-in. A heterogeneous judge panel sets one model (and optionally one base
URL and key) per seat: ``JUDGE_MODELS=model-a,model-b,model-c``.

Keys: ``LLM_API_KEY`` is sent only to ``LLM_BASE_URL``. A role or seat with a base URL of its
own needs a key of its own (``EXTRACTOR_API_KEY``, ``SETTLER_API_KEY``, ``JUDGE_API_KEYS``), or
the settings refuse to load, naming the setting.

Rate limits: one Redis token bucket per provider host (:func:`bucket_name`). Calls to
``LLM_BASE_URL``'s host take from ``LLM_RATE_LIMIT_NAME``'s bucket, as they always did; calls
to another host take from ``<LLM_RATE_LIMIT_NAME>:<host>``, so seats on one provider share a
bucket and providers do not throttle each other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from redis.asyncio import BlockingConnectionPool, Redis

from refund_bench.config import StageSettings
from refund_bench.domain import MAX_JUDGES
from refund_bench.llm.cache import CallOutcome, OnCall, RedisResponseCache
from refund_bench.llm.client import LlmClient, LlmEndpoint
from refund_bench.llm.ratelimit import RedisTokenBucket
from refund_bench.llm.roles import JUDGE_PROMPT_VERSION
from refund_bench.runtime.metrics import Metrics, retry_counter


@dataclass(frozen=True)
class EndpointAccess:
    """Where one role or seat sends its calls, and the key it sends there (printed masked)."""

    base_url: str
    api_key: SecretStr


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
    llm_rate_per_second: float = Field(default=2000.0, gt=0)
    llm_burst: int = Field(default=500, ge=1)
    llm_rate_limit_name: str = "default"
    llm_cache_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    llm_max_connections: int = Field(default=128, ge=1)
    """Pooled HTTP connections per client (per judge seat, per extractor or settler), all kept
    alive. A call beyond them waits for one, so with a slow endpoint raise it together with
    ``MAX_INFLIGHT``."""
    redis_max_connections: int = Field(default=64, ge=1)

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
        """``LLM_BASE_URL`` with ``LLM_API_KEY``."""
        return EndpointAccess(self.llm_base_url, self.llm_api_key)

    def access(
        self, base_url: str, api_key: SecretStr, *, who: str, url_setting: str, key_setting: str
    ) -> EndpointAccess:
        """The endpoint and key of a role or seat whose own settings are ``base_url`` and
        ``api_key`` (empty: none of its own). Without a URL of its own it calls
        ``LLM_BASE_URL``; without a key of its own it sends ``LLM_API_KEY``, but only to
        ``LLM_BASE_URL``. A URL of its own without a key of its own is a ``ValueError`` that
        names ``who`` and the two settings, never a key or a URL."""
        url = base_url or self.llm_base_url
        if api_key.get_secret_value():
            return EndpointAccess(url, api_key)
        if _endpoint_id(url) == _endpoint_id(self.llm_base_url):
            return EndpointAccess(url, self.llm_api_key)
        raise ValueError(
            f"{url_setting} sends {who} to an endpoint other than LLM_BASE_URL, and"
            f" {key_setting} gives it no key: LLM_API_KEY is sent only to LLM_BASE_URL"
        )


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
        """Where the role calls and with which key (see :meth:`LlmStageSettings.access`)."""
        role = self.ROLE
        return self.access(
            getattr(self, f"{role}_base_url"),
            getattr(self, f"{role}_api_key"),
            who=f"the {role}",
            url_setting=f"{role.upper()}_BASE_URL",
            key_setting=f"{role.upper()}_API_KEY",
        )


def bucket_name(settings: LlmStageSettings, base_url: str) -> str:
    """The rate-limit bucket of calls to ``base_url``: ``LLM_RATE_LIMIT_NAME`` for
    ``LLM_BASE_URL``'s host (the single-endpoint default keeps its bucket and Redis key), and
    ``<LLM_RATE_LIMIT_NAME>:<host>`` for any other host. Endpoints on one host share a bucket
    (a provider's limit is per account, and an account is per host here)."""
    host = _endpoint_host(base_url)
    if host == _endpoint_host(settings.llm_base_url):
        return settings.llm_rate_limit_name
    return f"{settings.llm_rate_limit_name}:{host}"


def redis_client(settings: LlmStageSettings) -> Redis:
    """A client whose pool waits for a free connection instead of failing when hundreds of
    calls are in flight at once."""
    pool = BlockingConnectionPool.from_url(
        settings.redis_url.get_secret_value(),
        max_connections=settings.redis_max_connections,
        timeout=30,
    )
    return Redis(connection_pool=pool)


def response_cache(settings: LlmStageSettings, redis: Redis) -> RedisResponseCache:
    """Where answers are kept so a redelivered input reuses them instead of a new draw."""
    return RedisResponseCache(
        redis, prefix="refund-bench:llm:", ttl_seconds=settings.llm_cache_ttl_seconds
    )


def rate_limiter(settings: LlmStageSettings, redis: Redis, base_url: str) -> RedisTokenBucket:
    """The token bucket of ``base_url``'s host (:func:`bucket_name`), shared through Redis by
    every replica of every LLM stage that calls that host."""
    return RedisTokenBucket(
        redis,
        bucket_name(settings, base_url),
        settings.llm_rate_per_second,
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
    ``LLM_API_KEY``), paced by its host's bucket; with ``metrics``, its retries are counted in
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
        rate_limiter=rate_limiter(settings, redis, access.base_url),
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
    judge_temperature: float = Field(default=0.7, gt=0.0, le=2.0)
    judge_seed_base: int = 1000
    judge_prompt_version: str = JUDGE_PROMPT_VERSION
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
        """Each list names one entry for every seat or one per seat, so a seat's model, URL and
        key are the same position of each; one key is not sent to different endpoints; a seat
        with a URL of its own has a key of its own. Errors name settings, never a key."""
        urls = split_list(self.judge_base_urls)
        keys = self._seat_keys()
        for setting, count in (
            ("JUDGE_MODELS", len(split_list(self.judge_models))),
            ("JUDGE_BASE_URLS", len(urls)),
            ("JUDGE_API_KEYS", len(keys)),
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
        for seat in range(self.judge_count):
            self.seat_access(seat)
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

    def seat_access(self, seat: int) -> EndpointAccess:
        """The endpoint seat ``seat`` calls and the key it sends there (see
        :meth:`LlmStageSettings.access`); ``ValueError`` naming the settings when a seat with
        a base URL of its own has no key of its own."""
        return self.access(
            self.seat_base_url(seat),
            SecretStr(self._of_seat(split_list(self.judge_api_keys.get_secret_value()), seat)),
            who=f"judge seat {seat}",
            url_setting="JUDGE_BASE_URLS",
            key_setting="JUDGE_API_KEYS",
        )

    def seat_seed(self, seat: int) -> int:
        """The seed seat ``seat`` sends with its first draw."""
        return self.judge_seed_base + seat


def call_counter(metrics: Metrics) -> OnCall:
    """The handlers' ``on_call``: counts ``llm_calls`` by outcome (made, cached, refused)."""

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
    """Client of ``access`` (default: ``LLM_BASE_URL`` with ``LLM_API_KEY``; with its host's
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
