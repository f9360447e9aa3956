"""Which endpoint refusals are one input's (sent to a person, cached) and which are the
settings' (the stage stops and alerts)."""

from __future__ import annotations

import pytest

from refund_bench.llm.client import LlmRejected


@pytest.mark.parametrize(
    ("status", "code", "param", "one_input"),
    [
        (400, "context_length_exceeded", "messages", True),
        (400, "content_filter", "prompt", True),
        (400, None, None, True),
        (413, None, None, True),
        (422, None, None, True),
        (400, "unsupported_value", "temperature", False),
        (400, None, "response_format", False),
        (400, None, "seed", False),
        (400, "unsupported_parameter", None, False),
        (400, "model_not_found", None, False),
        (401, "invalid_api_key", None, False),
        (403, None, None, False),
        (404, "model_not_found", "model", False),
    ],
)
def test_a_refusal_is_one_inputs_unless_it_names_a_setting(
    status: int, code: str | None, param: str | None, one_input: bool
) -> None:
    assert LlmRejected(status, "refused", code, param).refused_input is one_input
