"""Loopback ports for servers a test starts itself."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nobody listens on now (another process may take it before the caller
    binds it: good enough for a test's own server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
