"""The openai client under :class:`~refund_bench.llm.client.LlmClient`: with a fixed key it
leaves each request's options as the client's own hook would, and with a key provider it still
asks the provider before every request."""

from __future__ import annotations

import asyncio

from refund_bench.llm.client import _COMPLETION_POST, _OpenAIClient

BASE_URL = "http://127.0.0.1:9/v1"


def test_a_client_with_a_fixed_key_leaves_each_requests_options_as_they_are() -> None:
    """The options, the key and the (absent) custom auth are what the client's hook gives."""
    client = _OpenAIClient(base_url=BASE_URL, api_key="fixed-key", max_retries=0)
    options = _COMPLETION_POST.model_copy(update={"content": b"{}"})

    prepared = asyncio.run(client._prepare_options(options))

    assert prepared is options
    assert client.custom_auth is None
    assert client.api_key == "fixed-key"


def test_a_client_with_a_key_provider_asks_it_before_every_request() -> None:
    """A key that rotates is read again for each request: the hook is not skipped for it."""
    keys = iter(["first-key", "second-key"])

    async def provider() -> str:
        return next(keys)

    client = _OpenAIClient(base_url=BASE_URL, api_key=provider, max_retries=0)

    async def prepare_twice() -> list[str]:
        seen = []
        for _ in range(2):
            await client._prepare_options(_COMPLETION_POST.model_copy(update={"content": b"{}"}))
            seen.append(client.api_key)
        return seen

    assert asyncio.run(prepare_twice()) == ["first-key", "second-key"]
