"""``python -m services.recorder``: run the audit/review-queue projection."""

from __future__ import annotations

from typing import Literal

import psycopg
from prometheus_client import CollectorRegistry

from refund_bench.config import StageSettings
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.service import configure_logging, run_stage
from services.recorder.handler import Recorder


class Settings(StageSettings):
    # A projection made idempotent by natural keys: at-least-once is enough, and cheaper.
    guarantee: Literal["exactly-once", "at-least-once"] = "at-least-once"


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    with psycopg.connect(settings.database_conninfo(), autocommit=True) as conn:
        registry = CollectorRegistry()
        metrics = PrometheusMetrics("recorder", registry)
        recorder = Recorder(conn, metrics=metrics)
        run_stage(recorder.spec(), settings, registry, metrics)


if __name__ == "__main__":
    main()
