"""The judge's handler against real Redis and the LLM stand-in: inputs that must not stop it.

A request the endpoint refuses for its content is one seat's ESCALATE, not a crash loop; a
grievance of an unknown category is dead-lettered; wrong settings (a 401) still stop the stage.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from redis.asyncio import Redis

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.codec import Codec, FingerprintFraming
from refund_bench.domain import MAX_JUDGES, Category, OrderRecord
from refund_bench.errors import InvalidInput
from refund_bench.llm.cache import CallOutcome, OnCall, RedisResponseCache, uncounted
from refund_bench.llm.client import LlmRejected
from refund_bench.llm.roles import JUDGE_PROMPT_VERSION, load_prompt
from refund_bench.runtime import Context, Message
from refund_bench.samples import ARTICLE_ORDER
from services.extractor.evidence import (
    claim_unrecorded,
    evidence_fields,
    freeze,
    load_snapshot,
    silent_fields,
)
from services.judge.handler import (
    DRAWS_PER_SEAT,
    MAX_CITATION_CHARS,
    MAX_CITATIONS,
    REDRAW_SEED_STRIDE,
    JudgeHandler,
    Seat,
)
from services.judge.normalise import normalise
from tests.fakes.chat_completion import FixedAnswerServer, completion
from tests.grievances import grievance_message
from tests.standin import Standin

pytestmark = pytest.mark.stack


def _dispute() -> str:
    return f"d-{uuid.uuid4().hex[:12]}"


def _deliver(
    redis_url: str,
    standin: Standin,
    message: Message,
    outcomes: list[CallOutcome],
    deliveries: int = 1,
    models: Sequence[str] = (),
    then: Sequence[Message] = (),
) -> list[list[Mapping[str, Any]]]:
    """The rulings of a three-seat bench for each delivery of ``message`` (one cache for all);
    ``models``: the seats' model in each delivery (default: ``standin-judge`` in all);
    ``then``: messages delivered after those, one each."""

    async def go() -> list[list[Mapping[str, Any]]]:
        redis = Redis.from_url(redis_url)
        cache = RedisResponseCache(redis, f"test-judge-{uuid.uuid4().hex}:", 600)
        prompt = load_prompt(JUDGE_PROMPT_VERSION)
        try:
            runs = []
            delivered = [(message, model) for model in models or ["standin-judge"] * deliveries]
            for next_message, model in [*delivered, *((m, "standin-judge") for m in then)]:
                llm = standin.client(model, temperature=0.7)
                seats = [Seat(index=i, llm=llm, seed=1000 + i) for i in range(3)]
                handler = JudgeHandler(seats, cache, prompt, outcomes.append)
                try:
                    emits = await handler.handle(next_message, Context(None))
                finally:
                    await llm.aclose()
                runs.append([e.value for e in emits])
            return runs
        finally:
            await redis.aclose()

    return asyncio.run(go())


def _ruled(ruling: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a ruling decides and says, without the time it was cast."""
    return tuple(
        ruling[field]
        for field in ("judge_seat", "ruling", "model_ruling", "confidence", "reasoning")
    )


def test_a_refused_request_is_that_seats_escalate_on_every_delivery(
    redis_url: str, standin: Standin
) -> None:
    """The refusal is cached in the answer's place: a redelivery casts the same three rulings
    with no call, so a replay neither pays for a new draw nor publishes a different ruling."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=["400"])
    outcomes: list[CallOutcome] = []

    first, second = _deliver(redis_url, standin, grievance_message(dispute), outcomes, deliveries=2)

    (refused,) = [r for r in first if r["model_ruling"] == "REFUSED"]
    assert refused["ruling"] == "ESCALATE"
    assert refused["raw_response"] == ""
    assert "HTTP 400" in refused["reasoning"]
    assert sorted(r["ruling"] for r in first) == ["ESCALATE", "UPHELD", "UPHELD"]
    assert [_ruled(r) for r in second] == [_ruled(r) for r in first]
    assert sorted(outcomes) == ["cached", "cached", "cached", "made", "made", "refused"]
    assert standin.stats()["by_dispute"][dispute] == 3


def test_a_grievance_id_that_names_another_claim_is_judged_anew(
    redis_url: str, standin: Standin
) -> None:
    """The cache key holds what the judges read: a grievance id that comes back with another
    claim (the complaint extracted again after its extraction left the cache) is judged on
    that claim, not given the rulings drawn for the claim the id named before."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    outcomes: list[CallOutcome] = []

    late, missing, late_again = _deliver(
        redis_url,
        standin,
        grievance_message(dispute, "LATE_DELIVERY"),
        outcomes,
        then=[grievance_message(dispute, "MISSING_ITEM"), grievance_message(dispute)],
    )

    assert outcomes == ["made"] * 6 + ["cached"] * 3
    assert standin.stats()["by_dispute"][dispute] == 6
    assert [r["raw_response"] for r in late_again] == [r["raw_response"] for r in late]
    assert [r["raw_response"] for r in missing] != [r["raw_response"] for r in late]


def test_a_seat_given_another_model_draws_anew_and_names_it(
    redis_url: str, standin: Standin
) -> None:
    """The cache key holds the model: a redelivery after a model change is not the old model's
    answer labelled with the new model's name."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    outcomes: list[CallOutcome] = []

    first, replay, changed = _deliver(
        redis_url,
        standin,
        grievance_message(dispute),
        outcomes,
        models=["standin-judge", "standin-judge", "standin-judge-2"],
    )

    assert outcomes == ["made"] * 3 + ["cached"] * 3 + ["made"] * 3
    assert standin.stats()["by_dispute"][dispute] == 6
    assert [r["raw_response"] for r in replay] == [r["raw_response"] for r in first]
    assert {r["model"] for r in first + replay} == {"standin-judge"}
    assert {r["model"] for r in changed} == {"standin-judge-2"}


def test_a_seat_whose_answer_is_cut_short_draws_again_with_its_next_seed(
    redis_url: str, standin: Standin
) -> None:
    """The ruling names the seed of the draw it comes from; a redelivery served from the cache
    names the same seeds."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=["malformed"])
    first, again = _deliver(redis_url, standin, grievance_message(dispute), [], deliveries=2)

    offsets = sorted(r["seed"] - (1000 + r["judge_seat"]) for r in first)
    assert offsets == [0, 0, REDRAW_SEED_STRIDE], "one seat drew a second time"
    assert all(r["model_ruling"] != "UNREADABLE" for r in first)
    assert [(r["judge_seat"], r["seed"]) for r in again] == [
        (r["judge_seat"], r["seed"]) for r in first
    ]
    assert standin.stats()["by_dispute"][dispute] == 4


def test_a_wrong_api_key_stops_the_judge(redis_url: str, standin: Standin) -> None:
    """HTTP 401 is the settings, not the grievance: raised, so the stage stops and alerts."""
    standin.faults(next_faults=["401"])
    with pytest.raises(LlmRejected) as caught:
        _deliver(redis_url, standin, grievance_message(f"d-{uuid.uuid4().hex[:12]}"), [])
    assert caught.value.status == 401


def test_a_setting_the_model_refuses_stops_the_judge_and_caches_nothing(
    redis_url: str, standin: Standin
) -> None:
    """A 400 naming a setting (here ``temperature``) would refuse every grievance: raised, so
    the stage stops and alerts, instead of casting ESCALATE for everything and caching that
    (a refusal is counted, and cached, as ``refused``)."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    standin.faults(next_faults=["400_setting"])
    outcomes: list[CallOutcome] = []
    with pytest.raises(LlmRejected) as caught:
        _deliver(redis_url, standin, grievance_message(dispute), outcomes)
    assert (caught.value.status, caught.value.param) == (400, "temperature")
    assert not caught.value.refused_input
    assert "refused" not in outcomes


def test_an_unknown_category_is_invalid_input_and_calls_no_model(
    redis_url: str, standin: Standin
) -> None:
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    with pytest.raises(InvalidInput, match="unknown grievance category 'SMELL'"):
        _deliver(redis_url, standin, grievance_message(dispute, category="SMELL"), [])
    assert standin.stats()["by_dispute"].get(dispute, 0) == 0


def test_a_grievance_handled_twice_at_once_pays_for_each_seat_once(
    redis_url: str, standin: Standin
) -> None:
    """Two handlings of one grievance at the same time (a handler retried while its earlier
    attempt's calls still run, or a grievance twice in a batch): the second joins the calls of
    the first instead of drawing again, and both cast the same rulings."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    message = grievance_message(dispute)
    outcomes: list[CallOutcome] = []

    async def go() -> list[list[Mapping[str, Any]]]:
        redis = Redis.from_url(redis_url)
        cache = RedisResponseCache(redis, f"test-judge-{uuid.uuid4().hex}:", 600)
        llm = standin.client("standin-judge", temperature=0.7)
        seats = [Seat(index=i, llm=llm, seed=1000 + i) for i in range(3)]
        handler = JudgeHandler(seats, cache, load_prompt(JUDGE_PROMPT_VERSION), outcomes.append)
        try:
            first, second = await asyncio.gather(
                handler.handle(message, Context(None)), handler.handle(message, Context(None))
            )
        finally:
            await llm.aclose()
            await redis.aclose()
        return [[e.value for e in first], [e.value for e in second]]

    standin.faults(latency_ms=300)
    try:
        first, second = asyncio.run(go())
    finally:
        standin.faults(latency_ms=0)

    assert standin.stats()["by_dispute"][dispute] == 3
    assert sorted(outcomes) == ["cached"] * 3 + ["made"] * 3
    assert [_ruled(r) for r in second] == [_ruled(r) for r in first]
    assert [r["raw_response"] for r in second] == [r["raw_response"] for r in first]


def _rulings_for_answer(
    redis_url: str, endpoint: FixedAnswerServer, message: Message
) -> list[Mapping[str, Any]]:
    """The rulings a three-seat bench casts for ``message`` when ``endpoint`` gives every seat
    the same answer."""
    (rulings,) = _deliveries_answered(redis_url, endpoint, message, 1)
    return rulings


def _deliveries_answered(
    redis_url: str,
    endpoint: FixedAnswerServer,
    message: Message,
    deliveries: int,
    seats: int = 3,
    cache_prefix: str | None = None,
    on_call: OnCall = uncounted,
) -> list[list[Mapping[str, Any]]]:
    """The rulings a bench of ``seats`` (one handler: one process) casts for each delivery of
    ``message`` (one cache for all, under ``cache_prefix`` if given) when ``endpoint`` gives
    every seat the same answer (with one seat, the answers come in the order the endpoint gives
    them); the handler's calls counted by ``on_call``."""

    async def go() -> list[list[Mapping[str, Any]]]:
        redis = Redis.from_url(redis_url)
        prefix = cache_prefix or f"test-judge-{uuid.uuid4().hex}:"
        cache = RedisResponseCache(redis, prefix, 600)
        llm = endpoint.client(temperature=0.7)
        bench = [Seat(index=i, llm=llm, seed=1000 + i) for i in range(seats)]
        handler = JudgeHandler(bench, cache, load_prompt(JUDGE_PROMPT_VERSION), on_call)
        try:
            runs = []
            for _ in range(deliveries):
                emits = await handler.handle(message, Context(None))
                runs.append([e.value for e in emits])
            return runs
        finally:
            await llm.aclose()
            await redis.aclose()

    return asyncio.run(go())


def _rulings_on(
    redis_url: str, message: Message, ruling: str, cited: list[str], reasoning: str
) -> tuple[list[Mapping[str, Any]], int]:
    """The rulings a three-seat bench casts for ``message`` when every seat's model answers
    ``ruling`` citing ``cited``, and the number of calls made."""
    answer = {"ruling": ruling, "evidence_cited": cited, "confidence": 0.8, "reasoning": reasoning}
    with FixedAnswerServer(completion(json.dumps(answer))) as server:
        return _rulings_for_answer(redis_url, server, message), len(server.requests)


READABLE_UPHELD = json.dumps(
    {
        "ruling": "UPHELD",
        "evidence_cited": ["derived.sla_exceeded"],
        "confidence": 0.9,
        "reasoning": "Delivered after the promised time.",
    }
)
"""A whole, grounded answer: what a model cut short at its closing brace would have written."""


def test_a_ruling_names_what_drew_it_in_the_process_that_drew_it(redis_url: str) -> None:
    """Each ruling records the temperature it was drawn at and the model and fingerprint the
    endpoint's response named (a dated snapshot for the alias asked for), and so does a ruling
    the same process casts again from the cache (a handler retried after another seat failed).
    Another process casts the same ruling from the cache, with no call, and names none of them:
    they are not kept with the answer."""
    body = completion(READABLE_UPHELD, model="judge-2026-11-01", system_fingerprint="fp_9b0c")
    message, prefix = grievance_message(_dispute()), f"test-judge-{uuid.uuid4().hex}:"
    with FixedAnswerServer(body) as server:
        first, again = _deliveries_answered(redis_url, server, message, 2, cache_prefix=prefix)
        [elsewhere] = _deliveries_answered(redis_url, server, message, 1, cache_prefix=prefix)

    assert len(server.requests) == 3, "every later delivery came from the cache"
    assert (
        [_ruled(r) for r in elsewhere] == [_ruled(r) for r in again] == [_ruled(r) for r in first]
    )
    for rulings in (first, again):
        assert [
            (r["model"], r["served_model"], r["system_fingerprint"], r["temperature"])
            for r in rulings
        ] == [("any-model", "judge-2026-11-01", "fp_9b0c", 0.7)] * 3
    assert [
        (r["model"], r["served_model"], r["system_fingerprint"], r["temperature"])
        for r in elsewhere
    ] == [("any-model", None, None, None)] * 3


def test_a_ruling_from_an_endpoint_that_names_nothing_records_none(redis_url: str) -> None:
    with FixedAnswerServer(completion(READABLE_UPHELD)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert [(r["served_model"], r["system_fingerprint"], r["temperature"]) for r in rulings] == [
        (None, None, 0.7)
    ] * 3


def test_a_malformed_draw_before_a_good_one_leaves_no_trace_in_the_ruling(
    redis_url: str,
) -> None:
    """Each seat's first draw is cut short and names another model: the ruling names what
    served the draw it comes from, the second."""
    cut = completion(READABLE_UPHELD, "length", model="old", system_fingerprint="fp_old")
    good = completion(READABLE_UPHELD, model="new", system_fingerprint="fp_new")
    with FixedAnswerServer(good, before=[cut] * 3) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert len(server.requests) == 6
    assert [(r["ruling"], r["served_model"], r["system_fingerprint"]) for r in rulings] == [
        ("UPHELD", "new", "fp_new")
    ] * 3


def test_a_served_model_name_of_any_length_is_kept_bounded(redis_url: str) -> None:
    from refund_bench.llm.client import MAX_SERVED_CHARS

    name = "m" * 10_000
    with FixedAnswerServer(completion(READABLE_UPHELD, model=name)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    for ruling in rulings:
        assert ruling["served_model"].startswith("m" * MAX_SERVED_CHARS)
        assert len(ruling["served_model"]) < MAX_SERVED_CHARS + 60


def test_the_standins_rulings_name_its_rules_fingerprint(redis_url: str, standin: Standin) -> None:
    from services.llm_standin.app import SYSTEM_FINGERPRINT

    [rulings] = _deliver(redis_url, standin, grievance_message(_dispute()), [])
    assert {(r["served_model"], r["system_fingerprint"]) for r in rulings} == {
        ("standin-judge", SYSTEM_FINGERPRINT)
    }
    assert SYSTEM_FINGERPRINT.startswith("fp_")


def test_the_cached_answer_keeps_the_form_every_judge_reads(redis_url: str) -> None:
    """The answer's value is the one a judge of an earlier release reads (the seed header and
    the text): either release reads the other's in a rolling update."""
    message = grievance_message(_dispute())

    async def go() -> list[Any]:
        redis = Redis.from_url(redis_url)
        prefix = f"test-judge-{uuid.uuid4().hex}:"
        cache = RedisResponseCache(redis, prefix, 600)
        with FixedAnswerServer(completion(READABLE_UPHELD, model="new")) as server:
            llm = server.client(temperature=0.7)
            seats = [Seat(index=i, llm=llm, seed=1000 + i) for i in range(3)]
            prompt = load_prompt(JUDGE_PROMPT_VERSION)
            handler = JudgeHandler(seats, cache, prompt, lambda _: None)
            try:
                await handler.handle(message, Context(None))
                keys = sorted([k async for k in redis.scan_iter(match=f"{prefix}*")])
                return [await redis.get(k) for k in keys]
            finally:
                await llm.aclose()
                await redis.aclose()

    assert sorted(asyncio.run(go())) == [
        f"seed={1000 + seat}\n{READABLE_UPHELD}".encode() for seat in range(3)
    ], "the value an earlier judge reads, and nothing beside it"


def test_a_seat_none_of_whose_draws_could_be_read_names_what_served_its_last(
    redis_url: str,
) -> None:
    """Each seat's draws: an unreadable answer, one cut short, then one the parse refuses; the
    ruling is UNREADABLE and names what served the last draw."""
    unreadable = completion("not json", model="a", system_fingerprint="fp_a")
    cut = completion(READABLE_UPHELD, "length", model="b", system_fingerprint="fp_b")
    last = completion("still not json", model="c", system_fingerprint="fp_c")
    with FixedAnswerServer(last, before=[unreadable, cut]) as server:
        [rulings] = _deliveries_answered(
            redis_url, server, grievance_message(_dispute()), 1, seats=1
        )

    assert len(server.requests) == DRAWS_PER_SEAT
    assert [
        (r["model_ruling"], r["served_model"], r["system_fingerprint"], r["temperature"])
        for r in rulings
    ] == [("UNREADABLE", "c", "fp_c", 0.7)]


def test_a_seat_whose_last_draw_is_cut_short_names_what_served_it(redis_url: str) -> None:
    """The last draw's answer is cut short: its text is not read, but the response named what
    served it."""
    cut = completion(READABLE_UPHELD, "length", model="b", system_fingerprint="fp_b")
    unreadable = completion("x", model="a")
    with FixedAnswerServer(cut, before=[unreadable] * (DRAWS_PER_SEAT - 1)) as server:
        [rulings] = _deliveries_answered(
            redis_url, server, grievance_message(_dispute()), 1, seats=1
        )

    assert [(r["model_ruling"], r["served_model"], r["system_fingerprint"]) for r in rulings] == [
        ("UNREADABLE", "b", "fp_b")
    ]


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
def test_a_seat_whose_every_draw_is_cut_short_is_unreadable_on_every_delivery(
    redis_url: str, finish_reason: str
) -> None:
    """Every draw of every seat ends ``length`` (or ``content_filter``): each seat draws three
    times and casts UNREADABLE, counted as ESCALATE, even though the text of its last draw
    would parse. A redelivery served from the cache casts the same rulings, without a call.
    The judge used to take the parse of the last draw, the answer it had just called
    malformed."""
    outcomes: list[CallOutcome] = []
    with FixedAnswerServer(completion(READABLE_UPHELD, finish_reason)) as server:
        first, again = _deliveries_answered(
            redis_url, server, grievance_message(_dispute()), 2, on_call=outcomes.append
        )

    assert len(server.requests) == 3 * DRAWS_PER_SEAT, "each seat drew again, in vain, once"
    # Every answer is counted made and unread (the page for an endpoint many of whose answers
    # are), then the three UNREADABLE rulings stored are served from the cache.
    draws = 3 * DRAWS_PER_SEAT
    assert Counter(outcomes) == {"unreadable": draws, "made": draws, "cached": 3}
    for rulings in (first, again):
        assert [r["model_ruling"] for r in rulings] == ["UNREADABLE"] * 3
        assert [r["ruling"] for r in rulings] == ["ESCALATE"] * 3
        assert all(f"finish_reason is {finish_reason!r}" in r["reasoning"] for r in rulings)
        assert [r["raw_response"] for r in rulings] == [READABLE_UPHELD] * 3
    assert [_ruled(r) for r in again] == [_ruled(r) for r in first]
    assert [r["seed"] for r in again] == [r["seed"] for r in first]
    assert {r["seed"] - (1000 + r["judge_seat"]) for r in first} == {
        (DRAWS_PER_SEAT - 1) * REDRAW_SEED_STRIDE
    }


@pytest.mark.parametrize("finish_reason", ["eos_token", None])
def test_an_answer_ended_in_the_endpoints_own_words_is_one_call_per_seat(
    redis_url: str, finish_reason: str | None
) -> None:
    """An endpoint that ends whole answers with ``eos_token`` (TGI) or no finish reason (some
    gateways): every seat rules on its first draw. Each used to draw three times, on every
    grievance, and then cast the answer it had called malformed."""
    with FixedAnswerServer(completion(READABLE_UPHELD, finish_reason)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert len(server.requests) == 3
    assert [r["ruling"] for r in rulings] == ["UPHELD"] * 3
    assert [r["seed"] for r in rulings] == [1000, 1001, 1002]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            {"ruling": "REJECTED", "evidence_cited": ["order.packaging_notes"]},
            "a rejection resting on a record that is absent",
        ),
        (
            {"ruling": "REJECTED", "evidence_cited": ["delivered_at", "packaging_notes"]},
            "a rejection resting in part on an absent record",
        ),
        ({"ruling": "UPHELD", "evidence_cited": []}, "an upheld claim grounded in nothing"),
        (
            {"ruling": "UPHELD", "evidence_cited": ["order.customer_mood"]},
            "an upheld claim citing a field the snapshot does not have",
        ),
    ],
)
def test_a_model_ruling_on_silent_or_no_evidence_is_cast_as_escalate(
    redis_url: str, answer: dict[str, Any], why: str
) -> None:
    """The judge's code, not the model, keeps "missing evidence is never REJECTED": whatever a
    model answers, the ruling cast is ESCALATE, and the model's word is kept for audit."""
    dispute = f"d-{uuid.uuid4().hex[:12]}"
    content = json.dumps({**answer, "confidence": 0.9, "reasoning": why})

    with FixedAnswerServer(completion(content)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(dispute, "PACKAGING"))

    assert len(server.requests) == 3, "three seats asked"
    assert [r["ruling"] for r in rulings] == ["ESCALATE"] * 3, why
    assert [r["model_ruling"] for r in rulings] == [answer["ruling"]] * 3
    assert all(r["raw_response"] == content for r in rulings), "the raw answer is kept"


@pytest.mark.parametrize(
    "cited",
    [
        pytest.param(["order.packaging_condition_recorded"], id="the missing record"),
        pytest.param(["order.line_items"], id="only recorded fields"),
    ],
)
def test_every_seat_upholding_a_claim_without_its_record_is_cast_marked(
    redis_url: str, cited: list[str]
) -> None:
    """A model that takes the customer at their word on every seat: the rulings stay UPHELD
    as cast, each marked as resting on missing evidence, so that the tally counts none of them
    towards a majority. The article's order has no packaging record, so the raita claim rests
    on nothing whether the rulings cite that record or only the line items, which are
    recorded."""
    rulings, _ = _rulings_on(
        redis_url,
        grievance_message(_dispute(), "PACKAGING"),
        "UPHELD",
        cited,
        "Nothing contradicts the customer's account.",
    )
    assert [r["ruling"] for r in rulings] == ["UPHELD"] * 3
    assert [r["cites_missing_evidence"] for r in rulings] == [True] * 3


@pytest.mark.parametrize(
    "cited",
    [
        pytest.param(["derived.missing_units_estimate"], id="the estimates"),
        pytest.param(["order.line_items", "derived.pickup_weight_shortfall_g"], id="the items"),
    ],
)
def test_a_rejection_citing_an_object_that_holds_a_null_is_cast_as_escalate(
    redis_url: str, cited: list[str]
) -> None:
    """The raita has no unit weight on record, so its missing-unit estimate is null. A
    rejection of the missing raita that cites the estimates, or the line items, as a whole
    rests on that null as much as one citing it by name: ESCALATE on every seat, marked. It
    used to stand as REJECTED, since neither object is null as a whole."""
    no_weight = ARTICLE_ORDER.model_dump()
    no_weight["line_items"][1]["unit_weight_g"] = None
    order = OrderRecord.model_validate(no_weight)
    message = grievance_message(
        _dispute(), "MISSING_ITEM", order=order, item_name="Raita", item_quantity=1
    )
    rulings, calls = _rulings_on(
        redis_url, message, "REJECTED", cited, "The estimates show no missing raita."
    )

    assert calls == 3
    assert [r["ruling"] for r in rulings] == ["ESCALATE"] * 3
    assert [r["model_ruling"] for r in rulings] == ["REJECTED"] * 3
    assert [r["cites_missing_evidence"] for r in rulings] == [True] * 3
    assert all("missing evidence is never a rejection" in r["reasoning"] for r in rulings)


@pytest.mark.parametrize(("item_name", "marked"), [("Raita", True), ("Hyderabadi Biryani", False)])
def test_upholding_a_missing_item_with_no_unit_weight_rests_on_silence(
    redis_url: str, item_name: str, marked: bool
) -> None:
    """The raita has no unit weight, so the pickup weights say nothing of how many raitas are
    missing: three seats upholding the claim, citing the weights, are each marked and make no
    majority (pricing would pay the raita in full on their word). The same order's biryani is
    weighed: its claim stands on the same citations."""
    no_weight = ARTICLE_ORDER.model_dump()
    no_weight["line_items"][1]["unit_weight_g"] = None
    order = OrderRecord.model_validate(no_weight)
    message = grievance_message(
        _dispute(), "MISSING_ITEM", order=order, item_name=item_name, item_quantity=1
    )
    cited = ["order.pickup_weight_expected_g", "order.pickup_weight_actual_g"]
    rulings, calls = _rulings_on(redis_url, message, "UPHELD", cited, "The bag was light.")

    assert calls == 3
    assert [r["ruling"] for r in rulings] == ["UPHELD"] * 3
    assert [r["cites_missing_evidence"] for r in rulings] == [marked] * 3


def test_an_unreadable_answer_holding_a_nul_is_kept_storable(redis_url: str) -> None:
    """An answer cut short may hold a NUL, which PostgreSQL text cannot take; the ruling keeps
    the raw answer with it replaced by U+FFFD, so that the recorder can store it, instead of
    failing the audit record on every redelivery."""
    content = '{"ruling": "UPH\x00ELD", "reasoning": "late'
    with FixedAnswerServer(completion(content)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert len(server.requests) == 3 * DRAWS_PER_SEAT, "each seat drew again, in vain"
    assert [r["model_ruling"] for r in rulings] == ["UNREADABLE"] * 3
    assert [r["raw_response"] for r in rulings] == [content.replace("\x00", "\ufffd")] * 3


def test_an_answer_holding_a_lone_surrogate_is_drawn_again_not_retried_as_an_outage(
    redis_url: str,
) -> None:
    """A completion whose text holds a lone surrogate escape is the model's answer, unusable:
    each seat draws again and then casts ESCALATE, keeping the text with the surrogate
    replaced. Taken for a broken endpoint, it was retried with backoff and then failed the
    whole grievance, on every redelivery."""
    content = '{"ruling": "UPHELD", "reasoning": "late \ud83d"}'
    with FixedAnswerServer(completion(content)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert len(server.requests) == 3 * DRAWS_PER_SEAT, "each seat drew again, in vain"
    assert [r["model_ruling"] for r in rulings] == ["UNREADABLE"] * 3
    assert [r["ruling"] for r in rulings] == ["ESCALATE"] * 3
    assert [r["raw_response"] for r in rulings] == [content.replace("\ud83d", "?")] * 3


def test_a_lone_surrogate_outside_the_answer_does_not_stop_the_answer_being_read(
    redis_url: str,
) -> None:
    """A lone surrogate escape in a field the judge does not read (the model's name, a refusal
    field) leaves the answer readable: the seats rule on it, with one call each."""
    answer = {
        "ruling": "UPHELD",
        "evidence_cited": ["derived.sla_exceeded"],
        "confidence": 0.8,
        "reasoning": "Delivered after the promised time.",
    }
    content = json.dumps(answer)
    message = {"role": "assistant", "content": content, "refusal": "\udc00"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = json.dumps({"id": "x", "model": "m\ud83d", "choices": [choice]}).encode()
    with FixedAnswerServer(body) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert len(server.requests) == 3
    assert [r["model_ruling"] for r in rulings] == ["UPHELD"] * 3
    assert [r["raw_response"] for r in rulings] == [content] * 3


def test_a_ruling_and_a_full_bench_verdict_fit_one_record_whatever_the_model_writes(
    redis_url: str,
) -> None:
    """A model that writes on and on (reasoning of 300,000 four-byte characters, a thousand
    distinct citations of 1,000 four-byte characters each) still yields a ruling, and a verdict
    of the largest bench, that fit one Kafka record: one that did not would be dead-lettered
    and its grievance never decided. The rejection cites a recorded field among the kept
    citations, but more than a ruling keeps: ESCALATE."""
    long = [f"{index:04d}" + "\U0001f642" * 1_000 for index in range(998)]
    cited = ["derived.sla_exceeded", *long, "order.packaging_notes"]
    answer = {"ruling": "REJECTED", "confidence": 0.9, "evidence_cited": cited}
    content = json.dumps({**answer, "reasoning": "\U0001f642" * 300_000})
    with FixedAnswerServer(completion(content)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute()))

    assert [r["ruling"] for r in rulings] == ["ESCALATE"] * 3
    ruling = rulings[0]
    assert len(ruling["evidence_cited"]) == MAX_CITATIONS
    assert all(len(c) < MAX_CITATION_CHARS + 50 for c in ruling["evidence_cited"])
    assert f"[{1000 - MAX_CITATIONS} more citations not kept]" in ruling["reasoning"]
    assert "cites more evidence than a ruling keeps" in ruling["reasoning"]
    limit = 1_000_000 - 512  # the producer's message.max.bytes, less the runner's margin
    cast = Codec(FingerprintFraming(), {t.RULING_CAST.name: t.RULING_CAST.schema})
    assert len(cast.encode(t.RULING_CAST.name, ruling)) < limit
    summary = {field: ruling[field] for field in ev.RulingSummary.model_fields}
    verdict = ev.VerdictDecided(
        dispute_id=ruling["dispute_id"],
        order_id=ruling["order_id"],
        grievance_id="g1",
        grievance_total=1,
        category="LATE_DELIVERY",
        snapshot_sha256=ruling["snapshot_sha256"],
        outcome="ESCALATE",
        votes_upheld=0,
        votes_rejected=0,
        votes_escalate=MAX_JUDGES,
        split=f"0-0-{MAX_JUDGES}",
        unanimous=True,
        rulings=[ev.RulingSummary(**{**summary, "judge_seat": seat}) for seat in range(MAX_JUDGES)],
        decided_at=datetime(2026, 12, 5, tzinfo=UTC),
    )
    decided = Codec(FingerprintFraming(), {t.VERDICT_DECIDED.name: t.VERDICT_DECIDED.schema})
    assert len(decided.encode(t.VERDICT_DECIDED.name, verdict.to_avro())) < limit


UNKNOWN = [f"order.note_{index}" for index in range(MAX_CITATIONS)]
"""Sixteen distinct citations of fields the snapshot does not have."""


def _replayed(ruling: Mapping[str, Any], category: str) -> tuple[str, bool]:
    """The ruling and mark an auditor gets from the stored record alone: the model's word,
    the kept citations, the snapshot (here, the article's, as the grievance carried it) and
    the notes of what was not kept."""
    snapshot = freeze(ARTICLE_ORDER)
    evidence = load_snapshot(snapshot.json, snapshot.sha256)
    fields, silent = evidence_fields(evidence), silent_fields(evidence)
    cut = "more citations not kept]" in ruling["reasoning"] or any(
        "more characters not kept]" in cited for cited in ruling["evidence_cited"]
    )
    replayed = normalise(
        ruling["model_ruling"],
        ruling["evidence_cited"],
        fields,
        silent,
        claim_unrecorded(Category(category), fields, silent),
        citations_cut=cut,
    )
    return replayed.ruling.value, replayed.cites_missing_evidence


@pytest.mark.parametrize(
    ("category", "answer", "ruling", "kept"),
    [
        pytest.param(
            "LATE_DELIVERY",
            {"ruling": "UPHELD", "evidence_cited": [*UNKNOWN, "derived.sla_exceeded"]},
            "ESCALATE",
            UNKNOWN,
            id="the one recorded field beyond the sixteen kept",
        ),
        pytest.param(
            "LATE_DELIVERY",
            {"ruling": "REJECTED", "evidence_cited": ["derived.sla_exceeded", "x" * 250]},
            "ESCALATE",
            ["derived.sla_exceeded", "x" * 200 + " [... 50 more characters not kept]"],
            id="a citation cut short",
        ),
        pytest.param(
            "PACKAGING",
            {
                "ruling": "REJECTED",
                "evidence_cited": ["order.placed_at"] * 999 + ["order.packaging_notes"],
            },
            "ESCALATE",
            ["order.placed_at", "order.packaging_notes"],
            id="an absent record after a citation repeated",
        ),
        pytest.param(
            "LATE_DELIVERY",
            {"ruling": "UPHELD", "evidence_cited": ["derived.sla_exceeded"] * 40},
            "UPHELD",
            ["derived.sla_exceeded"],
            id="a recorded field repeated",
        ),
        pytest.param(
            "LATE_DELIVERY",
            {"ruling": "UPHELD", "evidence_cited": [*UNKNOWN[1:], "derived.sla_exceeded"]},
            "UPHELD",
            [*UNKNOWN[1:], "derived.sla_exceeded"],
            id="a recorded field among sixteen",
        ),
    ],
)
def test_a_ruling_is_judged_on_exactly_the_citations_it_keeps(
    redis_url: str, category: str, answer: dict[str, Any], ruling: str, kept: list[str]
) -> None:
    """What a ruling stores of the model's citations is what it was judged on: each distinct
    entry once, at most sixteen of up to 200 characters. A decisive ruling that cited more
    than that is ESCALATE, since what it rests on beyond them is not on record; an auditor
    replaying the stored ruling gets the same outcome and mark."""
    content = json.dumps({**answer, "confidence": 0.9, "reasoning": "As cited."})
    with FixedAnswerServer(completion(content)) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(_dispute(), category))

    assert [r["ruling"] for r in rulings] == [ruling] * 3
    for cast in rulings:
        assert cast["evidence_cited"] == kept
        assert _replayed(cast, category) == (cast["ruling"], cast["cites_missing_evidence"])


def test_no_seat_is_sent_the_orders_identifiers(redis_url: str) -> None:
    """The order, customer and payment ids decide no claim; a judge is shown the rest of the
    frozen snapshot, the same for every seat, and they never leave for a model provider."""
    dispute = _dispute()
    answer = {
        "ruling": "UPHELD",
        "evidence_cited": ["derived.delay_minutes"],
        "confidence": 0.9,
        "reasoning": "late",
    }
    with FixedAnswerServer(completion(json.dumps(answer))) as server:
        rulings = _rulings_for_answer(redis_url, server, grievance_message(dispute))

    assert [r["ruling"] for r in rulings] == ["UPHELD"] * 3
    bodies = [body.decode() for _, _, body in server.requests]
    documents = [json.loads(json.loads(b)["messages"][-1]["content"]) for b in bodies]
    assert len(documents) == 3
    assert all(d == documents[0] for d in documents), "every seat reads the same evidence"
    order = documents[0]["evidence"]["order"]
    assert order["line_items"]
    assert "delivered_at" in order
    for identifier in (ARTICLE_ORDER.order_id, ARTICLE_ORDER.customer_id):
        assert all(identifier not in body for body in bodies)
    assert ARTICLE_ORDER.payment_reference
    assert all(ARTICLE_ORDER.payment_reference not in body for body in bodies)
