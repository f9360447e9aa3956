"""The API with Kafka unreachable: complaints are recorded and answered 503, and publishers
waiting for the broker do not take the connections of the desk and the status API.

PostgreSQL, the registry and the HTTP server are real; Kafka is a loopback port nobody listens
on, so every publish waits out ``PUBLISH_TIMEOUT_S``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import psycopg
import pytest

from refund_bench import topics as t
from refund_bench.codec import Codec, FingerprintFraming
from services.api.publisher import KafkaPublisher
from services.api.refund_failures import REFUND_COMPLETIONS, REFUND_FAILURES
from services.api.store import DECISIONS
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    ApiServer,
    delete_dispute,
    dispute_events,
    end_offsets,
    event_codec,
    record_intake,
    running_api,
    seed_article_dispute,
)
from tests.fakes.stripe_idempotent import FakeStripe, FakeStripeServer
from tests.ledger_rows import paid_round, read_round
from tests.stripe_events import refund_event, signed, webhook_settings

pytestmark = pytest.mark.stack

PUBLISH_TIMEOUT_S = 30.0
"""Long enough that the publishers are surely still waiting after the test's other requests,
however slow the machine: those must be served while they wait."""
PUBLISH_POOL = 2
LATE_PUBLISH_TIMEOUT_S = 12.0
"""The publish timeout of an instance started while Kafka is away: each outbox's first drain
waits it out."""


def unused_loopback_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def stripe_now() -> Iterator[FakeStripeServer]:
    """Stripe as the webhook reads refunds back from it."""
    with FakeStripeServer(FakeStripe()) as server:
        yield server


def outboxes_published(stack: Stack) -> None:
    """What every outbox holds, published by an instance that reaches Kafka: an instance
    started without Kafka then has no row to drain, and its publishing connections are the
    tests' own."""
    with running_api(stack) as reaching:
        wait_until(
            lambda: unpublished(reaching.database_url) == 0,
            timeout_s=60.0,
            what="every outbox row published",
        )


def unpublished(database_url: str) -> int:
    """Rows of the API's outboxes not published yet."""
    tables = (DECISIONS, REFUND_FAILURES, REFUND_COMPLETIONS)
    query = " + ".join(f"(SELECT count(*) FROM {t.name} WHERE NOT published)" for t in tables)
    with psycopg.connect(database_url) as conn:
        row = conn.execute(f"SELECT {query}").fetchone()  # table names: the code's constants
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="module")
def api(stack: Stack, stripe_now: FakeStripeServer) -> Iterator[ApiServer]:
    outboxes_published(stack)
    with running_api(
        stack,
        kafka_bootstrap_servers=unused_loopback_address(),
        db_pool_max=2,
        db_publish_pool_max=PUBLISH_POOL,
        publish_wait_s=0.5,
        publish_timeout_s=PUBLISH_TIMEOUT_S,
        outbox_interval_s=600.0,
        **webhook_settings(stripe_now.url),
    ) as server:
        yield server


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def publishers_holding_rows(database_url: str, keys: list[str]) -> int:
    """Sessions that hold the intake row of one of ``keys`` locked and wait (for Kafka) inside
    the transaction. Only this test's rows count, whatever else shares the database: a row
    locked ``FOR UPDATE`` carries its locker's transaction id in ``xmax``, and the session
    running that transaction holds the id's lock."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT activity.pid) FROM intake_requests AS intake"
            " JOIN pg_locks AS lock ON lock.locktype = 'transactionid'"
            "  AND lock.transactionid = intake.xmax AND lock.mode = 'ExclusiveLock'"
            "  AND lock.granted"
            " JOIN pg_stat_activity AS activity ON activity.pid = lock.pid"
            " WHERE intake.idempotency_key = ANY(%s) AND activity.state = 'idle in transaction'",
            (keys,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def complaint_body(key: str, text: str = "Two of the four were missing.") -> dict[str, str]:
    return {"order_id": "order-1840", "customer_id": "cust-77", "text": f"{text} [{key}]"}


def complaint(
    api: ApiServer, key: str, text: str = "Two of the four were missing."
) -> httpx.Response:
    # A client of its own: it may wait out PUBLISH_TIMEOUT_S, as long as api.client()'s timeout.
    with httpx.Client(base_url=api.url, timeout=PUBLISH_TIMEOUT_S + 30) as client:
        return client.post(
            "/complaints",
            json=complaint_body(key, text),
            headers=api.auth(**{"Idempotency-Key": key}),
        )


def record_published(database_url: str, key: str) -> str:
    """A complaint published before Kafka went away, as its intake row; its dispute id."""
    return record_intake(database_url, key, complaint_body(key), published=True)


def test_waiting_publishers_leave_the_other_requests_their_connections(
    api: ApiServer,
) -> None:
    keys = [str(uuid.uuid4()) for _ in range(PUBLISH_POOL + 1)]
    earlier = str(uuid.uuid4())
    earlier_dispute = record_published(api.database_url, earlier)
    with ThreadPoolExecutor(max_workers=PUBLISH_POOL) as pool:
        waiting: list[Future[httpx.Response]] = [
            pool.submit(complaint, api, key) for key in keys[:PUBLISH_POOL]
        ]
        wait_until(
            lambda: publishers_holding_rows(api.database_url, keys) == PUBLISH_POOL,
            timeout_s=PUBLISH_TIMEOUT_S / 2,
            what="both publishers to hold their rows",
        )
        # Every publishing connection now waits for Kafka. The main pool still serves:
        with api.client() as client:
            status = client.get(f"/disputes/d-{uuid.uuid4().hex}", headers=api.auth())
            ready = client.get("/readyz")
            login = client.get("/review/login")
        # ... and a further complaint is told to retry instead of queueing behind them.
        third = complaint(api, keys[-1])
        # A retry of a published complaint, and a reused key, need no publishing connection.
        replay = complaint(api, earlier)
        reused = complaint(api, earlier, text="Something else entirely.")
        assert not any(f.done() for f in waiting), "the publishers stopped waiting too soon"
        answers = [f.result(timeout=PUBLISH_TIMEOUT_S + 10) for f in waiting]

    assert status.status_code == 404, status.text
    # Still ready: the desk, the status API and the webhook work without Kafka.
    assert ready.status_code == 200
    assert ready.json()["checks"]["postgres"] == "ok"
    assert ready.json()["checks"]["kafka"] != "ok"
    assert login.status_code == 200
    assert replay.status_code == 200, replay.text
    assert replay.json() == {
        "dispute_id": earlier_dispute,
        "status_url": f"/disputes/{earlier_dispute}",
        "replayed": True,
    }
    assert reused.status_code == 409, reused.text
    for answer in [third, *answers]:
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        detail = answer.json()["detail"]
        assert "retry with the same Idempotency-Key, never a new one" in detail
        # Kafka may have taken the record though it did not confirm it in time.
        assert "may already be published" in detail
        assert "could not be published" not in detail
    with psycopg.connect(api.database_url) as conn:
        rows = conn.execute(
            "SELECT published FROM intake_requests WHERE idempotency_key = ANY(%s)", (keys,)
        ).fetchall()
    assert rows == [(False,)] * len(keys)  # recorded, for the retries to publish
    metrics = httpx.get(api.metrics_url, timeout=10).text
    assert 'api_complaints_total{outcome="unpublished"} 3.0' in metrics
    assert 'api_publish_failures_total{topic="complaint.received"} 2.0' in metrics


def native_threads() -> int:
    """The process's threads as the kernel counts them: librdkafka's own included."""
    return len(os.listdir("/proc/self/task"))


def test_a_closed_publisher_lets_go_of_the_broker() -> None:
    """Shutdown closes the client: its threads end (and with them its reconnection attempts)
    at once, not whenever the publisher object is collected."""
    codec = Codec(FingerprintFraming(), {t.COMPLAINT_RECEIVED.name: t.COMPLAINT_RECEIVED.schema})
    publisher = KafkaPublisher(unused_loopback_address(), codec, timeout_s=1.0)
    before = native_threads()
    publisher.start()
    running = native_threads()
    publisher.close()
    publisher.close()  # idempotent

    assert running > before, "librdkafka's threads and the delivery-report thread"
    assert native_threads() <= before
    with pytest.raises(RuntimeError, match="closed"):
        publisher.start()


def test_a_refund_failure_recorded_while_kafka_is_away_is_published_later(
    api: ApiServer, stack: Stack, stripe_now: FakeStripeServer
) -> None:
    """Stripe's delivery does not wait for Kafka: the failed round is recorded and answered at
    once, and its payout.failed is published by an instance that reaches Kafka."""
    dispute, refund_id = paid_round(api.database_url)
    stripe_now.fake.hold(refund_id, "failed", failure_reason="expired_or_canceled_card")
    topic = t.PAYOUT_FAILED.name
    start = end_offsets(stack.kafka, topic)
    body, headers = signed(refund_event(refund_id, dispute_id=dispute))
    with api.client() as client:
        answer = client.post("/webhooks/stripe", content=body, headers=headers)
    assert (answer.status_code, answer.json()["outcome"]) == (200, "recorded"), answer.text
    assert answer.elapsed.total_seconds() < PUBLISH_TIMEOUT_S / 2, "waited for Kafka"
    assert read_round(api.database_url, dispute) == ("FAILED", 1, "refund_failed")

    def published() -> bool | None:
        with psycopg.connect(api.database_url) as conn:
            row = conn.execute(
                "SELECT published FROM refund_failures WHERE dispute_id = %s", (dispute,)
            ).fetchone()
        return None if row is None else bool(row[0])

    assert published() is False
    with running_api(stack):  # reaches Kafka: its outbox publishes the row
        mine = dispute_events(
            stack.kafka, event_codec(stack), topic, start, dispute, timeout_s=60.0
        )
        wait_until(lambda: published() is True, timeout_s=30.0, what="the row marked published")
    assert [(v["round"], v["error_code"]) for v in mine] == [(1, "refund_failed")]


def test_an_instance_starting_while_kafka_is_away_serves_at_once(
    api: ApiServer, stack: Stack, stripe_now: FakeStripeServer
) -> None:
    """A decision its outbox must publish is waiting (recorded before a crash), and its
    publish would wait out ``PUBLISH_TIMEOUT_S``: the instance still serves the desk and the
    status API from its start; the row is published in the background."""
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    with psycopg.connect(api.database_url) as conn:  # no one holds it: nothing skips it
        conn.execute(
            "INSERT INTO review_decisions (review_id, dispute_id, item_key, kind, grievance_id,"
            " decision, reviewer, note, decided_at, published)"
            " VALUES (%s, %s, 'grievance:g3', 'GRIEVANCE', 'g3', 'REJECT', 'bob',"
            " 'recorded before a crash', now(), false)",
            (f"r-{uuid.uuid4().hex}", dispute_id),
        )

    started = time.monotonic()
    with running_api(
        stack,
        kafka_bootstrap_servers=unused_loopback_address(),
        publish_timeout_s=LATE_PUBLISH_TIMEOUT_S,  # its stop waits out the publish under way
        outbox_interval_s=600.0,
        **webhook_settings(stripe_now.url),
    ) as late:
        with late.client() as client:
            login = client.get("/review/login")
            status = client.get(f"/disputes/d-{uuid.uuid4().hex}", headers=late.auth())
        serving_after = time.monotonic() - started
    assert login.status_code == 200
    assert status.status_code == 404, status.text
    assert serving_after < LATE_PUBLISH_TIMEOUT_S / 2, "start-up waited for Kafka"
    outboxes_published(stack)  # nothing left for the next instance to wait on
    delete_dispute(api.database_url, dispute_id)
