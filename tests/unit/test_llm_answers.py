"""Reading a model's answer: JSON whose strings can be sent on, or a clear refusal."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refund_bench.llm.roles import MalformedAnswer, loads_answer, parse_judge_ruling

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


@given(st.text())
def test_any_text_the_model_can_send_is_read_back_and_encodes(text: str) -> None:
    """Every string of valid Unicode survives, escaped or not; what loads also encodes."""
    for ensure_ascii in (True, False):
        raw = json.dumps({"reasoning": text}, ensure_ascii=ensure_ascii)
        try:
            data = loads_answer(raw)
        except ValueError:
            assert any(0xD800 <= ord(c) <= 0xDFFF for c in text)
            continue
        assert data == {"reasoning": text}
        json.dumps(data, ensure_ascii=False).encode("utf-8")
