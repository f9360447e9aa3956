"""The judge panel's settings: one model and seed per seat, temperature strictly above zero."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from refund_bench.llm_setup import JudgePanelSettings


def test_a_heterogeneous_panel_gives_each_seat_its_model_endpoint_and_seed() -> None:
    panel = JudgePanelSettings(
        judge_count=3,
        judge_models="model-a, model-b,model-c",
        judge_base_urls="http://a/v1,http://b/v1",
    )
    assert [panel.seat_model(s) for s in range(3)] == ["model-a", "model-b", "model-c"]
    assert [panel.seat_base_url(s) for s in range(3)] == [
        "http://a/v1",
        "http://b/v1",
        "http://a/v1",
    ]
    assert len({panel.seat_seed(s) for s in range(3)}) == 3


def test_one_model_serves_every_seat_by_default() -> None:
    panel = JudgePanelSettings()
    assert {panel.seat_model(s) for s in range(panel.judge_count)} == {"standin-judge"}
    assert panel.seat_base_url(0) == ""


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
