"""The extractor's handler against real PostgreSQL, Redis and the LLM stand-in.

What it emits is judged against the snapshot the dispute keeps: the one frozen first, even when
the order's evidence changed before a redelivery.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from redis.asyncio import Redis

from refund_bench import topics as t
from refund_bench.codec import Codec, FingerprintFraming
from refund_bench.db.orders import OrderReader, upsert_orders
from refund_bench.db.snapshots import DisputeToFreeze, freeze_dispute
from refund_bench.domain import OrderRecord
from refund_bench.errors import InvalidInput
from refund_bench.llm.cache import CallOutcome, OnCall, RedisResponseCache, sha256_hex
from refund_bench.llm.client import LlmRejected
from refund_bench.llm.roles import EXTRACTOR_PROMPT_VERSION, load_prompt
from refund_bench.resources import pg_pool
from refund_bench.runtime import Context, Emit
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER, own_copy
from services.extractor.evidence import FrozenSnapshot, canonical_json, freeze, snapshot_sha256
from services.extractor.handler import (
    CHANGED_REASON,
    LEFT_OUT_REASON,
    MAX_CHANNEL_CHARS,
    NOT_WHOLE_REASON,
    REFUSED_REASON,
    REVIEW_REASON,
    ExtractorHandler,
)
from services.llm_standin.app import SYSTEM_FINGERPRINT
from tests.fakes.chat_completion import FixedAnswerServer, completion
from tests.grievances import complaint_message
from tests.standin import Standin

pytestmark = pytest.mark.stack


def _handle(
    database: str,
    redis_url: str,
    standin: Standin,
    *disputes: str,
    on_call: OnCall | None = None,
    cache_prefix: str | None = None,
    text: str = ARTICLE_COMPLAINT,
    endpoint: FixedAnswerServer | None = None,
    order_id: str = ARTICLE_ORDER.order_id,
    prompt_version: str = EXTRACTOR_PROMPT_VERSION,
    model: str = "standin-extractor",
    records: list[Mapping[str, Any]] | None = None,
    channel: str = "api",
) -> list[Sequence[Emit]]:
    """What the handler emits for each dispute's complaint (``text``), handled together, but
    its ``complaint.extracted``: each dispute's last emit, and its only one (checked), whose
    value is added to ``records``. Answers are cached under ``cache_prefix`` (a fresh one
    unless given: pass the same one to redeliver). The model is the stand-in's, or
    ``endpoint``'s."""

    async def go() -> list[Sequence[Emit]]:
        pool = pg_pool(database)
        await pool.open()
        redis = Redis.from_url(redis_url)
        llm = (
            standin.client(model, temperature=0.0)
            if endpoint is None
            else endpoint.client(temperature=0.0)
        )
        prefix = cache_prefix or f"test-extractor-{uuid.uuid4().hex}:"
        cache = RedisResponseCache(redis, prefix, 600)
        prompt = load_prompt(prompt_version)
        handler = ExtractorHandler(pool, llm, cache, prompt, on_call=on_call)
        try:
            return await asyncio.gather(
                *(
                    handler.handle(complaint_message(d, text, order_id, channel), Context(None))
                    for d in disputes
                )
            )
        finally:
            await llm.aclose()
            await redis.aclose()
            await pool.close()

    flows: list[Sequence[Emit]] = []
    for dispute, emits in zip(disputes, asyncio.run(go()), strict=True):
        *flow, last = emits
        assert last.topic == t.COMPLAINT_EXTRACTED.name, [e.topic for e in emits]
        assert t.COMPLAINT_EXTRACTED.name not in {e.topic for e in flow}
        assert last.key == dispute
        if records is not None:
            records.append(last.value)
        flows.append(flow)
    return flows


async def _freeze_articlecomplaint_message(
    pool: AsyncConnectionPool[Any], dispute_id: str, snapshot_json: str, sha256: str
) -> None:
    """Store the article's complaint as ``dispute_id``, as a delivery before would have, with
    the given snapshot."""
    await freeze_dispute(
        pool,
        DisputeToFreeze(
            dispute_id=dispute_id,
            order_id=ARTICLE_ORDER.order_id,
            customer_id=ARTICLE_ORDER.customer_id,
            complaint_text=ARTICLE_COMPLAINT,
            received_at=datetime(2026, 12, 3, 19, 0, tzinfo=UTC),
            snapshot_json=snapshot_json,
            snapshot_sha256=sha256,
            channel="app",
        ),
    )


def _delivered_twice(
    database: str,
    redis_url: str,
    standin: Standin,
    faults: list[str],
    on_call: OnCall | None = None,
) -> tuple[str, Sequence[Emit], Sequence[Emit]]:
    """A new dispute's complaint handled, then redelivered (one cache), with the stand-in's next
    answers given ``faults``; (the dispute, what each delivery emitted)."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=faults)
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    (first,) = _handle(database, redis_url, standin, dispute, on_call=on_call, cache_prefix=cache)
    (again,) = _handle(database, redis_url, standin, dispute, on_call=on_call, cache_prefix=cache)
    return dispute, first, again


def _extract(database: str, redis_url: str, standin: Standin, *disputes: str) -> list[list[Any]]:
    """The grievance.extracted values the handler emits for each dispute, handled together."""
    return [
        [e.value for e in emits if e.topic == t.GRIEVANCE_EXTRACTED.name]
        for emits in _handle(database, redis_url, standin, *disputes)
    ]


def test_grievances_carry_the_snapshot_the_dispute_keeps(
    database: str, redis_url: str, standin: Standin
) -> None:
    earlier = freeze(ARTICLE_ORDER.model_copy(update={"packaging_notes": "bag torn at pickup"}))
    redelivered, fresh = f"d-{uuid.uuid4().hex[:12]}", f"d-{uuid.uuid4().hex[:12]}"

    async def froze_earlier() -> FrozenSnapshot:
        """The order's snapshot as stored now; a delivery before its evidence changed froze
        ``redelivered`` with another."""
        pool = pg_pool(database)
        await pool.open()
        try:
            order = await OrderReader(pool).get(ARTICLE_ORDER.order_id)
            assert isinstance(order, OrderRecord)
            await _freeze_articlecomplaint_message(pool, redelivered, earlier.json, earlier.sha256)
            return freeze(order)
        finally:
            await pool.close()

    current = asyncio.run(froze_earlier())
    assert earlier.sha256 != current.sha256
    kept, new = _extract(database, redis_url, standin, redelivered, fresh)

    assert len(kept) == len(new) == 4, "the article's four grievances, both times"
    assert {(g["snapshot_sha256"], g["snapshot_json"]) for g in kept} == {
        (earlier.sha256, earlier.json)
    }
    assert {(g["snapshot_sha256"], g["snapshot_json"]) for g in new} == {
        (current.sha256, current.json)
    }


@pytest.mark.parametrize(
    ("channel", "kept"),
    [
        ("email", "email"),
        (
            "x" * 500,
            f"{'x' * MAX_CHANNEL_CHARS} [... {500 - MAX_CHANNEL_CHARS} more characters not kept]",
        ),
    ],
    ids=["a label", "a label far too long"],
)
def test_a_dispute_keeps_the_channel_its_complaint_came_from(
    database: str, redis_url: str, standin: Standin, channel: str, kept: str
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    _handle(database, redis_url, standin, dispute, channel=channel)
    with psycopg.connect(database) as conn:
        stored = conn.execute(
            "SELECT channel FROM disputes WHERE dispute_id = %s", (dispute,)
        ).fetchall()
    assert stored == [(kept,)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (["UPDATE orders SET placed_at = 'infinity' WHERE order_id = %s"], "cannot be used"),
        (
            ["UPDATE orders SET delivered_at = placed_at - interval '1 hour' WHERE order_id = %s"],
            "is before placed_at",
        ),
        (["UPDATE orders SET customer_id = 'cust-else' WHERE order_id = %s"], "another customer"),
        (
            [
                "DELETE FROM order_line_items WHERE order_id = %s",
                "DELETE FROM orders WHERE order_id = %s",
            ],
            "unknown order",
        ),
    ],
)
def test_a_redelivery_is_judged_against_its_frozen_snapshot_whatever_became_of_the_order(
    database: str, redis_url: str, standin: Standin, change: list[str], reason: str
) -> None:
    """The first delivery froze the evidence; then the order's row was edited into something
    unusable, or deleted, before the complaint was redelivered (a crash before the commit). The
    redelivery emits what the first did, from the snapshot the dispute keeps; only a new
    dispute about that order is refused."""
    order = own_copy(ARTICLE_ORDER, uuid.uuid4().hex[:8])
    with psycopg.connect(database, autocommit=True) as conn:
        upsert_orders(conn, [order])
    dispute, cache = f"d-{uuid.uuid4().hex[:12]}", f"test-extractor-{uuid.uuid4().hex}:"
    (first,) = _handle(
        database, redis_url, standin, dispute, cache_prefix=cache, order_id=order.order_id
    )
    with psycopg.connect(database, autocommit=True) as conn:
        for statement in change:
            conn.execute(statement, (order.order_id,))

    (again,) = _handle(
        database, redis_url, standin, dispute, cache_prefix=cache, order_id=order.order_id
    )
    assert len(first) == 4
    assert [e.value["grievance_id"] for e in again] == [e.value["grievance_id"] for e in first]
    assert {e.value["snapshot_sha256"] for e in again} == {first[0].value["snapshot_sha256"]}
    with pytest.raises(InvalidInput, match=reason):
        _handle(database, redis_url, standin, f"d-{uuid.uuid4().hex[:12]}", order_id=order.order_id)


def test_a_snapshot_frozen_with_line_items_this_version_refuses_is_invalid_input(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A dispute frozen by an older version, whose bounds were looser (a quantity this one
    refuses), is dead-lettered with its reason on redelivery, not a crash of the stage."""
    snapshot = freeze(ARTICLE_ORDER).data
    snapshot["order"]["line_items"][0]["quantity"] = 2_000_000
    text = canonical_json(snapshot)
    dispute = f"d-{uuid.uuid4().hex[:12]}"

    async def froze() -> None:
        pool = pg_pool(database)
        await pool.open()
        try:
            await _freeze_articlecomplaint_message(pool, dispute, text, snapshot_sha256(text))
        finally:
            await pool.close()

    asyncio.run(froze())
    with pytest.raises(InvalidInput, match="has line items this version refuses"):
        _handle(database, redis_url, standin, dispute)


def test_a_second_complaint_under_a_dispute_id_in_use_is_invalid_input(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A redelivery of the complaint is answered again; another complaint that reuses its
    dispute id is refused (dead-lettered), not judged against the first one's evidence."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    (first,) = _handle(database, redis_url, standin, dispute, cache_prefix=cache)
    (again,) = _handle(database, redis_url, standin, dispute, cache_prefix=cache)
    assert len(first) == len(again) == 4
    with pytest.raises(InvalidInput) as caught:
        _handle(database, redis_url, standin, dispute, text="The naan was burnt.")
    assert str(caught.value) == (
        f"dispute {dispute!r} already holds another complaint"
        f" (order {ARTICLE_ORDER.order_id!r}); a new complaint needs a new dispute id"
    )


def test_each_grievance_carries_the_customers_words_at_its_span(
    database: str, redis_url: str, standin: Standin
) -> None:
    [grievances] = _extract(database, redis_url, standin, f"d-{uuid.uuid4().hex[:12]}")
    assert len(grievances) == 4
    for g in grievances:
        assert g["span_text"] == ARTICLE_COMPLAINT[g["span_start"] : g["span_end"]]
        assert g["span_text"].strip(), "a span holds words"


def test_a_complaint_the_endpoint_refuses_goes_to_review_and_stays_there(
    database: str, redis_url: str, standin: Standin
) -> None:
    """HTTP 400 for the complaint itself (too long for the model, say): the dispute is held for
    review with the endpoint's reason and the stage goes on. A redelivery gets the same outcome
    without asking again: grievances now would make a second round 1, one that could pay."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=["400"])
    outcomes: list[CallOutcome] = []

    cache = f"test-extractor-{uuid.uuid4().hex}:"
    (emits,) = _handle(
        database, redis_url, standin, dispute, on_call=outcomes.append, cache_prefix=cache
    )

    assert [e.topic for e in emits] == [t.REFUND_PRICED.name]
    priced = emits[0].value
    assert priced["decision"] == "HELD_FOR_REVIEW"
    assert priced["lines"] == []
    assert priced["reason"].startswith("EXTRACTION: the model endpoint refused the complaint")
    assert "HTTP 400" in priced["reason"]
    assert "context" in priced["reason"]
    assert outcomes == ["refused"]

    (again,) = _handle(
        database, redis_url, standin, dispute, on_call=outcomes.append, cache_prefix=cache
    )
    assert [e.topic for e in again] == [t.REFUND_PRICED.name]
    replayed = again[0].value
    assert (replayed["decision"], replayed["reason"]) == (priced["decision"], priced["reason"])
    assert outcomes == ["refused", "cached"]
    assert standin.stats()["by_dispute"][dispute] == 1, "the endpoint was not asked again"


def test_a_complaint_held_for_review_stays_held_when_redelivered_after_a_prompt_change(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The endpoint refused the complaint under one prompt, and the dispute was held for review.
    Delivered again under another prompt version (extractor/v1 here), it gets the same outcome
    from the cache, without a new call: extracted anew, it could come out with grievances and
    a round 1 that pays while the customer was told it is held."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=["400"])
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    (first,) = _handle(database, redis_url, standin, dispute, cache_prefix=cache)
    (again,) = _handle(
        database, redis_url, standin, dispute, cache_prefix=cache, prompt_version="extractor/v1"
    )
    assert [e.topic for e in again] == [t.REFUND_PRICED.name]
    assert again[0].value["decision"] == first[0].value["decision"] == "HELD_FOR_REVIEW"
    assert standin.stats()["by_dispute"][dispute] == 1, "the endpoint was not asked again"


def _extract_with_an_earlier_maker(
    database: str, redis_url: str, standin: Standin, dispute: str, cache: str
) -> list[Sequence[Emit]]:
    """The article's complaint extracted under extractor/v1 by the model ``extractor-before``,
    its answer cached under ``cache``."""
    return _handle(
        database,
        redis_url,
        standin,
        dispute,
        cache_prefix=cache,
        prompt_version="extractor/v1",
        model="extractor-before",
    )


def test_a_redelivery_after_a_model_and_prompt_change_names_those_that_wrote_the_grievances(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A complaint extracted under extractor/v1 by one model, delivered again once another
    model and prompt are configured, reuses the cached answer: its events name the model and
    prompt that wrote the grievances, not the ones configured now."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    (first,) = _extract_with_an_earlier_maker(database, redis_url, standin, dispute, cache)
    (again,) = _handle(
        database, redis_url, standin, dispute, cache_prefix=cache, model="extractor-after"
    )
    assert standin.stats()["by_dispute"][dispute] == 1, "the endpoint was not asked again"
    assert len(again) == len(first) == 4
    for emits in (first, again):
        makers = {(e.value["extractor_model"], e.value["extractor_prompt_version"]) for e in emits}
        assert makers == {("extractor-before", "extractor/v1")}
    assert [e.value["text"] for e in again] == [e.value["text"] for e in first]


def test_an_answer_cached_without_its_maker_stays_readable_and_names_the_configured_model(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The maker is kept beside the answer, not in it: the answer's value is the model's JSON
    as an earlier release cached it and still reads it. An answer without a maker (cached by
    an earlier release) is reused, and its events name the model and prompt configured now."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    _handle(database, redis_url, standin, dispute, cache_prefix=cache, model="extractor-before")

    async def strip_makers() -> list[str]:
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            keys = [key async for key in redis.scan_iter(f"{cache}*")]
            makers = [key for key in keys if key.endswith(":made-by")]
            assert len(makers) == 1, keys
            await redis.delete(*makers)
            return [str(await redis.get(key)) for key in keys if key not in makers]
        finally:
            await redis.aclose()

    (answer,) = asyncio.run(strip_makers())
    assert len(json.loads(answer)["grievances"]) == 4
    records: list[Mapping[str, Any]] = []
    (again,) = _handle(
        database,
        redis_url,
        standin,
        dispute,
        cache_prefix=cache,
        model="extractor-after",
        records=records,
    )
    assert standin.stats()["by_dispute"][dispute] == 1, "the endpoint was not asked again"
    makers = {(e.value["extractor_model"], e.value["extractor_prompt_version"]) for e in again}
    assert makers == {("extractor-after", EXTRACTOR_PROMPT_VERSION)}
    [answer_kept] = records[0]["answers"]
    assert answer_kept["raw_answer"] == answer
    assert [answer_kept[k] for k in ("model", "prompt_version", "served_model")] == [None] * 3, (
        "the record says who wrote the answer only where that is known"
    )


def test_an_answer_drawn_again_after_its_predecessor_left_the_cache_names_its_own_maker(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The answer left the cache (evicted, expired) while the record of its maker stayed. The
    complaint delivered again is extracted anew, by the model configured now (the endpoint's
    ``any-model``): its events name that model, not the one the surviving record names."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    _extract_with_an_earlier_maker(database, redis_url, standin, dispute, cache)

    async def evict_the_answer() -> str:
        redis = Redis.from_url(redis_url, decode_responses=True)
        try:
            keys = [key async for key in redis.scan_iter(f"{cache}*")]
            (answer_key,) = [key for key in keys if not key.endswith(":made-by")]
            answer = str(await redis.get(answer_key))
            await redis.delete(answer_key)
            return answer
        finally:
            await redis.aclose()

    # The same grievances, worded as another draw would be (other whitespace).
    redrawn = json.dumps(json.loads(asyncio.run(evict_the_answer())), indent=1)
    with FixedAnswerServer(completion(redrawn)) as server:
        (again,) = _handle(
            database,
            redis_url,
            standin,
            dispute,
            cache_prefix=cache,
            endpoint=server,
        )
    assert len(server.requests) == 1
    assert len(again) == 4
    makers = {(e.value["extractor_model"], e.value["extractor_prompt_version"]) for e in again}
    assert makers == {("any-model", EXTRACTOR_PROMPT_VERSION)}


def test_an_answer_that_looks_like_a_cached_refusal_ends_the_same_on_every_delivery(
    database: str, redis_url: str, standin: Standin
) -> None:
    """An endpoint that does not hold the model to the schema answers with the very record the
    cache keeps for a refusal. It is an invalid answer, repaired in vain, so the complaint is
    held for review as unreadable; a redelivery reads the cached answers as answers, not as a
    refusal, and ends the same way without asking again."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    content = json.dumps({"refused_by_endpoint": "policy\u0000x"})
    with FixedAnswerServer(completion(content)) as server:
        deliveries = [
            _handle(database, redis_url, standin, dispute, cache_prefix=cache, endpoint=server)
            for _ in range(2)
        ]
    assert len(server.requests) == 2, "the answer and its repair, once"
    reasons = [emits[0].value["reason"] for (emits,) in deliveries]
    assert reasons[0] == reasons[1]
    assert reasons[0].startswith(REVIEW_REASON), reasons[0]


def test_an_endpoints_refusal_is_kept_storable_and_short(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The endpoint's reason for refusing a complaint is copied into the held outcome's reason,
    which the recorder stores and the desk shows: a NUL or half of a surrogate pair in it would
    stop the recorder on every redelivery (or dead-letter the complaint), and megabytes of it
    would not fit one record. A redelivery gives the same reason, from the cache."""
    dispute, cache = f"d-{uuid.uuid4().hex[:12]}", f"test-extractor-{uuid.uuid4().hex}:"
    message = "blocked\u0000 by policy \ud83d " + "x" * 200_000
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    with FixedAnswerServer(body.encode(), statuses=[400]) as server:
        (emits,), (again,) = (
            _handle(database, redis_url, standin, dispute, cache_prefix=cache, endpoint=server)
            for _ in range(2)
        )
    assert len(server.requests) == 1

    reason = emits[0].value["reason"]
    assert again[0].value["reason"] == reason
    assert reason.startswith(f"{REFUSED_REASON} (HTTP 400: "), reason[:200]
    assert "blocked\ufffd by policy \ufffd x" in reason
    assert len(reason) < 1_200
    codec = Codec(FingerprintFraming(), {t.REFUND_PRICED.name: t.REFUND_PRICED.schema})
    codec.encode(t.REFUND_PRICED.name, emits[0].value)


def test_a_refused_repair_holds_the_complaint_on_every_delivery(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The first answer is malformed, the repair request is refused: held for review, and a
    redelivery reuses both (no third call, no grievances)."""
    dispute, emits, again = _delivered_twice(database, redis_url, standin, ["malformed", "400"])

    for outcome in (emits, again):
        assert [e.topic for e in outcome] == [t.REFUND_PRICED.name]
        assert (
            outcome[0]
            .value["reason"]
            .startswith("EXTRACTION: the model endpoint refused the complaint")
        )
    assert standin.stats()["by_dispute"][dispute] == 2


def test_an_endpoint_that_refuses_the_key_stops_the_stage(
    database: str, redis_url: str, standin: Standin
) -> None:
    """HTTP 401 is the settings, not the complaint: raised, so the stage stops and alerts."""
    standin.faults(next_faults=["401"])
    with pytest.raises(LlmRejected) as caught:
        _handle(database, redis_url, standin, f"d-{uuid.uuid4().hex[:12]}")
    assert caught.value.status == 401
    assert not caught.value.refused_input


def test_a_malformed_answer_is_repaired_once_and_the_repair_is_used(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The first answer is cut off; the repair call's answer is valid: the article's four
    grievances, after exactly two calls, and a redelivery asks nothing more. The answer that
    could not be read is counted so, once."""
    outcomes: list[CallOutcome] = []
    dispute, emits, again = _delivered_twice(
        database, redis_url, standin, ["malformed"], on_call=outcomes.append
    )
    assert Counter(outcomes) == {"made": 2, "unreadable": 1, "cached": 2}

    for outcome in (emits, again):
        assert [e.topic for e in outcome] == [t.GRIEVANCE_EXTRACTED.name] * 4
    assert [e.value["category"] for e in emits] == [
        "LATE_DELIVERY",
        "MISSING_ITEM",
        "PACKAGING",
        "PARTNER_CONDUCT",
    ]
    assert standin.stats()["by_dispute"][dispute] == 2, "the answer and its one repair"


def test_answers_in_another_shape_than_the_schemas_are_counted_unreadable(
    database: str, redis_url: str, standin: Standin
) -> None:
    """An endpoint that ignores the JSON schema answers JSON of its own shape, and its repair
    too: the complaint goes to review, and both answers are counted made and unreadable."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    outcomes: list[CallOutcome] = []
    with FixedAnswerServer(completion('{"issues": ["late", "missing"]}', "stop")) as server:
        (emits,) = _handle(
            database, redis_url, standin, dispute, on_call=outcomes.append, endpoint=server
        )
    assert [e.topic for e in emits] == [t.REFUND_PRICED.name]
    assert emits[0].value["decision"] == "HELD_FOR_REVIEW"
    assert len(server.requests) == 2
    assert Counter(outcomes) == {"made": 2, "unreadable": 2}


def test_an_answer_invalid_after_its_one_repair_sends_the_complaint_to_review(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Malformed twice: no third call, no grievances, and the complaint is not dropped: it is
    priced as held for review with the reason, on this delivery and the next."""
    dispute, emits, again = _delivered_twice(
        database, redis_url, standin, ["malformed", "malformed"]
    )

    for outcome in (emits, again):
        assert [e.topic for e in outcome] == [t.REFUND_PRICED.name]
        priced = outcome[0].value
        assert (priced["decision"], priced["payable_minor"], priced["lines"]) == (
            "HELD_FOR_REVIEW",
            0,
            [],
        )
        assert priced["reason"].startswith(f"{REVIEW_REASON}: the answer is not JSON: ")
    assert standin.stats()["by_dispute"][dispute] == 2, "the answer and its one repair"


def _article_grievance(
    phrase: str, category: str, item: str | None = None, span_end: int | None = None
) -> dict[str, Any]:
    """One grievance of an extraction of the article's complaint, at ``phrase``."""
    start = ARTICLE_COMPLAINT.index(phrase)
    return {
        "text": phrase,
        "category": category,
        "span_start": start,
        "span_end": span_end or start + len(phrase),
        "item_name": item,
        "item_quantity": None,
    }


def _first_answer_then_repair(
    database: str,
    redis_url: str,
    standin: Standin,
    first: list[dict[str, Any]],
    repaired: list[dict[str, Any]],
    deliveries: int = 1,
    records: list[Mapping[str, Any]] | None = None,
) -> list[Sequence[Emit]]:
    """What the handler emits for a new dispute, on each of ``deliveries`` deliveries, when the
    model's answer holds the grievances ``first`` and its one repair ``repaired``; the model
    must have been asked twice in all (a redelivery reuses both cached answers). Each
    delivery's ``complaint.extracted`` is added to ``records``."""
    return _answers_then_repair(
        database,
        redis_url,
        standin,
        completion(json.dumps({"grievances": first})),
        completion(json.dumps({"grievances": repaired})),
        deliveries,
        records,
    )


def _answers_then_repair(
    database: str,
    redis_url: str,
    standin: Standin,
    first: bytes,
    repaired: bytes,
    deliveries: int = 1,
    records: list[Mapping[str, Any]] | None = None,
) -> list[Sequence[Emit]]:
    """As :func:`_first_answer_then_repair`, with the endpoint's two answers as they come
    (:func:`~tests.fakes.chat_completion.completion`)."""
    dispute, cache = f"d-{uuid.uuid4().hex[:12]}", f"test-extractor-{uuid.uuid4().hex}:"
    with FixedAnswerServer(repaired, before=[first]) as server:
        emitted = [
            _handle(
                database,
                redis_url,
                standin,
                dispute,
                cache_prefix=cache,
                endpoint=server,
                records=records,
            )[0]
            for _ in range(deliveries)
        ]
    assert len(server.requests) == 2, "the answer and its repair, once"
    return emitted


LATE = _article_grievance("the food showed up at 9:40pm", "LATE_DELIVERY")
MISSING = _article_grievance("Two of the four were missing completely", "MISSING_ITEM", "biryani")
RUDE_PAST_THE_END = _article_grievance(
    "the delivery guy was rude", "PARTNER_CONDUCT", span_end=10_000
)
"""Two grievances without fault, and one whose span runs past the complaint."""
RUDE_UNCATEGORISED = _article_grievance("the delivery guy was rude", "RUDENESS")
"""A grievance of no known category: nothing says which claim it makes."""


BIRYANIS_LEFT_OUT = "MISSING_ITEM for 'Hyderabadi Biryani'"


@pytest.mark.parametrize(
    ("repaired", "left_out"),
    [
        pytest.param([], BIRYANIS_LEFT_OUT, id="no grievance at all"),
        pytest.param([LATE], BIRYANIS_LEFT_OUT, id="the missing biryanis left out"),
        pytest.param(
            [{**LATE, "text": "It came late."}, {**MISSING, "item_name": "Hyderabadi Biryani"}],
            "PARTNER_CONDUCT",
            id="the partner's conduct, whose span alone was wrong, left out",
        ),
        pytest.param(
            [LATE, {**MISSING, "item_name": "Raita"}, {**RUDE_PAST_THE_END, "span_end": 200}],
            BIRYANIS_LEFT_OUT,
            id="the missing item changed",
        ),
    ],
)
def test_a_repair_that_leaves_out_a_grievance_without_fault_sends_the_complaint_to_review(
    database: str,
    redis_url: str,
    standin: Standin,
    repaired: list[dict[str, Any]],
    left_out: str,
) -> None:
    """The first answer has two grievances without fault and one with a span past the
    complaint. A repair that drops one of the three, or all, is valid on its own, and used to
    close the complaint with what it kept (with none: nothing to pay, no review). It now holds
    the complaint for review, saying what was left out, on this delivery and the next: a span
    past the text says nothing against the claim its category and text make."""
    first = [LATE, MISSING, RUDE_PAST_THE_END]
    records: list[Mapping[str, Any]] = []
    deliveries = _first_answer_then_repair(
        database, redis_url, standin, first, repaired, deliveries=2, records=records
    )
    for record in records:  # the repair is recorded with what it left out
        assert record["outcome"] == "HELD"
        answer, repair = record["answers"]
        assert answer["problems"]
        assert any(left_out in problem for problem in repair["problems"])
    for emits in deliveries:
        assert [e.topic for e in emits] == [t.REFUND_PRICED.name]
        priced = emits[0].value
        assert (priced["decision"], priced["payable_minor"], priced["lines"]) == (
            "HELD_FOR_REVIEW",
            0,
            [],
        )
        assert priced["reason"].startswith(f"{LEFT_OUT_REASON}: "), priced["reason"]
        assert left_out in priced["reason"]


RUDE_REFILED = {**RUDE_UNCATEGORISED, "category": "PARTNER_CONDUCT"}


def test_a_repair_that_files_a_grievance_of_no_known_category_anew_is_used(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A repair may file a grievance of no known category under one of the fixed set, and word
    or name the others its own way: the claims are all there, so its grievances go to the
    judges."""
    kept = [
        {**LATE, "text": "It came late."},
        {**MISSING, "item_name": "Hyderabadi Biryani"},
        RUDE_REFILED,
    ]
    (emits,) = _first_answer_then_repair(
        database, redis_url, standin, [LATE, MISSING, RUDE_UNCATEGORISED], kept
    )
    assert [(e.value["category"], e.value["item_name"]) for e in emits] == [
        ("LATE_DELIVERY", None),
        ("MISSING_ITEM", "Hyderabadi Biryani"),
        ("PARTNER_CONDUCT", None),
    ]


def test_a_repair_that_drops_a_grievance_of_no_known_category_sends_it_to_review(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The first answer said something under a category of none of the fixed set ("RUDENESS"):
    whether the repair is right to drop it, or it was a claim the repair could not place, is
    for a person. It used to be dropped: a late delivery filed as "DELIVERY_DELAY" went unpaid
    with no one told."""
    kept = [{**LATE, "text": "It came late."}, {**MISSING, "item_name": "Hyderabadi Biryani"}]
    (emits,) = _first_answer_then_repair(
        database, redis_url, standin, [LATE, MISSING, RUDE_UNCATEGORISED], kept
    )
    reason = _held_reason(emits)
    assert reason.startswith(f"{LEFT_OUT_REASON}: "), reason
    assert "category 'RUDENESS', none of the fixed set" in reason
    assert "the delivery guy was rude" in reason


def test_a_repair_that_changes_the_units_of_a_claim_without_fault_sends_it_to_review(
    database: str, redis_url: str, standin: Standin
) -> None:
    """The first answer claims two of the four biryanis missing, without fault; its repair
    (of another grievance's span) names the biryanis without a number, which claims all four.
    It used to be judged so; the repair read the complaint anew, which is for a person."""
    two_missing = {**MISSING, "item_quantity": 2}
    (emits,) = _first_answer_then_repair(
        database,
        redis_url,
        standin,
        [LATE, two_missing, RUDE_PAST_THE_END],
        [LATE, MISSING, {**RUDE_PAST_THE_END, "span_end": 200}],
    )
    assert [e.topic for e in emits] == [t.REFUND_PRICED.name]
    priced = emits[0].value
    assert priced["decision"] == "HELD_FOR_REVIEW"
    assert priced["reason"] == (
        f"{CHANGED_REASON}: {BIRYANIS_LEFT_OUT}: 2 units in the first answer, 4 in the repair"
    )


RUDE = _article_grievance("the delivery guy was rude", "PARTNER_CONDUCT")
CUT_AFTER_TWO = json.dumps({"grievances": [LATE, MISSING, RUDE]})[:-40]
"""An answer cut short in its third grievance: the first two are whole."""


def _held_reason(emits: Sequence[Emit]) -> str:
    assert [e.topic for e in emits] == [t.REFUND_PRICED.name]
    priced = emits[0].value
    assert (priced["decision"], priced["payable_minor"], priced["lines"]) == (
        "HELD_FOR_REVIEW",
        0,
        [],
    )
    return str(priced["reason"])


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
@pytest.mark.parametrize(
    "repaired",
    [pytest.param([], id="no grievance at all"), pytest.param([LATE], id="one of the two")],
)
def test_a_repair_that_leaves_out_what_an_answer_cut_short_held_whole_sends_it_to_review(
    database: str,
    redis_url: str,
    standin: Standin,
    finish_reason: str,
    repaired: list[dict[str, Any]],
) -> None:
    """The first answer stops in its third grievance (at the token limit, or a content filter
    withheld the rest), with two whole. It used to give the repair nothing to be checked
    against: a repair naming fewer, or none, closed the complaint (nothing to pay, no review)
    and the partner's conduct was never judged. The grievances it holds whole are now what
    the repair must keep, on this delivery and the next; the record keeps the model's text."""
    records: list[Mapping[str, Any]] = []
    deliveries = _answers_then_repair(
        database,
        redis_url,
        standin,
        completion(CUT_AFTER_TWO, finish_reason=finish_reason),
        completion(json.dumps({"grievances": repaired})),
        deliveries=2,
        records=records,
    )
    for emits in deliveries:
        reason = _held_reason(emits)
        assert reason.startswith(f"{LEFT_OUT_REASON}: "), reason
        assert BIRYANIS_LEFT_OUT in reason
    for record in records:
        answer, _repair = record["answers"]
        assert answer["raw_answer"] == CUT_AFTER_TWO
        assert answer["problems"][0].startswith("the answer was ")


def test_a_repair_of_an_answer_cut_short_that_keeps_what_it_held_is_judged(
    database: str, redis_url: str, standin: Standin
) -> None:
    (emits,) = _answers_then_repair(
        database,
        redis_url,
        standin,
        completion(CUT_AFTER_TWO, finish_reason="length"),
        completion(json.dumps({"grievances": [LATE, MISSING, RUDE]})),
    )
    assert [e.value["category"] for e in emits] == [
        "LATE_DELIVERY",
        "MISSING_ITEM",
        "PARTNER_CONDUCT",
    ]


def test_an_answer_cut_short_before_its_first_grievance_is_not_repaired_to_nothing(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Cut short in its first grievance, the answer holds none whole; a repair naming none is
    not taken as "nothing checkable" (a reply, no review): a person reads the complaint."""
    cut = json.dumps({"grievances": [LATE]})[:30]
    (emits,) = _answers_then_repair(
        database,
        redis_url,
        standin,
        completion(cut, finish_reason="length"),
        completion(json.dumps({"grievances": []})),
    )
    assert _held_reason(emits) == (
        f"{NOT_WHOLE_REASON} (the answer was cut short (finish_reason is 'length'))"
    )


def test_an_answer_withheld_by_a_content_filter_is_repaired_even_when_it_reads(
    database: str, redis_url: str, standin: Standin
) -> None:
    """A filter may withhold a claim from an answer that still parses: it used to be taken as
    the whole answer after one call. It now gets the repair, which must keep what it held."""
    withheld = completion(json.dumps({"grievances": [LATE, MISSING]}), "content_filter")
    (emits,) = _answers_then_repair(
        database,
        redis_url,
        standin,
        withheld,
        completion(json.dumps({"grievances": [LATE, MISSING, RUDE]})),
    )
    assert [e.value["category"] for e in emits] == [
        "LATE_DELIVERY",
        "MISSING_ITEM",
        "PARTNER_CONDUCT",
    ]


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
def test_a_repair_that_is_not_whole_sends_the_complaint_to_review(
    database: str, redis_url: str, standin: Standin, finish_reason: str
) -> None:
    """A repair cut short or withheld is not read either, even when its text parses: a person
    reads the complaint, on this delivery and the next."""
    deliveries = _answers_then_repair(
        database,
        redis_url,
        standin,
        completion(json.dumps({"grievances": [RUDE_PAST_THE_END]})),
        completion(json.dumps({"grievances": [RUDE]}), finish_reason=finish_reason),
        deliveries=2,
    )
    for emits in deliveries:
        reason = _held_reason(emits)
        assert reason.startswith(f"{REVIEW_REASON}: the answer was "), reason
        assert f"(finish_reason is {finish_reason!r})" in reason


GARLIC_BREAD = _article_grievance(
    "The raita had leaked all over the inside of the bag", "MISSING_ITEM", "garlic bread"
)
"""A claim whose item is not on the article's order (at the raita's words: only its item
matters here)."""


@pytest.mark.parametrize(
    ("repaired", "judged"),
    [
        pytest.param([LATE, MISSING], None, id="left out"),
        pytest.param(
            [LATE, MISSING, {**GARLIC_BREAD, "item_name": "Raita"}],
            [
                ("LATE_DELIVERY", None),
                ("MISSING_ITEM", "Hyderabadi Biryani"),
                ("MISSING_ITEM", "Raita"),
            ],
            id="placed on an item of the order",
        ),
    ],
)
def test_a_repair_that_drops_a_claim_it_could_not_place_on_the_order_sends_it_to_review(
    database: str,
    redis_url: str,
    standin: Standin,
    repaired: list[dict[str, Any]],
    judged: list[tuple[str, str | None]] | None,
) -> None:
    """The first answer claims an item the order does not have. A repair that drops that claim
    used to close the complaint with the others judged, and the customer's claim neither judged
    nor read by anyone; now a person reads the complaint. A repair that places the claim on an
    item of the order is used."""
    (emits,) = _first_answer_then_repair(
        database, redis_url, standin, [LATE, MISSING, GARLIC_BREAD], repaired
    )
    if judged is not None:
        assert [(e.value["category"], e.value["item_name"]) for e in emits] == judged
        return
    assert [e.topic for e in emits] == [t.REFUND_PRICED.name]
    priced = emits[0].value
    assert (priced["decision"], priced["payable_minor"]) == ("HELD_FOR_REVIEW", 0)
    assert priced["reason"] == (
        f"{LEFT_OUT_REASON}: MISSING_ITEM for 'garlic bread', which names no one item of the order"
    )


def test_a_complaint_longer_than_the_limit_is_invalid_input_before_any_model_call(
    database: str, redis_url: str, standin: Standin
) -> None:
    """Published straight to Kafka past the intake's limit: every model call would carry it."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    text = "The biryani was cold. " * 300  # 6,600 characters

    async def go() -> None:
        pool = pg_pool(database)
        await pool.open()
        redis = Redis.from_url(redis_url)
        llm = standin.client("standin-extractor", temperature=0.0)
        cache = RedisResponseCache(redis, f"test-extractor-{uuid.uuid4().hex}:", 600)
        handler = ExtractorHandler(
            pool, llm, cache, load_prompt(EXTRACTOR_PROMPT_VERSION), max_complaint_chars=5000
        )
        try:
            await handler.handle(complaint_message(dispute, text), Context(None))
        finally:
            await llm.aclose()
            await redis.aclose()
            await pool.close()

    with pytest.raises(InvalidInput) as caught:
        asyncio.run(go())
    assert str(caught.value) == (
        "complaint text is 6600 characters, more than the 5000 MAX_COMPLAINT_CHARS allows"
    )
    assert standin.stats()["by_dispute"].get(dispute, 0) == 0


# --------------------------------------------------------------------------- complaint.extracted


def _records_of_two_deliveries(
    database: str,
    redis_url: str,
    standin: Standin,
    faults: list[str],
    text: str = ARTICLE_COMPLAINT,
) -> tuple[str, list[Mapping[str, Any]], list[Sequence[Emit]]]:
    """A new dispute's complaint handled and redelivered (one cache), the stand-in's next answers
    given ``faults``: (the dispute, each delivery's complaint.extracted, each one's other emits)."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=faults)
    cache = f"test-extractor-{uuid.uuid4().hex}:"
    records: list[Mapping[str, Any]] = []
    flows = [
        _handle(
            database, redis_url, standin, dispute, cache_prefix=cache, text=text, records=records
        )[0]
        for _ in range(2)
    ]
    return dispute, records, flows


def _without_time(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "extracted_at"}


def test_each_complaint_records_its_answer_and_outcome_on_every_delivery(
    database: str, redis_url: str, standin: Standin
) -> None:
    dispute, (first, again), (flow, _) = _records_of_two_deliveries(
        database, redis_url, standin, []
    )

    assert (first["dispute_id"], first["order_id"]) == (dispute, ARTICLE_ORDER.order_id)
    assert first["complaint_sha256"] == sha256_hex(ARTICLE_COMPLAINT)
    assert first["snapshot_sha256"] == flow[0].value["snapshot_sha256"]
    assert (first["outcome"], first["grievance_total"], first["reason"]) == ("EXTRACTED", 4, None)
    [answer] = first["answers"]
    assert (answer["attempt"], answer["problems"]) == (1, [])
    assert (answer["model"], answer["prompt_version"]) == (
        "standin-extractor",
        EXTRACTOR_PROMPT_VERSION,
    )
    assert (answer["served_model"], answer["system_fingerprint"]) == (
        "standin-extractor",
        SYSTEM_FINGERPRINT,
    )
    assert len(json.loads(answer["raw_answer"])["grievances"]) == 4, "the answer as it came"
    assert _without_time(again) == _without_time(first), "a redelivery records the same"
    assert standin.stats()["by_dispute"][dispute] == 1


def test_a_repaired_answer_is_recorded_after_the_first_with_its_problems(
    database: str, redis_url: str, standin: Standin
) -> None:
    _, (record, again), _ = _records_of_two_deliveries(database, redis_url, standin, ["malformed"])

    assert (record["outcome"], record["grievance_total"]) == ("EXTRACTED", 4)
    first, repair = record["answers"]
    assert (first["attempt"], repair["attempt"]) == (1, 2)
    assert len(first["problems"]) == 1
    assert first["problems"][0].startswith("the answer is not JSON: ")
    assert first["raw_answer"] != repair["raw_answer"]
    assert repair["problems"] == []
    assert _without_time(again) == _without_time(record)


def test_a_complaint_held_after_its_repair_records_both_answers_and_why(
    database: str, redis_url: str, standin: Standin
) -> None:
    _, (record, _), (flow, _) = _records_of_two_deliveries(
        database, redis_url, standin, ["malformed", "malformed"]
    )

    assert (record["outcome"], record["grievance_total"]) == ("HELD", 0)
    assert record["reason"] == flow[0].value["reason"]
    assert [a["attempt"] for a in record["answers"]] == [1, 2]
    assert all(a["problems"] for a in record["answers"])


def test_a_refused_complaint_records_no_answer_and_the_refusal(
    database: str, redis_url: str, standin: Standin
) -> None:
    _, (record, again), (flow, _) = _records_of_two_deliveries(
        database, redis_url, standin, ["400"]
    )

    assert (record["outcome"], record["answers"]) == ("REFUSED", [])
    assert record["reason"] == flow[0].value["reason"]
    assert "HTTP 400" in record["reason"]
    assert _without_time(again) == _without_time(record)


def test_a_refused_repair_records_the_first_answer(
    database: str, redis_url: str, standin: Standin
) -> None:
    _, (record, again), _ = _records_of_two_deliveries(
        database, redis_url, standin, ["malformed", "400"]
    )

    assert record["outcome"] == "REFUSED"
    [first] = record["answers"]
    assert first["attempt"] == 1
    assert first["problems"][0].startswith("the answer is not JSON: ")
    assert _without_time(again) == _without_time(record)


def test_a_complaint_with_nothing_checkable_records_its_answer(
    database: str, redis_url: str, standin: Standin
) -> None:
    text = "I love this app and I will order again tomorrow."
    _, (record, _), (flow, _) = _records_of_two_deliveries(database, redis_url, standin, [], text)

    assert [e.value["decision"] for e in flow] == ["NOTHING_TO_PAY"]
    assert (record["outcome"], record["grievance_total"], record["reason"]) == (
        "NOTHING_CHECKABLE",
        0,
        None,
    )
    [answer] = record["answers"]
    assert json.loads(answer["raw_answer"])["grievances"] == []
    assert record["complaint_sha256"] == sha256_hex(text)


def test_a_record_encodes_under_its_contract(
    database: str, redis_url: str, standin: Standin
) -> None:
    records: list[Mapping[str, Any]] = []
    _handle(database, redis_url, standin, f"d-{uuid.uuid4().hex[:12]}", records=records)
    codec = Codec(FingerprintFraming(), {t.COMPLAINT_EXTRACTED.name: t.COMPLAINT_EXTRACTED.schema})
    decoded = codec.decode(
        t.COMPLAINT_EXTRACTED.name, codec.encode(t.COMPLAINT_EXTRACTED.name, records[0])
    )
    assert decoded["answers"][0]["raw_answer"] == records[0]["answers"][0]["raw_answer"]
