"""``python -m services.pricing``: price each dispute once all its verdicts are in."""

from __future__ import annotations

import psycopg
from prometheus_client import CollectorRegistry

from refund_bench.config import StageSettings
from refund_bench.db.snapshots import SnapshotReader
from refund_bench.service import configure_logging, run_stage
from services.pricing.handler import PricingHandler
from services.pricing.table import DEFAULT_CAP_CURRENCY, DEFAULT_CAP_MINOR, CapCurrency, CapMinor


class Settings(StageSettings):
    auto_approve_cap_minor: CapMinor = DEFAULT_CAP_MINOR
    auto_approve_cap_currency: CapCurrency = DEFAULT_CAP_CURRENCY


def main() -> None:
    settings = Settings()
    configure_logging(settings.log_level)
    with psycopg.connect(settings.database_conninfo(), autocommit=True) as conn:
        handler = PricingHandler(
            SnapshotReader(conn).get,
            settings.auto_approve_cap_minor,
            settings.auto_approve_cap_currency,
        )
        run_stage(handler.spec(), settings, CollectorRegistry())


if __name__ == "__main__":
    main()
