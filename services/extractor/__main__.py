"""``python -m services.extractor``: split complaints into checkable grievances."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry
from pydantic import Field, SecretStr

from refund_bench.llm.roles import EXTRACTOR_PROMPT_VERSION, ExtractorPromptVersion, load_prompt
from refund_bench.llm_setup import OwnRate, SingleRoleSettings, call_counter, single_role
from refund_bench.resources import lifecycle, opened, pg_pool
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.service import configure_logging, run_stage
from services.extractor.handler import DEFAULT_MAX_COMPLAINT_CHARS, ExtractorHandler
from services.pricing.table import DEFAULT_CAP_CURRENCY, DEFAULT_CAP_MINOR, CapCurrency, CapMinor


class Settings(SingleRoleSettings):
    ROLE = "extractor"

    extractor_model: str = "standin-extractor"
    extractor_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    extractor_base_url: str = ""
    """This role's endpoint; empty: ``LLM_BASE_URL``."""
    extractor_api_key: SecretStr = SecretStr("")
    """The key of ``EXTRACTOR_BASE_URL``; empty: ``LLM_API_KEY``, which is sent only to
    ``LLM_BASE_URL`` (an own base URL without an own key refuses to start)."""
    extractor_rate_per_second: OwnRate = None
    """The refill rate (calls per second) of the rate-limit bucket of this role's endpoint and
    key; unset or empty: ``LLM_RATE_PER_SECOND``. Refused when not above 0, and on
    ``LLM_BASE_URL`` with ``LLM_API_KEY`` unless it equals ``LLM_RATE_PER_SECOND``."""
    extractor_prompt_version: ExtractorPromptVersion = EXTRACTOR_PROMPT_VERSION
    auto_approve_cap_minor: CapMinor = DEFAULT_CAP_MINOR
    auto_approve_cap_currency: CapCurrency = DEFAULT_CAP_CURRENCY
    max_complaint_chars: int = Field(default=DEFAULT_MAX_COMPLAINT_CHARS, ge=1, le=1_000_000)
    """Longest complaint text judged; a longer one is dead-lettered before any model call (the
    API's setting of the same name refuses it at intake; this guards what is published to
    Kafka directly)."""


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    registry = CollectorRegistry()
    metrics = PrometheusMetrics("extractor", registry)
    role = single_role(
        settings,
        metrics,
        model=settings.extractor_model,
        temperature=settings.extractor_temperature,
        access=settings.endpoint(),
    )
    pool = pg_pool(settings.database_conninfo())
    handler = ExtractorHandler(
        pool,
        role.llm,
        role.cache,
        load_prompt(settings.extractor_prompt_version),
        settings.auto_approve_cap_minor,
        on_call=call_counter(metrics),
        cap_currency=settings.auto_approve_cap_currency,
        max_complaint_chars=settings.max_complaint_chars,
    )
    spec = dataclasses.replace(
        handler.spec(),
        startup=lifecycle(opened(pool), role.redis.ping),
        shutdown=lifecycle(pool.close, *role.closers()),
    )
    run_stage(spec, settings, registry, metrics)


if __name__ == "__main__":
    main()
