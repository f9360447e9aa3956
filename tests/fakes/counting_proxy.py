"""A pass-through HTTP proxy on loopback that records every request it forwards.

Put in front of stripe-mock, it is the tests' own count of what reached Stripe: a count kept
outside the code under test, so "no new refund on replay" cannot pass because that code also
forgot to count.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl

import httpx

from tests.fakes.loopback import LoopbackServer

_FORWARDED = ("Authorization", "Content-Type", "Idempotency-Key", "Stripe-Version", "User-Agent")


@dataclass(frozen=True)
class Forwarded:
    """One request that went through: method, path, form fields and idempotency key."""

    method: str
    path: str
    form: dict[str, str]
    idempotency_key: str | None
    status: int


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients it stands between expect
    server: CountingProxy

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k: v for k in _FORWARDED if (v := self.headers.get(k)) is not None}
        answer = self.server.upstream.request(
            self.command, self.path, content=body, headers=headers
        )
        self.server.record(
            Forwarded(
                self.command,
                self.path.split("?", 1)[0],
                dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True)),
                self.headers.get("Idempotency-Key"),
                answer.status_code,
            )
        )
        self.send_response(answer.status_code)
        for name in ("Content-Type", "Idempotency-Key", "Request-Id", "Stripe-Version"):
            if name in answer.headers:
                self.send_header(name, answer.headers[name])
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_DELETE = _forward  # noqa: N815 - the names http.server dispatches to

    def log_message(self, format: str, *args: Any) -> None:
        pass


class CountingProxy(LoopbackServer):
    """Forwards to ``upstream_url`` while the ``with`` block runs; ``requests`` lists them."""

    def __init__(self, upstream_url: str) -> None:
        super().__init__(_Forward)
        self.upstream = httpx.Client(base_url=upstream_url, timeout=30)
        self._lock = threading.Lock()
        self._requests: list[Forwarded] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, forwarded: Forwarded) -> None:
        with self._lock:
            self._requests.append(forwarded)

    @property
    def requests(self) -> list[Forwarded]:
        with self._lock:
            return list(self._requests)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.upstream.close()
