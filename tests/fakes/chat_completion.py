"""An OpenAI-compatible endpoint that gives one fixed answer, for tests of what code does with
an answer the stand-in's rules would never give."""

from __future__ import annotations

import json

from pydantic import SecretStr

from refund_bench.llm.client import DISPUTE_HEADER, LlmClient, LlmEndpoint
from tests.fakes.loopback import JsonAnswerHandler, LoopbackServer


def completion(content: str | None, finish_reason: str | None = "stop", **served: str) -> bytes:
    """A chat completion's body whose one choice says ``content``; ``served``: more top-level
    fields (``model``, ``system_fingerprint``)."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    body = {"id": "x", "object": "chat.completion", "choices": [choice], **served}
    return json.dumps(body).encode()


class _FixedAnswer(JsonAnswerHandler):
    """Answers a POST with the server's next status (200 once they are used up) and its next
    body (``body`` once they are used up); records what it was sent."""

    server: FixedAnswerServer

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        length = int(self.headers.get("Content-Length", "0"))
        self.server.requests.append(
            (self.path, self.headers.get("Content-Type", ""), self.rfile.read(length))
        )
        self.server.disputes.append(self.headers.get(DISPUTE_HEADER, ""))
        self.server.credentials.append(self.headers.get("Authorization", ""))
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        self.answer_json(
            status,
            self.server.bodies.pop(0) if self.server.bodies else self.server.body,
            self.server.status_headers if status != 200 else None,
        )


class FixedAnswerServer(LoopbackServer):
    """Answers every POST with ``body``, after the given ``statuses`` (with the same body and
    ``status_headers``), and after the bodies ``before`` (one each, in order)."""

    def __init__(
        self,
        body: bytes,
        statuses: list[int] | None = None,
        before: list[bytes] | None = None,
        status_headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(_FixedAnswer)
        self.body = body
        self.statuses = list(statuses or [])
        self.bodies = list(before or [])
        self.status_headers = dict(status_headers or {})
        self.requests: list[tuple[str, str, bytes]] = []  # (path, content type, body)
        self.disputes: list[str] = []  # the dispute header of each request
        self.credentials: list[str] = []  # the Authorization header of each request

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def client(self, temperature: float) -> LlmClient:
        """A client of this endpoint for one role (close it with ``aclose``)."""
        return LlmClient(
            LlmEndpoint(
                base_url=f"http://127.0.0.1:{self.port}/v1",
                api_key=SecretStr("k"),
                model="any-model",
                temperature=temperature,
                timeout_seconds=5,
            )
        )
