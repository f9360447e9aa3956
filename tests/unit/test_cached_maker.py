"""An answer is cached with the model and prompt version that wrote it, and read back whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refund_bench.llm.cache import (
    MadeAnswer,
    cache_value,
    cached_answer,
    made_answer,
    with_maker,
)


@given(st.text(), st.text(), st.text())
def test_an_answer_cached_with_its_maker_reads_back_as_written(
    answer: str, model: str, version: str
) -> None:
    value = cache_value(with_maker(answer, model, version))
    assert made_answer(cached_answer(value)) == MadeAnswer(answer, model, version)


def test_an_answer_cached_before_makers_were_is_read_whole_without_one() -> None:
    for value in (
        '{"grievances": []}',
        "made-by:",
        "made-by:not json\n{}",
        'made-by:{"model": "m"}\n{}',
        'made-by:{"model": "m", "prompt_version": 2}\n{}',
        'made-by:["m", "v"]\n{}',
        'made-by:{"model": "m", "prompt_version": "v"}',
    ):
        assert made_answer(value) == MadeAnswer(value), value
