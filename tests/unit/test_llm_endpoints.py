"""Each LLM role's endpoint and key, and the rate-limit bucket of each provider account.

A role (extractor, settler) with a base URL of its own needs a key of its own: ``LLM_API_KEY``
is sent only to ``LLM_BASE_URL``. Calls to one host with one key share a token bucket; calls
to another host, or with another key, take from a bucket of their own, so providers and
accounts do not throttle each other.
"""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

from refund_bench.llm_setup import (
    EndpointAccess,
    JudgePanelSettings,
    LlmStageSettings,
    account_id,
)
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
        _role(settings, **{f"{role}_base_url": "https://own.example/v1"})
    message = str(caught.value)
    assert f"{role.upper()}_BASE_URL sends the {role}" in message
    assert f"{role.upper()}_API_KEY" in message
    assert SHARED_KEY not in message
    assert "own.example" not in message


def _shared(**values: object) -> LlmStageSettings:
    return LlmStageSettings.model_validate(
        {"llm_base_url": LLM, "llm_api_key": SHARED_KEY, "llm_rate_limit_name": "default", **values}
    )


def _access(url: str, key: str = SHARED_KEY) -> EndpointAccess:
    return EndpointAccess(url, SecretStr(key), 2000.0)


def test_the_shared_endpoint_keeps_its_bucket() -> None:
    """The single-endpoint default takes from ``LLM_RATE_LIMIT_NAME``'s bucket as before
    (Redis key ``refund-bench:ratelimit:default``), whatever path or trailing slash."""
    settings = _shared()
    assert settings.bucket_name(settings.shared_access()) == "default"
    assert settings.bucket_name(_access("https://LLM.example:443/openai/v1/")) == "default"
    stand_in = LlmStageSettings.model_validate(
        {"llm_base_url": LlmStageSettings.model_fields["llm_base_url"].default}
    )
    assert stand_in.bucket_name(stand_in.shared_access()) == stand_in.llm_rate_limit_name


def test_seats_of_one_account_share_a_bucket_and_other_accounts_have_their_own() -> None:
    """A bucket is a provider account: one host with one key. Seats 0 and 2 are one account
    on host a; seat 1 is host b, seat 3 host b on another port, seat 4 a second account on
    host a, whose limit is its own."""
    panel = JudgePanelSettings.model_validate(
        {
            "llm_base_url": LLM,
            "judge_count": 5,
            "judge_base_urls": (
                "https://a.example/v1,https://b.example/v1,https://a.example/v2,"
                "http://b.example:8080/v1,https://a.example/v1"
            ),
            "judge_api_keys": "k0,k1,k0,k3,k4",
            "llm_rate_limit_name": "judges",
        }
    )
    names = [panel.bucket_name(panel.seat_access(seat)) for seat in range(5)]
    k0, k1, k3, k4 = (account_id(SecretStr(key)) for key in ("k0", "k1", "k3", "k4"))
    assert names == [
        f"judges:a.example:{k0}",
        f"judges:b.example:{k1}",
        f"judges:a.example:{k0}",
        f"judges:b.example:8080:{k3}",
        f"judges:a.example:{k4}",
    ]
    assert len({k0, k1, k3, k4}) == 4
    assert "judges" not in names, "no other account takes from the shared endpoint's bucket"


def test_another_key_on_the_shared_host_has_a_bucket_of_its_own() -> None:
    """Two accounts on ``LLM_BASE_URL``'s host: ``LLM_API_KEY`` keeps the shared bucket, a
    seat's own key takes from its account's."""
    panel = JudgePanelSettings.model_validate(
        {
            "llm_base_url": LLM,
            "llm_api_key": SHARED_KEY,
            "judge_count": 2,
            "judge_api_keys": f",{OWN_KEY}",
        }
    )
    names = [panel.bucket_name(panel.seat_access(seat)) for seat in range(2)]
    assert names == ["default", f"default:llm.example:{account_id(SecretStr(OWN_KEY))}"]


def test_a_bucket_name_never_carries_a_key_or_the_credentials_of_a_url() -> None:
    name = _shared().bucket_name(_access("https://user:secret@other.example/v1?key=q", OWN_KEY))
    assert name == f"default:other.example:{account_id(SecretStr(OWN_KEY))}"
    assert OWN_KEY not in name
    assert account_id(SecretStr(OWN_KEY)) not in OWN_KEY


def test_an_attempt_deadline_below_the_timeout_refuses_to_start() -> None:
    """A deployment that raised ``LLM_TIMEOUT_SECONDS`` for a slow model would otherwise have
    every attempt cut off at the default deadline."""
    with pytest.raises(ValidationError, match="LLM_ATTEMPT_DEADLINE_SECONDS"):
        LlmStageSettings(llm_timeout_seconds=90, llm_attempt_deadline_seconds=60)
    settings = LlmStageSettings(llm_timeout_seconds=90, llm_attempt_deadline_seconds=90)
    assert settings.llm_attempt_deadline_seconds == 90


UNUSABLE_BASE_URLS = [
    ("https://user:pw-golf-7e2a@llm.example/v1", "no user name or password"),
    ("https://llm.example/v1?key=pw-golf-7e2a", "no query or fragment"),
    ("https://llm.example/v1#pw-golf-7e2a", "no query or fragment"),
    ("ftp://llm.example/v1", "http or https URL with a host"),
    ("llm.example/v1", "http or https URL with a host"),
    ("https://llm.example:99999/v1", "valid host and port"),
]


@pytest.mark.parametrize(("url", "why"), UNUSABLE_BASE_URLS)
def test_a_base_url_no_client_could_call_refuses_to_start_without_quoting_it(
    url: str, why: str
) -> None:
    """A user name in the URL becomes an Authorization header that clashes with the key's, and
    a query ends up before the client's own path: refused at start, for every place a base URL
    is set, and the refusal names the setting, never the URL."""
    places: list[tuple[type[BaseSettings], dict[str, str], str]] = [
        (LlmStageSettings, {"llm_base_url": url}, "LLM_BASE_URL"),
        (
            JudgePanelSettings,
            {"judge_base_urls": url, "judge_api_keys": OWN_KEY},
            "JUDGE_BASE_URLS",
        ),
        *(
            (
                settings,
                {f"{role}_base_url": url, f"{role}_api_key": OWN_KEY},
                f"{role.upper()}_BASE_URL",
            )
            for settings, role in ROLES
        ),
    ]
    for settings, values, setting in places:
        with pytest.raises(ValidationError) as refused:
            settings.model_validate({"llm_base_url": LLM, "llm_api_key": SHARED_KEY} | values)
        message = str(refused.value)
        assert setting in message, message
        assert why in message, message
        assert "pw-golf" not in message, message
        assert "llm.example:99999" not in message, message
