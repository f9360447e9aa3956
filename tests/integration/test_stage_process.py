"""A stage as its own process: health, readiness and metrics over HTTP; SIGTERM within 30 s."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from refund_bench.launcher import start_at_the_end
from refund_bench.stages import TALLY, StageTopics
from tests.conftest import Stack
from tests.fakes.registry_proxy import Answer, RegistryProxy
from tests.kafka_helpers import REPO, wait_for
from tests.ports import free_port

pytestmark = pytest.mark.stack

GRACE_S = 30
"""Kubernetes' default grace period: a stage must have stopped this long after SIGTERM."""
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _tail(log_path: Path) -> str:
    """The end of a stage's log, to show with a failure."""
    return f"last lines of {log_path}:\n" + log_path.read_text(errors="replace")[-2000:]


def _get(port: int, path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2)
    except httpx.HTTPError:
        return None


def test_a_stage_serves_probes_and_metrics_and_stops_cleanly_on_sigterm(
    stack: Stack, registry_url: str
) -> None:
    """The real ``python -m services.tally``, in a consumer group of its own (set at the end of
    its input, so it takes no records of the pipeline's group or of earlier runs) and on a free
    port, so that it disturbs nothing else on the shared stack. Its registry answers the first
    request 503: the retry is counted on ``/metrics``."""
    instance = f"tally-probe-{uuid.uuid4().hex[:6]}"  # its group and its transactional id
    port = free_port()
    start_at_the_end(stack.kafka, [StageTopics(instance, TALLY.inputs, ())])
    failed: list[str] = []

    def fail_the_first(path: str) -> Answer | None:
        if failed:
            return None
        failed.append(path)
        return 503, b'{"error_code": 50001, "message": "registry backend unavailable"}'

    with RegistryProxy(registry_url, fail_the_first) as registry:
        _probe(stack, instance, port, registry.url)
    assert len(failed) == 1


def _probe(stack: Stack, instance: str, port: int, registry_url: str) -> None:
    """Run tally, check its probes and metrics, stop it with SIGTERM and see it exit 0."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka,
        "SCHEMA_REGISTRY_URL": registry_url,
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(port),
        "TRANSACTIONAL_ID": instance,
        "CONSUMER_GROUP": instance,
    }
    # Its log goes to a file: a pipe nobody reads while it runs would block the stage once its
    # ~64 KB buffer is full.
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / f"{instance}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.tally"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        try:
            wait_for(
                lambda: (r := _get(port, "/readyz")) is not None and r.status_code == 200,
                60,
                "tally to be ready",
            )
        except TimeoutError as exc:
            pytest.fail(f"{exc}; {_tail(log_path)}")
        health = _get(port, "/healthz")
        assert health is not None
        assert health.status_code == 200
        metrics = _get(port, "/metrics")
        assert metrics is not None
        assert "refund_bench_transactions_total" in metrics.text
        assert "# TYPE refund_bench_batch_seconds histogram" in metrics.text
        assert "dispute" not in metrics.text.lower(), "no per-dispute labels"
        retried = {"stage": "tally", "topic": "", "kind": "schema_registry"}
        assert _sample(metrics.text, "refund_bench_retries_total", retried) == 1, (
            "the registry's 503 at start, retried once, is counted"
        )

        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"tally was still running {GRACE_S} s after SIGTERM; {_tail(log_path)}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        _delete_group(stack.kafka, instance)
    assert code == 0, _tail(log_path)


def _sample(text: str, name: str, labels: dict[str, str]) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` in Prometheus text ``text``."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def _delete_group(kafka: str, group: str) -> None:
    """Best effort: a test's group left on the broker is clutter, not harm."""
    admin = AdminClient({"bootstrap.servers": kafka})
    for future in admin.delete_consumer_groups([group], request_timeout=10).values():
        with contextlib.suppress(KafkaException):  # e.g. not empty yet: it expires later
            future.result()


@pytest.mark.parametrize(
    ("stage", "setting", "reason"),
    [
        ("extractor", "DATABASE_URL", "PostgreSQL (DATABASE_URL) gave no connection"),
        ("judge", "REDIS_URL", "Connection refused"),
        ("settler", "REDIS_URL (silent)", "Timeout"),
    ],
)
def test_a_stage_that_cannot_reach_its_store_stops_at_start_saying_why(
    stack: Stack, stage: str, setting: str, reason: str
) -> None:
    """It exits before consuming, so Kubernetes shows the crash loop and its log the reason;
    its consumer group (its own, not the pipeline's) has committed nothing. A Redis address
    that accepts connections and never answers fails the start-up PING after the client's
    read timeout (redis-py's default, 5 s), not a hang."""
    group = f"{stage}-unreachable-{uuid.uuid4().hex[:8]}"
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        unreachable = {
            "DATABASE_URL": "postgresql://refund:refund@127.0.0.1:1/refund_bench",
            "REDIS_URL": "redis://127.0.0.1:1/0",
            "REDIS_URL (silent)": f"redis://127.0.0.1:{silent.getsockname()[1]}/0",
        }[setting]
        finished = _run_stage(stack, stage, setting.split()[0], unreachable, group)
    assert finished.returncode != 0
    assert reason in finished.stdout + finished.stderr
    # A stage that joined its group and left would leave it EMPTY (committed or not): DEAD is
    # a group no member ever joined.
    assert _group_state(stack.kafka, group) == ConsumerGroupState.DEAD, "it joined its group"
    assert _committed(stack.kafka, group) == [], "it consumed before its store answered"


def _group_state(kafka: str, group: str) -> ConsumerGroupState:
    admin = AdminClient({"bootstrap.servers": kafka})
    (described,) = admin.describe_consumer_groups([group], request_timeout=30).values()
    state: ConsumerGroupState = described.result(30).state
    return state


def _committed(kafka: str, group: str) -> list[TopicPartition]:
    """The partitions ``group`` has committed an offset for."""
    admin = AdminClient({"bootstrap.servers": kafka})
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=30
    )
    [listing] = [future.result() for future in futures.values()]
    return [tp for tp in listing.topic_partitions or [] if tp.offset >= 0]


def _run_stage(
    stack: Stack, stage: str, setting: str, value: str, group: str
) -> subprocess.CompletedProcess[str]:
    """``services.<stage>`` run to its end (90 s at most) in consumer group ``group``, with
    ``setting`` set to ``value``."""
    stores = {"DATABASE_URL": stack.database_url, "REDIS_URL": stack.redis_url}
    env = {
        **os.environ,
        **{name: address for name, address in stores.items() if address},  # testcontainers'
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka,
        "SCHEMA_REGISTRY_URL": stack.registry_url,
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(free_port()),
        "TRANSACTIONAL_ID": group,
        "CONSUMER_GROUP": group,
        setting: value,
    }
    return subprocess.run(
        [sys.executable, "-m", f"services.{stage}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
