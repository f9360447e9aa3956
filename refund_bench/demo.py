"""The demo: run all services, publish the sample complaints, print each dispute's story.

``make demo`` runs it on the local stack with the embedded defaults (the LLM stand-in,
stripe-mock). Per dispute it prints the grievances, the K rulings, votes and verdicts, the
priced lines and total, the reply and the payout status.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psycopg
import typer

from refund_bench.config import StackSettings
from refund_bench.db.orders import upsert_orders
from refund_bench.disputes import load_story, render
from refund_bench.launcher import REPO, Launcher
from refund_bench.publish import ComplaintPublisher
from refund_bench.samples import SAMPLE_COMPLAINTS, SAMPLE_ORDERS, own_copy

app = typer.Typer(add_completion=False)


@app.command()
def demo(
    timeout_s: float = 120.0,
    llm_stats_url: str = "http://127.0.0.1:18090/stats",
    log_dir: Path = REPO / ".stack" / "logs" / "demo",
) -> None:
    """Start the six stages and the recorder, publish the samples, print the outcomes."""
    settings = StackSettings()
    launcher = Launcher(log_dir=log_dir)
    launcher.start()
    try:
        launcher.wait_ready()
        publisher = ComplaintPublisher(
            settings.kafka_bootstrap_servers,
            settings.schema_registry_url,
            settings.kafka_security_config(),
        )
        run = time.strftime("%Y%m%d-%H%M%S")
        # Each run complains about its own copies of the sample orders: an order's payment is
        # refunded for one dispute only, so a second run on the same orders would pay nothing.
        orders = {o.order_id: own_copy(o, run) for o in SAMPLE_ORDERS}
        with psycopg.connect(settings.database_url.get_secret_value()) as conn:
            upsert_orders(conn, orders.values())
        disputes: list[tuple[str, str]] = []
        for sample in SAMPLE_COMPLAINTS:
            dispute_id = f"demo-{run}-{sample.label}"
            order_id = orders[sample.order_id].order_id
            publisher.publish(dispute_id, order_id, sample.customer_id, sample.text, channel="demo")
            disputes.append((dispute_id, f"{sample.label} ({sample.shows})"))
        publisher.flush()
        typer.echo(f"published {len(disputes)} sample complaints; waiting for their outcomes\n")
        _wait_and_print(settings, disputes, timeout_s, llm_stats_url)
    finally:
        launcher.stop()


def _wait_and_print(
    settings: StackSettings, disputes: list[tuple[str, str]], timeout_s: float, stats_url: str
) -> None:
    deadline = time.monotonic() + timeout_s
    pending = dict(disputes)
    with psycopg.connect(settings.database_url.get_secret_value()) as conn:
        while pending and time.monotonic() < deadline:
            for dispute_id in list(pending):
                if load_story(conn, dispute_id).is_final():
                    pending.pop(dispute_id)
            time.sleep(0.3)
        try:
            by_dispute = httpx.get(stats_url, timeout=5).json().get("by_dispute", {})
        except httpx.HTTPError:
            by_dispute = {}
        for dispute_id, label in disputes:
            typer.echo(render(load_story(conn, dispute_id), label))
            if dispute_id in by_dispute:
                typer.echo(f"  LLM calls: {by_dispute[dispute_id]}")
            typer.echo("")
    if pending:
        typer.echo(f"not final after {timeout_s}s: {sorted(pending)}", err=True)
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
