"""Liveness, readiness and ``/metrics`` over HTTP, served from a background thread.

``/healthz`` is 200 while the poll loop has polled within ``liveness_timeout_s`` (a wedged loop
fails it and Kubernetes restarts the pod); ``/readyz`` is 200 once the stage is consuming, except
while it restores state from a changelog (a rolling update waits for a restored replica).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

StartResponse = Callable[..., Any]


@dataclass
class Heartbeat:
    """Updated by the poll loop; read by the probes."""

    liveness_timeout_s: float = 60.0
    ready: bool = False
    """Set while the stage is subscribed."""
    _last_beat: float = field(default_factory=time.monotonic)
    _restoring: bool = False

    def beat(self) -> None:
        self._last_beat = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self._last_beat < self.liveness_timeout_s

    @contextmanager
    def restoring(self) -> Iterator[None]:
        """Not ready inside: the stage is rebuilding state and processes nothing."""
        self._restoring = True
        try:
            yield
        finally:
            self._restoring = False

    def ready_now(self) -> bool:
        """Subscribed, not restoring, and alive."""
        return self.ready and not self._restoring and self.alive()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class HealthServer:
    """Serves ``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` (port 0 = any free)."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        registry: CollectorRegistry,
        host: str = "0.0.0.0",  # noqa: S104 - probes and scrapes come from the cluster
        port: int = 0,
    ) -> None:
        self._heartbeat = heartbeat
        self._metrics_app = make_wsgi_app(registry)
        self._server: WSGIServer = make_server(host, port, self._app, handler_class=_QuietHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body: Iterable[bytes] = self._metrics_app(environ, start_response)
            return body
        if path == "/healthz":
            ok = self._heartbeat.alive()
        elif path == "/readyz":
            ok = self._heartbeat.ready_now()
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain")])
        return [b"ok\n" if ok else b"unhealthy\n"]

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
