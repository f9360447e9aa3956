"""A failing call never prints its endpoint's credentials: the error the stage logs or crashes
with, its whole chain of causes, and the client's log lines show the URL without user name,
password and query. Against real sockets on 127.0.0.1, no stack needed."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import traceback
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from refund_bench.llm.client import LlmClient, LlmEndpoint, LlmRejected, LlmUnavailable
from refund_bench.llm.roles import ChatMessage
from refund_bench.retry import RetryPolicy
from tests.fakes.chat_completion import FixedAnswerServer

QUERY_KEY = "sk-in-query-7c2b"
PASSWORD = "s3cr3t-pass"
MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Rule on the grievance."}]


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose listener never accepts and whose accept queue is full: Linux drops each
    further SYN, so a client's connect waits until its own timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        fillers = [socket.socket() for _ in range(2)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
            yield port
        finally:
            for filler in fillers:
                filler.close()


def _failure(base_url: str) -> tuple[LlmUnavailable, str]:
    """The error of one call to ``base_url`` (one attempt, 0.3 s per phase), and everything a
    traceback of it prints."""

    async def call() -> str:
        endpoint = LlmEndpoint(
            base_url=base_url,
            api_key=SecretStr("k"),
            model="m",
            temperature=0.7,
            timeout_seconds=0.3,
        )
        async with LlmClient(endpoint, retry=RetryPolicy(attempts=1)) as client:
            answer = await client.complete_json(MESSAGES, "ruling", {"type": "object"}, 1, "d-url")
            return answer.text

    with pytest.raises(LlmUnavailable) as caught:
        asyncio.run(call())
    return caught.value, "".join(traceback.format_exception(caught.value))


def test_a_connect_timeout_prints_the_url_without_its_query(
    unanswered_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's message quotes the request URL ("Connection timeout to host <url>"), query
    and all; what reaches the log and a traceback keeps only host and path."""
    caplog.set_level(logging.INFO)
    error, printed = _failure(f"http://127.0.0.1:{unanswered_port}/v1?key={QUERY_KEY}")
    assert error.kind == "timeout"
    assert f"Connection timeout to host http://127.0.0.1:{unanswered_port}/v1/" in printed
    assert QUERY_KEY not in printed
    assert caplog.records, "the transient failure is logged"
    for record in caplog.records:
        assert QUERY_KEY not in record.getMessage()


def test_a_refused_url_prints_without_user_name_password_and_query(
    unanswered_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL aiohttp refuses (here, not HTTP) is quoted whole in its error."""
    caplog.set_level(logging.INFO)
    error, printed = _failure(
        f"ftp://alice:{PASSWORD}@127.0.0.1:{unanswered_port}/v1?key={QUERY_KEY}"
    )
    assert error.kind == "connection"
    assert f"ftp://127.0.0.1:{unanswered_port}/v1/" in printed
    for secret in (PASSWORD, QUERY_KEY, "alice"):
        assert secret not in printed
        assert not any(secret in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("status", [401, 503])
def test_an_endpoints_error_quoting_a_url_prints_without_its_credentials(status: int) -> None:
    """The endpoint's error body is the openai error's message; a traceback of the error the
    client raises prints it only without credentials (that openai error is not chained)."""
    body = json.dumps(
        {"error": {"message": f"see https://alice:{PASSWORD}@llm.example/v1?key={QUERY_KEY}"}}
    ).encode()
    with FixedAnswerServer(body, statuses=[status]) as server:

        async def call() -> str:
            endpoint = LlmEndpoint(
                base_url=f"http://127.0.0.1:{server.port}/v1",
                api_key=SecretStr("k"),
                model="m",
                temperature=0.7,
                timeout_seconds=5,
            )
            async with LlmClient(endpoint, retry=RetryPolicy(attempts=1)) as client:
                answer = await client.complete_json(
                    MESSAGES, "ruling", {"type": "object"}, 1, "d-url"
                )
                return answer.text

        with pytest.raises((LlmUnavailable, LlmRejected)) as caught:
            asyncio.run(call())
    printed = "".join(traceback.format_exception(caught.value))
    assert "https://llm.example/v1" in printed
    for secret in (PASSWORD, QUERY_KEY, "alice"):
        assert secret not in printed
