"""Reading a model's answer: JSON whose strings can be sent on, or a clear refusal."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from refund_bench.llm.roles import (
    MalformedAnswer,
    loads_answer,
    parse_customer_reply,
    parse_extraction,
    parse_judge_ruling,
)

RULING = {"ruling": "UPHELD", "confidence": 0.9, "evidence_cited": ["delivered_at"]}


def test_an_escaped_surrogate_pair_is_one_character() -> None:
    raw = json.dumps({**RULING, "reasoning": "late \U0001f600"})  # escaped as \ud83d\ude00
    assert "\\ud83d\\ude00" in raw
    assert parse_judge_ruling(raw).reasoning == "late \U0001f600"


@pytest.mark.parametrize("half", ["\\ud83d", "\\uDE00", "\\ud83d x", "x \\ude00\\ud83d"])
def test_half_a_surrogate_pair_is_a_malformed_answer(half: str) -> None:
    raw = '{"ruling": "UPHELD", "confidence": 0.9, "evidence_cited": [], "reasoning": "%s"}'
    with pytest.raises(MalformedAnswer, match="half of a surrogate pair"):
        parse_judge_ruling(raw % half)
    with pytest.raises(ValueError, match="half of a surrogate pair"):
        loads_answer(raw % half)


@pytest.mark.parametrize(
    "answer",
    [
        {**RULING, "reasoning": "late\x00"},
        {**RULING, "evidence_cited": ["delivered_at", "\x00"]},
        {**RULING, "reasoning": "ok", "note\x00": 1},
    ],
)
def test_a_nul_character_anywhere_in_an_answer_is_a_malformed_answer(answer: object) -> None:
    raw = json.dumps(answer)
    assert "\\u0000" in raw
    with pytest.raises(MalformedAnswer, match="NUL character"):
        parse_judge_ruling(raw)


@pytest.mark.parametrize("depth", [2_000, 100_000])
@pytest.mark.parametrize("parse", [parse_extraction, parse_judge_ruling, parse_customer_reply])
def test_an_answer_nested_too_deeply_to_read_is_a_malformed_answer(
    parse: Callable[[str], object], depth: int
) -> None:
    """Python's JSON reader raises RecursionError for it; as such it stopped the extractor and
    the settler on every redelivery (their answers are cached before they are read)."""
    raw = '{"grievances": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(MalformedAnswer, match="nested too deeply"):
        parse(raw)


def test_an_escaped_backslash_before_u0000_is_no_nul() -> None:
    raw = json.dumps({**RULING, "reasoning": "path C:\\u0000"})
    assert "\\u0000" in raw
    assert parse_judge_ruling(raw).reasoning == "path C:\\u0000"


@given(st.text(st.characters(blacklist_categories=())))
@example("\ud83d\ude00 joined")
@example("cold\x00 and late")
@example("\ud83d cut short")
def test_any_text_is_read_back_whole_unless_it_holds_half_a_surrogate_pair_or_a_nul(
    text: str,
) -> None:
    """Escaped as JSON sends it (``ensure_ascii``), valid text reads back as it was and encodes;
    text with an unpaired surrogate is refused. (Unescaped, such text is not UTF-8 and cannot
    come off the wire at all.)"""
    raw = json.dumps({"reasoning": text})
    decoded = json.loads(raw)["reasoning"]  # a high and a low surrogate in a row join up
    if any(0xD800 <= ord(c) <= 0xDFFF for c in decoded):
        with pytest.raises(ValueError, match="half of a surrogate pair"):
            loads_answer(raw)
        return
    if "\x00" in decoded:
        with pytest.raises(ValueError, match="NUL"):
            loads_answer(raw)
        return
    assert loads_answer(raw) == {"reasoning": decoded}
    if decoded == text:
        assert loads_answer(json.dumps({"reasoning": text}, ensure_ascii=False)) == {
            "reasoning": text
        }
