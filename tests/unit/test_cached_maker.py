"""The model and prompt version that wrote a cached answer, kept beside it and read back."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from refund_bench.llm.cache import Maker, maker_value, read_maker

_OPTIONAL = st.none() | st.text(st.characters(exclude_categories=()))
"""Any text, NUL and lone surrogates included, or none."""


@given(st.text(), st.text(), _OPTIONAL, _OPTIONAL, st.text())
def test_a_maker_reads_back_as_written(
    model: str, version: str, served: str | None, fingerprint: str | None, answer: str
) -> None:
    maker = Maker(model, version, served, fingerprint)
    assert read_maker(maker_value(maker, answer), answer) == maker


@given(st.text(), st.text(), st.text(), st.text())
def test_a_maker_written_for_another_answer_is_not_this_ones(
    model: str, version: str, answer: str, other: str
) -> None:
    """A record that outlived its answer, which another model then drew again, does not name
    that model's answer."""
    assume(answer != other)
    assert read_maker(maker_value(Maker(model, version), other), answer) is None


def test_a_maker_of_an_earlier_release_names_no_answer_and_is_read() -> None:
    assert read_maker('{"model": "m", "prompt_version": "extractor/v1"}', "a") == Maker(
        "m", "extractor/v1", None, None
    )


@pytest.mark.parametrize(
    "extra", ['"served_model": 3, "system_fingerprint": []', '"served_model": {"a": 1}']
)
def test_what_served_it_of_another_kind_reads_as_unknown(extra: str) -> None:
    value = '{"model": "m", "prompt_version": "v", ' + extra + "}"
    assert read_maker(value, "a") == Maker("m", "v", None, None)


def test_no_maker_or_another_value_reads_as_unknown() -> None:
    for value in (
        None,
        "",
        "not json",
        '{"model": "m"}',
        '{"model": "m", "prompt_version": 2}',
        '["m", "v"]',
    ):
        assert read_maker(value, "a") is None, value
