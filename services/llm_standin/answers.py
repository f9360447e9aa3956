"""The stand-in's answer to one request: transparent, deterministic rules, one per role.

These rules are NOT the product's judgement. They exist so that the pipeline can be exercised
end to end (and under load) without a real model: they read the same JSON documents a model
would read and return answers of the same shape. Every rule is written down in ``README.md``.

:func:`answer` reads the request's user document and dispatches on the schema name to
:func:`~services.llm_standin.extraction.extract_grievances` (``grievance_extraction``),
:func:`~services.llm_standin.judging.judge_grievance` (``judge_ruling``) or
:func:`~services.llm_standin.reply.write_reply` (``customer_reply``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from services.llm_standin.errors import RuleError
from services.llm_standin.extraction import ExtractionAnswer, extract_grievances
from services.llm_standin.judging import RulingAnswer, judge_grievance
from services.llm_standin.reply import ReplyAnswer, write_reply

ROLE_BY_SCHEMA: Final[dict[str, str]] = {
    "grievance_extraction": "extractor",
    "judge_ruling": "judge",
    "customer_reply": "settler",
}


def _user_document(messages: object) -> Mapping[str, Any]:
    if not isinstance(messages, list):
        raise RuleError("messages must be a list")
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if not isinstance(content, str):
                raise RuleError("the user message content must be a string (a JSON document)")
            try:
                document = orjson.loads(content)
            except ValueError as exc:
                raise RuleError(f"the user message is not a JSON document: {exc}") from exc
            if not isinstance(document, Mapping):
                raise RuleError("the user message must be a JSON object")
            return document
    raise RuleError("no user message")


def _optional(document: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """``document[key]`` if present (of type ``kind``), else ``default``: a field a later
    prompt version added."""
    if key not in document:
        return default
    return _require(document, key, kind)


def _require(document: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise RuleError(f"user document: {key!r} is missing or has the wrong type")
    return value


def answer(
    schema_name: str, messages: object, *, seed: int | None, temperature: float | None
) -> ExtractionAnswer | RulingAnswer | ReplyAnswer:
    """The stand-in's answer to one chat-completions request, chosen by ``schema_name``.

    Raises :class:`RuleError` for an unknown schema, a malformed user document, or a judge
    request at temperature 0 (the product rule: independent judges need temperature > 0).
    """
    if schema_name not in ROLE_BY_SCHEMA:
        raise RuleError(
            f"unknown response_format.json_schema.name {schema_name!r}: the stand-in answers "
            f"{sorted(ROLE_BY_SCHEMA)}",
            "response_format",
        )
    if schema_name == "judge_ruling" and temperature is not None and temperature <= 0:
        raise RuleError(
            "judge_ruling requests must use temperature > 0: at temperature 0 the K judges "
            "are one opinion counted K times",
            "temperature",
        )
    document = _user_document(messages)
    if schema_name == "grievance_extraction":
        return extract_grievances(
            _require(document, "complaint_text", str), _require(document, "line_items", list)
        )
    if schema_name == "judge_ruling":
        return judge_grievance(
            _require(document, "grievance", Mapping), _require(document, "evidence", Mapping), seed
        )
    return write_reply(
        _require(document, "complaint_text", str),
        _require(document, "approved_amount", str),
        _require(document, "resolved", list),
        _require(document, "held_for_review", list),
        _optional(document, "earlier_refund", bool, False),
    )
