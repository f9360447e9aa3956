"""Every stage's settings refuse what would leave it polling and doing nothing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from refund_bench.config import StageSettings
from refund_bench.llm_setup import JudgePanelSettings
from services.extractor.__main__ import Settings as ExtractorSettings
from services.payout.__main__ import Settings as PayoutSettings
from services.pricing.__main__ import Settings as PricingSettings
from services.recorder.__main__ import Settings as RecorderSettings
from services.settler.__main__ import Settings as SettlerSettings

STAGES: list[type[BaseSettings]] = [
    ExtractorSettings,
    JudgePanelSettings,
    StageSettings,  # the tally's
    PricingSettings,
    SettlerSettings,
    PayoutSettings,
    RecorderSettings,
]


@pytest.mark.parametrize("settings", STAGES, ids=lambda cls: cls.__module__)
def test_a_batch_of_no_records_is_refused(settings: type[BaseSettings]) -> None:
    with pytest.raises(ValidationError, match="batch_max_records"):
        settings(batch_max_records=0)
    assert settings(batch_max_records=1).batch_max_records == 1  # type: ignore[attr-defined]
