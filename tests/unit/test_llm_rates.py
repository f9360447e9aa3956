"""Each endpoint's rate limit: a role's or seat's own rate, in the style of its own key, falling
back to ``LLM_RATE_PER_SECOND``; refused at start when a list does not align with the seats, a
rate is not a finite number above 0, or two rates would pace one bucket.

No server: a limiter is built, never used.
"""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings
from redis.asyncio import Redis

from refund_bench.llm_setup import (
    EndpointAccess,
    JudgePanelSettings,
    LlmStageSettings,
    rate_limiter,
)
from services.extractor.__main__ import Settings as ExtractorSettings
from services.settler.__main__ import Settings as SettlerSettings

LLM = "https://llm.example/v1"
SHARED_KEY = "sk-shared-golf-31c7"
SEAT_KEYS = ("sk-seat-hotel-8a21", "sk-seat-india-f04e", "sk-seat-juliet-5b9d")
URLS = "https://a.example/v1,https://b.example/v1,https://c.example/v1"
NOT_A_RATE = ["0", "-2", "inf", "nan", "fast"]

ROLES: list[tuple[type[BaseSettings], str]] = [
    (ExtractorSettings, "extractor"),
    (SettlerSettings, "settler"),
]


def _panel(**values: object) -> JudgePanelSettings:
    """A panel as the environment would give it (strings), on ``LLM`` at 2000 calls/s."""
    return JudgePanelSettings.model_validate(
        {"llm_base_url": LLM, "llm_api_key": SHARED_KEY, "llm_rate_per_second": 2000, **values}
    )


def _role(settings: type[BaseSettings], **values: object) -> ExtractorSettings | SettlerSettings:
    loaded = settings.model_validate(
        {"llm_base_url": LLM, "llm_api_key": SHARED_KEY, "llm_rate_per_second": 2000, **values}
    )
    assert isinstance(loaded, ExtractorSettings | SettlerSettings)
    return loaded


def _rate(settings: LlmStageSettings, access: EndpointAccess) -> float:
    """The rate of the limiter a client of ``access`` is paced by."""
    return rate_limiter(settings, Redis.from_url("redis://127.0.0.1:1/0"), access).rate_per_second


def test_without_rates_of_their_own_every_bucket_refills_at_the_shared_rate() -> None:
    panel = _panel(judge_count=3, judge_base_urls=URLS, judge_api_keys=",".join(SEAT_KEYS))
    assert [_rate(panel, panel.seat_access(seat)) for seat in range(3)] == [2000.0] * 3
    for settings, role in ROLES:
        own = _role(
            settings, **{f"{role}_base_url": "https://own.example/v1", f"{role}_api_key": "k"}
        )
        assert _rate(own, own.endpoint()) == 2000.0


def test_each_seat_is_paced_at_its_own_endpoints_rate() -> None:
    panel = _panel(
        judge_count=3,
        judge_base_urls=URLS,
        judge_api_keys=",".join(SEAT_KEYS),
        judge_rates_per_second=" 5, 12.5 ,300",
    )
    assert [_rate(panel, panel.seat_access(seat)) for seat in range(3)] == [5.0, 12.5, 300.0]


def test_one_rate_serves_every_seat_and_an_empty_entry_is_the_shared_rate() -> None:
    one = _panel(
        judge_count=3,
        judge_base_urls=URLS,
        judge_api_keys=",".join(SEAT_KEYS),
        judge_rates_per_second="40",
    )
    assert [_rate(one, one.seat_access(seat)) for seat in range(3)] == [40.0] * 3
    gaps = _panel(
        judge_count=3,
        judge_base_urls=URLS,
        judge_api_keys=",".join(SEAT_KEYS),
        judge_rates_per_second=",7,",
    )
    assert [_rate(gaps, gaps.seat_access(seat)) for seat in range(3)] == [2000.0, 7.0, 2000.0]


@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_a_role_on_its_own_endpoint_is_paced_at_its_own_rate(
    settings: type[BaseSettings], role: str
) -> None:
    loaded = _role(
        settings,
        **{
            f"{role}_base_url": "https://own.example/v1",
            f"{role}_api_key": "sk-own",
            f"{role}_rate_per_second": "3",
        },
    )
    assert _rate(loaded, loaded.endpoint()) == 3.0


@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_an_empty_rate_in_the_environment_is_the_shared_rate(
    settings: type[BaseSettings], role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``EXTRACTOR_RATE_PER_SECOND=`` in a ConfigMap is unset, not a refusal to start."""
    monkeypatch.setenv(f"{role.upper()}_RATE_PER_SECOND", "")
    monkeypatch.setenv("LLM_RATE_PER_SECOND", "150")
    loaded = settings()
    assert isinstance(loaded, ExtractorSettings | SettlerSettings)
    assert _rate(loaded, loaded.endpoint()) == 150.0


@pytest.mark.parametrize("value", ["5,6", "5,6,7,8"])
def test_a_rate_list_that_does_not_align_with_the_seats_refuses_to_start(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _panel(
            judge_count=3,
            judge_base_urls=URLS,
            judge_api_keys=",".join(SEAT_KEYS),
            judge_rates_per_second=value,
        )
    message = str(caught.value)
    assert f"JUDGE_RATES_PER_SECOND has {len(value.split(','))} entries" in message
    assert "JUDGE_COUNT=3" in message


@pytest.mark.parametrize("value", NOT_A_RATE)
def test_a_seat_rate_that_is_not_above_zero_refuses_to_start(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _panel(
            judge_count=3,
            judge_base_urls=URLS,
            judge_api_keys=",".join(SEAT_KEYS),
            judge_rates_per_second=f"5,{value},5",
        )
    assert "JUDGE_RATES_PER_SECOND (judge seat 1) must be" in str(caught.value)


@pytest.mark.parametrize("value", NOT_A_RATE)
@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_a_role_rate_that_is_not_above_zero_refuses_to_start(
    settings: type[BaseSettings], role: str, value: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        _role(
            settings,
            **{
                f"{role}_base_url": "https://own.example/v1",
                f"{role}_api_key": "sk-own",
                f"{role}_rate_per_second": value,
            },
        )
    assert f"{role.upper()}_RATE_PER_SECOND must be" in str(caught.value)


def test_text_that_is_no_rate_is_not_repeated_in_the_refusal() -> None:
    """A key pasted into the wrong setting must not reach the log of a refused start."""
    with pytest.raises(ValidationError) as caught:
        _panel(
            judge_count=3,
            judge_base_urls=URLS,
            judge_api_keys=",".join(SEAT_KEYS),
            judge_rates_per_second=f"5,{SEAT_KEYS[1]},5",
        )
    assert SEAT_KEYS[1] not in str(caught.value)


def test_seats_sharing_a_bucket_with_different_rates_refuse_to_start() -> None:
    """Seats 0 and 2 are one account on one host, so one bucket: it cannot refill at 5 and
    at 9 calls per second."""
    with pytest.raises(ValidationError) as caught:
        _panel(
            judge_count=3,
            judge_base_urls="https://a.example/v1,https://b.example/v1,https://a.example/v2",
            judge_api_keys=f"{SEAT_KEYS[0]},{SEAT_KEYS[1]},{SEAT_KEYS[0]}",
            judge_rates_per_second="5,7,9",
        )
    message = str(caught.value)
    assert "judge seats 0, 2 different rates (5, 9 calls per second)" in message
    assert "a.example" not in message
    assert not any(key in message for key in SEAT_KEYS)


def test_seats_on_one_host_with_different_keys_may_have_different_rates() -> None:
    """Two accounts on one host: each its own bucket, each its own limit."""
    panel = _panel(
        judge_count=2,
        judge_base_urls="https://a.example/v1",
        judge_api_keys=f"{SEAT_KEYS[0]},{SEAT_KEYS[1]}",
        judge_rates_per_second="5,9",
    )
    assert [_rate(panel, panel.seat_access(seat)) for seat in range(2)] == [5.0, 9.0]


def test_a_seat_on_the_shared_bucket_keeps_the_shared_rate() -> None:
    """Every stage takes from the bucket of ``LLM_BASE_URL`` with ``LLM_API_KEY`` at
    ``LLM_RATE_PER_SECOND``: a judge seat cannot pace it at another rate."""
    with pytest.raises(ValidationError) as caught:
        _panel(judge_count=2, judge_api_keys=f",{SEAT_KEYS[1]}", judge_rates_per_second="5,5")
    message = str(caught.value)
    assert "JUDGE_RATES_PER_SECOND gives judge seat 0 5 calls per second" in message
    assert "LLM_RATE_PER_SECOND (2000)" in message
    panel = _panel(
        judge_count=2, judge_api_keys=f",{SEAT_KEYS[1]}", judge_rates_per_second="2000,5"
    )
    assert [_rate(panel, panel.seat_access(seat)) for seat in range(2)] == [2000.0, 5.0]


@pytest.mark.parametrize(("settings", "role"), ROLES)
def test_a_role_on_the_shared_bucket_keeps_the_shared_rate(
    settings: type[BaseSettings], role: str
) -> None:
    with pytest.raises(ValidationError, match=f"{role.upper()}_RATE_PER_SECOND gives the {role}"):
        _role(settings, **{f"{role}_rate_per_second": "5"})
    same = _role(settings, **{f"{role}_rate_per_second": "2000"})
    assert _rate(same, same.endpoint()) == 2000.0


def test_the_shared_rate_is_a_finite_number_above_zero() -> None:
    for value in ("0", "inf"):
        with pytest.raises(ValidationError, match="llm_rate_per_second"):
            LlmStageSettings.model_validate({"llm_rate_per_second": value})


def test_no_key_is_printed_with_the_rates() -> None:
    panel = _panel(
        judge_count=3,
        judge_base_urls=URLS,
        judge_api_keys=",".join(SEAT_KEYS),
        judge_rates_per_second="5,6,7",
    )
    printed = [repr(panel), *(repr(panel.seat_access(seat)) for seat in range(3))]
    printed += [panel.bucket_name(panel.seat_access(seat)) for seat in range(3)]
    for text in printed:
        assert not any(key in text for key in (*SEAT_KEYS, SHARED_KEY)), text
    assert [panel.seat_access(seat).api_key for seat in range(3)] == [
        SecretStr(key) for key in SEAT_KEYS
    ]
