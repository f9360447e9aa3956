"""Running the API on the real stack in tests, signing in to the desk, seeding disputes, and
reading exactly the records a test produced from a shared topic.

Plain functions, not fixtures, so each test module starts a server with the settings it needs
(``with running_api(stack, max_complaint_chars=200) as api: ...``).
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from psycopg import sql
from psycopg.types.json import Jsonb
from pydantic import SecretStr

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.codec import Codec, framing_from_registry_url
from refund_bench.db.migrate import migrate
from refund_bench.db.orders import order_exists, upsert_orders
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER, SAMPLE_ORDERS
from services.api.app import build_deps, create_app
from services.api.intake import body_sha256
from services.api.models import ComplaintRequest
from services.api.passwords import MIN_ITERATIONS, hash_password
from services.api.server import BackgroundServer
from services.api.settings import ApiSettings
from services.extractor.evidence import freeze
from services.settler.handler import _only_held, template_for
from services.settler.phrases import describe
from tests.conftest import Stack, unavailable

API_TOKEN = "test-token-" + "a" * 24
OTHER_TOKEN = "test-token-" + "b" * 24
SUBMIT_TOKEN = "test-token-" + "c" * 24
"""Opens ``complaints`` only (an upstream service's token)."""
READ_TOKEN = "test-token-" + "d" * 24
"""Opens ``disputes`` only (an analyst's or a support tool's token)."""
PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-2", "carol": "carol-password-3"}
_HASHES = {name: hash_password(pw, iterations=MIN_ITERATIONS) for name, pw in PASSWORDS.items()}
"""Low iteration counts keep sign-in fast in tests; production hashes use the default."""


@dataclass(frozen=True)
class ApiServer:
    url: str
    settings: ApiSettings
    token: str
    database_url: str
    metrics_url: str
    """Where the app serves ``/metrics``: its own port, not the API's."""

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, **kwargs)

    def auth(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}


def prepare_database(database_url: str) -> None:
    """Apply the schema (idempotent) and seed the sample orders that are missing."""
    migrate(database_url)
    with psycopg.connect(database_url) as conn:
        missing = [o for o in SAMPLE_ORDERS if not order_exists(conn, o.order_id)]
        if missing:
            upsert_orders(conn, missing)


def api_settings(stack: Stack, **overrides: Any) -> ApiSettings:
    values: dict[str, Any] = {
        "kafka_bootstrap_servers": stack.kafka,
        "schema_registry_url": stack.registry_url,
        "database_url": SecretStr(stack.database_url),
        "api_tokens": SecretStr(
            f"{API_TOKEN},{OTHER_TOKEN},complaints:{SUBMIT_TOKEN},disputes:{READ_TOKEN}"
        ),
        "reviewers": SecretStr(",".join(f"{n}:{h}" for n, h in _HASHES.items())),
        "session_secret": SecretStr("s" * 48),
        "outbox_interval_s": 1.0,
        "metrics_host": "127.0.0.1",
        "metrics_port": 0,
        **overrides,
    }
    return ApiSettings(**values)


@contextmanager
def running_api(stack: Stack, **overrides: Any) -> Iterator[ApiServer]:
    """The real app (real PostgreSQL pool, real Kafka producer) served by uvicorn in a thread."""
    if not stack.database_url:
        unavailable("PostgreSQL (DATABASE_URL)")
    prepare_database(stack.database_url)
    settings = api_settings(stack, **overrides)
    app = create_app(settings, build_deps(settings))
    server = BackgroundServer(app).start()
    metrics_url = f"http://127.0.0.1:{app.state.metrics_port}/metrics"
    try:
        yield ApiServer(server.url, settings, API_TOKEN, stack.database_url, metrics_url)
    finally:
        server.stop()


# -- the desk -------------------------------------------------------------------------------

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def sign_in(client: httpx.Client, user: str, password: str | None = None) -> str:
    """Sign ``client`` in to the desk as ``user``; returns the session's CSRF token."""
    page = client.get("/review/login")
    assert page.status_code == 200
    answer = client.post(
        "/review/login",
        data={
            "username": user,
            "password": PASSWORDS[user] if password is None else password,
            "csrf_token": csrf_of(page.text),
            "next": "/review",
        },
    )
    assert answer.status_code == 303, answer.text
    queue = client.get("/review")
    assert queue.status_code == 200
    return csrf_of(queue.text)


# -- Kafka: the records a test produced on a shared topic -------------------------------------


def record_intake(database_url: str, key: str, payload: dict[str, str], *, published: bool) -> str:
    """An intake row for ``payload`` under ``key``, as the API records it before publishing
    (``published``: and after Kafka acknowledged it); its dispute id."""
    dispute_id = f"d-{uuid.uuid4().hex}"
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO intake_requests (idempotency_key, body_sha256, dispute_id, order_id,"
            " customer_id, complaint_text, received_at, published)"
            " VALUES (%s, %s, %s, %s, %s, %s, now(), %s)",
            (
                key,
                body_sha256(ComplaintRequest(**payload)),
                dispute_id,
                payload["order_id"],
                payload["customer_id"],
                payload["text"],
                published,
            ),
        )
    return dispute_id


def end_offsets(kafka: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark now."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"probe-{uuid.uuid4().hex}"})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        partitions = meta.topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def read_window(
    kafka: str,
    topic: str,
    start: dict[int, int],
    *,
    decode: Callable[[bytes | None], dict[str, Any]],
    until: Callable[[list[tuple[str, dict[str, Any]]]], bool] | None = None,
    timeout_s: float = 30.0,
    settle_s: float = 0.0,
) -> list[tuple[str, dict[str, Any]]]:
    """Committed (key, value) records of ``topic`` from ``start`` offsets.

    Without ``until``, reads to the high watermarks taken at call time: every record a
    request had published (acknowledged) before the call is included. With ``until``, reads
    until it holds, then ``settle_s`` longer so late duplicates would show.
    """
    stop = end_offsets(kafka, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": f"window-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, start.get(p, 0)) for p in stop])
    records: list[tuple[str, dict[str, Any]]] = []
    positions = dict(start)
    deadline = time.monotonic() + timeout_s
    met_at: float | None = None
    try:
        while True:
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                part, offset = msg.partition(), msg.offset()
                assert part is not None
                assert offset is not None
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        positions[part] = max(positions.get(part, 0), offset)
                        continue
                    raise KafkaException(err)
                positions[part] = offset + 1
                key = msg.key()
                records.append((key.decode() if key else "", decode(msg.value())))
            now = time.monotonic()
            if until is None:
                if all(positions.get(p, 0) >= end for p, end in stop.items()):
                    return records
            elif met_at is None and until(records):
                met_at = now
            if met_at is not None and now - met_at >= settle_s:
                return records
            if now > deadline:
                raise TimeoutError(f"{topic}: window not read in {timeout_s}s ({len(records)})")
    finally:
        consumer.close()


def event_codec(stack: Stack) -> Codec:
    return Codec(
        framing_from_registry_url(stack.registry_url),
        {
            t.COMPLAINT_RECEIVED.name: t.COMPLAINT_RECEIVED.schema,
            t.REVIEW_DECIDED.name: t.REVIEW_DECIDED.schema,
            t.PAYOUT_FAILED.name: t.PAYOUT_FAILED.schema,
            t.PAYOUT_COMPLETED.name: t.PAYOUT_COMPLETED.schema,
        },
    )


def decoder(codec: Codec, topic: str) -> Callable[[bytes | None], dict[str, Any]]:
    return lambda data: codec.decode(topic, data)


def dispute_events(
    kafka: str,
    codec: Codec,
    topic: str,
    start: dict[int, int],
    dispute_id: str,
    *,
    timeout_s: float = 30.0,
    settle_s: float = 2.0,
) -> list[dict[str, Any]]:
    """The events of ``dispute_id`` in ``topic`` after ``start``: waits for the first, then
    ``settle_s`` longer (several outbox intervals), so that a duplicate would be seen. Asserts
    that they are keyed by the dispute."""
    records = read_window(
        kafka,
        topic,
        start,
        decode=decoder(codec, topic),
        until=lambda rs: any(v["dispute_id"] == dispute_id for _, v in rs),
        timeout_s=timeout_s,
        settle_s=settle_s,
    )
    mine = [(k, v) for k, v in records if v["dispute_id"] == dispute_id]
    assert all(k == dispute_id for k, _ in mine), f"{topic} must be keyed by dispute_id"
    return [v for _, v in mine]


# -- seeding the audit tables ---------------------------------------------------------------


def _span(phrase: str) -> tuple[int, int]:
    start = ARTICLE_COMPLAINT.index(phrase)
    return start, start + len(phrase)


ARTICLE_GRIEVANCES: list[dict[str, Any]] = [
    {
        "id": "g1",
        "category": "LATE_DELIVERY",
        "item": None,
        "qty": None,
        "phrase": "Ordered at 8:15pm and the food showed up at 9:40pm.",
        "votes": ["UPHELD", "UPHELD", "UPHELD"],
        "outcome": "UPHELD",
        "split": "3-0",
        "pays": 4900,
        "rule": "LATE_DELIVERY: flat 4900 (delivered 85 min after placing, SLA 45 min)",
    },
    {
        "id": "g2",
        "category": "MISSING_ITEM",
        "item": "Hyderabadi Biryani",
        "qty": 2,
        "phrase": "Two of the four were missing completely.",
        "votes": ["UPHELD", "UPHELD", "UPHELD"],
        "outcome": "UPHELD",
        "split": "3-0",
        "pays": 64000,
        "rule": "MISSING_ITEM: 2 x 32000 (Hyderabadi Biryani)",
    },
    {
        "id": "g3",
        "category": "PACKAGING",
        "item": "Raita",
        "qty": 1,
        "phrase": "The raita had leaked all over the inside of the bag.",
        "votes": ["UPHELD", "ESCALATE", "ESCALATE"],
        "outcome": "ESCALATE",
        "split": "2-1",
        "pays": 6000,
        "rule": "PACKAGING: 1 x 6000 (Raita)",
    },
    {
        "id": "g4",
        "category": "PARTNER_CONDUCT",
        "item": None,
        "qty": None,
        "phrase": "the delivery guy was rude when I asked him about it",
        "votes": ["UPHELD", "UPHELD", "UPHELD"],
        "outcome": "UPHELD",
        "split": "3-0",
        "pays": 0,
        "rule": "PARTNER_CONDUCT: no monetary compensation, 0",
    },
]


def _lines(raita_upheld: bool) -> list[dict[str, Any]]:
    lines = []
    for g in ARTICLE_GRIEVANCES:
        outcome = "UPHELD" if (g["id"] == "g3" and raita_upheld) else g["outcome"]
        held = outcome == "ESCALATE"
        amount = 0 if held else g["pays"]
        status = "HELD" if held else ("PAY" if amount else "ZERO")
        lines.append(
            {
                "grievance_id": g["id"],
                "category": g["category"],
                "outcome": outcome,
                "status": status,
                "amount_minor": amount,
                "proposed_minor": g["pays"],
                "rule": g["rule"],
                "item_name": g["item"],
                "quantity": g["qty"],
            }
        )
    return lines


def insert_article_complaint(
    conn: psycopg.Connection[Any], dispute_id: str, received_at: datetime
) -> str:
    """The article's complaint as dispute ``dispute_id``, and its frozen evidence (shared by
    every seeded dispute); returns the evidence's sha256."""
    frozen = freeze(ARTICLE_ORDER)
    conn.execute(
        "INSERT INTO evidence_snapshots (sha256, snapshot) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        (frozen.sha256, frozen.json),
    )
    conn.execute(
        "INSERT INTO disputes (dispute_id, order_id, customer_id, complaint_text,"
        " received_at, snapshot_sha256, channel) VALUES (%s, %s, %s, %s, %s, %s, 'app')",
        (dispute_id, "order-1840", "cust-77", ARTICLE_COMPLAINT, received_at, frozen.sha256),
    )
    return frozen.sha256


SEEDED_EXTRACTOR_ANSWERS = [
    {
        "attempt": 1,
        "raw_answer": '{"grievances": [{"category": "<LATE>"',
        "problems": ["the answer is not JSON: Expecting ',' delimiter"],
        "model": "stand-in",
        "prompt_version": "extractor/v3",
        "served_model": "stand-in",
        "system_fingerprint": "fp_extractor",
    },
    {
        "attempt": 2,
        "raw_answer": '{"grievances": []}',
        "problems": [],
        "model": "stand-in",
        "prompt_version": "extractor/v3",
        "served_model": None,
        "system_fingerprint": None,
    },
]
"""The seeded dispute's extraction: a first answer cut short, then its repair."""


def insert_unpublished_decision(database_url: str, dispute_id: str) -> str:
    """A reviewer's REJECT of the article dispute's raita item, recorded but not published (as
    a crash between the two leaves it); returns its review id."""
    review_id = f"r-{uuid.uuid4().hex}"
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO review_decisions (review_id, dispute_id, item_key, kind, grievance_id,"
            " decision, reviewer, note, decided_at, published)"
            " VALUES (%s, %s, 'grievance:g3', 'GRIEVANCE', 'g3', 'REJECT', 'bob',"
            " 'recorded before a crash', %s, false)",
            (review_id, dispute_id, datetime.now(UTC)),
        )
    return review_id


def seed_article_dispute(database_url: str, dispute_id: str, *, rounds: int = 1) -> None:
    """The article's dispute as the pipeline leaves it after round 1 (68900 paid, the raita
    grievance ESCALATE and OPEN for review); with ``rounds=2`` also what follows an UPHOLD of
    the raita (round 2 pays 6000, 74900 in all)."""
    base = datetime.now(UTC) - timedelta(minutes=10)
    with psycopg.connect(database_url) as conn, conn.transaction():
        sha256 = insert_article_complaint(conn, dispute_id, base)
        conn.execute(
            "INSERT INTO extractions (dispute_id, order_id, snapshot_sha256, complaint_sha256,"
            " outcome, grievance_total, reason, answers, extracted_at)"
            " VALUES (%s, 'order-1840', %s, %s, 'EXTRACTED', 4, NULL, %s, %s)",
            (
                dispute_id,
                sha256,
                hashlib.sha256(ARTICLE_COMPLAINT.encode()).hexdigest(),
                Jsonb(SEEDED_EXTRACTOR_ANSWERS),
                base + timedelta(seconds=1),
            ),
        )
        for g in ARTICLE_GRIEVANCES:
            start, end = _span(g["phrase"])
            conn.execute(
                "INSERT INTO grievances (dispute_id, grievance_id, category, text, span_start,"
                " span_end, item_name, item_quantity, grievance_total, snapshot_sha256,"
                " prompt_version, model, extracted_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 4, %s, 'extract.v1', 'stand-in', %s)",
                (
                    dispute_id,
                    g["id"],
                    g["category"],
                    g["phrase"],
                    start,
                    end,
                    g["item"],
                    g["qty"],
                    sha256,
                    base + timedelta(seconds=1),
                ),
            )
            for seat, ruling in enumerate(g["votes"]):
                # The raita's UPHELD rests on the packaging record, which the order lacks.
                unrecorded = ruling == "UPHELD" and g["category"] == "PACKAGING"
                cited = (
                    []
                    if ruling == "ESCALATE"
                    else ["order.packaging_condition_recorded"]
                    if unrecorded
                    else ["derived.delay_minutes"]
                )
                conn.execute(
                    "INSERT INTO rulings (dispute_id, grievance_id, judge_seat, ruling,"
                    " model_ruling, confidence, evidence_cited, reasoning, model,"
                    " prompt_version, snapshot_sha256, raw_response, cast_at,"
                    " cites_missing_evidence, temperature, served_model, system_fingerprint)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'stand-in', 'judge.v1', %s, %s, %s,"
                    " %s, 0.7, %s, 'fp_seeded')",
                    (
                        dispute_id,
                        g["id"],
                        seat,
                        ruling,
                        ruling,
                        0.9 - 0.1 * seat,
                        Jsonb(cited),
                        f"seat {seat}: {ruling.lower()} on {g['category'].lower()}",
                        sha256,
                        f'{{"ruling": "{ruling}"}}',
                        base + timedelta(seconds=2),
                        unrecorded,
                        # Seat 0's endpoint names a dated snapshot of the model asked for.
                        "stand-in-2026-11-01" if seat == 0 else "stand-in",
                    ),
                )
            upheld = g["votes"].count("UPHELD")
            escalate = g["votes"].count("ESCALATE")
            conn.execute(
                "INSERT INTO verdicts (dispute_id, grievance_id, category, outcome,"
                " votes_upheld, votes_rejected, votes_escalate, split, unanimous, decided_at)"
                " VALUES (%s, %s, %s, %s, %s, 0, %s, %s, %s, %s)",
                (
                    dispute_id,
                    g["id"],
                    g["category"],
                    g["outcome"],
                    upheld,
                    escalate,
                    g["split"],
                    g["split"].endswith("-0"),
                    base + timedelta(seconds=3),
                ),
            )
        conn.execute(
            "INSERT INTO review_items (dispute_id, item_key, kind, grievance_id, reason,"
            " created_at) VALUES (%s, 'grievance:g3', 'GRIEVANCE', 'g3', %s, %s)",
            (
                dispute_id,
                "the bench could not decide (2-1: 1 upheld, 0 rejected, 2 escalate)",
                base + timedelta(seconds=3),
            ),
        )
        _seed_round(conn, dispute_id, 1, base + timedelta(seconds=4))
        if rounds >= 2:
            _seed_round(conn, dispute_id, 2, base + timedelta(minutes=5))


SEEDED_MODEL_ANSWER = '{"reply": "We are refunding <b>INR 10000</b> & more."}'
"""The seeded round 1's model answer, which the guard refused."""


def seeded_template(lines: list[dict[str, Any]], payable: int) -> str:
    """The template reply the settler writes for ``lines`` (as seeded: a first round, nothing
    held by the cap) and ``payable`` INR minor units."""
    priced = [ev.PricedLineEvent(**line) for line in lines]
    resolved = [line for line in priced if line.status != "HELD"]
    held = [line for line in priced if line.status == "HELD"]
    held_names = _only_held(held, resolved)
    return template_for(
        payable, "INR", resolved, [describe(line) for line in held], held_names=held_names
    )


def _seed_round(conn: psycopg.Connection[Any], dispute_id: str, round_: int, at: datetime) -> None:
    lines = _lines(raita_upheld=round_ >= 2)
    total = sum(line["amount_minor"] for line in lines)
    already = 0 if round_ == 1 else 68900
    payable = total - already
    decision = "AUTO_APPROVED" if round_ == 1 else "REVIEW_APPROVED"
    held = [] if round_ >= 2 else ["g3"]
    conn.execute(
        "INSERT INTO priced_refunds (dispute_id, round, pricing_version, currency,"
        " order_total_minor, lines, total_minor, already_paid_minor, payable_minor, cap_minor,"
        " decision, held_grievances, reason, priced_at)"
        " VALUES (%s, %s, '2026-12-01.v1', 'INR', 134000, %s, %s, %s, %s, 100000, %s, %s, %s, %s)",
        (
            dispute_id,
            round_,
            Jsonb(lines),
            total,
            already,
            payable,
            decision,
            Jsonb(held),
            "within the auto-approve cap",
            at,
        ),
    )
    # Round 1's model answer named another amount: the template went instead. What served it
    # is known; round 2's reply was written again from a cached answer, and names nothing.
    refused = round_ == 1
    conn.execute(
        "INSERT INTO replies (dispute_id, round, text, amount_minor, currency, source,"
        " guard_failures, model, prompt_version, model_answer, served_model, system_fingerprint)"
        " VALUES (%s, %s, %s, %s, 'INR', %s, %s, 'stand-in', 'settle.v1', %s, %s, %s)",
        (
            dispute_id,
            round_,
            seeded_template(lines, payable)
            if refused
            else f"We are sorry. We are refunding INR {payable // 100}.",
            payable,
            "TEMPLATE" if refused else "MODEL",
            Jsonb(
                ["names an amount other than the approved INR 689: 'INR 10000'"] if refused else []
            ),
            SEEDED_MODEL_ANSWER if refused else None,
            "stand-in-settler-2026-11-01" if refused else None,
            "fp_settler" if refused else None,
        ),
    )
    key = f"{dispute_id}:round{round_}"
    conn.execute(
        "INSERT INTO payout_ledger (dispute_id, round, amount_minor, currency,"
        " payment_reference, idempotency_key, status, stripe_refund_id, attempts)"
        " VALUES (%s, %s, %s, 'INR', %s, %s, 'SUCCEEDED', %s, 1)",
        (dispute_id, round_, payable, f"pi_{dispute_id}", key, f"re_{uuid.uuid4().hex[:14]}"),
    )
    conn.execute(
        "INSERT INTO payout_events (dispute_id, round, outcome, amount_minor, stripe_refund_id,"
        " at) VALUES (%s, %s, 'COMPLETED', %s, 're_seeded', %s)",
        (dispute_id, round_, payable, at + timedelta(seconds=1)),
    )
    conn.execute(
        "INSERT INTO payout_event_history (dispute_id, round, revision, outcome, amount_minor,"
        " stripe_refund_id, at) VALUES (%s, %s, 0, 'COMPLETED', %s, 're_seeded', %s)",
        (dispute_id, round_, payable, at + timedelta(seconds=1)),
    )


_SEEDED_TABLES = (
    "extractions",
    "grievances",
    "rulings",
    "verdicts",
    "priced_refunds",
    "replies",
    "payout_ledger",
    "payout_events",
    "payout_event_history",
    "review_items",
    "review_decisions",
    "intake_requests",
    "disputes",
)


def delete_dispute(database_url: str, dispute_id: str) -> None:
    """Remove a seeded dispute from every table (keeps the shared evidence snapshot)."""
    with psycopg.connect(database_url) as conn, conn.transaction():
        for table in _SEEDED_TABLES:
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE dispute_id = %s").format(sql.Identifier(table)),
                (dispute_id,),
            )
