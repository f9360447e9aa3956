"""The benchmarks' percentiles: nearest rank (the value at rank ceil(q * n)), and the burst
timeline's relative to the burst's first complaint."""

from __future__ import annotations

from bench.burst_timeline import quantiles
from bench.pipeline_throughput import nearest_rank


def test_quantiles_are_nearest_ranks_after_the_origin() -> None:
    values = [10.0 + i for i in range(10)]  # 10.0 .. 19.0, unordered below
    # Ranks 1, 1, 5, 9 and 10 of 10: the 10th percentile is the first value, the median the 5th.
    assert quantiles(list(reversed(values)), origin=10.0) == [0.0, 0.0, 4.0, 8.0, 9.0]


def test_one_record_is_every_quantile() -> None:
    assert quantiles([3.5], origin=1.0) == [2.5] * 5


def test_p99_of_a_hundred_is_the_99th_value() -> None:
    ranked = [float(i) for i in range(1, 101)]  # 1.0 .. 100.0
    assert nearest_rank(ranked, 0.99) == 99.0
    assert nearest_rank(ranked, 0.07) == 7.0  # 0.07 * 100 is a hair above 7 in floating point
    assert nearest_rank(ranked, 1.0) == 100.0


def test_p99_of_fewer_than_a_hundred_is_the_largest() -> None:
    assert nearest_rank([1.0, 2.0, 3.0], 0.99) == 3.0
