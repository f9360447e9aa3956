"""docker-compose.yaml against the embedded defaults (no Docker needed).

With Docker, ``docker compose up`` replaces ``make stack-up``, and the services and the demo then
run with their embedded defaults. So every address a default points at must be one the compose
file publishes, with the credentials it sets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from refund_bench.config import StackSettings
from refund_bench.llm_setup import LlmStageSettings
from services.api.settings import ApiSettings
from services.payout.__main__ import Settings as PayoutSettings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"


def _default(settings: type[BaseSettings], field: str) -> str:
    """The code default (not what this process's environment says)."""
    default = settings.model_fields[field].default
    return default.get_secret_value() if isinstance(default, SecretStr) else str(default)


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _published(service: str) -> dict[int, int]:
    """Host port -> container port, for the ports published on 127.0.0.1."""
    published: dict[int, int] = {}
    for entry in _services()[service]["ports"]:
        host_ip, host_port, container_port = entry.split(":")
        assert host_ip == "127.0.0.1", f"{service} publishes beyond loopback: {entry}"
        published[int(host_port)] = int(container_port)
    return published


def test_kafka_is_published_where_the_services_look_and_advertises_that_address() -> None:
    host, port = _default(StackSettings, "kafka_bootstrap_servers").rsplit(":", 1)
    assert int(port) in _published("kafka")
    advertised = _services()["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"PLAINTEXT://{host}:{port}" in advertised.split(",")


def test_postgres_has_the_default_address_user_password_and_database() -> None:
    url = urlsplit(_default(StackSettings, "database_url"))
    assert url.port is not None
    assert _published("postgres")[url.port] == 5432
    env = _services()["postgres"]["environment"]
    assert env["POSTGRES_USER"] == url.username
    assert env["POSTGRES_PASSWORD"] == url.password
    assert env["POSTGRES_DB"] == url.path.lstrip("/")


def test_redis_stripe_mock_and_the_stand_in_are_at_the_default_addresses() -> None:
    redis = urlsplit(_default(StackSettings, "redis_url"))
    assert redis.port is not None
    assert _published("redis")[redis.port] == 6379
    for reader in (PayoutSettings, ApiSettings):  # the payout pays, the API's webhook reads
        stripe = urlsplit(_default(reader, "stripe_api_base"))
        assert stripe.port in _published("stripe-mock"), reader
    standin = urlsplit(_default(LlmStageSettings, "llm_base_url"))
    assert standin.port in _published("llm-standin")


def test_images_install_the_versions_ci_tested() -> None:
    """Every ``pip install`` of an image is pinned, by files copied in first: pip itself by
    build-constraints.txt, the package by constraints.txt and its build by the former."""
    dockerfiles = {
        "deploy/Dockerfile": (REPO / "deploy" / "Dockerfile").read_text(),
        "llm-standin": _services()["llm-standin"]["build"]["dockerfile_inline"],
    }
    for name, text in dockerfiles.items():
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        installs = [i for i, line in enumerate(lines) if "pip install" in line]
        assert installs, name
        for i in installs:
            install = lines[i].strip()
            if install.endswith("-c build-constraints.txt pip \\"):
                pinned = ["build-constraints.txt"]
            else:
                assert "-c constraints.txt" in install, f"{name}: {install}"
                assert "--build-constraint build-constraints.txt" in install, f"{name}: {install}"
                pinned = ["constraints.txt", "build-constraints.txt"]
            copied = [line.split() for line in lines[:i] if line.strip().startswith("COPY")]
            for file in pinned:
                assert any(file in words for words in copied), f"{name}: {file}"


def test_redis_persists_by_append_only_file_without_a_snapshot_schedule() -> None:
    """A snapshot forks and writes the whole dataset; the answer cache grows with every
    complaint, so under load the snapshot schedule took a core (docs/operations.md#redis)."""
    args = _services()["redis"]["command"]
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert options == {"--save": "", "--appendonly": "yes", "--appendfsync": "everysec"}
