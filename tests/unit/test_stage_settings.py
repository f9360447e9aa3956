"""Every stage's settings refuse what would leave it polling and doing nothing."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict
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


@pytest.mark.parametrize(
    ("settings", "field", "role"),
    [
        (ExtractorSettings, "extractor_prompt_version", "extractor"),
        (JudgePanelSettings, "judge_prompt_version", "judge"),
        (SettlerSettings, "settler_prompt_version", "settler"),
    ],
)
def test_a_prompt_of_another_role_or_not_shipped_is_refused_at_start(
    settings: type[BaseSettings], field: str, role: str
) -> None:
    """Refused when the settings load, not on every record the stage then reads."""
    other = "judge/v3" if role != "judge" else "settler/v1"
    refused: list[tuple[str, str]] = [
        (other, f"must be a {role} prompt"),
        (f"{role}/v999", "is shipped with this release"),
        (f"{role}/latest", "must look like"),
    ]
    for version, why in refused:
        given: dict[str, Any] = {field: version}
        with pytest.raises(ValidationError, match=why):
            settings(**given)
    assert getattr(settings(), field).startswith(f"{role}/")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgresql://rb:s3cr%et-PW@db:5432/rb", "cannot be read"),
        ("postgresql://rb:s3cret PW@db/rb", "cannot be read"),
        ("postgresql://rb:p@ss-word@db/rb", "percent-encode '@'"),
        ("postgresql://rb:Xq7/Zk9pW2@db:5432/rb", "percent-encode '/'"),
        ("postgresql://rb:12345/ss-word@db:5432/rb", "percent-encode '/'"),
    ],
)
def test_a_database_url_that_cannot_be_read_is_refused_without_quoting_it(
    url: str, why: str
) -> None:
    """The URL parser's own message quotes the part it could not read, here the password; a
    connection pool would log it on every retry. Refused at start, naming only the fix."""
    with pytest.raises(ValidationError, match=why) as refused:
        StageSettings(database_url=url)
    for secret in ("s3cr", "ss-word", "Zk9pW2", "Xq7"):
        assert secret not in str(refused.value)
    for fine in (
        "postgresql://rb:pw@h1:5432,h2:5433/rb",
        "postgresql://rb:pw@h1,h2:5433/rb",
        "postgresql://rb:pw@h1,h2/rb",
        "host=/var/run/postgresql dbname=rb",
    ):
        assert StageSettings(database_url=fine).database_url.get_secret_value() == fine
    readable = "postgresql://rb:p%40ss%20w%25rd@db:5432/rb"
    conninfo = StageSettings(database_url=readable).database_conninfo()
    assert conninfo_to_dict(conninfo)["password"] == "p@ss w%rd"
