"""Settings models. Only entry points read the environment; libraries take plain values.

Each service defines one frozen settings class deriving from :class:`StageSettings`; field
names map to upper-case environment variables (``kafka_bootstrap_servers`` ->
``KAFKA_BOOTSTRAP_SERVERS``). Defaults match the local stack (``make stack-up``), except
``SCHEMA_REGISTRY_URL``: empty by default, set by ``.stack/env.sh``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any, Literal, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from refund_bench.gc_tuning import DEFAULT_YOUNG_THRESHOLD
from refund_bench.urls import printable_url, printable_urls

KafkaSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
KafkaSaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class StackSettings(BaseSettings):
    """Addresses of the shared infrastructure, and how to sign in to Kafka."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True)

    kafka_bootstrap_servers: str = "127.0.0.1:19092"
    kafka_security_protocol: KafkaSecurityProtocol = "PLAINTEXT"
    """``SASL_SSL`` (user name and password over TLS) or ``SSL`` (TLS, with a client
    certificate for mTLS) for a secured cluster; ``PLAINTEXT`` only on a private network."""
    kafka_sasl_mechanism: KafkaSaslMechanism = "SCRAM-SHA-512"
    kafka_sasl_username: str = ""
    kafka_sasl_password: SecretStr = SecretStr("")
    kafka_ssl_ca_location: str = ""
    """PEM file of the CA that signed the brokers' certificates; empty: the system's CAs."""
    kafka_ssl_certificate_location: str = ""
    """PEM file of this service's client certificate (mTLS), with ``KAFKA_SSL_KEY_LOCATION``."""
    kafka_ssl_key_location: str = ""
    kafka_ssl_key_password: SecretStr = SecretStr("")
    schema_registry_url: str = ""
    topic_partitions: int = Field(default=12, ge=1)
    topic_replication_factor: int = Field(default=1, ge=1)
    database_url: SecretStr = SecretStr(
        "postgresql://refund_bench:refund_bench@127.0.0.1:15432/refund_bench"
    )
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:16379/0")
    pg_statement_timeout_ms: int = Field(default=30_000, ge=0)
    """PostgreSQL's ``statement_timeout`` on the services' connections (0: none). A statement
    stuck behind a lock or a sick disk fails instead of holding its batch, and the batch is
    redelivered; an ``options`` in ``DATABASE_URL`` that sets it wins."""
    pg_migration_lock_timeout_ms: int = Field(default=5_000, ge=0)
    """How long ``provision``'s schema migration waits for a table lock (PostgreSQL's
    ``lock_timeout``, 0: no limit) before it rolls back and tries again
    (:func:`refund_bench.db.migrate.migrate`)."""

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        """The fields as printed: a URL setting (``*_URL``, or a list: ``*_URLS``) without user
        name, password and query, which may carry credentials; secrets masked."""
        for name, value in super().__repr_args__():
            if isinstance(value, str) and name is not None and name.endswith("_url"):
                yield name, printable_url(value) if value else value
            elif isinstance(value, str) and name is not None and name.endswith("_urls"):
                yield name, printable_urls(value)
            else:
                yield name, value

    @field_validator("database_url")
    @classmethod
    def _database_url_readable(cls, value: SecretStr) -> SecretStr:
        """``DATABASE_URL`` must read as a PostgreSQL URL (or conninfo string). The parser's own
        message quotes the part it could not read, often the password, and a connection pool
        would log it on every retry: the error here says only what to fix."""
        try:
            parts = conninfo_to_dict(value.get_secret_value())
        except psycopg.Error:
            raise ValueError(
                "DATABASE_URL cannot be read as a PostgreSQL URL: percent-encode '%', '@', ':',"
                " '/' and spaces in its user name and password"
            ) from None
        if "@" in str(parts.get("host", "")):
            raise ValueError(
                "DATABASE_URL names a host with '@' in it: percent-encode '@' in the password"
                " as %40"
            )
        port, dbname = str(parts.get("port", "")), str(parts.get("dbname", ""))
        # libpq leaves a host's port empty when the URL gives none ("h1,h2:5433": ",5433").
        if any(p and not p.isdigit() for p in port.split(",")) or "@" in dbname:
            raise ValueError(
                "DATABASE_URL reads as a port or database name that cannot be one (a '/' in the"
                " password?): percent-encode '/' in its user name and password as %2F"
            )
        return value

    def database_conninfo(self) -> str:
        """``DATABASE_URL`` with ``PG_STATEMENT_TIMEOUT_MS`` added to its ``options`` (first,
        so that a ``statement_timeout`` the URL sets itself wins). Holds the password."""
        url = self.database_url.get_secret_value()
        if not self.pg_statement_timeout_ms:
            return url
        ours = f"-c statement_timeout={self.pg_statement_timeout_ms}"
        theirs = conninfo_to_dict(url).get("options")
        return make_conninfo(url, options=f"{ours} {theirs}" if theirs else ours)

    @model_validator(mode="after")
    def _kafka_sign_in_complete(self) -> Self:
        if self.kafka_security_protocol.startswith("SASL_") and not (
            self.kafka_sasl_username and self.kafka_sasl_password.get_secret_value()
        ):
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs"
                " KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"
            )
        if bool(self.kafka_ssl_certificate_location) != bool(self.kafka_ssl_key_location):
            raise ValueError(
                "KAFKA_SSL_CERTIFICATE_LOCATION and KAFKA_SSL_KEY_LOCATION go together"
            )
        return self

    def kafka_security_config(self) -> dict[str, str]:
        """The librdkafka settings every Kafka client of the service adds to its own: how it
        signs in to the brokers. Holds secrets: never log it."""
        conf: dict[str, str] = {"security.protocol": self.kafka_security_protocol}
        if self.kafka_security_protocol.startswith("SASL_"):
            conf["sasl.mechanism"] = self.kafka_sasl_mechanism
            conf["sasl.username"] = self.kafka_sasl_username
            conf["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        if self.kafka_security_protocol in ("SSL", "SASL_SSL"):
            tls = {
                "ssl.ca.location": self.kafka_ssl_ca_location,
                "ssl.certificate.location": self.kafka_ssl_certificate_location,
                "ssl.key.location": self.kafka_ssl_key_location,
                "ssl.key.password": self.kafka_ssl_key_password.get_secret_value(),
            }
            conf.update({key: value for key, value in tls.items() if value})
        return conf


class StageSettings(StackSettings):
    """Settings every stage has: how its runtime consumes, batches and reports."""

    guarantee: Literal["exactly-once", "at-least-once"] = "exactly-once"
    batch_max_records: int = Field(default=500, ge=1)
    batch_max_wait_ms: int = Field(default=50, ge=1)
    max_inflight: int = Field(default=512, ge=1)
    max_pending_records: int = Field(default=2000, ge=1)
    drain_timeout_s: float = Field(default=20.0, gt=0)
    """Async stages: how long the records in flight may take to finish and commit after SIGTERM,
    counted from it; no commit begins after it, and the rest are left uncommitted for the
    partitions' next owner. With the last commit (30 s at most) after it, below the pod's grace
    period (60 s in the manifests)."""
    transactional_id: str = ""
    group_instance_id: str = ""
    consumer_group: str = ""
    """The stage's Kafka consumer group; empty (always, in the pipeline): the stage's name, the
    one group its Kafka user may read (:mod:`refund_bench.kafka_acls`). Another group is for a
    copy of the stage that must stay out of the pipeline's, such as a test's on a shared stack."""
    state_retention_hours: float | None = Field(default=None, gt=0)
    """Stateful stages: how long a state key outlives its last write; unset, the stage's own
    default (tally 7 days, pricing 90 days)."""
    dlq_max_fraction: float = Field(default=0.5, gt=0, le=1)
    """The DLQ budget: the stage stops once more than this share of its last 200 records went
    to the DLQ (and at least 20 did). 1 never stops it: for a replay that is known to
    dead-letter most of what it reads (decisions for disputes pricing no longer keeps)."""
    metrics_host: str = "0.0.0.0"  # noqa: S104 - scraped from inside the cluster
    metrics_port: int = 9400
    log_level: str = "INFO"
    gc_young_threshold: int = Field(default=DEFAULT_YOUNG_THRESHOLD, ge=0)
    """Allocations between young-generation collections (see ``refund_bench.gc_tuning``); 0 keeps
    Python's default (700)."""

    def instance_id(self, stage: str) -> str:
        """This instance's transactional id: set explicitly, or ``<stage>-<hostname>``.

        On Kubernetes the hostname is the pod name, unique per replica. An explicit id of an
        exactly-once stage must begin with ``<stage>-``, the prefix the stage's Kafka user may
        use (:mod:`refund_bench.kafka_acls`); otherwise ``ValueError`` at start, instead of the
        broker refusing the first transaction.
        """
        if not self.transactional_id:
            return f"{stage}-{socket.gethostname()}"
        prefix = f"{stage}-"
        if self.guarantee == "exactly-once" and not self.transactional_id.startswith(prefix):
            raise ValueError(
                f"TRANSACTIONAL_ID {self.transactional_id!r} must begin with {prefix!r}: "
                "the stage's Kafka user may use only the transactional ids with that prefix"
            )
        return self.transactional_id
