"""Each LLM role's endpoint and key, and the rate-limit bucket of each endpoint's host.

A role (extractor, settler) with a base URL of its own needs a key of its own: ``LLM_API_KEY``
is sent only to ``LLM_BASE_URL``. Calls to one host share a token bucket; calls to another
host take from a bucket of their own, so providers do not throttle each other.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from refund_bench import llm_setup
from refund_bench.llm_setup import JudgePanelSettings, LlmStageSettings
from services.extractor.__main__ import Settings as ExtractorSettings
from services.settler.__main__ import Settings as SettlerSettings

LLM = "https://llm.example/v1"
SHARED_KEY = "sk-shared-echo-5a1c"
OWN_KEY = "sk-own-foxtrot-0d9b"

ROLES: list[tuple[type[BaseSettings], str]] = [
    (ExtractorSettings, "extractor"),
    (SettlerSettings, "settler"),
]


def _role(settings: type[BaseSettings], **values: object) -> BaseSettings:
    return settings.model_validate({"llm_base_url": LLM, "llm_api_key": SHARED_KEY, **values})


@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_a_role_on_the_shared_endpoint_sends_the_shared_key(
    settings: type[BaseSettings], role: str
) -> None:
    loaded = _role(settings)
    assert isinstance(loaded, ExtractorSettings | SettlerSettings)
    access = loaded.endpoint()
    assert (access.base_url, access.api_key.get_secret_value()) == (LLM, SHARED_KEY)


@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_a_role_with_its_own_endpoint_sends_its_own_key(
    settings: type[BaseSettings], role: str
) -> None:
    loaded = _role(
        settings, **{f"{role}_base_url": "https://own.example/v1", f"{role}_api_key": OWN_KEY}
    )
    assert isinstance(loaded, ExtractorSettings | SettlerSettings)
    access = loaded.endpoint()
    assert (access.base_url, access.api_key.get_secret_value()) == (
        "https://own.example/v1",
        OWN_KEY,
    )
    assert OWN_KEY not in repr(loaded)
    assert OWN_KEY not in repr(access)


@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_a_role_with_its_own_endpoint_and_no_key_of_its_own_refuses_to_start(
    settings: type[BaseSettings], role: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        _role(settings, **{f"{role}_base_url": "https://user:pw@own.example/v1"})
    message = str(caught.value)
    assert f"{role.upper()}_BASE_URL sends the {role}" in message
    assert f"{role.upper()}_API_KEY" in message
    assert SHARED_KEY not in message
    assert "user:pw" not in message


def _shared(**values: object) -> LlmStageSettings:
    return LlmStageSettings.model_validate(
        {"llm_base_url": LLM, "llm_rate_limit_name": "default", **values}
    )


def test_the_shared_endpoint_keeps_its_bucket() -> None:
    """The single-endpoint default takes from ``LLM_RATE_LIMIT_NAME``'s bucket as before
    (Redis key ``refund-bench:ratelimit:default``), whatever path or trailing slash."""
    settings = _shared()
    assert llm_setup.bucket_name(settings, LLM) == "default"
    assert llm_setup.bucket_name(settings, "https://LLM.example:443/openai/v1/") == "default"
    stand_in = LlmStageSettings.model_validate(
        {"llm_base_url": LlmStageSettings.model_fields["llm_base_url"].default}
    )
    assert llm_setup.bucket_name(stand_in, stand_in.llm_base_url) == stand_in.llm_rate_limit_name


def test_seats_on_one_host_share_a_bucket_and_other_hosts_have_their_own() -> None:
    panel = JudgePanelSettings.model_validate(
        {
            "llm_base_url": LLM,
            "judge_count": 4,
            "judge_base_urls": (
                "https://a.example/v1,https://b.example/v1,https://a.example/v2,"
                "http://b.example:8080/v1"
            ),
            "judge_api_keys": "k0,k1,k2,k3",
            "llm_rate_limit_name": "judges",
        }
    )
    names = [llm_setup.bucket_name(panel, panel.seat_endpoint(seat)) for seat in range(4)]
    assert names == [
        "judges:a.example",
        "judges:b.example",
        "judges:a.example",
        "judges:b.example:8080",
    ]
    assert "judges" not in names, "no other host takes from the shared endpoint's bucket"


def test_a_bucket_name_never_carries_the_credentials_of_a_url() -> None:
    name = llm_setup.bucket_name(_shared(), "https://user:secret@other.example/v1")
    assert name == "default:other.example"


def test_an_attempt_deadline_below_the_timeout_refuses_to_start() -> None:
    """A deployment that raised ``LLM_TIMEOUT_SECONDS`` for a slow model would otherwise have
    every attempt cut off at the default deadline."""
    with pytest.raises(ValidationError, match="LLM_ATTEMPT_DEADLINE_SECONDS"):
        LlmStageSettings(llm_timeout_seconds=90, llm_attempt_deadline_seconds=60)
    settings = LlmStageSettings(llm_timeout_seconds=90, llm_attempt_deadline_seconds=90)
    assert settings.llm_attempt_deadline_seconds == 90
