"""A URL is printed without its user name, password, query and fragment: any of them may carry
a credential. The LLM client, its endpoint, a role's or seat's access and the settings all print
their URLs so."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import SecretStr

from refund_bench.llm.client import LlmClient, LlmEndpoint, LlmRejected, LlmUnavailable
from refund_bench.llm_setup import EndpointAccess, JudgePanelSettings
from refund_bench.urls import UNPRINTABLE, printable_url, without_credentials
from services.extractor.__main__ import Settings as ExtractorSettings

SECRETS = ("s3cr3t-pass", "sk-in-query-4d1e", "frag-token-9a", "alice")
WITH_CREDENTIALS = (
    "https://alice:s3cr3t-pass@llm.example:8443/openai/v1?key=sk-in-query-4d1e#frag-token-9a"
)
PRINTED = "https://llm.example:8443/openai/v1"


def _clean(text: str) -> bool:
    return not any(secret in text for secret in SECRETS)


@pytest.mark.parametrize(
    ("url", "printed"),
    [
        (WITH_CREDENTIALS, PRINTED),
        ("http://127.0.0.1:18090/v1", "http://127.0.0.1:18090/v1"),
        ("https://user@llm.example/v1/", "https://llm.example/v1/"),
        ("https://us:p@ss@llm.example/v1", "https://llm.example/v1"),
        ("http://[::1]:8080/v1?api-key=x", "http://[::1]:8080/v1"),
        ("llm.example/v1?key=x", UNPRINTABLE),
        ("alice:s3cr3t-pass@llm.example/v1", UNPRINTABLE),
        ("http://[::1/v1", UNPRINTABLE),
        ("", UNPRINTABLE),
    ],
)
def test_a_url_is_printed_with_host_and_path_only(url: str, printed: str) -> None:
    assert printable_url(url) == printed


def test_urls_quoted_in_a_message_lose_their_credentials() -> None:
    message = f"Connection timeout to host {WITH_CREDENTIALS} then 'http://bob:pw@b.example/x?k=1'"
    assert without_credentials(message) == (
        f"Connection timeout to host {PRINTED} then 'http://b.example/x'"
    )


def test_the_clients_repr_shows_its_endpoint_without_credentials() -> None:
    endpoint = LlmEndpoint(
        base_url=WITH_CREDENTIALS,
        api_key=SecretStr("sk-key-never-printed"),
        model="m",
        temperature=0.7,
        timeout_seconds=5,
    )
    client = LlmClient(endpoint)
    try:
        printed = [repr(client), repr(endpoint), str(endpoint)]
    finally:
        asyncio.run(client.aclose())
    assert printed[0] == f"LlmClient(base_url={PRINTED!r}, model='m')"
    for text in printed:
        assert _clean(text), text
        assert "sk-key-never-printed" not in text
        assert PRINTED in text


def test_an_access_is_printed_without_credentials() -> None:
    access = EndpointAccess(WITH_CREDENTIALS, SecretStr("sk-key-never-printed"), 5.0)
    printed = repr(access)
    assert printed == (
        f"EndpointAccess(base_url={PRINTED!r}, api_key=SecretStr('**********'),"
        " rate_per_second=5.0)"
    )
    assert access.base_url == WITH_CREDENTIALS, "the URL called is the one configured"


def test_the_settings_print_their_urls_without_credentials() -> None:
    """The registry's URL may carry credentials; an LLM base URL that does is refused at load
    (``test_llm_endpoints``), so those are built here without validation, as printed anyway."""
    registry = "https://alice:s3cr3t-pass@registry.example/apis/ccompat/v7"
    assert JudgePanelSettings.model_validate({"schema_registry_url": registry})
    panel = JudgePanelSettings.model_construct(
        llm_base_url=WITH_CREDENTIALS,
        judge_count=3,
        judge_base_urls=f"{WITH_CREDENTIALS},,http://alice:s3cr3t-pass@b.example/v1",
        judge_api_keys=SecretStr("k0,,k2"),
        schema_registry_url=registry,
    )
    role = ExtractorSettings.model_construct(
        extractor_base_url=WITH_CREDENTIALS, extractor_api_key=SecretStr("k")
    )
    for text in (repr(panel), str(panel), repr(role), str(role)):
        assert _clean(text), text
    assert f"judge_base_urls='{PRINTED},,http://b.example/v1'" in repr(panel)
    assert f"llm_base_url='{PRINTED}'" in repr(panel)
    assert "schema_registry_url='https://registry.example/apis/ccompat/v7'" in repr(panel)
    assert f"extractor_base_url='{PRINTED}'" in repr(role)
    assert panel.seat_endpoint(0) == WITH_CREDENTIALS, "the settings keep the URL as given"


def test_an_endpoints_refusal_quoting_its_url_keeps_no_credentials() -> None:
    """The message is logged, cached as a refusal's reason and shown to reviewers: a URL the
    endpoint echoes loses its credentials there."""
    refused = LlmRejected(
        400, "content refused at https://alice:s3cr3t-pass@llm.example/v1?key=sk-query-key"
    )
    for text in (refused.message, str(refused)):
        assert "s3cr3t-pass" not in text, text
        assert "sk-query-key" not in text, text
        assert "https://llm.example/v1" in text, text


def test_a_transient_failure_quoting_its_url_keeps_no_credentials() -> None:
    unavailable = LlmUnavailable(
        "server_error", "upstream https://alice:s3cr3t-pass@llm.example/v1?key=sk-query-key", 502
    )
    assert "s3cr3t-pass" not in str(unavailable)
    assert "sk-query-key" not in str(unavailable)
