"""The judge panel's settings: one model and seed per seat, temperature strictly above zero."""

from __future__ import annotations

import io

import pytest
from fastavro import parse_schema, schemaless_writer
from pydantic import ValidationError

from refund_bench.domain import MAX_JUDGES
from refund_bench.llm_setup import JudgePanelSettings
from services.judge.handler import DRAWS_PER_SEAT, redraw_seed

LLM = "https://llm.example/v1"
"""The shared endpoint (``LLM_BASE_URL``) of these tests; the environment may name another."""

SEAT_KEYS = ("sk-seat-alpha-1f3a", "sk-seat-bravo-9c2d", "sk-seat-charlie-77e0")
SHARED_KEY = "sk-shared-delta-4b8e"


def _panel(**values: object) -> JudgePanelSettings:
    """The settings as the environment would give them (strings), on ``LLM``."""
    return JudgePanelSettings.model_validate(
        {"llm_base_url": LLM, "llm_api_key": SHARED_KEY, **values}
    )


def test_a_heterogeneous_panel_gives_each_seat_its_model_endpoint_key_and_seed() -> None:
    panel = _panel(
        judge_count=3,
        judge_models="model-a, model-b,model-c",
        judge_base_urls="https://a.example/v1,https://b.example/v1,https://c.example/v1",
        judge_api_keys=",".join(SEAT_KEYS),
    )
    assert [panel.seat_model(s) for s in range(3)] == ["model-a", "model-b", "model-c"]
    seats = [panel.seat_access(s) for s in range(3)]
    assert [seat.base_url for seat in seats] == [
        "https://a.example/v1",
        "https://b.example/v1",
        "https://c.example/v1",
    ]
    assert [seat.api_key.get_secret_value() for seat in seats] == list(SEAT_KEYS)
    assert len({panel.seat_seed(s) for s in range(3)}) == 3


def test_one_model_serves_every_seat_by_default() -> None:
    panel = _panel()
    assert {panel.seat_model(s) for s in range(panel.judge_count)} == {"standin-judge"}
    assert panel.seat_base_url(0) == ""
    for seat in range(panel.judge_count):
        access = panel.seat_access(seat)
        assert (access.base_url, access.api_key.get_secret_value()) == (LLM, SHARED_KEY)


def test_one_entry_of_each_list_serves_every_seat() -> None:
    panel = _panel(
        judge_count=3,
        judge_models="model-a",
        judge_base_urls="https://a.example/v1",
        judge_api_keys=SEAT_KEYS[0],
    )
    seats = [panel.seat_access(s) for s in range(3)]
    assert {panel.seat_model(s) for s in range(3)} == {"model-a"}
    assert {(a.base_url, a.api_key.get_secret_value()) for a in seats} == {
        ("https://a.example/v1", SEAT_KEYS[0])
    }


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("judge_models", "model-a,model-b"),
        ("judge_base_urls", "https://a.example/v1,https://b.example/v1"),
        ("judge_api_keys", ",".join(SEAT_KEYS[:2])),
        ("judge_models", "model-a,model-b,model-c,model-d"),
    ],
)
def test_a_list_must_serve_every_seat_or_name_one_entry_per_seat(setting: str, value: str) -> None:
    """With 2 models for 3 seats the third seat would wrap around to the first model, and a
    model would be paired with another seat's endpoint: refused at start, naming the setting."""
    with pytest.raises(ValidationError) as caught:
        _panel(judge_count=3, **{setting: value})
    message = str(caught.value)
    assert f"{setting.upper()} has {len(value.split(','))} entries" in message
    assert "JUDGE_COUNT=3" in message
    assert not any(key in message for key in (*SEAT_KEYS, SHARED_KEY))


def test_a_seat_with_its_own_endpoint_and_no_key_of_its_own_refuses_to_start() -> None:
    """LLM_API_KEY belongs to LLM_BASE_URL: sending it to seat 1's provider would leak it."""
    with pytest.raises(ValidationError) as caught:
        _panel(judge_count=3, judge_base_urls=f"{LLM},https://b.example/v1,{LLM}")
    message = str(caught.value)
    assert "JUDGE_BASE_URLS sends judge seat 1" in message
    assert "JUDGE_API_KEYS" in message
    assert SHARED_KEY not in message
    assert "b.example" not in message, "a URL may carry credentials: the error names settings"


def test_a_seat_on_the_shared_endpoint_falls_back_to_the_shared_key() -> None:
    panel = _panel(judge_count=2, judge_base_urls=f"{LLM}/,{LLM}")
    assert [panel.seat_access(s).api_key.get_secret_value() for s in range(2)] == [
        SHARED_KEY,
        SHARED_KEY,
    ]


def test_an_empty_entry_keeps_every_later_entry_on_its_own_seat() -> None:
    """``,https://b`` gives seat 1, not seat 0, the second provider: dropping the empty entry
    would move seat 0 there, with seat 0's key."""
    panel = _panel(
        judge_count=2,
        judge_base_urls=",https://b.example/v1",
        judge_api_keys=f",{SEAT_KEYS[1]}",
    )
    seats = [panel.seat_access(seat) for seat in range(2)]
    assert [(a.base_url, a.api_key.get_secret_value()) for a in seats] == [
        (LLM, SHARED_KEY),
        ("https://b.example/v1", SEAT_KEYS[1]),
    ]


def test_a_model_list_with_an_empty_entry_is_refused() -> None:
    with pytest.raises(ValidationError, match="JUDGE_MODELS has an empty entry"):
        _panel(judge_count=3, judge_models="model-a,,model-c")


def test_one_key_is_not_sent_to_seats_on_different_endpoints() -> None:
    with pytest.raises(ValidationError) as caught:
        _panel(
            judge_count=2,
            judge_base_urls="https://a.example/v1,https://b.example/v1",
            judge_api_keys=SEAT_KEYS[0],
        )
    message = str(caught.value)
    assert "JUDGE_API_KEYS has one key for seats on different endpoints" in message
    assert SEAT_KEYS[0] not in message


def test_no_key_is_printed_by_the_settings_or_a_seats_access() -> None:
    panel = _panel(
        judge_count=3,
        judge_base_urls="https://a.example/v1,https://b.example/v1,https://c.example/v1",
        judge_api_keys=",".join(SEAT_KEYS),
    )
    assert panel.seat_access(1).api_key.get_secret_value() == SEAT_KEYS[1]
    printed = [repr(panel), str(panel), *(repr(panel.seat_access(s)) for s in range(3))]
    printed.append(panel.model_dump_json())
    for text in printed:
        assert not any(key in text for key in (*SEAT_KEYS, SHARED_KEY)), text


@pytest.mark.parametrize("temperature", [0.0, -0.1])
def test_judges_refuse_a_temperature_that_is_not_above_zero(temperature: float) -> None:
    with pytest.raises(ValidationError):
        JudgePanelSettings(judge_temperature=temperature)


@pytest.mark.parametrize("field", ["max_inflight", "batch_max_records"])
@pytest.mark.parametrize("value", [0, -5])
def test_the_judge_keeps_the_lower_bounds_of_its_batch_and_in_flight_limits(
    field: str, value: int
) -> None:
    """The judge's own defaults replace the shared settings' fields; their bounds stay: with
    ``MAX_INFLIGHT=0`` no grievance would ever be judged, while the stage looked healthy."""
    with pytest.raises(ValidationError, match=field):
        JudgePanelSettings.model_validate({field: value})


def test_a_panel_needs_a_model() -> None:
    with pytest.raises(ValidationError):
        JudgePanelSettings(judge_models=" , ")


def test_every_seed_the_panel_can_send_fits_the_events_64_bit_seed() -> None:
    highest = _panel(judge_count=MAX_JUDGES, judge_seed_base=str(2**62))
    seed = redraw_seed(highest.seat_seed(MAX_JUDGES - 1), attempt=DRAWS_PER_SEAT - 1)
    schemaless_writer(io.BytesIO(), parse_schema({"type": "long"}), seed)
    with pytest.raises(ValidationError, match="judge_seed_base"):
        _panel(judge_seed_base=str(2**63))
    with pytest.raises(ValidationError, match="judge_seed_base"):
        _panel(judge_seed_base="-1")
