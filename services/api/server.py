"""Serving the app with uvicorn: in the foreground (the entry point) or in a background
thread on a given socket (tests, demos)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from services.api.app import build_deps, create_app
from services.api.settings import ApiSettings

GRACEFUL_SHUTDOWN_S = 20
"""How long uvicorn lets in-flight requests finish after SIGTERM (deploy/k8s/api.yaml's grace
period covers it)."""


def serve(settings: ApiSettings) -> None:
    """Run until SIGTERM/SIGINT; uvicorn finishes in-flight requests, then the app's
    lifespan flushes the producer and closes the pool."""
    app = create_app(settings, build_deps(settings))
    config = uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_level=settings.log_level.lower(),
        http="httptools",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    uvicorn.Server(config).run()


class BackgroundServer:
    """uvicorn in a daemon thread on ``127.0.0.1:<free port>``; ``stop()`` shuts it down."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self._server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        )
        self._thread = threading.Thread(target=self._run, name="api-server", daemon=True)
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self.error = exc

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"API server did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("API server did not start in time")
            time.sleep(0.02)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._sock.close()
