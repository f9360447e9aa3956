"""Settings and wiring for the LLM roles: endpoints per role and per judge seat, the shared
rate limiter and the response cache. Used by the entry points of extractor, judge and settler.

Every role talks to an OpenAI-compatible endpoint; the defaults point at the project's
deterministic stand-in. A heterogeneous judge panel sets one model (and optionally one base
URL) per seat: ``JUDGE_MODELS=model-a,model-b,model-c``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import Field, SecretStr, field_validator
from redis.asyncio import BlockingConnectionPool, Redis

from refund_bench.config import StageSettings
from refund_bench.domain import MAX_JUDGES
from refund_bench.llm.cache import CallOutcome, OnCall, RedisResponseCache
from refund_bench.llm.client import LlmClient, LlmEndpoint
from refund_bench.llm.ratelimit import RedisTokenBucket
from refund_bench.llm.roles import JUDGE_PROMPT_VERSION
from refund_bench.runtime.metrics import Metrics, retry_counter


class LlmStageSettings(StageSettings):
    """Settings every LLM-calling stage shares (``LLM_*`` environment variables)."""

    llm_base_url: str = "http://127.0.0.1:18090/v1"
    llm_api_key: SecretStr = SecretStr("stand-in")
    llm_timeout_seconds: float = Field(default=20.0, gt=0)
    llm_attempt_deadline_seconds: float = Field(default=60.0, gt=0)
    """Each attempt of a call, from start to the answer's last byte (the timeout above is per
    phase: an answer trickling in a byte at a time would never reach it)."""
    llm_rate_per_second: float = Field(default=2000.0, gt=0)
    llm_burst: int = Field(default=500, ge=1)
    llm_rate_limit_name: str = "default"
    llm_cache_ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    llm_max_connections: int = Field(default=128, ge=1)
    """Pooled HTTP connections per client (per judge seat, per extractor or settler), all kept
    alive. A call beyond them waits for one, so with a slow endpoint raise it together with
    ``MAX_INFLIGHT``."""
    redis_max_connections: int = Field(default=64, ge=1)


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


def rate_limiter(settings: LlmStageSettings, redis: Redis) -> RedisTokenBucket:
    """The token bucket every replica of every LLM stage shares through Redis."""
    return RedisTokenBucket(
        redis, settings.llm_rate_limit_name, settings.llm_rate_per_second, settings.llm_burst
    )


def client(
    settings: LlmStageSettings,
    *,
    model: str,
    temperature: float,
    redis: Redis,
    base_url: str = "",
    on_inflight: Callable[[int], None] | None = None,
    metrics: Metrics | None = None,
) -> LlmClient:
    """The role's (or seat's) client; with ``metrics``, its retries are counted in
    ``retries`` by kind (``llm_rate_limited``, ``llm_server_error``, ...)."""
    endpoint = LlmEndpoint(
        base_url=base_url or settings.llm_base_url,
        api_key=settings.llm_api_key,
        model=model,
        temperature=temperature,
        timeout_seconds=settings.llm_timeout_seconds,
        attempt_deadline_seconds=settings.llm_attempt_deadline_seconds,
    )
    return LlmClient(
        endpoint,
        rate_limiter=rate_limiter(settings, redis),
        on_inflight=on_inflight,
        on_retry=None if metrics is None else retry_counter(metrics),
        max_connections=settings.llm_max_connections,
    )


def split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class JudgePanelSettings(LlmStageSettings):
    """The bench: K seats, each with its model, seed and temperature (> 0: independent draws)."""

    judge_count: int = Field(default=3, ge=1, le=MAX_JUDGES)
    judge_models: str = "standin-judge"
    judge_base_urls: str = ""
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
        if not split_list(value):
            raise ValueError("JUDGE_MODELS needs at least one model")
        return value

    def seat_model(self, seat: int) -> str:
        models = split_list(self.judge_models)
        return models[seat % len(models)]

    def seat_base_url(self, seat: int) -> str:
        urls = split_list(self.judge_base_urls)
        return urls[seat % len(urls)] if urls else ""

    def seat_seed(self, seat: int) -> int:
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
    base_url: str = "",
) -> RoleWiring:
    """Client (with the shared rate limiter), response cache and Redis for one role."""
    redis = redis_client(settings)
    llm = client(
        settings,
        model=model,
        temperature=temperature,
        redis=redis,
        base_url=base_url,
        on_inflight=lambda n: metrics.set("inflight_llm_calls", n),
        metrics=metrics,
    )
    return RoleWiring(llm=llm, cache=response_cache(settings, redis), redis=redis)
