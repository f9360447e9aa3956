"""An answer checked against the JSON schema its request sent.

:func:`schema_errors` covers the subset of JSON Schema that strict structured outputs use;
:func:`unsupported` says what a schema asks beyond it, so that the stand-in refuses such a
request (HTTP 400) instead of answering it unchecked.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

import orjson

_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


_CHECKED: Final = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "minimum",
        "maximum",
    }
)
"""The keywords :func:`schema_errors` checks."""
_ANNOTATIONS: Final = frozenset({"title", "description", "default", "examples", "$comment"})
"""Keywords that constrain nothing, allowed anywhere."""


def unsupported(schema: Mapping[str, Any]) -> list[str]:
    """What in ``schema`` :func:`schema_errors` cannot check: a keyword outside its subset,
    or a keyword whose value is not of the form the subset reads (empty when there is none).
    Remembers the last 256 schemas it read (a client sends the same few on every request)."""
    return list(_unsupported_in(orjson.dumps(schema)))


@functools.lru_cache(maxsize=256)
def _unsupported_in(encoded: bytes) -> tuple[str, ...]:
    problems: list[str] = []
    _walk(orjson.loads(encoded), "$", problems)
    return tuple(problems)


def _walk(schema: object, path: str, problems: list[str]) -> None:
    if not isinstance(schema, dict):
        problems.append(f"{path}: a schema must be an object")
        return
    for keyword in sorted(schema.keys() - _CHECKED - _ANNOTATIONS):
        problems.append(f"{path}: the keyword {keyword!r} is not supported")
    if "type" in schema:
        kind = schema["type"]
        kinds = kind if isinstance(kind, list) else [kind]
        if not kinds or not all(isinstance(k, str) and k in _JSON_TYPES for k in kinds):
            problems.append(f"{path}.type: expected one of {sorted(_JSON_TYPES)} or a list")
    if "enum" in schema and not isinstance(schema["enum"], list):
        problems.append(f"{path}.enum: expected an array")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
        problems.append(f"{path}.required: expected an array of strings")
    for keyword in ("minimum", "maximum"):
        value = schema.get(keyword, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{path}.{keyword}: expected a number")
    if not isinstance(schema.get("additionalProperties", False), bool):
        problems.append(f"{path}.additionalProperties: only true or false is supported")
    properties = schema.get("properties", {})
    if isinstance(properties, dict):
        for name, sub in properties.items():
            _walk(sub, f"{path}.properties.{name}", problems)
    else:
        problems.append(f"{path}.properties: expected an object")
    if "items" in schema:
        _walk(schema["items"], f"{path}.items", problems)
    if "anyOf" in schema:
        options = schema["anyOf"]
        if isinstance(options, list) and options:
            for index, option in enumerate(options):
                _walk(option, f"{path}.anyOf[{index}]", problems)
        else:
            problems.append(f"{path}.anyOf: expected a non-empty array")


def _is_type(value: object, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _JSON_TYPES.get(name, ()))


def schema_errors(instance: object, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Why ``instance`` does not validate against ``schema`` (empty when it does).

    Covers the subset strict structured outputs use: type (or a list of types), enum, const,
    properties, required, additionalProperties false, items, anyOf, minimum, maximum.
    """
    errors: list[str] = []
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not any(not schema_errors(instance, option, path) for option in options):
            errors.append(f"{path}: matches none of anyOf")
        return errors
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is_type(instance, k) for k in kinds):
            return [f"{path}: expected {kind}, got {type(instance).__name__}"]
    if "enum" in schema and instance not in schema["enum"]:
        errors.append(f"{path}: {instance!r} not in {schema['enum']}")
    if "const" in schema and instance != schema["const"]:
        errors.append(f"{path}: expected {schema['const']!r}")
    if isinstance(instance, int | float) and not isinstance(instance, bool):
        if "minimum" in schema and instance < schema["minimum"]:
            errors.append(f"{path}: {instance} < minimum {schema['minimum']}")
        if "maximum" in schema and instance > schema["maximum"]:
            errors.append(f"{path}: {instance} > maximum {schema['maximum']}")
    if isinstance(instance, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in instance:
                errors.append(f"{path}: missing required {key!r}")
        for key, value in instance.items():
            if key in properties:
                errors.extend(schema_errors(value, properties[key], f"{path}.{key}"))
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected property {key!r}")
    if isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        for index, value in enumerate(instance):
            errors.extend(schema_errors(value, schema["items"], f"{path}[{index}]"))
    return errors
