"""``python -m services.settler``: write the guarded customer reply and request the payout."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry
from pydantic import Field, SecretStr

from refund_bench.llm.roles import SETTLER_PROMPT_VERSION, SettlerPromptVersion, load_prompt
from refund_bench.llm_setup import OwnRate, SingleRoleSettings, call_counter, single_role
from refund_bench.resources import lifecycle, opened, pg_pool
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.service import configure_logging, run_stage
from services.settler.handler import SettlerHandler


class Settings(SingleRoleSettings):
    ROLE = "settler"

    settler_model: str = "standin-settler"
    settler_temperature: float = Field(default=0.2, ge=0.0, le=1.0)
    settler_base_url: str = ""
    """This role's endpoint; empty: ``LLM_BASE_URL``."""
    settler_api_key: SecretStr = SecretStr("")
    """The key of ``SETTLER_BASE_URL``; empty: ``LLM_API_KEY``, which is sent only to
    ``LLM_BASE_URL`` (an own base URL without an own key refuses to start)."""
    settler_rate_per_second: OwnRate = None
    """The refill rate (calls per second) of the rate-limit bucket of this role's endpoint and
    key; unset or empty: ``LLM_RATE_PER_SECOND``. Refused when not above 0, and on
    ``LLM_BASE_URL`` with ``LLM_API_KEY`` unless it equals ``LLM_RATE_PER_SECOND``."""
    settler_prompt_version: SettlerPromptVersion = SETTLER_PROMPT_VERSION


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    registry = CollectorRegistry()
    metrics = PrometheusMetrics("settler", registry)
    role = single_role(
        settings,
        metrics,
        model=settings.settler_model,
        temperature=settings.settler_temperature,
        access=settings.endpoint(),
    )
    pool = pg_pool(settings.database_conninfo())
    handler = SettlerHandler(
        pool,
        role.llm,
        role.cache,
        load_prompt(settings.settler_prompt_version),
        on_call=call_counter(metrics),
    )
    spec = dataclasses.replace(
        handler.spec(),
        startup=lifecycle(opened(pool), role.redis.ping),
        shutdown=lifecycle(pool.close, *role.closers()),
    )
    run_stage(spec, settings, registry, metrics)


if __name__ == "__main__":
    main()
