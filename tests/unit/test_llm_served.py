"""What a completion says produced its answer: read from the response, bounded, never needed."""

from __future__ import annotations

import json

import pytest

from refund_bench.llm.client import MAX_SERVED_CHARS, LlmAnswer, _answer


def _body(**top: object) -> bytes:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "{}"},
        "finish_reason": "stop",
    }
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [choice], **top}).encode()


def test_the_served_model_and_fingerprint_come_with_the_answer() -> None:
    body = _body(model="gpt-x-2026-11-01", system_fingerprint="fp_44709d6fcb")
    assert _answer(body) == LlmAnswer("{}", "gpt-x-2026-11-01", "fp_44709d6fcb")


@pytest.mark.parametrize("top", [{}, {"model": None, "system_fingerprint": None}])
def test_a_response_that_names_neither_gives_none(top: dict[str, object]) -> None:
    assert _answer(_body(**top)) == LlmAnswer("{}", None, None)


def test_names_of_any_length_or_characters_are_kept_storable() -> None:
    answer = _answer(_body(model="m" * 5_000, system_fingerprint="fp\u0000\ud83d"))
    assert answer.served_model is not None
    assert answer.served_model.startswith("m" * MAX_SERVED_CHARS)
    assert len(answer.served_model) < MAX_SERVED_CHARS + 60
    assert answer.system_fingerprint == "fp\ufffd\ufffd"


@pytest.mark.parametrize("odd", [7, ["gpt"], {"id": "gpt"}, "", True])
def test_a_provenance_field_of_another_kind_is_read_as_none(odd: object) -> None:
    """They are informational: an endpoint that fills them oddly still gives its answer."""
    assert _answer(_body(model=odd, system_fingerprint=odd)) == LlmAnswer("{}", None, None)
