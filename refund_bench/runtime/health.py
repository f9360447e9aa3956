"""Liveness, readiness and ``/metrics`` over HTTP, served from a background thread.

``/healthz`` is 200 while the poll loop has polled within ``liveness_timeout_s`` (a wedged loop
fails it and Kubernetes restarts the pod); ``/readyz`` is 200 once the stage is consuming, except
while it restores state from a changelog (a rolling update waits for a restored replica).

Each connection is served in a thread of its own and dropped after ``CONNECTION_TIMEOUT_S`` of
silence, so a client that connects and sends nothing, or reads ``/metrics`` slowly, cannot hold
back the kubelet's probes (3 s each in the manifests) and get a healthy pod restarted. At most
``MAX_CONNECTIONS`` are served at once; a connection beyond them is closed unanswered, so that a
flood of connections costs the stage a bounded number of threads, not one each (the network
policy in ``deploy/k8s`` lets only the cluster's probes and scrapers connect).

The host may be an IPv4 or an IPv6 address (``::`` serves every address of both families where
the kernel allows it, ``::1`` the IPv6 loopback), or a name, served over IPv4 when it has an
IPv4 address and over IPv6 otherwise.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]

CONNECTION_TIMEOUT_S = 5.0
"""How long one connection may wait on its client, for each read of its request and each write
of its answer; then the server closes it."""
MAX_CONNECTIONS = 32
"""Connections served at once, at most (one thread each); more are closed unanswered."""


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


def address_family(host: str) -> socket.AddressFamily:
    """The family of the socket that serves ``host``: AF_INET6 for an IPv6 address, AF_INET for
    an IPv4 one or ``""`` (every IPv4 address), and for a name AF_INET if it resolves to an IPv4
    address, else AF_INET6. A name that does not resolve raises ``socket.gaierror``."""
    if not host:
        return socket.AF_INET
    try:
        literal = ipaddress.ip_address(host)  # fe80::1%eth0, a scoped address, too
    except ValueError:
        families = {info[0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        return socket.AF_INET if socket.AF_INET in families else socket.AF_INET6
    return socket.AF_INET6 if literal.version == 6 else socket.AF_INET


class _QuietHandler(WSGIRequestHandler):
    """One connection, whose socket times out after its server's ``connection_timeout_s``;
    no access log."""

    server: _ThreadingWSGIServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.connection_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """wsgiref's server with a thread per connection, so that one slow or silent client does not
    keep the others waiting, up to ``slots`` connections at once (:meth:`limit`); a connection
    beyond them is closed unanswered. Daemon threads: stopping the server waits for none of
    them."""

    daemon_threads = True
    connection_timeout_s = CONNECTION_TIMEOUT_S

    def __init__(self, *args: Any, family: socket.AddressFamily, **kwargs: Any) -> None:
        self.address_family = family  # read by TCPServer.__init__ when it makes the socket
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.refused = 0
        """Connections closed unanswered because every slot was taken."""

    def server_bind(self) -> None:
        """Binds as wsgiref does; an IPv6 socket also takes IPv4 connections (``::`` then serves
        both families) where the kernel allows it."""
        if self.address_family == socket.AF_INET6:
            with contextlib.suppress(OSError, AttributeError):
                self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def limit(self, max_connections: int) -> None:
        """Serve at most ``max_connections`` connections at once (before serving any)."""
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            log.debug("health connection from %s closed: every slot is taken", client_address)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()  # no thread started to release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out or went away (an ``OSError``) is no error of the stage's:
        logged at DEBUG only. Anything else is logged as a warning, with its traceback."""
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("health connection from %s dropped", client_address, exc_info=True)
        else:
            log.warning("health connection from %s failed", client_address, exc_info=True)


class HealthServer:
    """Serves ``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` (port 0 = any free),
    on up to ``max_connections`` connections at once; ``host`` is an IPv4 or IPv6 address or a
    name (:func:`address_family`)."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        registry: CollectorRegistry,
        host: str = "0.0.0.0",  # noqa: S104 - probes and scrapes come from the cluster
        port: int = 0,
        connection_timeout_s: float = CONNECTION_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._heartbeat = heartbeat
        self._metrics_app = make_wsgi_app(registry)
        self._server = _ThreadingWSGIServer(
            (host, port), _QuietHandler, family=address_family(host)
        )
        self._server.set_app(self._app)
        self._server.connection_timeout_s = connection_timeout_s
        self._server.limit(max_connections)
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

    @property
    def refused(self) -> int:
        """Connections closed unanswered so far because ``max_connections`` were being served."""
        return self._server.refused

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
