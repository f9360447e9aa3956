"""Start, watch and stop the pipeline's services as local processes (demo, tests, benchmarks).

On Kubernetes each service is its own Deployment (``deploy/k8s/``); locally they are child
processes of this launcher, each with its own metrics/health port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from refund_bench.stages import STAGES, StageTopics

REPO = Path(__file__).resolve().parent.parent

SERVICES: tuple[str, ...] = (
    "extractor",
    "judge",
    "tally",
    "pricing",
    "settler",
    "payout",
    "recorder",
)
BASE_METRICS_PORT = 9401


@dataclass
class Launched:
    name: str
    process: subprocess.Popen[bytes]
    metrics_port: int

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1).is_success
        except httpx.HTTPError:
            return False


@dataclass
class Launcher:
    """Runs the services with ``env`` added to the environment; logs go to ``log_dir``.

    Like a Kubernetes Deployment, it restarts a service that exits on its own (a crash is how
    a stage hands an unprocessable batch back to Kafka for redelivery); ``restarts`` counts them.
    """

    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    services: Sequence[str] = SERVICES
    base_port: int = BASE_METRICS_PORT
    replica: int = 0
    """Which replica these processes are: it names their transactional and member ids (a
    second launcher with ``replica=1`` and its own ports runs second replicas)."""
    running: dict[str, Launched] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _watching: threading.Event = field(default_factory=threading.Event)

    def start(self, names: Sequence[str] | None = None) -> None:
        """Start the services (default: all) and the supervisor that restarts crashed ones."""
        with self._lock:
            for name in names or self.services:
                self._spawn(name)
        if not self._watching.is_set():
            self._watching.set()
            threading.Thread(target=self._supervise, daemon=True).start()

    def _supervise(self) -> None:
        while self._watching.is_set():
            with self._lock:
                for name, launched in list(self.running.items()):
                    if launched.process.poll() is not None and self._watching.is_set():
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        del self.running[name]
                        self._spawn(name)
            time.sleep(0.5)

    def _spawn(self, name: str) -> None:
        if name in self.running and self.running[name].process.poll() is None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        port = self.base_port + self.services.index(name)
        env = {
            **os.environ,
            **self.env,
            "METRICS_PORT": str(port),
            "METRICS_HOST": "127.0.0.1",
            "TRANSACTIONAL_ID": f"{name}-local-{self.replica}",
            "GROUP_INSTANCE_ID": f"{name}-local-{self.replica}",
        }
        suffix = f"-{self.replica}" if self.replica else ""
        log = open(self.log_dir / f"{name}{suffix}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(  # noqa: S603 - our own modules
            [sys.executable, "-m", f"services.{name}"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.running[name] = Launched(name, process, port)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until every running service answers /readyz; raise naming the laggards."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.running)
        while pending:
            for name in sorted(pending):
                with self._lock:
                    launched = self.running.get(name)
                if launched is not None and launched.ready():
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"not ready after {timeout_s}s: {sorted(pending)}")
            if pending:
                time.sleep(0.2)

    def stop(self, names: Sequence[str] | None = None, *, kill: bool = False) -> None:
        """SIGTERM (graceful: the open batch commits) or SIGKILL, then wait for exit.

        Stopping every service also stops the supervisor.
        """
        with self._lock:
            if names is None:
                self._watching.clear()
            targets = [
                self.running.pop(n) for n in (names or list(self.running)) if n in self.running
            ]
        for launched in targets:
            if launched.process.poll() is None:
                launched.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        for launched in targets:
            try:
                launched.process.wait(35)
            except subprocess.TimeoutExpired:
                launched.process.kill()
                launched.process.wait(5)


def end_offsets(kafka: str, *topics: str) -> list[TopicPartition]:
    """The end offset of every partition of ``topics``, now."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "refund-bench-end-offsets"})
    try:
        ends = []
        for topic in topics:
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                ends.append(TopicPartition(topic, p, high))
        return ends
    finally:
        consumer.close()


def start_at_the_end(
    kafka: str, stages: Sequence[StageTopics] = STAGES, timeout_s: float = 60.0
) -> None:
    """Commit each stage's consumer group at the end of its inputs, so that services started
    next handle only what is published from now on: for tests and benchmarks on a stack that
    earlier runs left records in (decisions for disputes no stage knows any more, which would
    be dead-lettered by the hundred). Never for the pipeline's own groups in production.

    Only a group with no members can be moved. The services keep a static membership, which
    outlives a stopped process by the session timeout (10 s): a group is tried again until
    ``timeout_s``, then its error (``confluent_kafka.KafkaException``) is raised.
    """
    admin = AdminClient({"bootstrap.servers": kafka})
    deadline = time.monotonic() + timeout_s
    for stage in stages:
        group = ConsumerGroupTopicPartitions(
            stage.name, end_offsets(kafka, *(topic.name for topic in stage.inputs))
        )
        while True:
            try:
                for future in admin.alter_consumer_group_offsets([group]).values():
                    future.result()
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # until the last service's membership has expired
