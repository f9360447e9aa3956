"""The pipeline benchmark's completed rate under a steady input: counted while the input still
arrives, not while the backlog drains after it."""

from __future__ import annotations

from bench.pipeline_throughput import SETTLE_SECONDS, rate_while_arriving


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
