"""The intake and status API on the real stack: auth, validation, idempotency, the audit record.

complaint.received is shared with other tests, so each test reads only the window of offsets
after its own requests and filters by the dispute ids it got back.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from refund_bench import topics as t
from refund_bench.codec import Codec
from refund_bench.db.orders import upsert_orders
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER
from services.api.models import TEXT_PATTERN
from tests.conftest import Stack
from tests.e2e.conftest_api import (
    READ_TOKEN,
    SEEDED_MODEL_ANSWER,
    SUBMIT_TOKEN,
    ApiServer,
    decoder,
    delete_dispute,
    end_offsets,
    event_codec,
    insert_article_complaint,
    read_window,
    record_intake,
    running_api,
    seed_article_dispute,
    sign_in,
)
from tests.kafka_helpers import wait_for
from tests.pg_helpers import sessions_waiting_on

pytestmark = pytest.mark.stack
TOPIC = t.COMPLAINT_RECEIVED.name


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[ApiServer]:
    with running_api(stack, max_complaint_chars=200) as server:
        yield server


@pytest.fixture(scope="module")
def codec(stack: Stack) -> Codec:
    return event_codec(stack)


def body(marker: str, **fields: Any) -> dict[str, Any]:
    return {
        "order_id": "order-1840",
        "customer_id": "cust-77",
        "text": f"Two of the four were missing. [{marker}]",
        **fields,
    }


def published(
    stack: Stack, codec: Codec, start: dict[int, int]
) -> list[tuple[str, dict[str, Any]]]:
    """Every complaint.received record acknowledged since ``start``."""
    return read_window(stack.kafka, TOPIC, start, decode=decoder(codec, TOPIC))


def test_missing_or_wrong_token_is_401_and_publishes_nothing(
    api: ApiServer, stack: Stack, codec: Codec
) -> None:
    marker = uuid.uuid4().hex
    start = end_offsets(stack.kafka, TOPIC)
    attempts = [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": f"Basic {api.token}"},
        {"Authorization": f"Bearer {api.token}x"},
        {"Authorization": "Bearer"},
        {"Cookie": "rb_review_session=anything"},
    ]
    with api.client() as client:
        for headers in attempts:
            answer = client.post(
                "/complaints",
                json=body(marker),
                headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
            )
            assert answer.status_code == 401, (headers, answer.text)
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert answer.json()["detail"] == "missing or wrong bearer token"
        # 401 comes before the body is even parsed: a malformed body cannot leak a 422.
        assert client.post("/complaints", content=b"{not json").status_code == 401
        assert client.get("/disputes/d-anything").status_code == 401
    assert not [v for _, v in published(stack, codec, start) if marker in v["text"]]


def test_a_token_opens_only_its_scope_and_a_refusal_publishes_nothing(
    api: ApiServer, stack: Stack, codec: Codec
) -> None:
    """A ``complaints:`` token (an upstream service's) submits but cannot read the disputes'
    stories; a ``disputes:`` token (an analyst's) reads but cannot submit: 403 before the body
    is read, and nothing is published."""
    marker = uuid.uuid4().hex
    start = end_offsets(stack.kafka, TOPIC)
    submit = {"Authorization": f"Bearer {SUBMIT_TOKEN}"}
    read = {"Authorization": f"Bearer {READ_TOKEN}"}
    with api.client() as client:
        accepted = client.post(
            "/complaints",
            json=body(marker),
            headers={**submit, "Idempotency-Key": uuid.uuid4().hex},
        )
        assert accepted.status_code == 202, accepted.text
        status_url = accepted.json()["status_url"]
        refused = client.get(status_url, headers=submit)
        assert refused.status_code == 403
        assert refused.json()["detail"] == "this token may not read disputes"
        assert client.get(status_url, headers=read).status_code in (200, 404)
        for content in (json.dumps(body(marker + "-read")).encode(), b"{not json"):
            answer = client.post(
                "/complaints",
                content=content,
                headers={
                    **read,
                    "Idempotency-Key": uuid.uuid4().hex,
                    "Content-Type": "application/json",
                },
            )
            assert answer.status_code == 403, answer.text
            assert answer.json()["detail"] == "this token may not submit complaints"
        story = client.get(status_url, headers=api.auth())  # a bare token opens both scopes
        assert story.status_code in (200, 404)
    texts = [v["text"] for _, v in published(stack, codec, start) if marker in v["text"]]
    assert texts == [body(marker)["text"]]


def test_a_reviewer_session_does_not_open_the_api(api: ApiServer) -> None:
    with api.client() as desk:
        sign_in(desk, "alice")
        cookie = "; ".join(f"{c.name}={c.value}" for c in desk.cookies.jar)
    with api.client() as client:
        answer = client.post(
            "/complaints",
            json=body("session"),
            headers={"Cookie": cookie, "Idempotency-Key": uuid.uuid4().hex},
        )
    assert answer.status_code == 401


@pytest.mark.parametrize(
    ("payload", "status", "says"),
    [
        (body("x", text="x" * 201), 422, "at most 200 are accepted"),
        (body("x", order_id="order-does-not-exist"), 404, "unknown order_id"),
        (body("x", customer_id="cust-12"), 422, "does not match the order's customer"),
        ({"order_id": "order-1840", "customer_id": "cust-77"}, 422, "body.text: Field required"),
        (body("x", text="   "), 422, "body.text: Value error, is blank"),
        (body("x", text="nul \x00 inside"), 422, "body.text: Value error, holds a NUL character"),
        (
            body("x", text="bell \x07 inside"),
            422,
            "body.text: Value error, holds U+0007 at position 5",
        ),
        (
            body("x", text="refund \u202e0001 INR"),
            422,
            "holds U+202E at position 7: a control character or a bidirectional override",
        ),
        (body("x", text="\u200b\u200b \ufeff"), 422, "body.text: Value error, is blank"),
        (body("x", order_id=18), 422, "body.order_id"),
        (body("x", order_id="has space"), 422, "body.order_id"),
        (body("x", extra="field"), 422, "body.extra: Extra inputs are not permitted"),
        ([1, 2, 3], 422, "invalid request"),
    ],
    ids=[
        "oversize",
        "unknown-order",
        "wrong-customer",
        "missing-text",
        "blank-text",
        "nul-in-text",
        "control-character",
        "bidi-override",
        "zero-width-only",
        "order-id-type",
        "order-id-format",
        "extra-field",
        "not-an-object",
    ],
)
def test_validation_answers_say_what_is_wrong(
    api: ApiServer, payload: Any, status: int, says: str
) -> None:
    with api.client() as client:
        answer = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": uuid.uuid4().hex})
        )
    assert answer.status_code == status, answer.text
    problem = answer.json()
    assert says in problem["detail"]
    # A text refused says why, never by dumping the rule's regex, nor by repeating the text.
    for said in (problem["detail"], *(e["msg"] for e in problem["errors"])):
        assert TEXT_PATTERN not in said
        if isinstance(payload, dict) and "text" in payload:
            assert payload["text"] not in said


def test_a_trailing_slash_is_a_404_never_a_redirect(api: ApiServer) -> None:
    """Behind a TLS-terminating Ingress the app sees http: a redirect to the path without its
    slash would send the client, and the complaint it sends again, to plain http."""
    key = str(uuid.uuid4())
    with api.client(follow_redirects=False) as client:
        answers = [
            client.post(
                "/complaints/", json=body(key), headers=api.auth(**{"Idempotency-Key": key})
            ),
            client.get("/healthz/"),
        ]
    for answer in answers:
        assert not answer.is_redirect, answer.headers
        assert "location" not in answer.headers
        assert answer.status_code == 404, answer.text
        assert answer.json() == {"detail": "Not Found", "errors": []}
    with psycopg.connect(api.database_url) as conn:
        recorded = conn.execute(
            "SELECT 1 FROM intake_requests WHERE idempotency_key = %s", (key,)
        ).fetchone()
    assert recorded is None


def test_malformed_json_missing_key_and_huge_body(api: ApiServer) -> None:
    with api.client() as client:
        bad = client.post(
            "/complaints",
            content=b'{"order_id": ',
            headers=api.auth(
                **{"Idempotency-Key": "k-" + uuid.uuid4().hex, "Content-Type": "application/json"}
            ),
        )
        assert bad.status_code == 422
        assert "json" in bad.json()["detail"].lower()
        no_key = client.post("/complaints", json=body("k"), headers=api.auth())
        assert no_key.status_code == 400
        assert no_key.json()["detail"] == "the Idempotency-Key header is required"
        huge = client.post(
            "/complaints",
            content=b"x" * 200_000,
            headers=api.auth(**{"Idempotency-Key": uuid.uuid4().hex}),
        )
        assert huge.status_code == 413
        assert "request body above" in huge.json()["detail"]


@pytest.mark.parametrize(
    "media",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/xml; charset=utf-8",
        "text/json",
        "",
    ],
)
def test_a_json_body_sent_as_another_media_type_is_told_to_say_json(
    api: ApiServer, media: str
) -> None:
    media_header = {"Content-Type": media} if media else {}
    with api.client() as client:
        answer = client.post(
            "/complaints",
            content=json.dumps(body("k")).encode(),
            headers=api.auth(**{"Idempotency-Key": uuid.uuid4().hex, **media_header}),
        )
    assert answer.status_code == 415, answer.text
    assert "Content-Type: application/json" in answer.json()["detail"]
    assert (media.partition(";")[0] or "no Content-Type") in answer.json()["detail"]


def test_a_streamed_body_above_the_limit_is_refused_while_it_is_read(api: ApiServer) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        for _ in range(200):  # 3.2 MB, far above the limit
            yield b"x" * 16_384

    with api.client() as client:
        streamed = client.post(
            "/complaints",
            content=chunks(),
            headers=api.auth(
                **{"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}
            ),
        )
    assert streamed.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in streamed.request.headers
    assert streamed.status_code == 413, streamed.text
    assert "request body above" in streamed.json()["detail"]


def test_a_complaint_of_escaped_emoji_within_the_character_limit_is_not_413(
    stack: Stack,
) -> None:
    """The body limit leaves room for every character JSON-escaped as a surrogate pair (12
    bytes): a complaint within MAX_COMPLAINT_CHARS is accepted, whichever encoder sent it."""
    chars = 20_000  # above 8192, where 4 bytes a character plus 64 KiB no longer held it
    limit = 12 * chars + 65536  # the documented limit: 12 bytes a character, plus 64 KiB
    key = str(uuid.uuid4())
    text = "\N{FACE SAVOURING DELICIOUS FOOD}" * chars
    content = json.dumps(body(key, text=text), ensure_ascii=True).encode()
    assert content.count(b"\\ud83d\\ude0b") == chars  # every emoji as 12 escaped bytes
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    with running_api(stack, max_complaint_chars=chars) as api, api.client() as client:
        accepted = client.post("/complaints", content=content, headers=api.auth(**headers))
        assert accepted.status_code == 202, accepted.text[:300]
        one_more = json.dumps(body(key, text=text + "!"), ensure_ascii=True).encode()
        too_long = client.post(
            "/complaints",
            content=one_more,
            headers=api.auth(**{**headers, "Idempotency-Key": key + "x"}),
        )
        assert too_long.status_code == 422, too_long.text[:300]
        assert f"at most {chars} are accepted" in too_long.json()["detail"]
        # Padded with JSON whitespace to the limit exactly: still read (a retry: 200).
        at_limit = content + b" " * (limit - len(content))
        retried = client.post("/complaints", content=at_limit, headers=api.auth(**headers))
        assert retried.status_code == 200, retried.text[:300]
        over = client.post("/complaints", content=at_limit + b" ", headers=api.auth(**headers))
        assert over.status_code == 413, over.text[:300]
        assert f"request body above {limit} bytes" in over.json()["detail"]
    with psycopg.connect(stack.database_url) as conn:
        stored = conn.execute(
            "SELECT complaint_text FROM intake_requests WHERE idempotency_key = %s", (key,)
        ).fetchone()
    assert stored == (text,)


def _complain(api: ApiServer, key: str) -> httpx.Response:
    """POST /complaints with ``key``, on a client of its own (10 s: far below the pool's 30)."""
    with httpx.Client(base_url=api.url, timeout=10.0) as client:
        return client.post(
            "/complaints", json=body(key), headers=api.auth(**{"Idempotency-Key": key})
        )


def test_with_every_database_connection_taken_a_complaint_gets_503_at_once(
    stack: Stack,
) -> None:
    """The main pool's one connection is held by a complaint whose claim waits for a row this
    test inserted and has not committed: the next complaint is answered 503 with Retry-After
    after DB_POOL_WAIT_S, not a 500 after the pool's 30 s, and its retry is taken later."""
    held, other = str(uuid.uuid4()), str(uuid.uuid4())
    with (
        running_api(stack, db_pool_max=1, db_pool_wait_s=0.5) as api,
        psycopg.connect(stack.database_url) as blocker,
        ThreadPoolExecutor(max_workers=1) as pool,
    ):
        blocker.execute(  # an uncommitted claim of the key: the API's claim waits for it
            "INSERT INTO intake_requests (idempotency_key, body_sha256, dispute_id, order_id,"
            " customer_id, complaint_text, received_at) VALUES (%s, 'x', %s, 'order-1840',"
            " 'cust-77', 'held', now())",
            (held, f"d-{uuid.uuid4().hex}"),
        )
        first = pool.submit(_complain, api, held)
        try:
            wait_for(
                lambda: (
                    first.done()
                    or sessions_waiting_on(stack.database_url, blocker.info.backend_pid) == 1
                ),
                10.0,
                "the claim to wait for the row",
            )
            assert not first.done(), first.result().text
            busy = _complain(api, other)
            assert not first.done()  # it held the only connection all along
        finally:
            blocker.rollback()
        assert first.result(timeout=30).status_code == 202
        retried = _complain(api, other)
        metrics = httpx.get(api.metrics_url, timeout=10).text
    assert busy.status_code == 503, busy.text
    assert busy.headers["Retry-After"] == "5"
    assert "retry with the same Idempotency-Key" in busy.json()["detail"]
    assert retried.status_code == 202, retried.text
    assert 'api_complaints_total{outcome="busy"} 1.0' in metrics


def test_same_key_twice_is_one_dispute_and_one_event(
    api: ApiServer, stack: Stack, codec: Codec
) -> None:
    start = end_offsets(stack.kafka, TOPIC)
    key = str(uuid.uuid4())
    payload = body(key)
    with api.client() as client:
        first = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": key})
        )
        second = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": key})
        )
    assert first.status_code == 202, first.text
    assert second.status_code == 200, second.text
    dispute_id = first.json()["dispute_id"]
    assert dispute_id.startswith("d-")
    assert len(dispute_id) == 34
    assert first.json() == {
        "dispute_id": dispute_id,
        "status_url": f"/disputes/{dispute_id}",
        "replayed": False,
    }
    assert second.json() == {**first.json(), "replayed": True}
    assert first.headers["Location"] == f"/disputes/{dispute_id}"
    events = [(k, v) for k, v in published(stack, codec, start) if v["dispute_id"] == dispute_id]
    assert len(events) == 1
    record_key, value = events[0]
    assert record_key == dispute_id
    assert value["order_id"] == "order-1840"
    assert value["customer_id"] == "cust-77"
    assert value["text"] == payload["text"]
    assert value["channel"] == "api"


def test_same_key_with_another_body_is_409_and_publishes_nothing(
    api: ApiServer, stack: Stack, codec: Codec
) -> None:
    key = str(uuid.uuid4())
    with api.client() as client:
        first = client.post(
            "/complaints", json=body(key), headers=api.auth(**{"Idempotency-Key": key})
        )
        assert first.status_code == 202
        start = end_offsets(stack.kafka, TOPIC)
        other = client.post(
            "/complaints",
            json=body(key, text="Something else entirely."),
            headers=api.auth(**{"Idempotency-Key": key}),
        )
        unknown_order = client.post(
            "/complaints",
            json={**body(key), "order_id": "order-nobody-placed"},
            headers=api.auth(**{"Idempotency-Key": key}),
        )
    assert other.status_code == 409
    assert "already used with a different body" in other.json()["detail"]
    # The key decides before the body is checked: a reused key is a conflict, whatever it names.
    assert unknown_order.status_code == 409, unknown_order.text
    assert not [v for _, v in published(stack, codec, start) if v["text"].startswith("Something")]


def test_a_retry_publishes_what_a_crash_left_unpublished(
    api: ApiServer, stack: Stack, codec: Codec
) -> None:
    """The crash window: the key's row committed, the process died before Kafka acknowledged.
    A retry with the same key and body publishes that same dispute (not a new one)."""
    key = str(uuid.uuid4())
    payload = body(key)
    dispute_id = record_intake(api.database_url, key, payload, published=False)
    start = end_offsets(stack.kafka, TOPIC)
    with api.client() as client:
        retry = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": key})
        )
        again = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": key})
        )
    assert retry.status_code == 202
    assert retry.json()["dispute_id"] == dispute_id
    assert retry.json()["replayed"] is True
    assert again.status_code == 200
    assert again.json()["dispute_id"] == dispute_id
    events = [v for _, v in published(stack, codec, start) if v["dispute_id"] == dispute_id]
    assert len(events) == 1
    with psycopg.connect(api.database_url) as conn:
        row = conn.execute(
            "SELECT published FROM intake_requests WHERE idempotency_key = %s", (key,)
        ).fetchone()
    assert row == (True,)


@pytest.mark.parametrize("change", ["customer-changed", "order-deleted"])
def test_a_retry_gets_its_dispute_after_the_order_changed(
    api: ApiServer, stack: Stack, codec: Codec, change: str
) -> None:
    """A retry of a recorded request is answered from its record: the order is looked up
    for new requests only."""
    order_id = f"order-retry-{uuid.uuid4().hex[:12]}"
    with psycopg.connect(api.database_url) as conn:
        upsert_orders(conn, [ARTICLE_ORDER.model_copy(update={"order_id": order_id})])
    key = str(uuid.uuid4())
    payload = body(key, order_id=order_id)
    with api.client() as client:
        first = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": key})
        )
        assert first.status_code == 202, first.text
        with psycopg.connect(api.database_url) as conn:
            if change == "customer-changed":
                conn.execute(
                    "UPDATE orders SET customer_id = 'cust-someone-else' WHERE order_id = %s",
                    (order_id,),
                )
            else:
                conn.execute("DELETE FROM order_line_items WHERE order_id = %s", (order_id,))
                conn.execute("DELETE FROM orders WHERE order_id = %s", (order_id,))
        start = end_offsets(stack.kafka, TOPIC)
        retry = client.post(
            "/complaints", json=payload, headers=api.auth(**{"Idempotency-Key": key})
        )
        new_key = client.post(
            "/complaints",
            json=payload,
            headers=api.auth(**{"Idempotency-Key": str(uuid.uuid4())}),
        )
    assert retry.status_code == 200, retry.text
    assert retry.json() == {**first.json(), "replayed": True}
    # A new request is checked against the order as it is now.
    assert new_key.status_code == (422 if change == "customer-changed" else 404), new_key.text
    assert not [v for _, v in published(stack, codec, start) if v["order_id"] == order_id]


def test_status_of_unknown_and_just_accepted_disputes(api: ApiServer) -> None:
    key = str(uuid.uuid4())
    with api.client() as client:
        missing = client.get("/disputes/d-no-such-dispute", headers=api.auth())
        assert missing.status_code == 404
        assert missing.json() == {"detail": "no dispute 'd-no-such-dispute'", "errors": []}
        accepted = client.post(
            "/complaints", json=body(key), headers=api.auth(**{"Idempotency-Key": key})
        )
        story = client.get(accepted.json()["status_url"], headers=api.auth()).json()
    assert story["dispute_id"] == accepted.json()["dispute_id"]
    assert story["complaint"]["accepted_via_api"] is True
    assert story["complaint"]["published"] is True
    assert story["complaint"]["text"] == body(key)["text"]


def test_a_complaint_the_extractor_has_is_published_though_kafka_never_confirmed_it(
    api: ApiServer,
) -> None:
    """The complaint was answered 503 (no acknowledgement in time), yet its record reached the
    broker and the extractor made the dispute of it: its story says published."""
    key = str(uuid.uuid4())
    dispute_id = record_intake(api.database_url, key, body(key), published=False)
    try:
        with api.client() as client:
            before = client.get(f"/disputes/{dispute_id}", headers=api.auth())
            with psycopg.connect(api.database_url) as conn:
                insert_article_complaint(conn, dispute_id, datetime.now(UTC))
            after = client.get(f"/disputes/{dispute_id}", headers=api.auth())
    finally:
        delete_dispute(api.database_url, dispute_id)
    assert before.status_code == after.status_code == 200, (before.text, after.text)
    assert before.json()["complaint"]["published"] is False
    assert after.json()["complaint"]["published"] is True
    assert after.json()["complaint"]["accepted_via_api"] is True


@pytest.mark.parametrize(
    "stored", [None, "api"], ids=["stored before disputes kept it", "the contract's default"]
)
def test_a_complaint_the_api_never_took_that_names_no_channel_came_from_upstream(
    api: ApiServer, stored: str | None
) -> None:
    """No API record of the complaint, and no channel its event named: none stored with it (an
    earlier release), or the contract's default, which only the API's own complaints have."""
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id)
    try:
        with psycopg.connect(api.database_url) as conn:
            conn.execute(
                "UPDATE disputes SET channel = %s WHERE dispute_id = %s", (stored, dispute_id)
            )
        with api.client() as client:
            answer = client.get(f"/disputes/{dispute_id}", headers=api.auth())
        assert answer.status_code == 200, answer.text
    finally:
        delete_dispute(api.database_url, dispute_id)
    assert answer.json()["complaint"]["channel"] == "upstream"


def test_the_whole_story_of_a_dispute(api: ApiServer) -> None:
    dispute_id = f"d-test-{uuid.uuid4().hex}"
    seed_article_dispute(api.database_url, dispute_id, rounds=2)
    try:
        with api.client() as client:
            answer = client.get(f"/disputes/{dispute_id}", headers=api.auth())
        assert answer.status_code == 200, answer.text
        story = answer.json()
    finally:
        delete_dispute(api.database_url, dispute_id)
    assert story["summary"] == {
        "grievances": 4,
        "rounds": 2,
        "open_review_items": 1,
        "paid_minor": 74900,
        "currency": "INR",
    }
    assert story["complaint"]["text"] == ARTICLE_COMPLAINT
    assert story["complaint"]["accepted_via_api"] is False
    assert story["complaint"]["channel"] == "app", "as its complaint.received said"
    evidence = story["evidence"]
    assert evidence["snapshot"]["order"]["order_id"] == "order-1840"
    assert hashlib.sha256(evidence["snapshot_json"].encode()).hexdigest() == evidence["sha256"]
    raita = next(g for g in story["grievances"] if g["category"] == "PACKAGING")
    assert ARTICLE_COMPLAINT[raita["span_start"] : raita["span_end"]].startswith("The raita")
    assert len(story["rulings"]) == 12
    assert {r["judge_seat"] for r in story["rulings"]} == {0, 1, 2}
    assert all(r["reasoning"] and r["raw_response"] and r["cast_at"] for r in story["rulings"])
    marked = [
        (r["grievance_id"], r["judge_seat"], r["ruling"])
        for r in story["rulings"]
        if r["cites_missing_evidence"]
    ]
    assert marked == [(raita["grievance_id"], 0, "UPHELD")], "the raita's upheld seat only"
    verdict = next(v for v in story["verdicts"] if v["grievance_id"] == raita["grievance_id"])
    assert (verdict["outcome"], verdict["split"], verdict["votes_upheld"]) == ("ESCALATE", "2-1", 1)
    first, second = story["priced_rounds"]
    assert (first["total_minor"], first["payable_minor"], first["decision"]) == (
        68900,
        68900,
        "AUTO_APPROVED",
    )
    assert (second["total_minor"], second["already_paid_minor"], second["payable_minor"]) == (
        74900,
        68900,
        6000,
    )
    assert [line["status"] for line in first["lines"]] == ["PAY", "PAY", "HELD", "ZERO"]
    assert [(r["round"], r["source"], r["model_answer"]) for r in story["replies"]] == [
        (1, "TEMPLATE", SEEDED_MODEL_ANSWER),
        (2, "MODEL", None),
    ]
    assert [(r["served_model"], r["system_fingerprint"]) for r in story["replies"]] == [
        ("stand-in-settler-2026-11-01", "fp_settler"),
        (None, None),
    ], "what served each reply's model answer, where it is known"
    assert [(p["round"], p["amount_minor"], p["status"]) for p in story["payouts"]["ledger"]] == [
        (1, 68900, "SUCCEEDED"),
        (2, 6000, "SUCCEEDED"),
    ]
    assert [e["outcome"] for e in story["payouts"]["events"]] == ["COMPLETED", "COMPLETED"]
    assert [(e["round"], e["revision"], e["outcome"]) for e in story["payouts"]["history"]] == [
        (1, 0, "COMPLETED"),
        (2, 0, "COMPLETED"),
    ]
    assert story["review_items"][0]["item_key"] == "grievance:g3"
    assert story["review_decisions"] == []


def test_health_readiness_metrics_and_openapi(api: ApiServer) -> None:
    with api.client() as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "checks": {"postgres": "ok", "kafka": "ok"}}
        client.get("/disputes/d-metrics-probe-0001", headers=api.auth())
        on_api_port = client.get("/metrics")
        document = client.get("/openapi.json").json()
    metrics = httpx.get(api.metrics_url, timeout=10)
    # The counters are on their own port, which the Ingress does not publish.
    assert on_api_port.status_code == 404
    assert metrics.status_code == 200
    assert 'route="/disputes/{dispute_id}"' in metrics.text
    assert "d-metrics-probe-0001" not in metrics.text
    assert "cust-77" not in metrics.text
    text = document["components"]["schemas"]["ComplaintRequest"]["properties"]["text"]
    assert text["maxLength"] == 200
    assert text["pattern"] == TEXT_PATTERN  # shown, though a reason, not it, explains a 422
    assert set(document["paths"]) == {
        "/healthz",
        "/readyz",
        "/complaints",
        "/disputes/{dispute_id}",
        "/webhooks/stripe",
    }
    assert document["paths"]["/complaints"]["post"]["security"] == [{"bearer": []}]
    # The database busy or out of reach: 503 with Retry-After, as documented.
    story_answers = document["paths"]["/disputes/{dispute_id}"]["get"]["responses"]
    assert story_answers["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"
    }
    # Stripe signs its events; a bearer token is not what authenticates them.
    assert "security" not in document["paths"]["/webhooks/stripe"]["post"]


def test_with_api_docs_off_the_document_is_not_served_but_printed(stack: Stack) -> None:
    """Production turns ``API_DOCS`` off: neither the document nor its UI answers without
    sign-in, and ``python -m services.api openapi`` prints the same document instead."""
    with running_api(stack, api_docs=False) as server:
        assert httpx.get(f"{server.url}/openapi.json", timeout=10).status_code == 404
        assert httpx.get(f"{server.url}/docs", timeout=10).status_code == 404
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    printed = subprocess.run(
        [sys.executable, "-m", "services.api", "openapi"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    document = json.loads(printed.stdout)
    assert "/complaints" in document["paths"]
    assert "/webhooks/stripe" in document["paths"]
