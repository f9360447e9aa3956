"""End-to-end throughput and latency of the six stages, with the LLM stand-in at 0 and 300 ms.

One replica per stage, on the local stack. Each run publishes N copies of the article's
complaint (distinct disputes, so nothing is served from the cache), each about its own copy of
the article's order (an order's payment is refunded for one dispute only; the copies are
seeded before the clock starts), as fast as the producer goes, and measures until every
dispute's payout has completed:

- complaints/s = N / (last payout.completed - first complaint published)
- steady complaints/s: the middle 80% of the payouts (10th to 90th) over the time between
  them, which leaves out the burst's fill (the first batches travelling through six stages)
  and its drain
- latency per dispute = its payout.completed timestamp - its complaint's timestamp (p50, p99)
- LLM calls per complaint, from the stand-in's counts for the run's disputes.
- CPU milliseconds per complaint for each stage and each part of the stack (from /proc), which
  says where the machine's two cores went; and besides, the load generator's and what other
  work on the machine took (a slow burst with much of the latter met a busy machine).

A warm-up runs first, so that the broker has compiled its hot paths: right after a broker start,
Kafka's CPU per complaint is about twice what it settles at, and it takes a few thousand
complaints to settle (5.8, 5.0, 3.7 and 2.7 ms in four bursts of 1,200 after a fresh start,
2.3-3.0 ms later). A production broker runs for days, so the bursts measure the settled one.
Each latency gets three bursts, and the median is the figure: on a shared machine, the same
code's rate moves by a quarter from one burst to the next.

Both latencies run in one invocation, back to back, so they meet the same machine. Then a
steady input at the target rate (100/s, LLM at 0 ms, open-loop pacing for 30 s): a pipeline
that sustains it completes at the offered rate while the input arrives (from 10 s after the
first complaint to the last), with a bounded latency; one that does not falls behind, its
latency grows with the run, and most of its payouts complete after the input ended, at the rate
it drains its backlog (the middle 80% of the payouts, also printed). Last, at each latency,
bursts alternate between one and two judge replicas (1, 2, 2, 1): where the judge is the
bottleneck, the second replica raises the rate of the bursts' middle 80% (the ratio's figure;
the whole bursts' is printed too).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from confluent_kafka import Consumer, KafkaError

from bench import cli, cpu
from refund_bench import topics as t
from refund_bench.codec import Codec, framing_from_registry_url
from refund_bench.config import StackSettings
from refund_bench.db.orders import upsert_orders
from refund_bench.launcher import (
    BASE_METRICS_PORT,
    REPO,
    SERVICES,
    Launcher,
    end_offsets,
    start_at_the_end,
)
from refund_bench.llm_setup import JudgePanelSettings
from refund_bench.publish import ComplaintPublisher
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER, own_copy

SERVICE_ENV = {"LLM_CACHE_TTL_SECONDS": "3600"}
"""What the benchmark's services run with, besides the stack's settings.

Its disputes are never delivered again once a run is over, so their LLM answers are kept for an
hour, not the 30-day default. Otherwise a machine that runs the benchmark often piles up
millions of answers in Redis, and Redis rewrites its append-only file each time that doubles:
at 7.8 million answers one rewrite took 77 s of a core, in the middle of the measured bursts.
Each answer is written the same way (``SET NX EX``), so each costs the same CPU."""


@dataclass(frozen=True)
class Result:
    latency_ms: int
    complaints: int
    seconds: float
    p50_ms: float
    p99_ms: float
    llm_calls_per_complaint: float
    max_judge_inflight: int
    """The most judge LLM calls in progress at once (see :class:`InflightSampler`)."""
    steady_rate: float
    """Payouts per second between the 10th and the 90th percentile payout."""
    arriving_rate: float | None
    """Paced runs: payouts per second while the input still arrived (see
    :func:`rate_while_arriving`); None if it arrived for :data:`SETTLE_SECONDS` or less."""
    after_input: float
    """The share of the payouts completed after the last complaint was sent."""
    cpu_seconds: dict[str, float]
    wall_seconds: float

    def cpu_line(self) -> str:
        """``judge 15.3, llm_standin 4.2, ...`` in CPU ms per complaint and their total, then the
        load generator's and the rest of the machine's."""
        stack = {
            name: sec
            for name, sec in self.cpu_seconds.items()
            if name not in (cpu.LOAD_GENERATOR, cpu.OTHER)
        }
        parts = [f"{name} {self.cpu_ms(name):.1f}" for name in stack]
        total = sum(stack.values())
        return (
            f"CPU ms per complaint: {', '.join(parts)}; total {1000 * total / self.complaints:.1f}"
            f" ({100 * total / self.wall_seconds:.0f}% of one core over the run); besides:"
            f" the load generator {self.cpu_ms(cpu.LOAD_GENERATOR):.1f},"
            f" other work on the machine {self.cpu_ms(cpu.OTHER):.1f}"
        )

    def cpu_ms(self, label: str) -> float:
        """CPU milliseconds per complaint that ``label`` (see :mod:`bench.cpu`) used; 0 if none."""
        return 1000 * self.cpu_seconds.get(label, 0.0) / self.complaints

    @property
    def rate(self) -> float:
        return self.complaints / self.seconds


@dataclass(frozen=True)
class Endpoints:
    """Where a benchmark reaches the local stack, and the judge's metrics."""

    kafka: str
    registry: str
    standin: str
    """The LLM stand-in's base URL, without ``/v1``."""
    judge_metrics: str

    def burst(self, latency_ms: int, n: int) -> Result:
        """:func:`one_run`: a burst of ``n`` complaints with the LLM at ``latency_ms``."""
        return one_run(self.kafka, self.registry, self.standin, latency_ms, n, self.judge_metrics)

    def paced(self, latency_ms: int, rate_per_s: float, seconds: float) -> Result:
        """:func:`paced_run`: ``rate_per_s`` complaints a second for ``seconds``."""
        return paced_run(
            self.kafka,
            self.registry,
            self.standin,
            latency_ms,
            rate_per_s,
            seconds,
            self.judge_metrics,
        )


NO_FAULTS: dict[str, Any] = {
    "rate_429": 0.0,
    "rate_5xx": 0.0,
    "rate_timeout": 0.0,
    "rate_malformed": 0.0,
    "next_faults": [],
}
"""The stand-in's ``/admin/faults`` body that turns off every fault, scripted ones included."""


def set_standin_faults(standin: str, settings: dict[str, Any]) -> None:
    """Post ``settings`` to the stand-in's ``/admin/faults``; raises
    :class:`httpx.HTTPStatusError` if the stand-in refuses them."""
    httpx.post(f"{standin}/admin/faults", json=settings, timeout=5).raise_for_status()


@contextlib.contextmanager
def standin_faults_kept(standin: str) -> Iterator[None]:
    """Within the block, change the stand-in's faults freely: on exit they are what they were
    before (its settings and scripted faults, read from ``/stats``)."""
    stats = httpx.get(f"{standin}/stats", timeout=5).raise_for_status().json()
    before = {**stats["faults"], "next_faults": stats["next_faults"]}
    try:
        yield
    finally:
        set_standin_faults(standin, before)


@contextlib.contextmanager
def running_pipeline() -> Iterator[Endpoints]:
    """The six stages and the recorder, one replica each, with :data:`SERVICE_ENV`, ready;
    stopped on exit, and the stand-in's faults as they were. The stack's addresses come from
    the environment (``. .stack/env.sh``)."""
    kafka = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    standin = os.environ.get("LLM_BASE_URL", "http://127.0.0.1:18090/v1").removesuffix("/v1")
    start_at_the_end(kafka)  # what test runs left in the topics is not this run's work
    judge_metrics = f"http://127.0.0.1:{BASE_METRICS_PORT + SERVICES.index('judge')}/metrics"
    launcher = Launcher(log_dir=Path(REPO / ".stack" / "logs" / "bench"), env=SERVICE_ENV)
    with standin_faults_kept(standin):
        launcher.start()
        try:
            launcher.wait_ready()
            yield Endpoints(
                kafka=kafka,
                registry=os.environ.get("SCHEMA_REGISTRY_URL", ""),
                standin=standin,
                judge_metrics=judge_metrics,
            )
        finally:
            launcher.stop()


def gauge(metrics_url: str, name: str) -> int:
    """A stage's ``refund_bench_<name>`` gauge from its /metrics; 0 if it cannot be read.

    Asks for the page uncompressed: the stage would otherwise gzip every scrape.
    """
    try:
        text = httpx.get(metrics_url, timeout=1, headers={"Accept-Encoding": "identity"}).text
    except httpx.HTTPError:
        return 0
    for line in text.splitlines():
        if line.startswith(f"refund_bench_{name}{{"):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


class InflightSampler:
    """Samples the judge's ``refund_bench_inflight_llm_calls`` gauge once a second; keeps the
    maximum. (Every 250 ms, the judge spent about 2% of its CPU serving the scrapes.)

    The gauge counts calls in progress: from before the first attempt to the end of the last,
    so a call waiting for its rate limiter, for a pooled connection or for a retry counts too.
    Of those, at most :func:`judge_open_requests` are requests open on the wire."""

    def __init__(self, metrics_url: str) -> None:
        self.maximum = 0
        self._url = metrics_url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.maximum = max(self.maximum, gauge(self._url, "inflight_llm_calls"))

    def close(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.maximum


def nearest_rank(ranked: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``ranked`` (sorted, not empty) by nearest rank: the value
    at rank ``ceil(q * n)``, the first when ``q`` is 0."""
    # Less a hair: 0.07 * 100 is 7.000000000000001 in floating point, and rank 7 is meant.
    rank = math.ceil(q * len(ranked) - 1e-9)
    return ranked[min(len(ranked), max(1, rank)) - 1]


def judge_open_requests(settings: JudgePanelSettings) -> int:
    """The most LLM requests the judge has open at once: each seat's client opens at most
    ``LLM_MAX_CONNECTIONS``, and its further calls wait for one of them."""
    return settings.judge_count * settings.llm_max_connections


def llm_calls(by_dispute: Mapping[str, int], disputes: Iterable[str]) -> int:
    """The stand-in's calls for ``disputes``, from its per-dispute counts (``by_dispute`` of its
    ``/stats``), so that calls of its other clients are not counted."""
    return sum(by_dispute.get(dispute, 0) for dispute in disputes)


SETTLE_SECONDS = 10.0
"""How long a paced run's input must have arrived before its completed rate counts: the first
payouts take seconds to come through six stages."""


def rate_while_arriving(
    finished: Sequence[float], first_sent: float, last_sent: float
) -> float | None:
    """Payouts per second completed from :data:`SETTLE_SECONDS` after the first complaint was
    sent to when the last one was: what the pipeline kept up with while the input arrived, not
    how fast it drained its backlog afterwards. None if the input ended before that window."""
    start = first_sent + SETTLE_SECONDS
    if last_sent <= start:
        return None
    return sum(1 for at in finished if start <= at <= last_sent) / (last_sent - start)


def seed_orders(tag: str, n: int) -> list[str]:
    """``n`` copies of the article's order, each with its own payment (an order's payment is
    refunded for one dispute only), in the order store; their ids. Seeded before a run's clock
    starts."""
    database_url = os.environ.get("DATABASE_URL", StackSettings().database_url.get_secret_value())
    orders = [own_copy(ARTICLE_ORDER, f"{tag}-{i}") for i in range(n)]
    with psycopg.connect(database_url) as conn:
        upsert_orders(conn, orders)
    return [order.order_id for order in orders]


def one_run(
    kafka: str,
    registry: str,
    standin: str,
    latency_ms: int,
    n: int,
    judge_metrics: str,
    rate_per_s: float | None = None,
) -> Result:
    """One measurement: a burst of ``n`` complaints, or ``n`` paced at ``rate_per_s``, with the
    stand-in at ``latency_ms`` and no faults."""
    set_standin_faults(standin, {**NO_FAULTS, "latency_ms": latency_ms})
    start_at = end_offsets(kafka, t.PAYOUT_COMPLETED.name)
    codec = Codec(
        framing_from_registry_url(registry),
        {t.PAYOUT_COMPLETED.name: t.PAYOUT_COMPLETED.schema},
    )
    publisher = ComplaintPublisher(kafka, registry)
    tag = uuid.uuid4().hex[:8]
    orders = seed_orders(tag, n)
    sent: dict[str, float] = {}
    sampler = InflightSampler(judge_metrics)
    cpu_before = cpu.snapshot()
    started = time.monotonic()
    for i in range(n):
        if rate_per_s is not None:
            # Open-loop pacing: complaint i is due at i / rate, whatever the pipeline does.
            due = started + i / rate_per_s
            time.sleep(max(0.0, due - time.monotonic()))
        dispute_id = f"bench-{tag}-{i}"
        publisher.publish(dispute_id, orders[i], "cust-77", ARTICLE_COMPLAINT, channel="bench")
        if rate_per_s is not None:
            publisher.flush()
        sent[dispute_id] = time.time()
    publisher.flush(60)
    first_sent, last_sent = min(sent.values()), max(sent.values())

    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign(start_at)
    done: dict[str, float] = {}
    deadline = time.monotonic() + 600
    try:
        while len(done) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(done)}/{n} payouts completed")
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(err)
                value = codec.decode(t.PAYOUT_COMPLETED.name, msg.value())
                if value["dispute_id"] in sent and value["dispute_id"] not in done:
                    done[value["dispute_id"]] = msg.timestamp()[1] / 1000
    finally:
        consumer.close()
        max_inflight = sampler.close()
    cpu_seconds = cpu.used(cpu_before, cpu.snapshot())
    wall = time.monotonic() - started
    latencies = sorted((done[d] - sent[d]) * 1000 for d in done)
    finished = sorted(done.values())
    low, high = len(finished) // 10, len(finished) * 9 // 10
    span = finished[high - 1] - finished[low] if high > low + 1 else 0.0
    steady = (high - 1 - low) / span if span > 0 else 0.0
    by_dispute = httpx.get(f"{standin}/stats", timeout=5).raise_for_status().json()["by_dispute"]
    calls = llm_calls(by_dispute, sent)
    return Result(
        latency_ms=latency_ms,
        complaints=n,
        seconds=max(done.values()) - first_sent,
        p50_ms=statistics.median(latencies),
        p99_ms=nearest_rank(latencies, 0.99),
        llm_calls_per_complaint=calls / n,
        max_judge_inflight=max_inflight,
        steady_rate=steady,
        arriving_rate=rate_while_arriving(finished, first_sent, last_sent),
        after_input=sum(1 for at in finished if at > last_sent) / len(finished),
        cpu_seconds=cpu_seconds,
        wall_seconds=wall,
    )


def paced_run(
    kafka: str,
    registry: str,
    standin: str,
    latency_ms: int,
    rate_per_s: float,
    seconds: float,
    judge_metrics: str,
) -> Result:
    """``rate_per_s`` complaints a second for ``seconds``, open loop (see :func:`one_run`)."""
    return one_run(
        kafka,
        registry,
        standin,
        latency_ms,
        int(rate_per_s * seconds),
        judge_metrics,
        rate_per_s=rate_per_s,
    )


def median_run(runs: list[Result]) -> Result:
    """The run with the median rate (the lower middle one of an even count)."""
    ranked = sorted(runs, key=lambda run: run.rate)
    return ranked[(len(ranked) - 1) // 2]


def warm_up(stack: Endpoints, complaints: int, bursts: int) -> None:
    """300 complaints (connections, schema ids), then ``bursts`` bursts of ``complaints`` at
    0 ms, printing Kafka's CPU per complaint in each: it falls as the broker's JIT compiler
    settles."""
    stack.burst(0, 300)
    for number in range(1, bursts + 1):
        run = stack.burst(0, complaints)
        print(
            f"  warm-up burst {number} of {bursts}: {run.rate:.1f}/s,"
            f" Kafka {run.cpu_ms('kafka'):.1f} ms of CPU per complaint",
            flush=True,
        )


def _wait_assigned(urls: list[str], partitions: int, timeout_s: float = 90.0) -> None:
    """Wait until the judge replicas behind ``urls`` share all partitions, each holding some."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = [gauge(url, "assigned_partitions") for url in urls]
        if sum(counts) == partitions and all(counts):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"judge assignment {counts} never covered {partitions} partitions")
        time.sleep(0.5)


JUDGE_REPLICAS = (1, 2, 2, 1)
"""The judge replicas of :func:`judge_scaling`'s bursts, in order: balanced, so that a machine
speeding up or slowing down over the four bursts favours neither count."""


def judge_scaling(stack: Endpoints, latency_ms: int, n: int) -> list[tuple[int, Result]]:
    """Bursts with :data:`JUDGE_REPLICAS` judge replicas (every other stage: one): (replicas,
    run) each.

    If the judge were the bottleneck, a second replica would raise the rate.
    """
    second = Launcher(
        log_dir=Path(REPO / ".stack" / "logs" / "bench"),
        env=SERVICE_ENV,
        services=("judge",),
        base_port=BASE_METRICS_PORT + 100,
        replica=1,
    )
    second_metrics = f"http://127.0.0.1:{BASE_METRICS_PORT + 100}/metrics"
    partitions = t.DEFAULT_PARTITIONS
    results: list[tuple[int, Result]] = []
    try:
        for replicas in JUDGE_REPLICAS:
            if replicas == 2:
                second.start()
                second.wait_ready()
                _wait_assigned([stack.judge_metrics, second_metrics], partitions)
            else:
                second.stop()
                _wait_assigned([stack.judge_metrics], partitions)
            run = stack.burst(latency_ms, n)
            print(
                f"  {replicas} judge replica(s), LLM at {latency_ms} ms: {run.rate:.1f}/s,"
                f" middle 80% {run.steady_rate:.1f}/s",
                flush=True,
            )
            results.append((replicas, run))
    finally:
        second.stop()
    return results


def scaling_rows(latency_ms: int, scaling: Sequence[tuple[int, Result]]) -> list[tuple[str, str]]:
    """The medians of :func:`judge_scaling`'s bursts per replica count, over the whole burst and
    over its middle 80%, and the ratio of two replicas to one over the middle 80%: in a burst of
    600 the fill and the drain, which a second judge does not shorten, are a large share."""
    rows: list[tuple[str, str]] = []
    whole: dict[int, float] = {}
    middle: dict[int, float] = {}
    for replicas, label in ((1, "1 judge replica"), (2, "2 judge replicas")):
        runs = [run for count, run in scaling if count == replicas]
        whole[replicas] = statistics.median(run.rate for run in runs)
        middle[replicas] = statistics.median(run.steady_rate for run in runs)
        rows += [
            (f"complaints/s with {label} (LLM {latency_ms} ms)", f"{whole[replicas]:.1f}"),
            (
                f"complaints/s with {label}, middle 80% (LLM {latency_ms} ms)",
                f"{middle[replicas]:.1f}",
            ),
        ]
    ratio = f"2 judge replicas / 1, %s (LLM {latency_ms} ms)"
    return [
        *rows,
        (ratio % "middle 80%", f"{middle[2] / middle[1]:.2f}x"),
        (ratio % "whole burst", f"{whole[2] / whole[1]:.2f}x"),
    ]


def main(
    complaints: int = 1200,
    latencies: list[int] | None = None,
    paced_rate: float = 10.0,
    paced_seconds: float = 30.0,
    sustained_rate: float = 100.0,
    sustained_seconds: float = 30.0,
    bursts: int = 3,
    warm_up_bursts: int = 3,
) -> list[tuple[str, str]]:
    """After a warm-up (:func:`warm_up`), per LLM latency: ``bursts`` bursts of ``complaints``
    (throughput: the median burst), then a paced run at ``paced_rate``/s for ``paced_seconds``
    (latency below saturation). Then, with the LLM at 0 ms, ``sustained_rate``/s for
    ``sustained_seconds`` (can the pipeline keep up?)."""
    latencies = [0, 300] if latencies is None else latencies
    judge = JudgePanelSettings()  # the environment the launcher hands the judge
    open_requests = judge_open_requests(judge)
    rows: list[tuple[str, str]] = [
        (
            "judge LLM requests open at once, at most",
            f"{open_requests} ({judge.judge_count} seats x {judge.llm_max_connections})",
        )
    ]
    with running_pipeline() as stack:
        warm_up(stack, complaints, warm_up_bursts)
        for latency in latencies:
            runs = [stack.burst(latency, complaints) for _ in range(bursts)]
            burst = median_run(runs)
            paced = stack.paced(latency, paced_rate, paced_seconds)
            print(
                f"  LLM at {latency:3d} ms: bursts of {complaints}:"
                f" {', '.join(f'{run.rate:.1f}' for run in runs)}/s,"
                f" middle 80% {', '.join(f'{run.steady_rate:.1f}' for run in runs)}/s;"
                f" the median burst: {burst.rate:.1f}/s in {burst.seconds:.1f}s"
                f" (p50 {burst.p50_ms:.0f} ms, p99 {burst.p99_ms:.0f} ms);"
                f" paced at {paced_rate:g}/s:"
                f" p50 {paced.p50_ms:.0f} ms, p99 {paced.p99_ms:.0f} ms;"
                f" {burst.llm_calls_per_complaint:.1f} LLM calls per complaint;"
                f" up to {burst.max_judge_inflight} judge calls in progress"
                f" (of which at most {open_requests} open requests)",
                flush=True,
            )
            print(f"    median burst {burst.cpu_line()}", flush=True)
            steady = statistics.median(run.steady_rate for run in runs)
            rows += [
                (
                    f"pipeline complaints/s, median of {bursts} bursts (LLM {latency} ms)",
                    f"{burst.rate:.1f}",
                ),
                (
                    f"pipeline complaints/s, burst, middle 80% (LLM {latency} ms)",
                    f"{steady:.1f}",
                ),
                (
                    f"pipeline p50 / p99 latency at {paced_rate:g}/s (LLM {latency} ms)",
                    f"{paced.p50_ms:.0f} / {paced.p99_ms:.0f} ms",
                ),
                (
                    f"LLM calls per complaint (LLM {latency} ms)",
                    f"{burst.llm_calls_per_complaint:.1f}",
                ),
                (
                    f"judge LLM calls in progress, max (LLM {latency} ms)",
                    f"{burst.max_judge_inflight}",
                ),
            ]
        sustained = stack.paced(0, sustained_rate, sustained_seconds)
        arriving = "-" if sustained.arriving_rate is None else f"{sustained.arriving_rate:.1f}"
        print(
            f"  LLM at   0 ms, offered {sustained_rate:g}/s for {sustained_seconds:g}s:"
            f" {arriving}/s completed while the input arrived (from {SETTLE_SECONDS:g} s after"
            f" the first complaint to the last); {sustained.steady_rate:.1f}/s over the middle"
            f" 80% of the payouts, the backlog's drain included ({100 * sustained.after_input:.0f}%"
            f" of the payouts completed after the input ended); p50 {sustained.p50_ms:.0f} ms,"
            f" p99 {sustained.p99_ms:.0f} ms",
            flush=True,
        )
        print(f"    {sustained.cpu_line()}", flush=True)
        rows += [
            (
                f"pipeline complaints/s completed while offered {sustained_rate:g}/s (LLM 0 ms)",
                arriving,
            ),
            (
                f"pipeline complaints/s, offered {sustained_rate:g}/s, middle 80% of payouts,"
                " drain included (LLM 0 ms)",
                f"{sustained.steady_rate:.1f}",
            ),
            (
                f"pipeline p50 / p99 latency, offered {sustained_rate:g}/s (LLM 0 ms)",
                f"{sustained.p50_ms:.0f} / {sustained.p99_ms:.0f} ms",
            ),
        ]
        print("  judge replicas side by side (bursts of half the size):", flush=True)
        for latency in latencies:
            rows += scaling_rows(latency, judge_scaling(stack, latency, complaints // 2))
    return rows


if __name__ == "__main__":
    cli.run(main)
