"""Every contract stays backward compatible with each of its committed versions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from refund_bench.codec import load_schema, schema_names
from refund_bench.schema_compat import check_all, incompatibilities


def test_every_schema_reads_all_its_earlier_versions() -> None:
    assert check_all() == {}


@pytest.mark.parametrize("name", schema_names())
def test_adding_an_optional_field_is_compatible_and_a_required_one_is_not(name: str) -> None:
    old = load_schema(name)
    optional: dict[str, Any] = copy.deepcopy(old)
    optional["fields"].append({"name": "added_later", "type": ["null", "string"], "default": None})
    assert incompatibilities(old, optional) == []
    required: dict[str, Any] = copy.deepcopy(old)
    required["fields"].append({"name": "added_later", "type": "string"})
    assert incompatibilities(old, required) != []
