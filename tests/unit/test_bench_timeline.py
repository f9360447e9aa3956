"""The burst timeline's quantiles: nearest rank, relative to the burst's first complaint."""

from __future__ import annotations

from bench.burst_timeline import quantiles


def test_quantiles_are_nearest_ranks_after_the_origin() -> None:
    values = [10.0 + i for i in range(10)]  # 10.0 .. 19.0, unordered below
    assert quantiles(list(reversed(values)), origin=10.0) == [0.0, 1.0, 5.0, 9.0, 9.0]


def test_one_record_is_every_quantile() -> None:
    assert quantiles([3.5], origin=1.0) == [2.5] * 5
