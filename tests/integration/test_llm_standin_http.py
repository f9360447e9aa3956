"""The LLM stand-in over HTTP: what it refuses, and in which shape.

A request the stand-in cannot answer faithfully is refused with a 400 in OpenAI's error shape,
which the product does not retry, never a 500, which it would retry as an outage. Its fault
settings are bounded, so no setting makes requests wait for ever.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from refund_bench.llm import roles
from refund_bench.samples import ARTICLE_COMPLAINT
from services.llm_standin.app import MAX_WAIT_S
from tests.standin import Standin

pytestmark = pytest.mark.stack


def _body(request: roles.LlmRequest, *, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": list(request.messages),
        "temperature": 0.0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "strict": True,
                "schema": request.schema if schema is None else schema,
            },
        },
    }


def _extraction(line_items: list[Any]) -> dict[str, Any]:
    """An extraction request whose user document carries ``line_items`` as given."""
    request = roles.build_extractor_request(
        ARTICLE_COMPLAINT, [], prompt=roles.load_prompt(roles.EXTRACTOR_PROMPT_VERSION)
    )
    body = _body(request)
    document = {"complaint_text": ARTICLE_COMPLAINT, "line_items": line_items}
    body["messages"][-1] = {"role": "user", "content": json.dumps(document)}
    return body


def _refused(standin: Standin, body: dict[str, Any]) -> dict[str, Any]:
    before = standin.stats()["rejected_requests"]
    response = standin.admin.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert standin.stats()["rejected_requests"] == before + 1
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


def test_the_article_extraction_is_answered(standin: Standin) -> None:
    body = _extraction([{"name": "Hyderabadi Biryani", "quantity": 4}])
    response = standin.admin.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    content = json.loads(response.json()["choices"][0]["message"]["content"])
    assert len(content["grievances"]) == 4


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        (
            {
                "type": "object",
                "properties": {"grievances": {"type": "array", "minItems": 1}},
                "required": ["grievances"],
                "additionalProperties": False,
            },
            "'minItems'",
        ),
        ({"type": "object", "properties": {"grievances": True}}, "$.properties.grievances"),
        ({"type": {"x": 1}}, "$.type"),
    ],
)
def test_a_schema_the_check_cannot_read_is_refused_naming_it(
    standin: Standin, schema: dict[str, Any], named: str
) -> None:
    body = _extraction([{"name": "Raita", "quantity": 1}])
    body["response_format"]["json_schema"]["schema"] = schema
    error = _refused(standin, body)
    assert error["param"] == "response_format"
    assert named in error["message"]


@pytest.mark.parametrize(
    ("line_items", "said"),
    [
        ([1], "cannot read the request's messages"),
        (["Raita"], "cannot read the request's messages"),
        ([{"name": 5, "quantity": 1}], "line_items[0].name"),
    ],
)
def test_a_document_of_another_shape_is_refused_not_failed(
    standin: Standin, line_items: list[Any], said: str
) -> None:
    error = _refused(standin, _extraction(line_items))
    assert said in error["message"]


def test_an_injected_429_says_rate_limit_in_its_code(standin: Standin) -> None:
    standin.faults(next_faults=["429"])
    response = standin.admin.post(
        "/v1/chat/completions", json=_extraction([{"name": "Raita", "quantity": 1}])
    )
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize(
    "setting",
    [
        {"timeout_seconds": MAX_WAIT_S + 1},
        {"latency_ms": MAX_WAIT_S * 1000 + 1},
        # Python's JSON reader takes these; no finite wait follows from them.
        {"timeout_seconds": float("inf")},
        {"timeout_seconds": float("nan")},
    ],
)
def test_a_wait_without_bound_is_refused_and_the_settings_stay(
    standin: Standin, setting: dict[str, float]
) -> None:
    before = standin.stats()["faults"]
    response = standin.admin.post(
        "/admin/faults",
        content=json.dumps(setting),  # allows inf and nan, as a careless client would send
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert standin.stats()["faults"] == before
