"""The benchmarks' command lines, and the settings they give their services, read as the
stages read them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.pipeline_throughput import SERVICE_ENV, judge_open_requests
from refund_bench.launcher import REPO
from refund_bench.llm_setup import JudgePanelSettings, LlmStageSettings


def test_the_benchmarks_services_keep_their_answers_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SERVICE_ENV.items():
        monkeypatch.setenv(name, value)

    settings = LlmStageSettings()

    assert settings.llm_cache_ttl_seconds == 3600
    default = LlmStageSettings.model_fields["llm_cache_ttl_seconds"].default
    assert settings.llm_cache_ttl_seconds < default


def test_the_judges_open_requests_are_its_seats_pools() -> None:
    """Its grievances hold up to 3 x 256 = 768 calls in progress; each seat's pool opens 128."""
    settings = JudgePanelSettings(judge_count=3, llm_max_connections=128, max_inflight=256)
    assert judge_open_requests(settings) == 384


@pytest.mark.parametrize(
    "module",
    [
        "bench",
        "bench.broker_requests",
        "bench.burst_timeline",
        "bench.llm_client",
        "bench.pipeline_throughput",
        "bench.runtime_passthrough",
        "bench.stripe_client",
    ],
)
def test_a_benchmark_answers_help_without_running(module: str) -> None:
    """``--help`` prints the options and exits: it starts no stage, sends no complaint."""
    shown = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert shown.returncode == 0, shown.stderr
    assert f"Usage: python -m {module} [OPTIONS]" in shown.stdout
