"""``python -m services.tally``: count each grievance's K rulings, exactly once."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from refund_bench.config import StageSettings
from refund_bench.service import configure_logging, run_stage
from services.tally.handler import spec


def main() -> None:
    settings = StageSettings()
    configure_logging(settings.log_level)
    run_stage(spec(), settings, CollectorRegistry())


if __name__ == "__main__":
    main()
