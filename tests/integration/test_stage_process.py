"""A stage as its own process: health, readiness and metrics over HTTP; SIGTERM within 30 s."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from tests.conftest import Stack
from tests.kafka_helpers import REPO, wait_for

pytestmark = pytest.mark.stack

PORT = 9480


def _get(path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{PORT}{path}", timeout=2)
    except httpx.HTTPError:
        return None


def test_a_stage_serves_probes_and_metrics_and_stops_cleanly_on_sigterm(stack: Stack) -> None:
    instance = f"tally-probe-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka,
        "SCHEMA_REGISTRY_URL": stack.registry_url,
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(PORT),
        "TRANSACTIONAL_ID": instance,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.tally"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(
            lambda: (r := _get("/readyz")) is not None and r.status_code == 200,
            60,
            "tally to be ready",
        )
        health = _get("/healthz")
        assert health is not None
        assert health.status_code == 200
        metrics = _get("/metrics")
        assert metrics is not None
        assert "refund_bench_transactions_total" in metrics.text
        assert "# TYPE refund_bench_batch_seconds histogram" in metrics.text
        assert "dispute" not in metrics.text.lower(), "no per-dispute labels"

        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert code == 0, process.stderr.read().decode()[-2000:] if process.stderr else ""
    assert elapsed < 30


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
    """Not ready first and failing at its first record: it exits before consuming, so
    Kubernetes shows the crash loop and its log the reason. A Redis address that accepts
    connections and never answers fails the start-up PING after the client's read timeout
    (redis-py's default, 5 s), not a hang."""
    with socket.socket() as silent:  # accepts (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        unreachable = {
            "DATABASE_URL": "postgresql://refund:refund@127.0.0.1:1/refund_bench",
            "REDIS_URL": "redis://127.0.0.1:1/0",
            "REDIS_URL (silent)": f"redis://127.0.0.1:{silent.getsockname()[1]}/0",
        }[setting]
        finished = _run_stage(stack, stage, setting.split()[0], unreachable)
    assert finished.returncode != 0
    assert reason in finished.stdout + finished.stderr


def _run_stage(
    stack: Stack, stage: str, setting: str, value: str
) -> subprocess.CompletedProcess[str]:
    """``services.<stage>`` run to its end (90 s at most) with ``setting`` set to ``value``."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": stack.kafka,
        "SCHEMA_REGISTRY_URL": stack.registry_url,
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(PORT),
        "TRANSACTIONAL_ID": f"{stage}-unreachable-{uuid.uuid4().hex[:6]}",
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
