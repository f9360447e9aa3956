"""``python -m services.settler``: write the guarded customer reply and request the payout."""

from __future__ import annotations

import dataclasses
from typing import Self

from prometheus_client import CollectorRegistry
from pydantic import Field, SecretStr, model_validator

from refund_bench.llm.roles import SETTLER_PROMPT_VERSION, load_prompt
from refund_bench.llm_setup import EndpointAccess, LlmStageSettings, call_counter, single_role
from refund_bench.resources import lifecycle, opened, pg_pool
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.service import configure_logging, run_stage
from services.settler.handler import SettlerHandler


class Settings(LlmStageSettings):
    settler_model: str = "standin-settler"
    settler_temperature: float = Field(default=0.2, ge=0.0, le=1.0)
    settler_base_url: str = ""
    """This role's endpoint; empty: ``LLM_BASE_URL``."""
    settler_api_key: SecretStr = SecretStr("")
    """The key of ``SETTLER_BASE_URL``; empty: ``LLM_API_KEY``, which is sent only to
    ``LLM_BASE_URL`` (an own base URL without an own key refuses to start)."""
    settler_prompt_version: str = SETTLER_PROMPT_VERSION

    @model_validator(mode="after")
    def _endpoint_has_its_key(self) -> Self:
        self.endpoint()
        return self

    def endpoint(self) -> EndpointAccess:
        """Where the settler calls and with which key (see ``LlmStageSettings.access``)."""
        return self.access(
            self.settler_base_url,
            self.settler_api_key,
            who="the settler",
            url_setting="SETTLER_BASE_URL",
            key_setting="SETTLER_API_KEY",
        )


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
