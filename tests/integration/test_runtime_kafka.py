"""The runtime against a real broker: exactly-once under SIGKILL, aborts, fencing, state, DLQ."""

from __future__ import annotations

import asyncio
import re
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from refund_bench.codec import Codec, Framing
from refund_bench.errors import DlqLimitExceeded, Fenced
from refund_bench.runtime.dlq import DlqBudget
from refund_bench.runtime.health import Heartbeat
from refund_bench.runtime.messages import Context, Emit, Message
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.runtime.runner import (
    MAX_PUT_BACK_IN_A_ROW,
    RuntimeConfig,
    StageRunner,
    StageSpec,
)
from refund_bench.runtime.selftest import counter_spec, passthrough_spec
from refund_bench.topics import Topic
from tests.conftest import Stack, TopicFactory
from tests.fakes.registry_proxy import RegistryProxy, schema_id_of
from tests.kafka_helpers import (
    Read,
    StageThread,
    bench_codec,
    produce_raw,
    produce_values,
    read_committed,
    read_to_end,
    start_selftest,
    wait_consumed,
    wait_for,
)
from tests.raw_header_producer import produce_with_header_name

pytestmark = pytest.mark.stack

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _records(n: int, keys: int | None = None) -> list[tuple[str, dict[str, object]]]:
    return [
        (f"k{i % keys}" if keys else f"r{i}", {"id": f"r{i}", "seq": i, "payload": "x" * 16})
        for i in range(n)
    ]


def _config(kafka: str, group: str, **overrides: object) -> RuntimeConfig:
    base: dict[str, object] = {
        "bootstrap_servers": kafka,
        "group_id": group,
        "transactional_id": f"{group}-0",
        "batch_max_records": 100,
    }
    base.update(overrides)
    return RuntimeConfig(**base)  # type: ignore[arg-type]


def _selftest_args(
    source: str, sink: str, group: str, batch: int, instance: int = 0
) -> tuple[str, ...]:
    """CLI arguments of a selftest stage with a stable identity across restarts."""
    return (
        "--input", source, "--output", sink, "--group", group,
        "--txn-id", f"{group}-txn-{instance}", "--instance-id", f"{group}-{instance}",
        "--batch", str(batch),
    )  # fmt: skip


HANDLERS = {"sync": (), "async-pipelined": ("--jitter-ms", "20")}
"""Selftest arguments per handler kind: async handlers run on the pipelined path."""


def _start_selftest(stack: Stack, kind: str, group: str, *args: str) -> subprocess.Popen[bytes]:
    """A selftest stage of ``kind`` as its own process on the stack, logging to the artifacts
    under ``group``'s name."""
    ARTIFACTS.mkdir(exist_ok=True)
    return start_selftest(
        kind,
        *args,
        kafka=stack.kafka,
        registry_url=stack.registry_url,
        log_path=ARTIFACTS / f"{group}.log",
    )


def read_sink(
    stack: Stack,
    codec: Codec,
    sink: str,
    *,
    at_least: int,
    timeout_s: float,
    consumed_by: tuple[str, str] | None = None,
) -> list[Read]:
    """The committed, decoded records of ``sink`` once there are ``at_least``. With
    ``consumed_by`` (a stage's group and its source): once the group has also committed all
    of the source as it then stands, every record of ``sink``, so that a duplicate written
    after the first ``at_least`` is seen (:func:`wait_consumed`)."""
    decode = partial(codec.decode, sink)
    records = read_committed(
        stack.kafka, sink, until=lambda rs: len(rs) >= at_least, timeout_s=timeout_s, decode=decode
    )
    if consumed_by is None:
        return records
    group, source = consumed_by
    wait_consumed(stack.kafka, group, source, timeout_s=timeout_s)
    return read_to_end(stack.kafka, sink, timeout_s=timeout_s, decode=decode)


def read_stopped(stack: Stack, codec: Codec, sink: str, *, at_least: int) -> list[Read]:
    """Every committed, decoded record of ``sink``, whose writers have stopped, once there are
    ``at_least`` (a commit is answered before its markers are written, and a read_committed
    reader sees its records only then)."""
    decode = partial(codec.decode, sink)
    read_committed(stack.kafka, sink, until=lambda rs: len(rs) >= at_least, timeout_s=30)
    return read_to_end(stack.kafka, sink, timeout_s=30, decode=decode)


class _Progress:
    """Counts committed output records in the background while a stage is being killed."""

    def __init__(self, kafka: str, topic: str) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._kafka = kafka
        self._topic = topic
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        def until(records: list[Read]) -> bool:
            self.count = len(records)
            return self._stop.is_set()

        read_committed(self._kafka, self._topic, until=until, timeout_s=600)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _wait_progress(progress: _Progress, target: int) -> None:
    wait_for(lambda: progress.count >= target, 120, f"output to reach {target}")


@pytest.mark.slow
@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_exactly_once_through_repeated_sigkill(
    stack: Stack, framing: Framing, new_topic: TopicFactory, handler: str
) -> None:
    """10,000 records through a pass-through killed with SIGKILL 6 times: each output once.

    The input comes in chunks, one per run, and each run is killed once its output passes the
    middle of its chunk: a run cannot get ahead of the kills, however fast the machine (with
    all the input there at once, a fast stage once finished it in four runs)."""
    total, chunk, kills = 10_000, 1_200, 6
    source, sink = new_topic("eos-in", 6), new_topic("eos-out", 6)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    codec = bench_codec(framing, source, sink)
    inputs = _records(total)
    args = (*_selftest_args(source, sink, group, batch=50), *HANDLERS[handler])
    progress = _Progress(stack.kafka, sink)
    try:
        for run in range(kills):
            produce_values(stack.kafka, source, inputs[run * chunk : (run + 1) * chunk], codec)
            proc = _start_selftest(
                stack,
                "passthrough",
                group,
                *args,
            )
            try:
                _wait_progress(progress, run * chunk + chunk // 2)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
        produce_values(stack.kafka, source, inputs[kills * chunk :], codec)
        final = _start_selftest(
            stack,
            "passthrough",
            group,
            *args,
        )
        try:
            records = read_sink(
                stack, codec, sink, at_least=total, timeout_s=180, consumed_by=(group, source)
            )
        finally:
            final.terminate()
            final.wait(30)
    finally:
        progress.close()
    ids = Counter(r.value["id"] for r in records)
    duplicates = {k: c for k, c in ids.items() if c > 1}
    assert not duplicates, f"{len(duplicates)} duplicated outputs, e.g. {list(duplicates)[:5]}"
    assert set(ids) == {f"r{i}" for i in range(total)}
    assert len(records) == total


def test_pipelined_batches_overlap_and_commit_in_poll_order(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """An async stage keeps several batches in flight; outputs still come out in input order."""
    total = 600
    source, sink = new_topic("pipe-in", 1), new_topic("pipe-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")
    in_flight = 0
    most_in_flight = 0

    async def slow_then_fast(message: Message, _ctx: Context) -> Sequence[Emit]:
        # Every other run of ten records waits, so later batches finish before earlier ones.
        nonlocal in_flight, most_in_flight
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        await asyncio.sleep(0.05 if (int(message.value["seq"]) // 10) % 2 == 0 else 0.0)
        in_flight -= 1
        return [Emit(out.name, message.key or "", message.value)]

    spec = StageSpec("pipe", (Topic(source, "bench.record"),), (out,), slow_then_fast)
    group = f"pipe-{uuid.uuid4().hex[:8]}"
    config = _config(stack.kafka, group, batch_max_records=10, max_pending_records=200)
    stage = StageThread(StageRunner(spec, config, framing)).start()
    try:
        records = read_sink(
            stack, codec, sink, at_least=total, timeout_s=60, consumed_by=(group, source)
        )
    finally:
        assert stage.stop() is None
    assert [r.value["seq"] for r in records] == list(range(total))
    assert most_in_flight > 10, "batches of 10 never overlapped"


def test_records_of_a_partition_revoked_in_flight_are_left_to_the_new_owner(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """A holds every record in flight; B joins and takes a partition; A commits only the rest."""
    total = 400
    source, sink = new_topic("revoke-in", 2), new_topic("revoke-out", 2)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")
    gate = threading.Event()
    started = 0

    async def held(message: Message, _ctx: Context) -> Sequence[Emit]:
        nonlocal started
        started += 1
        while not gate.is_set():  # released by the test thread
            await asyncio.sleep(0.01)
        return [Emit(out.name, message.key or "", message.value)]

    async def at_once(message: Message, _ctx: Context) -> Sequence[Emit]:
        return [Emit(out.name, message.key or "", message.value)]

    group = f"revoke-{uuid.uuid4().hex[:8]}"
    inputs = (Topic(source, "bench.record"),)

    def runner(handler: Any, instance: int) -> StageRunner:
        config = _config(
            stack.kafka, group, transactional_id=f"{group}-{instance}", max_pending_records=1000
        )
        return StageRunner(StageSpec("revoke", inputs, (out,), handler), config, framing)

    inputs_read = read_committed(
        stack.kafka,
        source,
        until=lambda rs: len(rs) == total,
        timeout_s=60,
        decode=lambda raw: codec.decode(source, raw),
    )
    by_partition = [{r.value["id"] for r in inputs_read if r.partition == p} for p in range(2)]
    first = StageThread(runner(held, 0)).start()
    second: StageThread | None = None
    try:
        wait_for(lambda: started >= total, 60, "the first instance to hold every record")
        second = StageThread(runner(at_once, 1)).start()
        # Only the second instance can commit: the records of the partition it took over, all
        # of them, and nothing else while the first holds its own.
        taken_over = read_committed(
            stack.kafka,
            sink,
            until=lambda rs: {r.value["id"] for r in rs} in by_partition,
            timeout_s=60,
            decode=lambda raw: codec.decode(sink, raw),
        )
        gate.set()
        records = read_sink(
            stack, codec, sink, at_least=total, timeout_s=60, consumed_by=(group, source)
        )
    finally:
        gate.set()
        errors = [first.stop(), second.stop() if second is not None else None]
    assert errors == [None, None]
    released = first.runner.records_released
    assert 0 < len(taken_over) == released < total
    ids = Counter(r.value["id"] for r in records)
    assert {k: c for k, c in ids.items() if c > 1} == {}
    assert set(ids) == {f"r{i}" for i in range(total)}


def test_a_stop_waits_for_the_records_in_flight_only_until_the_drain_timeout(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """An async stage whose calls hang is stopped: it exits after ``drain_timeout_s``, leaves
    the records uncommitted, and the next instance of the group processes each of them once."""
    total = 50
    source, sink = new_topic("drain-in", 1), new_topic("drain-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")
    started = 0

    async def hangs(message: Message, _ctx: Context) -> Sequence[Emit]:
        nonlocal started
        started += 1
        await asyncio.Event().wait()  # a call that never answers
        return []

    async def at_once(message: Message, _ctx: Context) -> Sequence[Emit]:
        return [Emit(out.name, message.key or "", message.value)]

    group = f"drain-{uuid.uuid4().hex[:8]}"
    inputs = (Topic(source, "bench.record"),)

    def runner(handler: Any) -> StageRunner:
        config = _config(stack.kafka, group, drain_timeout_s=1.0)
        return StageRunner(StageSpec("drain", inputs, (out,), handler), config, framing)

    first = StageThread(runner(hangs)).start()
    wait_for(lambda: started >= total, 60, "every record to be in flight")
    stopped_at = time.monotonic()
    assert first.stop(timeout_s=15) is None
    assert time.monotonic() - stopped_at < 10, "exits after the drain timeout, not never"
    assert first.runner.records_abandoned == total

    second = StageThread(runner(at_once)).start()
    try:
        records = read_sink(
            stack, codec, sink, at_least=total, timeout_s=60, consumed_by=(group, source)
        )
    finally:
        assert second.stop() is None
    assert sorted(r.value["seq"] for r in records) == list(range(total))


def test_no_commit_begins_once_the_drain_timeout_counted_from_the_stop_is_over(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """The stop comes while a commit is under way and slow (a slow ``before_commit`` here, like
    a stage's slow database flush) and that commit outlasts the drain timeout, which counts
    from the stop. r1, whose call answered meanwhile, is not committed after it: each commit
    may take ``commit_timeout_s``, and the pod's grace period allows for one beyond the drain,
    not a chain of them. (``before_commit`` holds the event loop, so r1's batch completes once
    the commit goes on; it is then finished or about to be, and left uncommitted either way.)
    Its record is left to the next owner, which processes it once."""
    drain_s = 1.0
    source, sink = new_topic("slow-commit-in", 1), new_topic("slow-commit-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(2), codec)
    out = Topic(sink, "bench.record")
    committing, release, finish_r1 = threading.Event(), threading.Event(), threading.Event()
    r1_started = asyncio.Event()

    async def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        if message.value["id"] == "r1":
            r1_started.set()
            await asyncio.to_thread(finish_r1.wait, 60)
        else:
            await r1_started.wait()  # r1 is polled before r0's commit begins
        return [Emit(out.name, message.key or "", message.value)]

    def slow_commit() -> None:
        if not committing.is_set():
            committing.set()
            release.wait(60)  # the first commit hangs until the test lets it go on

    group = f"slow-commit-{uuid.uuid4().hex[:8]}"
    inputs = (Topic(source, "bench.record"),)

    def runner(handler: Any, before_commit: Any = None) -> StageRunner:
        config = _config(stack.kafka, group, batch_max_records=1, drain_timeout_s=drain_s)
        spec = StageSpec("slow-commit", inputs, (out,), handler, before_commit=before_commit)
        return StageRunner(spec, config, framing)

    first = runner(handler, slow_commit)
    stage = StageThread(first).start()
    try:
        wait_for(committing.is_set, 60, "r0's commit to be under way")
        first.stop()
        stopped_at = time.monotonic()
        finish_r1.set()  # r1's call answers while r0's commit still runs
        wait_for(lambda: time.monotonic() > stopped_at + drain_s, 10, "the drain to be over")
    finally:
        release.set()
        finish_r1.set()
    assert stage.join(60) is None
    assert first.records_abandoned == 1, "r1's commit would begin after the drain"
    committed = read_to_end(
        stack.kafka, sink, timeout_s=30, decode=lambda raw: codec.decode(sink, raw)
    )
    assert [r.value["id"] for r in committed] == ["r0"]

    async def at_once(message: Message, _ctx: Context) -> Sequence[Emit]:
        return [Emit(out.name, message.key or "", message.value)]

    second = StageThread(runner(at_once)).start()
    try:
        records = read_sink(
            stack, codec, sink, at_least=2, timeout_s=60, consumed_by=(group, source)
        )
    finally:
        assert second.stop() is None
    assert sorted(r.value["seq"] for r in records) == [0, 1]


def test_a_fatal_error_lets_the_handlers_in_flight_finish_then_stops_the_stage(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """One handler fails fatally (a refused API key) while the others' slow calls are in flight,
    in its batch and in later ones: those finish first, so that an answer already paid for is
    cached for the replay instead of being paid for again, and only a call that never answers
    is cut off at the drain timeout. Nothing is committed, and the error raised is the handler's
    own."""
    total, drain_s = 30, 3.0
    source, sink = new_topic("fatal-in", 1), new_topic("fatal-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")
    started: set[str] = set()
    finished: set[str] = set()
    all_started = asyncio.Event()

    async def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        record_id = str(message.value["id"])
        started.add(record_id)
        if len(started) == total:
            all_started.set()
        if record_id == "r5":
            await all_started.wait()
            raise RuntimeError("the model endpoint refused the API key")
        if record_id == "r7":
            await asyncio.Event().wait()  # a call that never answers
        await asyncio.sleep(0.5)  # a slow call: still running when r5 fails
        finished.add(record_id)
        return [Emit(out.name, message.key or "", message.value)]

    group = f"fatal-{uuid.uuid4().hex[:8]}"
    spec = StageSpec("fatal", (Topic(source, "bench.record"),), (out,), handler)
    config = _config(stack.kafka, group, batch_max_records=10, drain_timeout_s=drain_s)
    stage = StageThread(StageRunner(spec, config, framing)).start()
    wait_for(lambda: len(started) == total, 60, "every record to be in flight")
    failed_at = time.monotonic()
    error = stage.join(60)

    assert finished == {f"r{i}" for i in range(total)} - {"r5", "r7"}
    assert isinstance(error, RuntimeError), error
    assert str(error) == "the model endpoint refused the API key"
    assert time.monotonic() - failed_at < drain_s + 10, "the hung call is cut off, not awaited"
    assert read_to_end(stack.kafka, sink, timeout_s=30) == [], "nothing is committed"


@pytest.mark.parametrize("ending", ["stop", "fatal error"])
def test_a_stage_is_not_ready_while_it_drains_to_stop(
    stack: Stack, framing: Framing, new_topic: TopicFactory, ending: str
) -> None:
    """Asked to stop (SIGTERM in a rollout), or stopping after a fatal error, a stage lets the
    handlers in flight finish before it exits, for up to the drain timeout. It takes no new
    batch meanwhile, so ``/readyz`` answers 503 from the start of the drain, not only once it
    has exited."""
    source, sink = new_topic("drain-in", 1), new_topic("drain-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(2), codec)
    out = Topic(sink, "bench.record")
    release, fail = threading.Event(), threading.Event()
    started: set[str] = set()

    async def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        record_id = str(message.value["id"])
        started.add(record_id)
        if record_id == "r0":
            await asyncio.to_thread(release.wait, 60)  # a call still running
        elif ending == "fatal error":
            await asyncio.to_thread(fail.wait, 60)
            raise RuntimeError("the model endpoint refused the API key")
        return [Emit(out.name, message.key or "", message.value)]

    group = f"drain-{uuid.uuid4().hex[:8]}"
    spec = StageSpec("drain", (Topic(source, "bench.record"),), (out,), handler)
    config = _config(stack.kafka, group, batch_max_records=1, drain_timeout_s=60.0)
    runner = StageRunner(spec, config, framing)
    stage = StageThread(runner).start()
    try:
        wait_for(lambda: len(started) == 2 and runner.heartbeat.ready_now(), 60, "both in flight")
        if ending == "stop":
            runner.stop()
        fail.set()
        wait_for(lambda: not runner.heartbeat.ready_now(), 20, "the stage to be unready")
        assert stage.alive, "still draining: r0's call is running"
    finally:
        release.set()
        fail.set()
    error = stage.join(60)
    assert (error is None) == (ending == "stop"), error


@pytest.mark.parametrize("stopped", [True, False], ids=["after a stop", "without a stop"])
def test_a_fatal_error_behind_a_batch_still_running_stops_the_stage_with_that_error(
    stack: Stack, framing: Framing, new_topic: TopicFactory, stopped: bool
) -> None:
    """r0's call never answers; r1, in the next batch, fails fatally, after a stop (SIGTERM in
    a rollout) or without one. Once the drain timeout has run out the stage stops with r1's
    error, so that the process exits non-zero: not as after a clean stop, nor waiting on r0's
    call for ever. Nothing is committed."""
    source, sink = new_topic("behind-in", 1), new_topic("behind-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(2), codec)
    out = Topic(sink, "bench.record")
    fail = threading.Event()
    started: set[str] = set()

    async def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        record_id = str(message.value["id"])
        started.add(record_id)
        if record_id == "r0":
            await asyncio.Event().wait()  # a call that never answers
        await asyncio.to_thread(fail.wait, 60)
        raise RuntimeError("the model endpoint refused the API key")

    group = f"behind-{uuid.uuid4().hex[:8]}"
    spec = StageSpec("behind", (Topic(source, "bench.record"),), (out,), handler)
    config = _config(stack.kafka, group, batch_max_records=1, drain_timeout_s=2.0)
    runner = StageRunner(spec, config, framing)
    stage = StageThread(runner).start()
    try:
        wait_for(lambda: len(started) == 2 and runner.heartbeat.ready_now(), 60, "both in flight")
        if stopped:
            runner.stop()
        fail.set()
        error = stage.join(30)
    finally:
        fail.set()
        if stage.alive:
            stage.stop(30)
    assert isinstance(error, RuntimeError), error
    assert str(error) == "the model endpoint refused the API key"
    assert runner.records_abandoned == 2
    assert read_to_end(stack.kafka, sink, timeout_s=30) == [], "nothing is committed"


def test_an_async_stage_at_its_pending_limit_stays_in_its_group_while_the_head_waits(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """The head batch's call outlasts ``max.poll.interval.ms`` (payout in a Stripe brownout)
    while the records pending are at their limit. The stage pauses its partitions but keeps
    polling, so it stays in its group: the batch then commits, and the records after it follow,
    each once. Had it stopped polling, the broker would have dropped it from the group and the
    commit would have failed (UNKNOWN_MEMBER_ID), stopping the stage."""
    poll_interval_ms, slow_s = 10_000, 14.0
    source, sink = new_topic("held-in", 1), new_topic("held-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(4), codec)
    out = Topic(sink, "bench.record")

    held_for: list[float] = []

    async def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        if message.value["id"] == "r0":
            began = time.monotonic()
            await asyncio.sleep(slow_s)  # the slow call itself, not a wait for anything
            held_for.append(time.monotonic() - began)
        return [Emit(out.name, message.key or "", message.value)]

    group = f"held-{uuid.uuid4().hex[:8]}"
    spec = StageSpec("held", (Topic(source, "bench.record"),), (out,), handler)
    config = _config(
        stack.kafka,
        group,
        batch_max_records=1,
        max_pending_records=1,
        held_poll_after_s=2.0,
        consumer_overrides={"max.poll.interval.ms": poll_interval_ms},
    )
    stage = StageThread(StageRunner(spec, config, framing)).start()
    try:
        outputs = read_sink(
            stack, codec, sink, at_least=4, timeout_s=90, consumed_by=(group, source)
        )
    finally:
        assert stage.stop() is None
    (held,) = held_for
    assert held > poll_interval_ms / 1000, "the head batch outlasted max.poll.interval.ms"
    assert [r.value["id"] for r in outputs] == ["r0", "r1", "r2", "r3"]


def test_aborted_transaction_is_never_visible_to_read_committed(
    stack: Stack, new_topic: TopicFactory
) -> None:
    """Records of an aborted transaction reach the log but no read_committed reader sees them."""
    topic = new_topic("abort-raw", 1)
    producer = Producer({"bootstrap.servers": stack.kafka, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"k", value=b"aborted-%d" % i)
    assert producer.flush(30) == 0  # on the broker, inside the open transaction
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, key=b"k", value=b"committed-%d" % i)
    producer.commit_transaction(30)

    read_committed(stack.kafka, topic, until=lambda rs: len(rs) >= 5, timeout_s=30)
    committed = read_to_end(stack.kafka, topic, timeout_s=30)  # its producer is done
    assert [r.value for r in committed] == [b"committed-%d" % i for i in range(5)]
    everything = _read_uncommitted(stack.kafka, topic, at_least=15)
    assert sorted(everything)[:10] == sorted(b"aborted-%d" % i for i in range(10))


def test_handler_crash_aborts_the_batch_and_a_restart_processes_it_once(
    stack: Stack, new_topic: TopicFactory
) -> None:
    """A crash mid-batch aborts its outputs; the restarted stage emits each record once."""
    source, sink = new_topic("abort-in", 1), new_topic("abort-out", 1)
    framing_ = _fresh_framing(stack)
    codec = bench_codec(framing_, source, sink)
    produce_values(stack.kafka, source, _records(20), codec)
    out = Topic(sink, "bench.record")
    broken = threading.Event()
    broken.set()

    def explode_on_r15(message: Message, _ctx: Context) -> Sequence[Emit]:
        if message.value["id"] == "r15" and broken.is_set():
            raise RuntimeError("handler bug")
        return [Emit(out.name, message.key or "", message.value)]

    spec = StageSpec("abort", (Topic(source, "bench.record"),), (out,), explode_on_r15)
    group = f"abort-{uuid.uuid4().hex[:8]}"
    config = _config(stack.kafka, group, batch_max_records=10)
    error = StageThread(StageRunner(spec, config, framing_)).start().join(60)
    assert isinstance(error, RuntimeError)
    committed = read_stopped(stack, codec, sink, at_least=10)
    # Whatever batches committed before r15 are visible; r15's batch (r10..r19) is not.
    seqs = sorted(r.value["seq"] for r in committed)
    assert seqs == list(range(len(seqs)))
    assert len(seqs) <= 15
    assert 15 not in seqs

    broken.clear()
    stage = StageThread(StageRunner(spec, config, framing_)).start()
    try:
        after = read_sink(
            stack, codec, sink, at_least=20, timeout_s=60, consumed_by=(group, source)
        )
    finally:
        assert stage.stop() is None
    assert sorted(r.value["seq"] for r in after) == list(range(20))


def _slow_committing_stage(
    stack: Stack,
    name: str,
    group: str,
    source: str,
    out: Topic,
    kind: str,
    before_commit: Callable[[], None],
    *,
    handled: list[int] | None = None,
    **config: object,
) -> tuple[StageSpec, RuntimeConfig]:
    """A ``kind`` (sync or async) stage ``name`` copying ``source`` to ``out`` in batches of 5,
    which runs ``before_commit`` (a slow flush) in each commit, with ``max.poll.interval.ms``
    2 s; its session stays alive meanwhile (heartbeats every 300 ms, from librdkafka's own
    thread).
    ``handled``: gets the offset of each record handled."""

    def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        if handled is not None:
            handled.append(message.offset)
        return [Emit(out.name, message.key or "", message.value)]

    async def async_handler(message: Message, ctx: Context) -> Sequence[Emit]:
        return handler(message, ctx)

    spec = StageSpec(
        name, (Topic(source, "bench.record"),), (out,),
        handler if kind == "sync" else async_handler,
        before_commit=before_commit,
    )  # fmt: skip
    return spec, _config(
        stack.kafka,
        group,
        session_timeout_ms=2000,
        consumer_overrides={"heartbeat.interval.ms": 300, "max.poll.interval.ms": 2000},
        batch_max_records=5,
        **config,
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_batch_whose_commit_lost_the_group_is_polled_again_and_the_stage_goes_on(
    stack: Stack, framing: Framing, new_topic: TopicFactory, guarantee: str, kind: str
) -> None:
    """A stage's batch runs longer than ``max.poll.interval.ms`` (a slow database flush here,
    as the commit's ``before_commit``, which holds the loop; 2 s here, 5 minutes as shipped):
    the consumer leaves its group, the other member takes both partitions, and the batch's
    commit fails (``UNKNOWN_MEMBER_ID``; exactly once, this aborts the transaction). The stage
    puts the batch back instead of exiting (a restart would cost a tally or pricing pod its
    state's restore, an LLM stage its calls in flight), reads past the poll's "maximum poll
    interval exceeded" and rejoins once the other member leaves. Every record comes out:
    exactly once, once; at least once, those of the batches whose commit failed twice."""
    total = 20
    source, sink = new_topic("lost-group-in", 2), new_topic("lost-group-out", 2)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")
    committing, release = threading.Event(), threading.Event()

    def slow_first_commit() -> None:
        if not committing.is_set():
            committing.set()
            release.wait(60)  # until the group has moved on without this instance

    group = f"lost-group-{uuid.uuid4().hex[:8]}"
    # An async stage has polled batches behind the one whose commit fails.
    spec, config = _slow_committing_stage(
        stack, "lost-group", group, source, out, kind, slow_first_commit, guarantee=guarantee
    )
    runner = StageRunner(spec, config, framing)
    stage = StageThread(runner).start()
    other = Consumer(
        {
            "bootstrap.servers": stack.kafka,
            "group.id": group,
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 300,
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )
    taken: set[int] = set()
    try:
        wait_for(committing.is_set, 60, "the first batch's commit to be under way")
        other.subscribe([source], on_assign=lambda _c, ps: taken.update(tp.partition for tp in ps))

        def holds_both() -> bool:
            other.poll(0.1)
            return taken == {0, 1}

        wait_for(holds_both, 60, "the other member to hold both partitions")
    finally:
        other.close()  # commits nothing: the partitions go back at the committed offsets
        release.set()
    eos = guarantee == "exactly-once"
    try:
        records = read_sink(
            stack,
            codec,
            sink,
            at_least=total if eos else total + 1,
            timeout_s=60,
            consumed_by=(group, source),
        )
    finally:
        error = stage.stop()
    assert error is None
    counts = Counter(r.value["id"] for r in records)
    assert set(counts) == {f"r{i}" for i in range(total)}
    if eos:
        assert set(counts.values()) == {1}
    else:  # the records put back came out before the commit failed, and again after it
        assert set(counts.values()) == {1, 2}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_batch_that_always_outlasts_the_poll_interval_stops_the_stage_after_its_put_backs(
    stack: Stack, framing: Framing, new_topic: TopicFactory, kind: str
) -> None:
    """Every commit of the batch waits until the group has dropped the stage (a flush stuck
    for longer than ``max.poll.interval.ms``, each time). Each failed commit is put back; the
    poll that rejoins the group says only that it was left, and commits nothing, which is no
    progress: after :data:`MAX_PUT_BACK_IN_A_ROW` put-backs the stage stops (a restart, counted
    and alerted on), instead of rejoining and failing the same batch for ever."""
    source, sink = new_topic("always-late-in", 1), new_topic("always-late-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(5), codec)
    out = Topic(sink, "bench.record")
    group = f"always-late-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    handled: list[int] = []

    def group_dropped_the_stage() -> bool:
        (described,) = admin.describe_consumer_groups([group]).values()
        return bool(described.result(10).state == ConsumerGroupState.EMPTY)

    def stuck_flush() -> None:
        wait_for(group_dropped_the_stage, 60, "the group to drop the stage")

    spec, config = _slow_committing_stage(
        stack, "always-late", group, source, out, kind, stuck_flush, handled=handled
    )
    registry = CollectorRegistry()
    metrics = PrometheusMetrics("always-late", registry)
    stage = StageThread(StageRunner(spec, config, framing, metrics=metrics)).start()
    try:
        error = stage.join(120)
    finally:
        if stage.alive:
            stage.stop()
    assert isinstance(error, KafkaException), error
    put_back = {"stage": "always-late", "topic": "", "kind": "rebalance"}
    assert registry.get_sample_value("refund_bench_retries_total", put_back) == (
        MAX_PUT_BACK_IN_A_ROW
    ), "three failed commits put back, and the fourth stops the stage"
    assert set(handled) == set(range(5))
    assert read_stopped(stack, codec, sink, at_least=0) == [], "no batch was committed"


def test_batches_put_back_are_polled_again_from_their_first_record_of_each_partition(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """What a put-back does to partitions that stay with the instance (its commit raced a
    rebalance that left them here, so no reassignment resets their position): each goes
    back to the first record the batches hold of it, and the next polls return those records
    again, and none before them."""
    total = 40
    source, sink = new_topic("put-back-in", 2), new_topic("put-back-out", 2)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")

    def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        return [Emit(out.name, message.key or "", message.value)]

    group = f"put-back-{uuid.uuid4().hex[:8]}"
    spec = StageSpec("put-back", (Topic(source, "bench.record"),), (out,), handler)
    runner = StageRunner(spec, _config(stack.kafka, group), framing)
    runner._start()
    consumer = runner._consumer
    assert consumer is not None
    try:
        polled: list[Any] = []

        def read(into: list[Any], at_least: int) -> Callable[[], bool]:
            def more() -> bool:
                into.extend(m for m in consumer.consume(100, 0.2) if m.error() is None)
                return len(into) >= at_least

            return more

        wait_for(read(polled, total), 60, "every record to be polled")
        batches = [m for m in polled if m.offset() >= 5]  # each partition's records from 5 on
        assert {m.partition() for m in batches} == {0, 1}
        assert runner._seek_back([(m, runner._revocations) for m in batches])
        again: list[Any] = []
        wait_for(read(again, len(batches)), 60, "the records put back to be polled again")
        assert sorted((m.partition(), m.offset()) for m in again) == sorted(
            (m.partition(), m.offset()) for m in batches
        )
    finally:
        runner._close()


def test_zombie_is_fenced_and_cannot_commit(stack: Stack, new_topic: TopicFactory) -> None:
    """A second instance with the same transactional.id fences the first for good."""
    source, sink = new_topic("fence-in", 1), new_topic("fence-out", 1)
    framing_ = _fresh_framing(stack)
    codec = bench_codec(framing_, source, sink)
    out = Topic(sink, "bench.record")
    reached_pause = threading.Event()
    release = threading.Event()

    def handle(message: Message, _ctx: Context) -> Sequence[Emit]:
        if message.value["id"] == "pause":
            reached_pause.set()
            release.wait(60)
        return [Emit(out.name, message.key or "", message.value)]

    spec = StageSpec("fence", (Topic(source, "bench.record"),), (out,), handle)
    group = f"fence-{uuid.uuid4().hex[:8]}"
    config = _config(stack.kafka, group, batch_max_records=1)
    zombie = StageThread(StageRunner(spec, config, framing_)).start()
    produce_values(stack.kafka, source, [("a", {"id": "first", "seq": 0, "payload": ""})], codec)
    read_committed(stack.kafka, sink, until=lambda rs: len(rs) == 1, timeout_s=60)
    produce_values(stack.kafka, source, [("a", {"id": "pause", "seq": 1, "payload": ""})], codec)
    assert reached_pause.wait(60)

    successor = Producer(
        {"bootstrap.servers": stack.kafka, "transactional.id": config.transactional_id}
    )
    successor.init_transactions(30)
    release.set()
    error = zombie.join(60)
    assert isinstance(error, Fenced), f"zombie ended with {error!r}"

    successor.begin_transaction()
    successor.produce(
        sink, key=b"a", value=codec.encode(sink, {"id": "successor", "seq": 2, "payload": ""})
    )
    successor.commit_transaction(30)
    records = read_stopped(stack, codec, sink, at_least=2)
    assert [r.value["id"] for r in records] == ["first", "successor"]


@pytest.mark.slow
def test_counter_state_survives_sigkill(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """A counting stage killed mid-stream restores its counts from the changelog: exact."""
    total, keys = 4000, 40
    group = f"count-{uuid.uuid4().hex[:8]}"
    source, sink = new_topic("count-in", 4), new_topic("count-out", 4)
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(
        stack.kafka, [TopicSpec(f"{group}.counts.changelog", compacted=True)], partitions=4
    )
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total, keys=keys), codec)
    args = _selftest_args(source, sink, group, batch=40)
    progress = _Progress(stack.kafka, sink)
    try:
        for kill in range(3):
            proc = _start_selftest(
                stack,
                "counter",
                group,
                *args,
            )
            target = (kill + 1) * 900
            try:
                _wait_progress(progress, target)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
        final = _start_selftest(
            stack,
            "counter",
            group,
            *args,
        )
        try:
            records = read_sink(
                stack, codec, sink, at_least=total, timeout_s=180, consumed_by=(group, source)
            )
        finally:
            final.terminate()
            final.wait(30)
    finally:
        progress.close()
    per_key: dict[str, list[int]] = {}
    for r in records:
        per_key.setdefault(r.key or "", []).append(r.value["seq"])
    assert len(records) == total
    for key, seqs in per_key.items():
        assert seqs == list(range(1, total // keys + 1)), f"{key}: counts {seqs[:10]}..."


class _ShiftedClock:
    """Wall-clock time plus ``ahead`` seconds: the test moves the stage into the future."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def _expiring_counter(name: str, source: str, sink: str) -> StageSpec:
    """Counts records per key; keys starting with ``s`` are kept 600 s, the rest the store's."""
    out = Topic(sink, "bench.record")

    def handle(message: Message, ctx: Context) -> Sequence[Emit]:
        key = message.key or ""
        state = ctx.store()
        count = int(state.get(key) or 0) + 1
        state.put(key, count, retention_s=600.0 if key.startswith("s") else None)
        return [Emit(out.name, key, {"id": message.value["id"], "seq": count, "payload": ""})]

    return StageSpec(name, (Topic(source, "bench.record"),), (out,), handle, store="counts")


def test_a_changelog_is_created_compacted_with_hourly_segments(
    stack: Stack, new_topic: TopicFactory
) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    from refund_bench.topics import CHANGELOG_CONFIG

    changelog = new_topic("changelog", 1, compacted=True)
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert {name: configs[name].value for name in CHANGELOG_CONFIG} == CHANGELOG_CONFIG
    assert configs["min.insync.replicas"].value == "1", "one broker here: replication factor 1"


def test_a_long_restore_keeps_the_stage_alive_and_a_stalled_one_fails(
    stack: Stack, new_topic: TopicFactory
) -> None:
    """A restore that keeps reading beats the heartbeat and does not time out; one that reads
    nothing (a changelog it cannot reach) fails after the stall timeout."""
    from refund_bench.runtime.state import StateStore

    changelog = new_topic("restore", 1, compacted=True)
    producer = Producer({"bootstrap.servers": stack.kafka})
    for i in range(3000):
        producer.produce(changelog, key=f"k{i % 500}".encode(), value=b"{}")
    producer.flush(30)
    store = StateStore("s", changelog)
    beats: list[float] = []
    read = store.restore(
        {"bootstrap.servers": stack.kafka},
        [0],
        stall_timeout_s=30,
        on_progress=lambda: beats.append(1),
    )
    assert read == 3000
    assert store.size() == 500
    assert len(beats) >= 3, "a beat after each fetch (1000 records at most per fetch)"

    missing = StateStore("s", f"{changelog}-missing")
    with pytest.raises(TimeoutError, match="nothing read for 2 s"):
        missing.restore({"bootstrap.servers": stack.kafka}, [0], stall_timeout_s=2)


def test_state_past_retention_is_tombstoned_and_stays_gone_after_a_restart(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """Keys untouched longer than their retention are deleted in a committed batch, with
    changelog tombstones; a key the batch wrote keeps its state. A restart restores each key's
    write time (the record timestamp) and its own retention (the record header) and expires on
    them."""
    from refund_bench.topics import TopicSpec, ensure_topics

    group = f"expire-{uuid.uuid4().hex[:8]}"
    source, sink = new_topic("expire-in", 1), new_topic("expire-out", 1)
    changelog = f"{group}.counts.changelog"
    ensure_topics(stack.kafka, [TopicSpec(changelog, compacted=True)], partitions=1)
    codec = bench_codec(framing, source, sink)
    spec = _expiring_counter(group, source, sink)
    config = _config(stack.kafka, group, state_retention_s=3600.0)
    clock = _ShiftedClock()
    produced = 0

    def send(*keys: str) -> list[tuple[str, int]]:
        """Produce one record per key; the stage's counts once they are all out."""
        nonlocal produced
        values = [(k, {"id": f"{k}-{produced + i}", "seq": 0, "payload": ""}) for i, k in
                  enumerate(keys)]  # fmt: skip
        produce_values(stack.kafka, source, values, codec)
        produced += len(keys)
        records = read_sink(stack, codec, sink, at_least=produced, timeout_s=60)
        return [(r.key or "", r.value["seq"]) for r in records][-len(keys) :]

    def run(ahead_s: float, *steps: tuple[str, ...]) -> list[list[tuple[str, int]]]:
        """A new instance, ``ahead_s`` in the future, fed ``steps`` one after another."""
        clock.ahead = ahead_s
        stage = StageThread(StageRunner(spec, config, framing, clock=clock)).start()
        try:
            return [send(*keys) for keys in steps]
        finally:
            assert stage.stop() is None

    assert run(0.0, ("k0", "k1", "k2", "s0"), ("k0", "k1", "k2", "s0")) == [
        [("k0", 1), ("k1", 1), ("k2", 1), ("s0", 1)],
        [("k0", 2), ("k1", 2), ("k2", 2), ("s0", 2)],
    ]
    # 20 minutes later: past s0's own 600 s, inside the store's 3600 s.
    assert run(1200.0, ("k0",), ("s0",), ("k1",)) == [[("k0", 3)], [("s0", 1)], [("k1", 3)]]
    # 2 hours later: every key is past its retention; k2 is read before the batch expires it.
    assert run(7200.0, ("k2",), ("k0",)) == [[("k2", 3)], [("k0", 1)]]

    read_committed(
        stack.kafka,
        changelog,
        until=lambda rs: sum(r.value is None for r in rs) >= 4,
        timeout_s=30,
    )
    log = read_to_end(stack.kafka, changelog, timeout_s=30)  # every run's stage has stopped
    tombstones = [r.key or "" for r in log if r.value is None]
    assert tombstones == ["s0", "k0", "k1", "s0"], f"changelog tombstones {tombstones}"


class _RestoreLog(Heartbeat):
    """A heartbeat that notes when a restore began and when it ended."""

    def __init__(self) -> None:
        super().__init__()
        self.began = threading.Event()
        self.ended = threading.Event()

    @contextmanager
    def restoring(self) -> Iterator[None]:
        self.began.set()
        with super().restoring():
            yield
        self.ended.set()


def _handover(
    stack: Stack, framing: Framing, new_topic: TopicFactory, name: str
) -> tuple[str, str, str, str, Codec]:
    """A counter stage's group, input, output and changelog topics (one partition each), and
    3 records of key ``k`` already in the input: what an earlier owner counted."""
    from refund_bench.topics import TopicSpec, ensure_topics

    group = f"{name}-{uuid.uuid4().hex[:8]}"
    source, sink = new_topic(f"{name}-in", 1), new_topic(f"{name}-out", 1)
    changelog = f"{group}.counts.changelog"
    ensure_topics(stack.kafka, [TopicSpec(changelog, compacted=True)], partitions=1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, [("k", {"id": f"a{i}", "seq": 0, "payload": ""})
                                         for i in range(3)], codec)  # fmt: skip
    return group, source, sink, changelog, codec


def _counts_after_restore(
    stack: Stack,
    framing: Framing,
    topics: tuple[str, str, str, str, Codec],
    end_the_transaction: Callable[[], None],
    what: str,
) -> list[int]:
    """Start a new owner of the counter stage; check that its restore waits while the
    transaction is open, call ``end_the_transaction``, wait for the restore, feed 2 records of
    ``k`` and return their counts."""
    group, source, sink, _changelog, codec = topics
    heartbeat = _RestoreLog()
    runner = StageRunner(
        counter_spec(group, source, sink),
        _config(stack.kafka, group, batch_max_records=10),
        framing,
        heartbeat=heartbeat,
    )
    stage = StageThread(runner).start()
    try:
        assert heartbeat.began.wait(30), "the new owner was never assigned the partition"
        assert not heartbeat.ended.wait(5), f"restored while {what} was still open"
        end_the_transaction()
        assert heartbeat.ended.wait(30), "the restore did not end after the transaction"
        produce_values(stack.kafka, source, [("k", {"id": f"b{i}", "seq": 0, "payload": ""})
                                             for i in range(2)], codec)  # fmt: skip
        out = read_sink(stack, codec, sink, at_least=2, timeout_s=60, consumed_by=(group, source))
    finally:
        assert stage.stop() is None
    return [r.value["seq"] for r in out]


def test_a_new_owner_restores_the_state_an_earlier_owner_was_still_committing(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """An earlier owner of the partition (paused, or being replaced) has counted 3 records and
    is committing that: its state write and its offsets are in a transaction still open when
    the new owner is assigned the partition. The new owner restores only once that transaction
    has ended, so it resumes after those 3 records with their count, not from nothing."""
    from refund_bench.runtime.state import encode_state

    topics = _handover(stack, framing, new_topic, "handover")
    group, source, _sink, changelog, _codec = topics
    earlier = Consumer({"bootstrap.servers": stack.kafka, "group.id": group})
    earlier.assign([TopicPartition(source, 0, 0)])
    committing = Producer({"bootstrap.servers": stack.kafka, "transactional.id": f"{group}-x"})
    committing.init_transactions(30)
    committing.begin_transaction()
    committing.produce(changelog, value=encode_state(3), key=b"k", partition=0)
    committing.send_offsets_to_transaction(
        [TopicPartition(source, 0, 3)], earlier.consumer_group_metadata(), 30
    )
    committing.flush(30)
    earlier.close()

    # The earlier owner's transaction is open: the new owner must not restore past it.
    counts = _counts_after_restore(
        stack, framing, topics, lambda: committing.commit_transaction(30), "an earlier owner's"
    )
    assert counts == [4, 5]


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_a_new_owner_reads_state_writes_still_open_after_their_offsets_committed(
    stack: Stack, framing: Framing, new_topic: TopicFactory, ending: str
) -> None:
    """The coordinator ends a transaction by writing its marker to each partition apart, so
    the group's offsets can be committed while the same transaction's state write is not yet
    readable in the changelog. Here the offsets of 3 records are committed and their count sits
    in a transaction still open on the changelog. The new owner's restore ends only once that
    transaction has: committed, the owner resumes with the count 3; aborted, from nothing."""
    from refund_bench.runtime.state import encode_state

    topics = _handover(stack, framing, new_topic, "marker")
    group, source, _sink, changelog, _codec = topics
    writing = Producer({"bootstrap.servers": stack.kafka, "transactional.id": f"{group}-x"})
    writing.init_transactions(30)
    writing.begin_transaction()
    writing.produce(changelog, value=encode_state(3), key=b"k", partition=0)
    writing.flush(30)
    earlier = Consumer({"bootstrap.servers": stack.kafka, "group.id": group})
    earlier.commit(offsets=[TopicPartition(source, 0, 3)], asynchronous=False)
    earlier.close()

    def end() -> None:
        if ending == "commit":
            writing.commit_transaction(30)
        else:
            writing.abort_transaction(30)

    counts = _counts_after_restore(stack, framing, topics, end, "a state write")
    assert counts == ([4, 5] if ending == "commit" else [1, 2])


class _ReadinessLog(Heartbeat):
    """A heartbeat that notes, at every beat, whether ``/readyz`` would answer 200."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[bool] = []

    def beat(self) -> None:
        super().beat()
        self.seen.append(self.ready_now())


def test_a_stage_is_not_ready_while_it_restores_its_state(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """The restore beats the heartbeat (alive) while readiness is off; it is back on after."""
    from refund_bench.topics import TopicSpec, ensure_topics

    group = f"ready-{uuid.uuid4().hex[:8]}"
    source, sink = new_topic("ready-in", 1), new_topic("ready-out", 1)
    ensure_topics(stack.kafka, [TopicSpec(f"{group}.counts.changelog", compacted=True)], 1)
    codec = bench_codec(framing, source, sink)
    spec = _expiring_counter(group, source, sink)
    config = _config(stack.kafka, group)

    def run(
        keys: list[str], heartbeat: Heartbeat, until: Callable[[], bool] = lambda: True
    ) -> None:
        stage = StageThread(StageRunner(spec, config, framing, heartbeat=heartbeat)).start()
        try:
            # Every output so far (nothing new was sent yet): those of the run before.
            before = len(read_to_end(stack.kafka, sink, timeout_s=30))
            values = [(k, {"id": f"{k}-{before}", "seq": 0, "payload": ""}) for k in keys]
            produce_values(stack.kafka, source, values, codec)
            read_sink(stack, codec, sink, at_least=before + len(keys), timeout_s=60)
            wait_for(until, 30, "the stage's loop to beat again")
        finally:
            assert stage.stop() is None

    run([f"k{i}" for i in range(300)], Heartbeat())  # 300 keys in the changelog
    log = _ReadinessLog()
    # The output can be read before the loop's next beat: stopped then, no beat would follow
    # the restore's. So the stage runs until one has.
    run(["k0"], log, until=lambda: not all(log.seen) and log.seen[-1])

    # Every beat comes after subscribing: the unready ones are the restore's.
    unready = [i for i, ready in enumerate(log.seen) if not ready]
    assert unready, f"ready throughout the restore: {log.seen}"
    after = log.seen[unready[-1] + 1 :]
    assert after, "no beat after the restore"
    assert all(after), "not ready again after the restore"


def test_a_synchronous_batch_slower_than_the_liveness_limit_stays_alive_while_it_moves(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """A batch that takes longer in all than the liveness limit, each record well within it (a
    slow database): ``/healthz`` holds throughout, so the kubelet does not restart a stage that
    makes progress, only for it to poll the same batch again, as slowly."""
    total = 12
    source, sink = new_topic("slow-batch-in", 1), new_topic("slow-batch-out", 1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, _records(total), codec)
    out = Topic(sink, "bench.record")
    heartbeat = Heartbeat(liveness_timeout_s=1.0)
    alive: list[bool] = []
    slow_database = threading.Event()  # never set: each record takes its 0.25 s

    def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
        slow_database.wait(0.25)
        alive.append(heartbeat.alive())
        return [Emit(out.name, message.key or "", message.value)]

    spec = StageSpec("slow-batch", (Topic(source, "bench.record"),), (out,), handler)
    config = _config(stack.kafka, f"slow-batch-{uuid.uuid4().hex[:8]}", batch_max_records=total)
    stage = StageThread(StageRunner(spec, config, framing, heartbeat=heartbeat)).start()
    try:
        read_sink(stack, codec, sink, at_least=total, timeout_s=60)
    finally:
        assert stage.stop() is None
    assert len(alive) == total
    assert all(alive), f"liveness failed during the batch: {alive}"


def _dead_letters(stack: Stack, framing: Framing, dlq: str, at_least: int) -> list[Read]:
    """The committed, decoded envelopes of ``dlq`` once there are ``at_least``."""
    dlq_codec = Codec(framing, {dlq: "dead_letter"})
    return read_committed(
        stack.kafka,
        dlq,
        until=lambda rs: len(rs) >= at_least,
        timeout_s=60,
        decode=lambda raw: dlq_codec.decode(dlq, raw),
    )


def _outputs_and_dead_letters(
    stack: Stack,
    framing: Framing,
    spec: StageSpec,
    codec: Codec,
    sink: str,
    counts: tuple[int, int],
) -> tuple[list[Read], list[Read]]:
    """Run ``spec`` (its group named as it) until ``sink`` and its input's DLQ hold ``counts``
    records; both, decoded."""
    stage = StageThread(StageRunner(spec, _config(stack.kafka, spec.name), framing)).start()
    try:
        outputs = read_sink(stack, codec, sink, at_least=counts[0], timeout_s=60)
        dead = _dead_letters(stack, framing, f"{spec.inputs[0].name}.dlq", at_least=counts[1])
    finally:
        assert stage.stop() is None
    return outputs, dead


def test_an_async_stage_dead_letters_a_poll_that_holds_only_undecodable_records(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """On a quiet topic one bad record may be all a poll returns. The async stages (extractor,
    judge, settler, payout) then have nothing to hand their handlers: the record goes to the
    dead-letter topic and its offset is committed, as when good records come with it, and the
    stage goes on to the next record."""
    source, sink = new_topic("lone-poison-in", 1), new_topic("lone-poison-out", 1)
    dlq = f"{source}.dlq"
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(stack.kafka, [TopicSpec(dlq)], partitions=1)
    codec = bench_codec(framing, source, sink)
    produce_raw(stack.kafka, source, [(b"k", b"\xff\xfe not avro at all")])
    group = f"lone-poison-{uuid.uuid4().hex[:8]}"
    spec = passthrough_spec(group, source, sink, jitter_ms=1.0)
    stage = StageThread(StageRunner(spec, _config(stack.kafka, group), framing)).start()
    try:
        (dead,) = _dead_letters(stack, framing, dlq, at_least=1)
        produce_values(stack.kafka, source, [("k", {"id": "good", "seq": 1, "payload": ""})], codec)
        outputs = read_sink(stack, codec, sink, at_least=1, timeout_s=60)
    finally:
        assert stage.stop() is None
    assert dead.value["source_offset"] == 0
    assert [r.value["id"] for r in outputs] == ["good"]


class _SlowLookupRegistry(RegistryProxy):
    """A loopback registry that passes every request on to the stack's, and answers a lookup
    of a schema by id only after ``delay_s``, recording when it began and when it answered."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        self.lookup_began = threading.Event()
        self.answered_at: float | None = None

        def before(path: str) -> None:
            if schema_id_of(path) is not None:
                self.lookup_began.set()
                time.sleep(delay_s)  # the slow registry itself

        def after(path: str) -> None:
            if schema_id_of(path) is not None:
                self.answered_at = time.monotonic()

        super().__init__(upstream, before, after)


def test_an_async_stage_goes_on_while_a_writer_schema_is_looked_up(
    stack: Stack, registry_url: str, new_topic: TopicFactory
) -> None:
    """A record names a writer schema the stage has not seen, and the registry takes seconds to
    answer (or is down, and the lookup is retried). The handlers already in flight (the judge's
    LLM calls) go on meanwhile: the lookup does not hold the stage's event loop. The record is
    then handled as its answer says (here: an id the registry does not have, dead-lettered)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from refund_bench.codec import RegistryFraming
    from refund_bench.topics import TopicSpec, ensure_topics

    delay_s = 4.0
    with _SlowLookupRegistry(registry_url, delay_s) as registry:
        framing = RegistryFraming(SchemaRegistryClient({"url": registry.url, "max.retries": 0}))
        source, sink = new_topic("lookup-in", 1), new_topic("lookup-out", 1)
        dlq = f"{source}.dlq"
        ensure_topics(stack.kafka, [TopicSpec(dlq)], partitions=1)
        codec = bench_codec(framing, source, sink)
        out = Topic(sink, "bench.record")
        first_started = threading.Event()
        first_done_at: list[float] = []

        async def handler(message: Message, _ctx: Context) -> Sequence[Emit]:
            first_started.set()
            await asyncio.to_thread(registry.lookup_began.wait, 60)  # a call still in flight
            first_done_at.append(time.monotonic())
            return [Emit(out.name, message.key or "", message.value)]

        group = f"lookup-{uuid.uuid4().hex[:8]}"
        spec = StageSpec("lookup", (Topic(source, "bench.record"),), (out,), handler)
        stage = StageThread(StageRunner(spec, _config(stack.kafka, group), framing)).start()
        try:
            produce_values(
                stack.kafka, source, [("k", {"id": "r0", "seq": 0, "payload": ""})], codec
            )
            assert first_started.wait(60), "the first record's handler did not start"
            produce_raw(
                stack.kafka, source, [(b"k", b"\x00" + struct.pack(">I", 987654321) + b"\x02")]
            )
            outputs = read_sink(stack, codec, sink, at_least=1, timeout_s=60)
            (dead,) = _dead_letters(stack, framing, dlq, at_least=1)
        finally:
            assert stage.stop() is None
    assert registry.answered_at is not None
    (first_done,) = first_done_at
    assert first_done < registry.answered_at - delay_s / 2, "the call in flight waited"
    assert [r.value["id"] for r in outputs] == ["r0"]
    assert "writer schema id 987654321 not found" in dead.value["reason"]


def test_poison_input_goes_to_dlq_and_processing_continues(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    source, sink = new_topic("poison-in", 1), new_topic("poison-out", 1)
    dlq = f"{source}.dlq"
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(stack.kafka, [TopicSpec(dlq)], partitions=1)
    codec = bench_codec(framing, source, sink)
    good = codec.encode(source, {"id": "good-1", "seq": 1, "payload": ""})
    header = good[: len(good) - len(_avro_body(codec, source))]
    produce_raw(stack.kafka, source, [(b"k", good)])
    # Upstream's headers (a name may repeat, a value may be null) and timestamp travel along.
    upstream = [("traceparent", b"00-abc-01"), ("hop", b"1"), ("hop", b"2"), ("empty", None)]
    produce_raw(
        stack.kafka,
        source,
        [(b"k", b"\xff\xfe not avro at all")],
        headers=upstream,
        timestamp=1_764_000_000_123,
    )
    # Right header, but a body that does not fit the contract (a string where a long belongs).
    produce_raw(stack.kafka, source, [(b"k", header + b"\x04ab\x06abc")])
    produce_raw(stack.kafka, source, [(b"k", None)])
    # A fine value under a key that is not UTF-8 (keys are dispute ids).
    produce_raw(stack.kafka, source, [(b"\xff\xfek", good)])
    # Garbage under a key so long that the dead letter, which carries the key twice, would not
    # fit one record if it kept the whole key.
    huge_key, garbage = b"k" * 600_000, b"\xff" * 390_000
    produce_raw(stack.kafka, source, [(huge_key, garbage)])
    produce_values(stack.kafka, source, [("k", {"id": "good-2", "seq": 2, "payload": ""})], codec)

    group = f"poison-{uuid.uuid4().hex[:8]}"
    runner = StageRunner(
        passthrough_spec(group, source, sink), _config(stack.kafka, group), framing
    )
    stage = StageThread(runner).start()
    try:
        outputs = read_sink(stack, codec, sink, at_least=2, timeout_s=60)
        dead = _dead_letters(stack, framing, dlq, at_least=5)
    finally:
        assert stage.stop() is None
    assert [r.value["id"] for r in outputs] == ["good-1", "good-2"]
    assert [r.value["source_offset"] for r in dead] == [1, 2, 3, 4, 5]
    for record in dead:
        reason = record.headers["dlq.reason"].decode()
        assert reason == record.value["reason"]
        assert reason
        assert record.headers["dlq.source.topic"].decode() == source
        assert record.headers["dlq.error_type"] == b"InvalidInput"
    assert "magic" in dead[0].value["reason"]
    assert "cannot decode" in dead[1].value["reason"] or "trailing" in dead[1].value["reason"]
    assert dead[2].value["reason"] == "record has no value"
    assert dead[3].value["reason"] == "record key is not UTF-8: invalid start byte at byte 0"
    assert dead[0].value["original_value"] == b"\xff\xfe not avro at all"
    assert [(h["name"], h["value"]) for h in dead[0].value["original_headers"]] == upstream
    assert dead[0].value["original_timestamp"] == datetime.fromtimestamp(1_764_000_000.123, UTC)
    assert dead[2].value["original_headers"] == []
    assert dead[4].value["reason"].endswith("[original key cut to 1024 of 600000 bytes]")
    assert dead[4].value["original_key"] == huge_key[:1024]
    assert dead[4].value["original_value"] == garbage


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_a_record_whose_header_name_is_not_utf8_is_dead_lettered_and_the_stage_goes_on(
    stack: Stack, framing: Framing, new_topic: TopicFactory, handler: str
) -> None:
    """Producers in other languages may name a header with any bytes. confluent-kafka cannot
    read such a record's headers (and crashes the process if asked twice): the stage reads
    them once, dead-letters the record with the reason and no headers, and goes on, instead of
    crashing on it after every restart. The stage runs as its own process, as in production:
    what that library leaves behind after such a read must not reach other tests."""
    source, sink = new_topic("bad-header-in", 1), new_topic("bad-header-out", 1)
    dlq = f"{source}.dlq"
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(stack.kafka, [TopicSpec(dlq)], partitions=1)
    codec = bench_codec(framing, source, sink)
    produce_values(stack.kafka, source, [("k", {"id": "good-1", "seq": 1, "payload": ""})], codec)
    fine = codec.encode(source, {"id": "bad-header", "seq": 2, "payload": ""})
    produce_with_header_name(stack.kafka, source, b"k", fine, b"trace\xff")
    produce_values(stack.kafka, source, [("k", {"id": "good-2", "seq": 3, "payload": ""})], codec)

    group = f"bad-header-{uuid.uuid4().hex[:8]}"
    proc = _start_selftest(
        stack,
        "passthrough",
        group,
        *_selftest_args(source, sink, group, batch=10),
        *HANDLERS[handler],
    )
    try:
        outputs = read_sink(stack, codec, sink, at_least=2, timeout_s=60)
        (dead,) = _dead_letters(stack, framing, dlq, at_least=1)
        assert proc.poll() is None, "the stage stopped"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert [r.value["id"] for r in outputs] == ["good-1", "good-2"]
    assert dead.value["source_offset"] == 1
    assert "header name is not UTF-8" in dead.value["reason"]
    assert dead.value["original_value"] == fine
    assert dead.value["original_headers"] == []


def test_a_record_whose_output_cannot_be_encoded_or_sent_is_dead_lettered_alone(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """An output whose text cannot be encoded (half of a surrogate pair), or that is larger than
    one Kafka record may be, dead-letters its input, with none of its outputs written; the
    records around it commit as usual."""
    source, sink = new_topic("unencodable-in", 1), new_topic("unencodable-out", 1)
    dlq = f"{source}.dlq"
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(stack.kafka, [TopicSpec(dlq)], partitions=1)
    codec = bench_codec(framing, source, sink)
    ids = ["good-1", "bad", "huge", "good-2"]
    produce_values(
        stack.kafka, source, [("k", {"id": i, "seq": n, "payload": ""}) for n, i in enumerate(ids)],
        codec,
    )  # fmt: skip
    out = Topic(sink, "bench.record")

    def handle(message: Message, _ctx: Context) -> Sequence[Emit]:
        value = dict(message.value)
        first = Emit(out.name, "k", {**value, "payload": "first"})
        if value["id"] == "bad":
            value["payload"] = "cut short \ud83d"
        if value["id"] == "huge":
            value["payload"] = "x" * 1_000_000
        return [first, Emit(out.name, "k", value)]

    group = f"unencodable-{uuid.uuid4().hex[:8]}"
    spec = StageSpec(group, (Topic(source, "bench.record"),), (out,), handle)
    outputs, dead = _outputs_and_dead_letters(stack, framing, spec, codec, sink, (4, 2))
    assert [(r.value["id"], r.value["payload"]) for r in outputs] == [
        ("good-1", "first"),
        ("good-1", ""),
        ("good-2", "first"),
        ("good-2", ""),
    ]
    assert [r.value["source_offset"] for r in dead] == [1, 2]
    assert "cannot be encoded" in dead[0].value["reason"]
    assert re.fullmatch(
        rf"an output of this record to {sink} is 10000\d\d bytes, more than the 999488 one"
        " record may hold",
        dead[1].value["reason"],
    )
    assert {r.value["error_type"] for r in dead} == {"InvalidInput"}


def test_a_record_whose_state_would_not_fit_one_changelog_record_is_dead_lettered_alone(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """The state a stage keeps per key goes to its changelog as one record: a write too large
    for one (here, a key's texts kept together) dead-letters the record that made it, and
    the key's state stays as it was for the records after it."""
    source, sink = new_topic("big-state-in", 1), new_topic("big-state-out", 1)
    dlq = f"{source}.dlq"
    from refund_bench.topics import TopicSpec, ensure_topics

    group = f"big-state-{uuid.uuid4().hex[:8]}"
    changelog = TopicSpec(f"{group}.texts.changelog", compacted=True)
    ensure_topics(stack.kafka, [TopicSpec(dlq), changelog], partitions=1)
    codec = bench_codec(framing, source, sink)
    texts = [("a", "x" * 500_000), ("b", "y" * 500_000), ("c", "z")]
    produce_values(
        stack.kafka, source, [("k", {"id": i, "seq": n, "payload": p}) for n, (i, p) in
        enumerate(texts)], codec,
    )  # fmt: skip
    out = Topic(sink, "bench.record")

    def handle(message: Message, ctx: Context) -> Sequence[Emit]:
        state = ctx.store()
        kept = (state.get("k") or "") + message.value["payload"]
        state.put("k", kept)
        return [Emit(out.name, "k", {"id": message.value["id"], "seq": len(kept), "payload": ""})]

    spec = StageSpec(group, (Topic(source, "bench.record"),), (out,), handle, store="texts")
    outputs, dead = _outputs_and_dead_letters(stack, framing, spec, codec, sink, (2, 1))
    assert [(r.value["id"], r.value["seq"]) for r in outputs] == [("a", 500_000), ("c", 500_001)]
    assert [r.value["source_offset"] for r in dead] == [1]
    assert re.fullmatch(
        r"the state this record would keep for 'k' is 1000003 bytes, more than the 999488 one"
        " changelog record may hold",
        dead[0].value["reason"],
    )


def test_dlq_budget_stops_a_stage_fed_only_garbage(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    source, sink = new_topic("garbage-in", 1), new_topic("garbage-out", 1)
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(stack.kafka, [TopicSpec(f"{source}.dlq")], partitions=1)
    produce_raw(stack.kafka, source, [(b"k", b"garbage %d" % i) for i in range(50)])
    group = f"garbage-{uuid.uuid4().hex[:8]}"
    config = _config(
        stack.kafka,
        group,
        batch_max_records=50,
        dlq_budget=DlqBudget(window=50, max_fraction=0.5, min_failures=10),
    )
    error = (
        StageThread(StageRunner(passthrough_spec(group, source, sink), config, framing))
        .start()
        .join(60)
    )
    assert isinstance(error, DlqLimitExceeded)
    # The stage has stopped: what its DLQ holds now is all it will ever hold.
    assert read_to_end(stack.kafka, f"{source}.dlq", timeout_s=30) == []


def test_a_stage_started_on_a_run_of_bad_records_dead_letters_them(
    stack: Stack, framing: Framing, new_topic: TopicFactory
) -> None:
    """30 undecodable records wait at the committed offset when a stage starts (after a deploy,
    or a crash while an upstream published them): a new process, its DLQ budget's window empty,
    dead-letters them in one batch and goes on, as a process that had long been running would,
    instead of tripping the budget and stopping on every restart."""
    source, sink = new_topic("bad-run-in", 1), new_topic("bad-run-out", 1)
    from refund_bench.topics import TopicSpec, ensure_topics

    ensure_topics(stack.kafka, [TopicSpec(f"{source}.dlq")], partitions=1)
    produce_raw(stack.kafka, source, [(b"k", b"garbage %d" % i) for i in range(30)])
    group = f"bad-run-{uuid.uuid4().hex[:8]}"
    config = _config(stack.kafka, group, batch_max_records=100, dlq_budget=DlqBudget())
    stage = StageThread(StageRunner(passthrough_spec(group, source, sink), config, framing)).start()
    try:
        letters = read_committed(
            stack.kafka, f"{source}.dlq", until=lambda rs: len(rs) >= 30, timeout_s=60
        )
        assert stage.alive
    finally:
        error = stage.stop()
    assert error is None
    assert len(letters) == 30


def _avro_body(codec: Codec, topic: str) -> bytes:
    import io

    import fastavro

    from refund_bench.codec import load_schema

    buf = io.BytesIO()
    fastavro.schemaless_writer(
        buf,
        fastavro.parse_schema(load_schema("bench.record")),
        {"id": "good-1", "seq": 1, "payload": ""},
    )
    return buf.getvalue()


def _fresh_framing(stack: Stack) -> Framing:
    from refund_bench.codec import framing_from_registry_url

    return framing_from_registry_url(stack.registry_url)


def _read_uncommitted(kafka: str, topic: str, at_least: int) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"ru-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_uncommitted",
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []

    def enough() -> bool:
        for m in consumer.consume(500, 0.2):
            value = m.value()
            if m.error() is None and value is not None:
                seen.append(value)
        return len(seen) >= at_least

    try:
        wait_for(
            enough,
            30,
            f"{at_least} uncommitted records",
        )
    finally:
        consumer.close()
    return seen
