"""The pipeline benchmark and the LLM stand-in: a run turns every fault off, a refused setting
stops it, and the faults are as they were once the benchmark is done; a run counts the calls
for its own disputes only (the stand-in runs in the test process, see conftest)."""

from __future__ import annotations

import httpx
import pytest

from bench.pipeline_throughput import NO_FAULTS, llm_calls, set_standin_faults, standin_faults_kept
from refund_bench.llm.client import DISPUTE_HEADER
from tests.standin import Standin


def test_a_run_turns_every_fault_off_and_the_faults_come_back(standin: Standin) -> None:
    root = standin.base_url.removesuffix("/v1")
    standin.faults(latency_ms=40, rate_429=0.25, rate_malformed=0.5, next_faults=["5xx", "429"])
    before = standin.stats()
    with standin_faults_kept(root):
        set_standin_faults(root, {**NO_FAULTS, "latency_ms": 300})
        during = standin.stats()
        assert during["faults"]["latency_ms"] == 300
        assert all(during["faults"][name] == 0.0 for name in NO_FAULTS if name != "next_faults")
        assert during["next_faults"] == []
    after = standin.stats()
    assert after["faults"] == before["faults"]
    assert after["next_faults"] == ["5xx", "429"]


def test_a_refused_setting_raises(standin: Standin) -> None:
    root = standin.base_url.removesuffix("/v1")
    with pytest.raises(httpx.HTTPStatusError):
        set_standin_faults(root, {**NO_FAULTS, "rate_429": 0.75, "rate_5xx": 0.75})
    with pytest.raises(httpx.HTTPStatusError):
        set_standin_faults(root, {"latency_ms": -1})


def test_calls_are_counted_for_the_runs_disputes_only(standin: Standin) -> None:
    """Calls for other disputes, or for none, are other clients' (tests, a second benchmark)."""
    for dispute in ("run-a", "run-a", "run-b", "another-client", None):
        headers = {} if dispute is None else {DISPUTE_HEADER: dispute}
        httpx.post(f"{standin.base_url}/chat/completions", content=b"{}", headers=headers)
    stats = standin.stats()
    assert stats["total_calls"] == 5
    assert llm_calls(stats["by_dispute"], ["run-a", "run-b", "run-without-calls"]) == 3
