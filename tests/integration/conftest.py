"""Servers the integration tests share: the LLM stand-in on a loopback port, Redis, and the
stack's PostgreSQL with the schema applied and the sample orders seeded.

The stand-in runs in the test process, in a background thread, as a real uvicorn server on a
socket bound to 127.0.0.1 (port chosen by the OS); clients talk HTTP to it like to any
endpoint. Redis comes from ``REDIS_URL`` (the stack's) or testcontainers; without either the
tests that need it are skipped, and fail under CI.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest
import uvicorn
from pydantic import SecretStr

from refund_bench.config import StageSettings
from refund_bench.db.migrate import migrate
from refund_bench.db.orders import upsert_orders
from refund_bench.samples import SAMPLE_ORDERS
from services.llm_standin.app import create_app
from tests.conftest import Stack, unavailable
from tests.standin import Standin


@pytest.fixture(scope="session")
def database(stack: Stack) -> str:
    """The stack's database URL, its schema applied and the sample orders seeded."""
    if not stack.database_url:
        unavailable("PostgreSQL (DATABASE_URL)")
    migrate(stack.database_url)
    with psycopg.connect(stack.database_url) as conn:
        upsert_orders(conn, SAMPLE_ORDERS)
    return stack.database_url


SASL_USERNAME, SASL_PASSWORD = "refundbench", "local-sasl-password"
"""The local broker's super user on its SASL listener (stack/kafka/server.properties); the
per-client users ``refund-bench-<client>`` share the password."""
SASL_ADMIN = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": SASL_USERNAME,
    "sasl.password": SASL_PASSWORD,
}
"""The super user's client settings on the SASL listener (an administrator's)."""


def sasl_settings(
    address: str,
    *,
    user: str = SASL_USERNAME,
    password: str = SASL_PASSWORD,
    mechanism: str = "PLAIN",
) -> StageSettings:
    """A stage's settings for the SASL listener, as its environment would give them."""
    return StageSettings(
        kafka_bootstrap_servers=address,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username=user,
        kafka_sasl_password=SecretStr(password),
    )


@pytest.fixture(scope="session")
def sasl_bootstrap() -> str:
    """The address of the broker's SASL listener (ACLs enforced)."""
    address = os.environ.get("KAFKA_SASL_TEST_BOOTSTRAP_SERVERS", "")
    if not address:
        unavailable("the broker's SASL listener (KAFKA_SASL_TEST_BOOTSTRAP_SERVERS)")
    return address


@pytest.fixture(scope="session")
def redis_url(stack: Stack) -> str:
    """The stack's Redis (``REDIS_URL``), or the testcontainers one."""
    if not stack.redis_url:
        unavailable("Redis (REDIS_URL)")
    return stack.redis_url


@pytest.fixture(scope="session")
def standin_server() -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(seed=7),
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            if httpx.get(f"{root}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the stand-in did not start")
        time.sleep(0.05)
    yield root
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.fixture
def standin(standin_server: str) -> Iterator[Standin]:
    """The stand-in, reset, with no faults and a short hang for 'timeout' faults."""
    with httpx.Client(base_url=standin_server, timeout=10) as admin:
        handle = Standin(base_url=f"{standin_server}/v1", admin=admin)
        handle.faults(
            latency_ms=0, rate_429=0, rate_5xx=0, rate_timeout=0, rate_malformed=0,
            timeout_seconds=3,
        )  # fmt: skip
        admin.post("/admin/reset").raise_for_status()
        yield handle
