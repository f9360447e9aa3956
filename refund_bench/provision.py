"""Provision the stack for Refund Bench: topics, database schema, sample orders. Idempotent.

``python -m refund_bench.provision`` is run by ``make stack-up``; running it twice is a no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import psycopg
import typer

from refund_bench.config import StackSettings
from refund_bench.db.migrate import DEFAULT_LOCK_TIMEOUT_MS, MigrationBlockedError, migrate
from refund_bench.db.orders import upsert_orders
from refund_bench.kafka_acls import apply_acls
from refund_bench.samples import SAMPLE_ORDERS
from refund_bench.topics import DEFAULT_PARTITIONS, all_topic_specs, ensure_topics

app = typer.Typer(add_completion=False)


def provision_stack(
    bootstrap_servers: str,
    conninfo: str,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    replication_factor: int = 1,
    seed: bool = True,
    kafka_security: Mapping[str, str] | None = None,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
) -> tuple[int, int]:
    """Create missing topics, apply the schema, seed the sample orders; returns
    (topics created, orders seeded). Idempotent."""
    created = ensure_topics(
        bootstrap_servers,
        all_topic_specs(),
        partitions=partitions,
        replication_factor=replication_factor,
        security=kafka_security,
    )
    migrate(conninfo, lock_timeout_ms=lock_timeout_ms)
    seeded = 0
    if seed:
        with psycopg.connect(conninfo) as conn:
            seeded = upsert_orders(conn, SAMPLE_ORDERS)
    return len(created), seeded


@app.command()
def provision(
    seed: bool = True,
    acl_principal_prefix: Annotated[
        str,
        typer.Option(
            help="Also create each client's Kafka access rules (refund_bench.kafka_acls) for the"
            " principal <prefix><client>, e.g. 'User:refund-bench-' for User:refund-bench-judge."
            " Needs a Kafka user that may alter ACLs. Empty: no rules.",
        ),
    ] = "",
    prune_acls: Annotated[
        bool,
        typer.Option(
            help="With --acl-principal-prefix: also remove every other rule those principals"
            " hold (e.g. for a topic renamed since). Other principals' rules are never touched.",
        ),
    ] = False,
) -> None:
    """Create missing topics, apply the schema and (by default) seed the sample orders."""
    if prune_acls and not acl_principal_prefix:
        raise typer.BadParameter("--prune-acls needs --acl-principal-prefix")
    settings = StackSettings()
    try:
        created, seeded = provision_stack(
            settings.kafka_bootstrap_servers,
            settings.database_url.get_secret_value(),
            partitions=settings.topic_partitions,
            replication_factor=settings.topic_replication_factor,
            seed=seed,
            kafka_security=settings.kafka_security_config(),
            lock_timeout_ms=settings.pg_migration_lock_timeout_ms,
        )
    except MigrationBlockedError as exc:
        typer.echo(f"provision failed: {exc}", err=True)
        raise typer.Exit(code=1) from exc
    typer.echo(f"provisioned: {created} topics created, schema applied, {seeded} orders seeded")
    if acl_principal_prefix:
        changes = apply_acls(
            settings.kafka_bootstrap_servers,
            acl_principal_prefix,
            settings.kafka_security_config(),
            prune=prune_acls,
        )
        removed = f", {changes.removed} other rules removed" if prune_acls else ""
        typer.echo(f"access rules: {changes.asked} for {acl_principal_prefix}<client>{removed}")


if __name__ == "__main__":
    app()
