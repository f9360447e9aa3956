"""The pipeline benchmark's rates: under a steady input, counted while the input still arrives,
not while the backlog drains after it; one judge replica against two, compared over the bursts'
middle 80%, in a balanced order."""

from __future__ import annotations

from bench.pipeline_throughput import (
    JUDGE_REPLICAS,
    SETTLE_SECONDS,
    Result,
    rate_while_arriving,
    scaling_rows,
)


def test_only_payouts_while_the_input_arrives_count() -> None:
    """Input from 100 s to 130 s: 20 s counted (110 to 130); payouts before it (the fill) and
    after it (the drain, however fast) are left out."""
    assert SETTLE_SECONDS == 10.0
    fill = [105.0 + i / 10 for i in range(10)]
    kept_up = [110.0 + i / 2 for i in range(41)]  # 110.0 .. 130.0, 2 a second
    drain = [130.5 + i / 100 for i in range(500)]
    rate = rate_while_arriving(fill + kept_up + drain, first_sent=100.0, last_sent=130.0)
    assert rate == 41 / 20


def test_an_input_no_longer_than_the_settling_time_has_no_such_rate() -> None:
    assert rate_while_arriving([1.0, 2.0], first_sent=0.0, last_sent=SETTLE_SECONDS) is None


def burst(seconds: float, steady_rate: float) -> Result:
    """A burst of 600 in ``seconds``, ``steady_rate`` over its middle 80%."""
    return Result(
        latency_ms=300,
        complaints=600,
        seconds=seconds,
        p50_ms=0.0,
        p99_ms=0.0,
        llm_calls_per_complaint=14.0,
        max_judge_inflight=0,
        steady_rate=steady_rate,
        arriving_rate=None,
        after_input=0.0,
        cpu_seconds={},
        wall_seconds=seconds,
    )


def test_replicas_alternate_in_a_balanced_order() -> None:
    assert JUDGE_REPLICAS == (1, 2, 2, 1)


def test_the_replica_ratio_is_over_the_middle_80_percent() -> None:
    """The fill and drain of a burst of 600 take as long with two judges: the whole bursts hide
    what the second one adds in between."""
    scaling = [(1, burst(10.0, 80.0)), (2, burst(10.0, 100.0)), (2, burst(10.0, 100.0))]
    scaling.append((1, burst(10.0, 80.0)))
    rows = dict(scaling_rows(300, scaling))
    assert rows["2 judge replicas / 1, middle 80% (LLM 300 ms)"] == "1.25x"
    assert rows["2 judge replicas / 1, whole burst (LLM 300 ms)"] == "1.00x"
    assert rows["complaints/s with 1 judge replica, middle 80% (LLM 300 ms)"] == "80.0"
    assert rows["complaints/s with 2 judge replicas (LLM 300 ms)"] == "60.0"
