"""An ``http.server`` for tests, on a free loopback port, answering in a background thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackServer(ThreadingHTTPServer):
    """Serves ``handler`` on 127.0.0.1 (port chosen by the OS) while the ``with`` block runs,
    then stops and closes its socket."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class JsonAnswerHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON bytes and logs nothing."""

    def answer_json(
        self, status: int, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass
