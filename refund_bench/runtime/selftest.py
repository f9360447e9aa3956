"""Reference stages that verify and benchmark the runtime on a real broker.

- ``passthrough``: copies every ``bench.record`` from the input topic to the output topic. With
  ``--jitter-ms`` the handler is asynchronous and waits a random 0..jitter ms per record, so
  batches finish out of order: the pipelined path of the async stages.
- ``counter``: counts records per key in a changelog-backed store and emits the running count
  (``seq``) with every record, so a reader can check the final counts are exact.

Run as ``python -m refund_bench.runtime.selftest passthrough --input A --output B ...``; the
crash, fencing and benchmark scripts start them as separate processes. They sign in to Kafka
from the same settings as the services (``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*``,
``KAFKA_SSL_*``), so they can check the runtime on a secured cluster too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Annotated

import typer

from refund_bench.codec import framing_from_registry_url
from refund_bench.config import StackSettings
from refund_bench.runtime.messages import Context, Emit, Guarantee, Message
from refund_bench.runtime.runner import RuntimeConfig, StageRunner, StageSpec
from refund_bench.service import configure_logging
from refund_bench.topics import Topic

BENCH_SCHEMA = "bench.record"


def passthrough_spec(name: str, source: str, sink: str, jitter_ms: float = 0.0) -> StageSpec:
    """A stage that emits each input value unchanged to ``sink``.

    ``jitter_ms > 0``: an async handler that first waits a random 0..jitter_ms.
    """
    out = Topic(sink, BENCH_SCHEMA)

    def handle(message: Message, _ctx: Context) -> Sequence[Emit]:
        return [Emit(out.name, message.key or "", message.value)]

    async def handle_later(message: Message, ctx: Context) -> Sequence[Emit]:
        await asyncio.sleep(random.uniform(0, jitter_ms / 1000))  # noqa: S311 - not crypto
        return handle(message, ctx)

    handler = handle_later if jitter_ms > 0 else handle
    return StageSpec(name, (Topic(source, BENCH_SCHEMA),), (out,), handler)


def counter_spec(name: str, source: str, sink: str) -> StageSpec:
    """A stateful stage: per key, ``seq`` of the output is the number of inputs seen so far."""
    out = Topic(sink, BENCH_SCHEMA)

    def handle(message: Message, ctx: Context) -> Sequence[Emit]:
        key = message.key or ""
        state = ctx.store()
        count = int(state.get(key) or 0) + 1
        state.put(key, count)
        return [Emit(out.name, key, {"id": message.value["id"], "seq": count, "payload": ""})]

    return StageSpec(name, (Topic(source, BENCH_SCHEMA),), (out,), handle, store="counts")


app = typer.Typer(add_completion=False, help=__doc__)


def _run(
    spec: StageSpec,
    bootstrap: str,
    registry_url: str,
    group: str,
    txn_id: str,
    guarantee: Guarantee,
    batch: int,
    instance_id: str,
) -> None:
    configure_logging("WARNING")
    config = RuntimeConfig(
        bootstrap_servers=bootstrap,
        group_id=group,
        transactional_id=txn_id,
        guarantee=guarantee,
        batch_max_records=batch,
        group_instance_id=instance_id or None,
        # Signed in as the services are: KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*, KAFKA_SSL_*.
        kafka_security=StackSettings().kafka_security_config(),
    )
    runner = StageRunner(spec, config, framing_from_registry_url(registry_url))
    import signal

    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    runner.run()


Bootstrap = Annotated[str, typer.Option(envvar="KAFKA_BOOTSTRAP_SERVERS")]
Registry = Annotated[str, typer.Option(envvar="SCHEMA_REGISTRY_URL")]


@app.command()
def passthrough(
    input: Annotated[str, typer.Option()],
    output: Annotated[str, typer.Option()],
    group: Annotated[str, typer.Option()],
    txn_id: Annotated[str, typer.Option()],
    bootstrap: Bootstrap = "127.0.0.1:19092",
    registry_url: Registry = "",
    guarantee: Annotated[str, typer.Option()] = "exactly-once",
    batch: int = 1000,
    instance_id: str = "",
    jitter_ms: float = 0.0,
) -> None:
    """Copy records from --input to --output (asynchronously with --jitter-ms)."""
    spec = passthrough_spec(f"passthrough-{group}", input, output, jitter_ms)
    _run(spec, bootstrap, registry_url, group, txn_id, _guarantee(guarantee), batch, instance_id)


@app.command()
def counter(
    input: Annotated[str, typer.Option()],
    output: Annotated[str, typer.Option()],
    group: Annotated[str, typer.Option()],
    txn_id: Annotated[str, typer.Option()],
    bootstrap: Bootstrap = "127.0.0.1:19092",
    registry_url: Registry = "",
    batch: int = 500,
    instance_id: str = "",
) -> None:
    """Count records per key, with the counts in a changelog-backed store."""
    spec = counter_spec(group, input, output)
    _run(spec, bootstrap, registry_url, group, txn_id, "exactly-once", batch, instance_id)


def _guarantee(value: str) -> Guarantee:
    if value == "exactly-once":
        return "exactly-once"
    if value == "at-least-once":
        return "at-least-once"
    raise typer.BadParameter("exactly-once or at-least-once")


if __name__ == "__main__":
    app()
