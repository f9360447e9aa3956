"""The health server on a real loopback socket: a client that connects and says nothing does not
hold back the probes, and is dropped after the connection timeout; it serves IPv6 addresses as
well as IPv4 ones."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from refund_bench.runtime.health import HealthServer, Heartbeat, address_family

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


def _ipv6_loopback() -> bool:
    """Whether this machine has an IPv6 loopback to bind."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")


def _get(port: int, path: str, host: str = "127.0.0.1") -> int:
    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S / 2)
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


@pytest.mark.parametrize(
    ("host", "family"),
    [
        ("::", socket.AF_INET6),
        ("::1", socket.AF_INET6),
        ("fd00::17", socket.AF_INET6),
        ("0.0.0.0", socket.AF_INET),
        ("127.0.0.1", socket.AF_INET),
        ("", socket.AF_INET),
        ("localhost", socket.AF_INET),
    ],
)
def test_the_socket_family_follows_the_host(host: str, family: socket.AddressFamily) -> None:
    assert address_family(host) == family


@needs_ipv6
def test_the_server_answers_on_the_ipv6_loopback() -> None:
    health = HealthServer(
        Heartbeat(), CollectorRegistry(), host="::1", connection_timeout_s=TIMEOUT_S
    ).start()
    try:
        with socket.create_connection(("::1", health.port), timeout=TIMEOUT_S) as client:
            assert client.family == socket.AF_INET6
        assert _get(health.port, "/healthz", host="::1") == 200
        assert _get(health.port, "/readyz", host="::1") == 503  # not subscribed
        assert _get(health.port, "/metrics", host="::1") == 200
    finally:
        health.stop()


@needs_ipv6
def test_the_ipv6_any_address_serves_ipv4_clients_too() -> None:
    health = HealthServer(
        Heartbeat(), CollectorRegistry(), host="::", connection_timeout_s=TIMEOUT_S
    ).start()
    try:
        assert _get(health.port, "/healthz", host="::1") == 200
        assert _get(health.port, "/healthz", host="127.0.0.1") == 200
    finally:
        health.stop()
