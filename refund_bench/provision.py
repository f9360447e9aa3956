"""Provision the stack for Refund Bench: topics, database schema, sample orders. Idempotent.

``python -m refund_bench.provision`` is run by ``make stack-up``; running it twice is a no-op.
"""

from __future__ import annotations

import typer

from refund_bench.config import StackSettings
from refund_bench.db.migrate import migrate
from refund_bench.db.orders import upsert_orders
from refund_bench.samples import SAMPLE_ORDERS
from refund_bench.topics import all_topic_specs, ensure_topics

app = typer.Typer(add_completion=False)


@app.command()
def provision(seed: bool = True) -> None:
    """Create missing topics, apply the schema and (by default) seed the sample orders."""
    import psycopg

    settings = StackSettings()
    created = ensure_topics(
        settings.kafka_bootstrap_servers,
        all_topic_specs(),
        partitions=settings.topic_partitions,
        replication_factor=settings.topic_replication_factor,
    )
    conninfo = settings.database_url.get_secret_value()
    migrate(conninfo)
    seeded = 0
    if seed:
        with psycopg.connect(conninfo) as conn:
            seeded = upsert_orders(conn, SAMPLE_ORDERS)
    typer.echo(
        f"provisioned: {len(created)} topics created, schema applied, {seeded} orders seeded"
    )


if __name__ == "__main__":
    app()
