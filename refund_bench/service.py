"""Entry-point plumbing shared by every stage: logging, metrics/health server, SIGTERM, run."""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from prometheus_client import CollectorRegistry

from refund_bench.codec import framing_from_registry_url
from refund_bench.config import StageSettings
from refund_bench.gc_tuning import tune_gc
from refund_bench.runtime.dlq import DlqBudget
from refund_bench.runtime.health import HealthServer, Heartbeat
from refund_bench.runtime.metrics import PrometheusMetrics, retry_counter
from refund_bench.runtime.runner import RuntimeConfig, StageRunner, StageSpec

log = logging.getLogger(__name__)


def runtime_config(settings: StageSettings, stage: str) -> RuntimeConfig:
    """The runtime config of one instance of ``stage``, from its settings."""
    hours = settings.state_retention_hours
    return RuntimeConfig(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        group_id=settings.consumer_group or stage,
        transactional_id=settings.instance_id(stage),
        guarantee=settings.guarantee,
        batch_max_records=settings.batch_max_records,
        batch_max_wait_s=settings.batch_max_wait_ms / 1000,
        max_inflight=settings.max_inflight,
        max_pending_records=settings.max_pending_records,
        drain_timeout_s=settings.drain_timeout_s,
        group_instance_id=settings.group_instance_id or None,
        state_retention_s=None if hours is None else hours * 3600,
        kafka_security=settings.kafka_security_config(),
        dlq_budget=DlqBudget(
            max_fraction=settings.dlq_max_fraction,
            # Every record a put-back may poll again is remembered, however large the settings.
            remembered=max(
                DlqBudget.remembered, settings.max_pending_records + settings.batch_max_records
            ),
        ),
    )


QUIET_LOGGERS = ("httpx", "httpx2", "openai", "stripe")
"""Client libraries that log every request at INFO: kept at WARNING whatever ``level`` is.

At hundreds of LLM calls per second their per-request lines would cost CPU and disk and say
nothing the metrics do not.
"""


def configure_logging(level: str) -> None:
    """Log to stderr at ``level``; the per-request loggers of :data:`QUIET_LOGGERS` at WARNING."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


def run_stage(
    spec: StageSpec,
    settings: StageSettings,
    registry: CollectorRegistry,
    metrics: PrometheusMetrics | None = None,
) -> None:
    """Run ``spec`` until SIGTERM/SIGINT, serving /healthz, /readyz and /metrics meanwhile.

    On SIGTERM the open batches are finished (committed) and the consumer leaves the group:
    an async stage drains for at most ``DRAIN_TIMEOUT_S`` (20 s), then the last commit takes at
    most its commit timeout (30 s), inside the 60 s ``terminationGracePeriodSeconds`` of the
    manifests (more than Kubernetes' default 30 s).
    """
    heartbeat = Heartbeat(liveness_timeout_s=120.0)
    metrics = metrics or PrometheusMetrics(spec.name, registry)
    runner = StageRunner(
        spec,
        runtime_config(settings, spec.name),
        framing_from_registry_url(settings.schema_registry_url, on_retry=retry_counter(metrics)),
        metrics=metrics,
        heartbeat=heartbeat,
    )

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: signal %d, finishing the open batch", spec.name, signum)
        runner.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = HealthServer(heartbeat, registry, settings.metrics_host, settings.metrics_port).start()
    log.info("%s: metrics and health on port %d", spec.name, server.port)
    tune_gc(settings.gc_young_threshold)
    try:
        runner.run()
    finally:
        server.stop()
    log.info("%s: stopped", spec.name)
