"""The stack's schema registry behind a loopback HTTP proxy that can hold back or answer a
request itself, for tests of a slow or lagging registry."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from tests.fakes.loopback import JsonAnswerHandler, LoopbackServer

Answer = tuple[int, bytes]
"""An HTTP status and its JSON body."""


def schema_id_of(path: str) -> int | None:
    """The id of a lookup of a schema by id (``/schemas/ids/<id>``), else ``None``."""
    if "/schemas/ids/" not in path:
        return None
    return int(path.rsplit("/schemas/ids/", 1)[1].split("?")[0].split("/")[0])


class RegistryProxy(LoopbackServer):
    """Passes every request on to ``upstream``. ``before(path)`` runs first, in the request's
    thread: an answer it returns is sent instead of the registry's (it may also block, like a
    slow registry); ``after(path)`` runs once the registry answered. ``url`` is the proxy's
    address, with ``upstream``'s path."""

    def __init__(
        self,
        upstream: str,
        before: Callable[[str], Answer | None] = lambda _path: None,
        after: Callable[[str], None] = lambda _path: None,
    ) -> None:
        parts = urllib.parse.urlsplit(upstream)
        origin = f"{parts.scheme}://{parts.netloc}"

        class Forward(JsonAnswerHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length) if length else None
                answer = before(self.path)
                if answer is None:
                    request = urllib.request.Request(
                        origin + self.path,
                        data=sent,
                        headers={
                            "Content-Type": self.headers.get("Content-Type", "application/json")
                        },
                        method=self.command,
                    )
                    try:
                        with urllib.request.urlopen(request, timeout=30) as response:
                            answer = response.status, response.read()
                    except urllib.error.HTTPError as exc:
                        answer = exc.code, exc.read()
                    after(self.path)
                self.answer_json(*answer)

            do_GET = do_POST = _forward  # noqa: N815 - the http.server names

        handler: type[BaseHTTPRequestHandler] = Forward
        super().__init__(handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}{parts.path}"
