"""Two reviewers deciding the same item at the same moment: one decision, one review.decided.

And the outbox: a decision recorded but never published (a crash, Kafka away) is published
once when the API starts again.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.codec import Codec
from refund_bench.runtime import Context, Message
from services.api.store import AlreadyDecided, DecisionRecord, Store
from services.recorder.handler import Recorder
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    ApiServer,
    delete_dispute,
    dispute_events,
    end_offsets,
    event_codec,
    insert_unpublished_decision,
    running_api,
    seed_article_dispute,
    sign_in,
)
from tests.kafka_helpers import wait_for
from tests.pg_helpers import is_waiting, sessions_waiting_on

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


def _decision(dispute_id: str, reviewer: str) -> DecisionRecord:
    return DecisionRecord(
        review_id=f"r-{uuid.uuid4().hex}",
        dispute_id=dispute_id,
        item_key="grievance:g3",
        kind="",
        grievance_id=None,
        decision="UPHOLD",
        reviewer=reviewer,
        note=f"{reviewer}: the bag leak is plausible",
        decided_at=datetime.now(UTC),
    )


async def _record(database_url: str, record: DecisionRecord, check: Any) -> DecisionRecord:
    """``record`` recorded by a store on a connection of its own, as one API request does."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        return await Store(pool, pool, publish_wait_s=1.0).record_decision(record, check)
    finally:
        await pool.close()


def test_of_two_decisions_that_both_read_the_item_open_the_second_to_insert_is_refused(
    api: ApiServer,
) -> None:
    """Made to meet, not hoped to: alice's decision has read the item OPEN (its row held FOR
    SHARE, which does not hold back another reader) when bob's reads it OPEN too, records and
    commits. Alice's insert then meets the UNIQUE (dispute, item) constraint: she is told bob
    decided, and one decision is stored."""
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    alice, bob = _decision(dispute_id, "alice"), _decision(dispute_id, "bob")
    recorded: dict[str, DecisionRecord] = {}

    def bob_decides_meanwhile(kind: str) -> None:
        """Runs in alice's transaction, after her read of the item."""
        assert kind == "GRIEVANCE"
        thread = threading.Thread(
            target=lambda: recorded.update(
                bob=asyncio.run(_record(api.database_url, bob, lambda _kind: None))
            )
        )
        thread.start()
        thread.join(30)
        assert "bob" in recorded, "bob's decision did not commit while alice's was open"

    try:
        with pytest.raises(AlreadyDecided) as refused:
            asyncio.run(_record(api.database_url, alice, bob_decides_meanwhile))
        assert refused.value.existing is not None
        assert (refused.value.existing.review_id, refused.value.existing.reviewer) == (
            bob.review_id,
            "bob",
        )
        assert [(r[0], r[3]) for r in rows(api.database_url, dispute_id)] == [
            (bob.review_id, "bob")
        ]
    finally:
        delete_dispute(api.database_url, dispute_id)


def test_an_unpublished_decision_is_published_once_by_two_instances_draining(
    stack: Stack, codec: Codec, api: ApiServer
) -> None:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    # Read from before the row exists: the running instance's periodic drain may publish it
    # before the second instance has started.
    start = end_offsets(stack.kafka, TOPIC)
    review_id = insert_unpublished_decision(api.database_url, dispute_id)
    try:
        # A second instance starts (as after a restart) while the first keeps running: the
        # row lock and SKIP LOCKED let only one of them publish the decision. Which one, and
        # whether their drains meet at all, is up to timing here; test_outbox_concurrency
        # makes them meet.
        with running_api(stack):
            events = decided_events(stack, codec, start, dispute_id)
        assert [e["review_id"] for e in events] == [review_id]
        assert events[0]["decision"] == "REJECT"
        assert events[0]["reviewer"] == "bob"
        assert rows(api.database_url, dispute_id)[0][5] is True
    finally:
        delete_dispute(api.database_url, dispute_id)


# -- a decision and the recorder closing its item at the same moment -------------------------


def _round_two_recorder(
    database_url: str, dispute_id: str
) -> tuple[psycopg.Connection[Any], Recorder]:
    """A recorder, on a connection of its own, holding round 2 of ``dispute_id`` held by the
    cap: its write supersedes ``dispute:round1`` (what the recorder does on a new round)."""
    conn = psycopg.connect(database_url)
    recorder = Recorder(conn)
    priced = ev.RefundPriced(
        dispute_id=dispute_id,
        order_id="order-1840",
        round=2,
        pricing_version="v1",
        currency="INR",
        order_total_minor=134000,
        lines=[],
        total_minor=120000,
        payable_minor=0,
        cap_minor=100000,
        decision="HELD_FOR_REVIEW",
        reason="total 120000 exceeds the auto-approve cap 100000",
        snapshot_sha256="0" * 64,
        priced_at=datetime.now(UTC),
    )
    message = Message(t.REFUND_PRICED.name, 0, 0, dispute_id, priced.to_avro(), {}, 0)
    recorder.handle(message, Context(None))
    return conn, recorder


def _hold_round_one(database_url: str, dispute_id: str) -> None:
    """Round 1 of the seeded dispute held by the cap: ``dispute:round1`` OPEN for review."""
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO review_items (dispute_id, item_key, kind, reason)"
            " VALUES (%s, 'dispute:round1', 'DISPUTE', 'total exceeds the cap')",
            (dispute_id,),
        )


def _item(database_url: str, dispute_id: str, item_key: str) -> tuple[str, str]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT status, reason FROM review_items WHERE dispute_id = %s AND item_key = %s",
            (dispute_id, item_key),
        ).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])


def test_a_decision_waits_for_the_recorder_closing_its_item_and_is_refused(
    api: ApiServer,
) -> None:
    """The recorder has superseded dispute:round1 but not committed yet when a reviewer
    approves it: the decision waits for that commit, then answers 409 and records nothing
    (before: it read the item as still OPEN and recorded, and published, the approval)."""
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    _hold_round_one(api.database_url, dispute_id)
    conn, recorder = _round_two_recorder(api.database_url, dispute_id)
    try:
        with api.client() as client, ThreadPoolExecutor(max_workers=1) as pool:
            token = sign_in(client, "alice")
            conn.execute("SELECT 1")  # a transaction: the recorder's own becomes a savepoint
            recorder.flush()  # written, not committed: round 1's item is held by it
            answer = pool.submit(
                client.post,
                f"/review/disputes/{dispute_id}/decisions",
                data={
                    "item_key": "dispute:round1",
                    "decision": "APPROVE",
                    "note": "the total is right",
                    "csrf_token": token,
                },
            )
            wait_for(
                lambda: (
                    answer.done()
                    or sessions_waiting_on(api.database_url, conn.info.backend_pid) > 0
                ),
                10.0,
                "the decision to wait for the recorder",
            )
            conn.commit()
            refused = answer.result(timeout=30)
        assert refused.status_code == 409, refused.status_code
        assert "This item is already decided; your decision was not recorded." in refused.text
        assert rows(api.database_url, dispute_id) == []
        status, reason = _item(api.database_url, dispute_id, "dispute:round1")
        assert (status, reason.endswith("(superseded by round 2)")) == ("DECIDED", True)
    finally:
        conn.close()
        delete_dispute(api.database_url, dispute_id)


def test_the_recorder_closing_an_item_waits_for_a_decision_being_recorded(
    api: ApiServer,
) -> None:
    """A decision has read its item OPEN and not committed yet when the recorder supersedes
    the item: the recorder's write waits for the decision's commit (before: it closed the item
    underneath it, and the decision was recorded for an item already closed)."""
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    _hold_round_one(api.database_url, dispute_id)
    conn, recorder = _round_two_recorder(api.database_url, dispute_id)
    recorder_pid = conn.info.backend_pid
    writing = threading.Thread(target=recorder.flush)
    seen: dict[str, bool] = {}

    async def decide() -> DecisionRecord:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            api.database_url, min_size=1, max_size=1, open=False, kwargs={"autocommit": True}
        )
        await pool.open(wait=True)
        try:
            async with pool.connection() as only:  # the pool's one connection: the decision's
                decider_pid = only.info.backend_pid

            def check(kind: str) -> None:
                """Runs in the decision's transaction, after its read of the item: the recorder
                writes now, and either finishes or waits for a lock."""
                assert kind == "DISPUTE"
                writing.start()
                wait_for(
                    lambda: not writing.is_alive() or is_waiting(api.database_url, recorder_pid),
                    10.0,
                    "the recorder to write or wait",
                )
                seen["recorder done first"] = not writing.is_alive()
                seen["recorder waits for the decision"] = (
                    sessions_waiting_on(api.database_url, decider_pid) > 0
                )

            record = DecisionRecord(
                review_id=f"r-{uuid.uuid4().hex}",
                dispute_id=dispute_id,
                item_key="dispute:round1",
                kind="",
                grievance_id=None,
                decision="APPROVE",
                reviewer="alice",
                note="the total is right",
                decided_at=datetime.now(UTC),
            )
            return await Store(pool, pool, publish_wait_s=1.0).record_decision(record, check)
        finally:
            await pool.close()

    try:
        stored = asyncio.run(decide())
        writing.join(30)
        assert seen == {"recorder done first": False, "recorder waits for the decision": True}
        assert [r[0] for r in rows(api.database_url, dispute_id)] == [stored.review_id]
        status, reason = _item(api.database_url, dispute_id, "dispute:round1")
        assert (status, reason.endswith("(superseded by round 2)")) == ("DECIDED", True)
    finally:
        conn.close()
        delete_dispute(api.database_url, dispute_id)
