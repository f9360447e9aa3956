"""Fixtures shared by every test.

Servers come from the running stack when its addresses are in the environment
(``KAFKA_BOOTSTRAP_SERVERS`` and friends, written by ``make stack-up`` into
``.stack/env.sh``), else from testcontainers when a Docker engine answers (Kafka, PostgreSQL
and Redis only). A test that needs a server the environment does not give fails under CI (``CI``
set to ``true``, ``1`` or ``yes``, in any case) and is skipped elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NoReturn

import pytest

from refund_bench.codec import Framing, framing_from_registry_url
from refund_bench.topics import TopicSpec, ensure_topics


@dataclass(frozen=True)
class Stack:
    kafka: str
    registry_url: str
    database_url: str
    redis_url: str
    stripe_api_base: str
    llm_base_url: str


def _docker_available() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    probe = subprocess.run([docker, "info"], capture_output=True, check=False, timeout=20)
    return probe.returncode == 0


def under_ci() -> bool:
    """Whether the tests run under CI: ``CI`` set to ``true``, ``1`` or ``yes`` (any case), the
    spellings CI systems export. The one place the tests decide between skipping and failing."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable(what: str) -> NoReturn:
    """Skip, or fail under CI (:func:`under_ci`): CI must never pass by skipping a server test."""
    message = (
        f"{what} is not available: run `make stack-up` and `source .stack/env.sh` "
        "(without the stack, a Docker engine gives Kafka, PostgreSQL and Redis through "
        "testcontainers, but not stripe-mock, the schema registry or the LLM stand-in)"
    )
    if under_ci():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    env = os.environ
    if env.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield Stack(
            kafka=env["KAFKA_BOOTSTRAP_SERVERS"],
            registry_url=env.get("SCHEMA_REGISTRY_URL", ""),
            database_url=env.get("DATABASE_URL", ""),
            redis_url=env.get("REDIS_URL", ""),
            stripe_api_base=env.get("STRIPE_API_BASE", ""),
            llm_base_url=env.get("LLM_BASE_URL", ""),
        )
        return
    if not _docker_available():
        unavailable("the stack")
    from testcontainers.kafka import KafkaContainer
    from testcontainers.postgres import PostgresContainer
    from testcontainers.redis import RedisContainer

    with (
        KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft() as kafka,
        PostgresContainer("postgres:15") as pg,
        RedisContainer("redis:7") as redis,
    ):
        host = redis.get_container_host_ip()
        yield Stack(
            kafka=kafka.get_bootstrap_server(),
            registry_url="",
            database_url=pg.get_connection_url().replace("+psycopg2", ""),
            redis_url=f"redis://{host}:{redis.get_exposed_port(6379)}/0",
            stripe_api_base="",
            llm_base_url="",
        )


@pytest.fixture(scope="session")
def kafka(stack: Stack) -> str:
    return stack.kafka


@pytest.fixture(scope="session")
def registry_url(stack: Stack) -> str:
    """The schema registry, for a test that needs a real one (most tests take :func:`framing`,
    which without a registry frames records with schema fingerprints instead)."""
    if not stack.registry_url:
        unavailable("the schema registry (SCHEMA_REGISTRY_URL)")
    return stack.registry_url


@pytest.fixture(scope="session")
def stripe_api_base(stack: Stack) -> str:
    """stripe-mock, for a test that talks to a real Stripe API (most take a loopback fake)."""
    if not stack.stripe_api_base:
        unavailable("stripe-mock (STRIPE_API_BASE)")
    return stack.stripe_api_base


@pytest.fixture(scope="session")
def framing(stack: Stack) -> Framing:
    return framing_from_registry_url(stack.registry_url)


TopicFactory = Callable[..., str]


@pytest.fixture
def new_topic(kafka: str) -> TopicFactory:
    """Create a fresh uniquely named topic (uuid) for one test; returns its name."""

    def create(prefix: str = "t", partitions: int = 4, compacted: bool = False) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        ensure_topics(kafka, [TopicSpec(name, compacted)], partitions=partitions)
        return name

    return create
