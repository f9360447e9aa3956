"""``python -m services.payout``: pay auto-approved refunds through Stripe, at most once."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry
from pydantic import Field, SecretStr

from refund_bench.config import StageSettings
from refund_bench.resources import lifecycle, opened, pg_pool
from refund_bench.retry import RetryPolicy
from refund_bench.runtime.metrics import PrometheusMetrics, retry_counter
from refund_bench.service import configure_logging, run_stage
from services.payout.handler import PayoutHandler
from services.payout.ledger import PayoutLedger
from services.payout.payments import StripePayments


class Settings(StageSettings):
    stripe_api_key: SecretStr = SecretStr("sk_test_123")
    stripe_api_base: str = "http://127.0.0.1:12111"
    stripe_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds a refund request may take before it is retried (with the same key)."""
    batch_max_records: int = Field(default=200, ge=1)


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    pool = pg_pool(settings.database_conninfo(), max_size=20)
    payments = StripePayments(
        settings.stripe_api_key.get_secret_value(),
        settings.stripe_api_base,
        timeout_s=settings.stripe_timeout_s,
    )
    registry = CollectorRegistry()
    metrics = PrometheusMetrics("payout", registry)
    handler = PayoutHandler(
        PayoutLedger(pool), payments, RetryPolicy(), on_retry=retry_counter(metrics)
    )
    spec = dataclasses.replace(
        handler.spec(),
        startup=lifecycle(opened(pool)),
        shutdown=lifecycle(pool.close, payments.aclose),
    )
    run_stage(spec, settings, registry, metrics)


if __name__ == "__main__":
    main()
