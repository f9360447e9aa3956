"""The auto-approve cap a stage is started with: a bounded amount, refused at start otherwise."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from refund_bench.domain import MAX_ORDER_MINOR
from services.extractor.__main__ import Settings as ExtractorSettings
from services.pricing.__main__ import Settings as PricingSettings


@pytest.mark.parametrize("settings", [ExtractorSettings, PricingSettings])
@pytest.mark.parametrize("cap", [-1, MAX_ORDER_MINOR + 1, 2**63])
def test_a_cap_outside_what_an_order_can_cost_is_refused_at_start(
    settings: type[BaseSettings], cap: int
) -> None:
    """2**63 would pass the start and then stop the stage at its first priced outcome (Avro
    writes a long); any cap above every order's total caps nothing."""
    with pytest.raises(ValidationError, match="auto_approve_cap_minor"):
        settings(auto_approve_cap_minor=cap)


@pytest.mark.parametrize("settings", [ExtractorSettings, PricingSettings])
def test_a_cap_up_to_the_largest_order_is_taken(
    settings: type[ExtractorSettings | PricingSettings],
) -> None:
    assert (
        settings(auto_approve_cap_minor=MAX_ORDER_MINOR).auto_approve_cap_minor == MAX_ORDER_MINOR
    )


@pytest.mark.parametrize("settings", [ExtractorSettings, PricingSettings])
def test_the_caps_currency_is_an_iso_code(
    settings: type[ExtractorSettings | PricingSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap counts minor units of one currency, INR unless ``AUTO_APPROVE_CAP_CURRENCY``
    names another; a name that is no currency code is refused at start."""
    assert settings().auto_approve_cap_currency == "INR"
    monkeypatch.setenv("AUTO_APPROVE_CAP_CURRENCY", "EUR")
    assert settings().auto_approve_cap_currency == "EUR"
    for wrong in ("eur", "EURO", "€"):
        monkeypatch.setenv("AUTO_APPROVE_CAP_CURRENCY", wrong)
        with pytest.raises(ValidationError, match="auto_approve_cap_currency"):
            settings()
