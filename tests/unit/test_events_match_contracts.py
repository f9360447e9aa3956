"""The typed event models mirror the Avro contracts field for field."""

from __future__ import annotations

from typing import Any

import pytest
from fastavro.utils import generate_many

from refund_bench.codec import Codec, FingerprintFraming, load_schema
from refund_bench.events import TOPIC_MODELS, Event


def _fields(schema: dict[str, Any]) -> list[str]:
    return [f["name"] for f in schema["fields"]]


@pytest.mark.parametrize(("topic", "model"), sorted(TOPIC_MODELS.items()))
def test_model_fields_equal_schema_fields(topic: str, model: type[Event]) -> None:
    assert list(model.model_fields) == _fields(load_schema(topic))


@pytest.mark.parametrize(("topic", "model"), sorted(TOPIC_MODELS.items()))
def test_decoded_values_validate_and_re_encode_identically(topic: str, model: type[Event]) -> None:
    codec = Codec(FingerprintFraming(), {topic: topic})
    for datum in generate_many(load_schema(topic), 5):
        if "snapshot_sha256" in datum:  # a string in the contract, a sha256 hex in the model
            datum["snapshot_sha256"] = "0123456789abcdef" * 4
        decoded = codec.decode(topic, codec.encode(topic, datum))
        event = model.model_validate(decoded)
        assert codec.decode(topic, codec.encode(topic, event.to_avro())) == decoded
