"""The API signed in to Kafka as a user whose access rules do not let it write
``complaint.received``: the broker refuses the record outright. The complaint is recorded and
answered 503 at once, saying it was not published (not that it may already be), and a retry
with the same key, once the API may write, publishes it once, on the same instance.

Two ways a broker refuses: a user with no rules at all is refused an idempotent producer id
(librdkafka's producer then fails for good, and the API starts a new one for the next
request); a user with rules for other topics is refused the topic.

PostgreSQL, the registry, the HTTP server and the broker's SASL listener (ACLs enforced) are
real.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from refund_bench import topics as t
from refund_bench.kafka_acls import API, acl_bindings, apply_acls, client_grants, exact_filter
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    ApiServer,
    dispute_events,
    end_offsets,
    event_codec,
    running_api,
)
from tests.integration.conftest import SASL_ADMIN, SASL_PASSWORD
from tests.kafka_helpers import wait_for

pytestmark = pytest.mark.stack

NO_RULES_USER = "refund-bench-acl-test"
"""A user of the broker's SASL listener with no rules (tests grant it some for a test and take
them back)."""
OTHER_TOPICS_USER = "refund-bench-pricing"
"""A user whose rules, once the flow's are applied, write the pricing stage's topics only."""
PUBLISH_TIMEOUT_S = 30.0
"""A refusal is answered well before this: the test tells the two apart."""


def intake_row(database_url: str, key: str) -> tuple[str, bool] | None:
    """The intake row under ``key``: its dispute id and whether it is marked published."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT dispute_id, published FROM intake_requests WHERE idempotency_key = %s",
            (key,),
        ).fetchone()
    return None if row is None else (str(row[0]), bool(row[1]))


def complaint_body(key: str) -> dict[str, str]:
    return {
        "order_id": "order-1840",
        "customer_id": "cust-77",
        "text": f"Two of the four biryanis were missing. [{key}]",
    }


def refused_complaint(api: ApiServer) -> str:
    """Submit a complaint Kafka refuses; asserts the answer; returns its key."""
    key = str(uuid.uuid4())
    with api.client() as client:
        answer = client.post(
            "/complaints", json=complaint_body(key), headers=api.auth(**{"Idempotency-Key": key})
        )
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "5"
    detail = answer.json()["detail"]
    assert "was not published" in detail
    assert "may already be published" not in detail
    assert "retry with the same Idempotency-Key, never a new one" in detail
    assert answer.elapsed.total_seconds() < PUBLISH_TIMEOUT_S / 2, "waited for an acknowledgement"
    recorded = intake_row(api.database_url, key)
    assert recorded is not None
    assert recorded[1] is False
    return key


def signed_in_as(user: str, sasl_bootstrap: str) -> dict[str, object]:
    return {
        "kafka_bootstrap_servers": sasl_bootstrap,
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "kafka_sasl_mechanism": "PLAIN",
        "kafka_sasl_username": user,
        "kafka_sasl_password": SASL_PASSWORD,
        "publish_timeout_s": PUBLISH_TIMEOUT_S,
    }


def published_once_on_retry(stack: Stack, api: ApiServer, keys: list[str]) -> None:
    """Retry each key on ``api``, which may write now: each complaint is accepted under the
    dispute id it was recorded with, and published once."""
    topic = t.COMPLAINT_RECEIVED.name
    start = end_offsets(stack.kafka, topic)
    with api.client() as client:
        for key in keys:
            recorded = intake_row(stack.database_url, key)
            assert recorded is not None
            answer = client.post(
                "/complaints",
                json=complaint_body(key),
                headers=api.auth(**{"Idempotency-Key": key}),
            )
            assert answer.status_code == 202, answer.text
            assert answer.json() == {
                "dispute_id": recorded[0],
                "status_url": f"/disputes/{recorded[0]}",
                "replayed": True,
            }
            assert intake_row(stack.database_url, key) == (recorded[0], True)
            events = dispute_events(stack.kafka, event_codec(stack), topic, start, recorded[0])
            assert [e["text"] for e in events] == [complaint_body(key)["text"]]


def test_a_producer_refused_by_the_broker_is_replaced_and_publishes_once_it_may(
    stack: Stack, sasl_bootstrap: str
) -> None:
    admin = AdminClient({"bootstrap.servers": sasl_bootstrap, **SASL_ADMIN})
    with running_api(stack, **signed_in_as(NO_RULES_USER, sasl_bootstrap)) as api:
        # Each complaint meets a producer the broker refuses an id: the one before failed
        # for good.
        keys = [refused_complaint(api), refused_complaint(api)]
        # The last producer fails for good too (if it has not yet): the readiness check says
        # so, and the instance stays ready (the desk and the status API work).
        with api.client() as client:
            wait_for(
                lambda: client.get("/readyz").json()["checks"]["kafka"] != "ok",
                timeout_s=15.0,
                what="the readiness check to name the failure",
            )
            ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["kafka"] == "unavailable: KafkaException", ready.text
        # The operator grants the API's rules: the same instance, not restarted, publishes.
        rules = acl_bindings(f"User:{NO_RULES_USER}", client_grants()[API])
        for future in admin.create_acls(rules).values():
            future.result()
        try:
            published_once_on_retry(stack, api, keys)
        finally:
            for future in admin.delete_acls([exact_filter(r) for r in rules]).values():
                future.result()


def test_a_topic_the_user_may_not_write_is_answered_not_published(
    stack: Stack, sasl_bootstrap: str
) -> None:
    apply_acls(sasl_bootstrap, "User:refund-bench-", SASL_ADMIN)  # idempotent
    with running_api(stack, **signed_in_as(OTHER_TOPICS_USER, sasl_bootstrap)) as api:
        keys = [refused_complaint(api), refused_complaint(api)]
    with running_api(stack) as plain:  # a super user
        published_once_on_retry(stack, plain, keys)
