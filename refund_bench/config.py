"""Settings models. Only entry points read the environment; libraries take plain values.

Each service defines one frozen settings class deriving from :class:`StageSettings`; field
names map to upper-case environment variables (``kafka_bootstrap_servers`` ->
``KAFKA_BOOTSTRAP_SERVERS``). Defaults match the local stack (``make stack-up``).
"""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from refund_bench.gc_tuning import DEFAULT_YOUNG_THRESHOLD


class StackSettings(BaseSettings):
    """Addresses of the shared infrastructure."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    kafka_bootstrap_servers: str = "127.0.0.1:19092"
    schema_registry_url: str = ""
    topic_partitions: int = Field(default=12, ge=1)
    topic_replication_factor: int = Field(default=1, ge=1)
    database_url: SecretStr = SecretStr(
        "postgresql://refund_bench:refund_bench@127.0.0.1:15432/refund_bench"
    )
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:16379/0")


class StageSettings(StackSettings):
    """Settings every stage has: how its runtime consumes, batches and reports."""

    guarantee: Literal["exactly-once", "at-least-once"] = "exactly-once"
    batch_max_records: int = Field(default=500, ge=1)
    batch_max_wait_ms: int = Field(default=50, ge=1)
    max_inflight: int = Field(default=512, ge=1)
    max_pending_records: int = Field(default=2000, ge=1)
    transactional_id: str = ""
    group_instance_id: str = ""
    state_retention_hours: float | None = Field(default=None, gt=0)
    """Stateful stages: how long a state key outlives its last write; unset, the stage's own
    default (tally 7 days, pricing 90 days)."""
    metrics_host: str = "0.0.0.0"  # noqa: S104 - scraped from inside the cluster
    metrics_port: int = 9400
    log_level: str = "INFO"
    gc_young_threshold: int = Field(default=DEFAULT_YOUNG_THRESHOLD, ge=0)
    """Allocations between young-generation collections (see ``refund_bench.gc_tuning``); 0 keeps
    Python's default (700)."""

    def instance_id(self, stage: str) -> str:
        """This instance's transactional id: set explicitly, or ``<stage>-<hostname>``.

        On Kubernetes the hostname is the pod name, unique per replica.
        """
        return self.transactional_id or f"{stage}-{socket.gethostname()}"
