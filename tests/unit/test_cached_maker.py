"""The model and prompt version that wrote a cached answer, kept beside it and read back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refund_bench.llm.cache import maker_value, read_maker


@given(st.text(), st.text())
def test_a_maker_reads_back_as_written(model: str, version: str) -> None:
    assert read_maker(maker_value(model, version)) == (model, version)


def test_no_maker_or_another_value_reads_as_unknown() -> None:
    for value in (
        None,
        "",
        "not json",
        '{"model": "m"}',
        '{"model": "m", "prompt_version": 2}',
        '["m", "v"]',
    ):
        assert read_maker(value) is None, value
