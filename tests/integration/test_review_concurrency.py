"""Two reviewers deciding the same item at the same moment: one decision, one review.decided.

And the outbox: a decision recorded but never published (a crash, Kafka away) is published
once when the API starts again.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from refund_bench import topics as t
from refund_bench.codec import Codec
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    ApiServer,
    delete_dispute,
    dispute_events,
    end_offsets,
    event_codec,
    running_api,
    seed_article_dispute,
    sign_in,
)

pytestmark = pytest.mark.stack
TOPIC = t.REVIEW_DECIDED.name
ROUNDS = 5


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with running_api(stack) as server:
        yield server


@pytest.fixture(scope="module")
def codec(stack: Stack) -> Codec:
    return event_codec(stack)


def decided_events(
    stack: Stack, codec: Codec, start: dict[int, int], dispute_id: str, settle_s: float = 2.0
) -> list[dict[str, Any]]:
    """review.decided events of ``dispute_id`` after ``start`` (see :func:`dispute_events`)."""
    return dispute_events(stack.kafka, codec, TOPIC, start, dispute_id, settle_s=settle_s)


def rows(database_url: str, dispute_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT review_id, item_key, decision, reviewer, note, published"
            " FROM review_decisions WHERE dispute_id = %s",
            (dispute_id,),
        ).fetchall()


@pytest.mark.parametrize("attempt", range(ROUNDS))
def test_two_reviewers_at_once_make_one_decision_and_one_event(
    api: ApiServer, stack: Stack, codec: Codec, attempt: int
) -> None:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    start = end_offsets(stack.kafka, TOPIC)
    clients = {name: api.client() for name in ("alice", "bob")}
    try:
        tokens = {name: sign_in(client, name) for name, client in clients.items()}
        barrier = threading.Barrier(2)
        answers: dict[str, Any] = {}

        def decide(name: str) -> None:
            form = {
                "item_key": "grievance:g3",
                "decision": "UPHOLD",
                "note": f"{name}: the bag leak is plausible",
                "csrf_token": tokens[name],
            }
            barrier.wait()
            answers[name] = clients[name].post(
                f"/review/disputes/{dispute_id}/decisions", data=form
            )

        threads = [threading.Thread(target=decide, args=(n,)) for n in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        statuses = sorted(a.status_code for a in answers.values())
        assert statuses == [303, 409], {n: a.status_code for n, a in answers.items()}
        winner = next(n for n, a in answers.items() if a.status_code == 303)
        loser = next(n for n, a in answers.items() if a.status_code == 409)
        assert f"Already decided by {winner} at" in answers[loser].text

        stored = rows(api.database_url, dispute_id)
        assert len(stored) == 1
        review_id, item_key, decision, reviewer, note, _published = stored[0]
        assert (item_key, decision, reviewer) == ("grievance:g3", "UPHOLD", winner)

        events = decided_events(stack, codec, start, dispute_id)
        assert len(events) == 1, events
        event = events[0]
        assert event["review_id"] == review_id
        assert (event["kind"], event["grievance_id"], event["decision"]) == (
            "GRIEVANCE",
            "g3",
            "UPHOLD",
        )
        assert (event["reviewer"], event["note"]) == (winner, note)
        assert rows(api.database_url, dispute_id)[0][5] is True
    finally:
        for client in clients.values():
            client.close()
        delete_dispute(api.database_url, dispute_id)


def test_an_unpublished_decision_is_published_once_by_two_instances_draining(
    stack: Stack, codec: Codec, api: ApiServer
) -> None:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    review_id = f"r-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    # Read from before the row exists: the running instance's periodic drain may publish it
    # before the second instance has started.
    start = end_offsets(stack.kafka, TOPIC)
    with psycopg.connect(api.database_url) as conn:
        conn.execute(
            "INSERT INTO review_decisions (review_id, dispute_id, item_key, kind, grievance_id,"
            " decision, reviewer, note, decided_at, published)"
            " VALUES (%s, %s, 'grievance:g3', 'GRIEVANCE', 'g3', 'REJECT', 'bob',"
            " 'recorded before a crash', %s, false)",
            (review_id, dispute_id, datetime.now(UTC)),
        )
    try:
        # A second instance starts (as after a restart) while the first keeps running: the
        # row lock and SKIP LOCKED let only one of them publish the decision.
        with running_api(stack):
            events = decided_events(stack, codec, start, dispute_id)
        assert [e["review_id"] for e in events] == [review_id]
        assert events[0]["decision"] == "REJECT"
        assert events[0]["reviewer"] == "bob"
        assert rows(api.database_url, dispute_id)[0][5] is True
    finally:
        delete_dispute(api.database_url, dispute_id)
