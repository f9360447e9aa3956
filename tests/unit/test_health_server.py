"""The health server on a real loopback socket: a client that connects and says nothing does not
hold back the probes, and is dropped after the connection timeout."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from refund_bench.runtime.health import HealthServer, Heartbeat

TIMEOUT_S = 2.0
"""The server's connection timeout in these tests (the probes' client waits half of it: room
for a busy machine)."""


@pytest.fixture
def server() -> Iterator[HealthServer]:
    health = HealthServer(
        Heartbeat(), CollectorRegistry(), host="127.0.0.1", connection_timeout_s=TIMEOUT_S
    ).start()
    yield health
    health.stop()


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S / 2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_silent_client_neither_holds_back_the_probes_nor_stays_connected(
    server: HealthServer,
) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10 * TIMEOUT_S) as idle:
        # The server has accepted the idle connection once a later one is answered: both wait
        # in the same listen queue, and a single-threaded server would sit on the first.
        assert _get(server.port, "/healthz") == 200  # answered long before the idle one ends
        assert _get(server.port, "/metrics") == 200
        started = time.monotonic()
        assert idle.recv(1) == b""  # closed by the server, not by this client's 10 s timeout
        assert time.monotonic() - started < 3 * TIMEOUT_S


def test_a_client_that_stops_mid_request_is_dropped_too(server: HealthServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10 * TIMEOUT_S) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line: never finished
        assert _get(server.port, "/readyz") == 503  # not subscribed: answered, and promptly
        started = time.monotonic()
        assert slow.recv(1) == b""
        assert time.monotonic() - started < 3 * TIMEOUT_S


def test_connections_beyond_the_limit_are_closed_unanswered_until_a_slot_is_free() -> None:
    health = HealthServer(
        Heartbeat(),
        CollectorRegistry(),
        host="127.0.0.1",
        connection_timeout_s=10 * TIMEOUT_S,
        max_connections=2,
    ).start()
    try:
        first = socket.create_connection(("127.0.0.1", health.port), timeout=10 * TIMEOUT_S)
        second = socket.create_connection(("127.0.0.1", health.port), timeout=10 * TIMEOUT_S)
        # The server accepts in the order of the listen queue: the two silent connections hold
        # both slots by the time it takes this one, which it closes without an answer.
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            _get(health.port, "/healthz")
        assert health.refused == 1
        first.close()
        second.close()
        # Their threads see the clients gone and free the slots: the probes are answered again.
        deadline = time.monotonic() + 5 * TIMEOUT_S
        while True:
            try:
                assert _get(health.port, "/healthz") == 200
                break
            except (http.client.RemoteDisconnected, ConnectionError):
                if time.monotonic() > deadline:
                    raise
    finally:
        health.stop()
