"""An answer checked against the JSON schema its request sent.

:func:`schema_errors` covers the subset of JSON Schema that strict structured outputs use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}


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
