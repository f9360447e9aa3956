"""The extractor stage: complaint.received -> grievance.extracted (one event per grievance).

For each complaint: load the order's evidence, freeze it (content hash, stored once per
dispute), make ONE structured-output LLM call, and validate the answer in code. An invalid
answer, or one that is not whole (cut short or withheld: :mod:`services.extractor.not_whole`;
what it holds whole is what the repair must keep), gets one repair call; if that fails too, is
not whole itself, or leaves out a grievance the first answer had
without fault, or at fault only for its span, text length, quantity or keys left out (same
category and item: a repair mends, it does not read the complaint anew), or claims other units
of an item than such a grievance did, or one whose item could not be placed on
the order (a claim of its category on another item must stay), or one whose category is none
of the fixed set (a claim no other claim makes must stay: which category was meant is for a
person), read even from a first answer of the wrong shape, or
the endpoint refuses the complaint itself (HTTP 400, 413, 422: too long, against a content
policy) or fails it alone (:class:`~refund_bench.llm.client.LlmFailedAlone`), the complaint goes
to human review. A
complaint without a checkable grievance still gets a reply (a priced outcome with nothing to
pay). Answers are cached per (dispute, complaint, snapshot), with no model or prompt version, so
a redelivered complaint costs no new call and gets the outcome already published; a refusal is
cached too, so a redelivery cannot turn a dispute held for review into a second round 1 that
pays. The model and prompt version that wrote each answer are cached beside it, and the events
name those, not the ones configured when a redelivery reuses it. Extraction never judges: truth
is for the judges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.db.orders import OrderReader, UnreadableOrder
from refund_bench.db.snapshots import DisputeFreezer, DisputeToFreeze, frozen_dispute
from refund_bench.domain import Decision, ExtractionOutcome, LineItem, OrderRecord
from refund_bench.errors import InvalidInput
from refund_bench.llm.cache import (
    InFlight,
    MadeAnswer,
    Maker,
    OnCall,
    RefusedBefore,
    ResponseCache,
    cached_call,
    extractor_cache_key,
    made_by,
    sha256_hex,
    uncounted,
)
from refund_bench.llm.client import JsonCompleter, LlmAnswer, failed_alone
from refund_bench.llm.roles import (
    LlmRequest,
    MalformedAnswer,
    Prompt,
    build_extractor_request,
    loads_answer,
)
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.stages import EXTRACTOR
from refund_bench.storable import storable
from services.extractor import not_whole
from services.extractor.evidence import freeze, load_snapshot
from services.extractor.validation import (
    ExtractedGrievance,
    ExtractionInvalid,
    claims_left_out,
    quantities_changed,
    validate_extraction,
)
from services.pricing.table import (
    DEFAULT_CAP_CURRENCY,
    DEFAULT_CAP_MINOR,
    PRICING_VERSION,
    cap_for,
)

REVIEW_REASON = "EXTRACTION: the model's answer could not be validated after one repair"
LEFT_OUT_REASON = (
    "EXTRACTION: the repaired answer leaves out grievances of the first answer (named without"
    " fault, or at fault only for its span, its text's length, its quantity or keys left out,"
    " or for the item or category each names)"
)
"""Followed by the claims left out: each says which item or category was at fault, if one."""
CHANGED_REASON = (
    "EXTRACTION: the repaired answer claims other units than the first answer did without fault"
)
REFUSED_REASON = "EXTRACTION: the model endpoint refused the complaint"
NO_ANSWER_REASON = "EXTRACTION: the model endpoint gave no answer to the complaint"
NOT_WHOLE_REASON = "EXTRACTION: the first answer was not whole, and its repair names no grievance"
NOT_WHOLE_PROBLEM = "names no grievance, where the first answer, not whole, had text"
NOTHING_REASON = "no checkable grievance in the complaint"
MAX_CHANNEL_CHARS = 64
"""A dispute keeps this much of the channel its complaint names (a label: api, app, email)."""
DEFAULT_MAX_COMPLAINT_CHARS = 5000
"""The API's default limit too: a complaint the intake would take is never refused here."""
MAX_KEPT_ANSWER_CHARS = 20_000
"""``complaint.extracted`` keeps this much of each model answer."""
MAX_KEPT_PROBLEMS = 50
"""... and this many of the problems code found in it, each cut to :data:`KEPT_PROBLEM_CHARS`."""
KEPT_PROBLEM_CHARS = 500


class ExtractorHandler:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        llm: JsonCompleter,
        cache: ResponseCache,
        prompt: Prompt,
        cap_minor: int = DEFAULT_CAP_MINOR,
        on_call: OnCall | None = None,
        max_complaint_chars: int = DEFAULT_MAX_COMPLAINT_CHARS,
        cap_currency: str = DEFAULT_CAP_CURRENCY,
    ) -> None:
        self._max_chars = max_complaint_chars
        self._pool = pool
        self._orders = OrderReader(pool)
        self._disputes = DisputeFreezer(pool)
        self._llm = llm
        self._cache = cache
        self._prompt = prompt
        self._cap_minor = cap_minor
        self._cap_currency = cap_currency
        self._on_call: OnCall = on_call or uncounted
        self._in_flight = InFlight()

    def spec(self) -> StageSpec:
        return StageSpec.of(EXTRACTOR, self.handle)

    async def handle(self, message: Message, _ctx: Context) -> Sequence[Emit]:
        complaint = ev.parse(ev.ComplaintReceived, message.value)
        if len(complaint.text) > self._max_chars:
            # Every model call would carry it (the repair and each judge's span too).
            raise InvalidInput(
                f"complaint text is {len(complaint.text)} characters, more than the"
                f" {self._max_chars} MAX_COMPLAINT_CHARS allows"
            )
        order = await self._orders.get(complaint.order_id)
        fresh, unusable = None, _unusable(complaint.order_id, order)
        if isinstance(order, OrderRecord) and order.customer_id == complaint.customer_id:
            try:
                fresh = freeze(order)
            except InvalidInput as exc:  # the row reads, but makes no consistent evidence
                unusable = str(exc)
        if fresh is None:
            # A redelivery is judged against the evidence frozen the first time, whatever
            # became of the order since; only a new dispute needs a usable order.
            stored = await frozen_dispute(self._pool, complaint.dispute_id)
            if stored is None or not stored.is_for(
                complaint.order_id, complaint.customer_id, complaint.text
            ):
                raise InvalidInput(unusable)
            snapshot = load_snapshot(stored.snapshot_json, stored.snapshot_sha256)
            return await self._outcome(
                complaint, snapshot, stored.snapshot_json, stored.snapshot_sha256
            )
        dispute = DisputeToFreeze(
            dispute_id=complaint.dispute_id,
            order_id=complaint.order_id,
            customer_id=complaint.customer_id,
            complaint_text=complaint.text,
            received_at=complaint.received_at,
            snapshot_json=fresh.json,
            snapshot_sha256=fresh.sha256,
            channel=storable(complaint.channel, MAX_CHANNEL_CHARS),
        )
        stored = await self._disputes.freeze(dispute)
        if not stored.holds(dispute):
            # Judged against the first complaint's evidence, it could be paid to that order's
            # payment, or its reply and its payout could disagree: a person must look.
            raise InvalidInput(
                f"dispute {complaint.dispute_id!r} already holds another complaint"
                f" (order {stored.order_id!r}); a new complaint needs a new dispute id"
            )
        snapshot_json, snapshot_sha = stored.snapshot_json, stored.snapshot_sha256
        # The dispute keeps the snapshot frozen first: ours, already parsed, unless a delivery
        # before this one froze another (then it is read back and checked against its hash).
        fresh_kept = snapshot_sha == fresh.sha256 and snapshot_json == fresh.json
        snapshot = fresh.data if fresh_kept else load_snapshot(snapshot_json, snapshot_sha)
        return await self._outcome(complaint, snapshot, snapshot_json, snapshot_sha)

    async def _outcome(
        self,
        complaint: ev.ComplaintReceived,
        snapshot: dict[str, Any],
        snapshot_json: str,
        snapshot_sha: str,
    ) -> Sequence[Emit]:
        """The complaint's grievances judged against ``snapshot`` (the one its dispute keeps),
        or its unpriced outcome."""
        try:
            items = [LineItem.model_validate(item) for item in snapshot["order"]["line_items"]]
        except ValidationError as exc:
            # Frozen by an older version whose bounds were looser: no redelivery can mend it.
            raise InvalidInput(
                f"the evidence snapshot {snapshot_sha} of dispute {complaint.dispute_id!r} has"
                f" line items this version refuses: {exc.error_count()} error(s)"
            ) from exc
        answers: list[ev.ExtractorAnswer] = []
        try:
            grievances, made = await self._extract(complaint, snapshot_sha, items, answers)
        except RefusedBefore as exc:
            what = NO_ANSWER_REASON if failed_alone(str(exc)) else REFUSED_REASON
            reason = f"{what} ({exc})"
            return [
                self._unpriced(complaint, snapshot, snapshot_sha, reason),
                _record(complaint, snapshot_sha, ExtractionOutcome.REFUSED, 0, reason, answers),
            ]
        if isinstance(grievances, str):
            return [
                self._unpriced(complaint, snapshot, snapshot_sha, grievances),
                _record(complaint, snapshot_sha, ExtractionOutcome.HELD, 0, grievances, answers),
            ]
        if not grievances:
            nothing = ExtractionOutcome.NOTHING_CHECKABLE
            return [
                self._unpriced(complaint, snapshot, snapshot_sha, None),
                _record(complaint, snapshot_sha, nothing, 0, None, answers),
            ]
        extracted_at = ev.now()
        # An answer whose writer is not known is attributed to the model configured now.
        maker = made.maker or Maker(self._llm.model, self._prompt.version)
        return [
            *(
                Emit(
                    t.GRIEVANCE_EXTRACTED.name,
                    complaint.dispute_id,
                    ev.GrievanceExtracted(
                        dispute_id=complaint.dispute_id,
                        order_id=complaint.order_id,
                        grievance_id=g.grievance_id,
                        grievance_total=len(grievances),
                        category=g.category.value,
                        text=g.text,
                        span_start=g.span_start,
                        span_end=g.span_end,
                        span_text=complaint.text[g.span_start : g.span_end],
                        item_name=g.item_name,
                        item_quantity=g.item_quantity,
                        snapshot_sha256=snapshot_sha,
                        snapshot_json=snapshot_json,
                        extractor_model=maker.model,
                        extractor_prompt_version=maker.prompt_version,
                        extracted_at=extracted_at,
                    ).to_avro(),
                )
                for g in grievances
            ),
            _record(
                complaint,
                snapshot_sha,
                ExtractionOutcome.EXTRACTED,
                len(grievances),
                None,
                answers,
                extracted_at,
            ),
        ]

    async def _extract(
        self,
        complaint: ev.ComplaintReceived,
        snapshot_sha: str,
        items: list[LineItem],
        answers: list[ev.ExtractorAnswer],
    ) -> tuple[tuple[ExtractedGrievance, ...] | str, MadeAnswer]:
        """The validated grievances, or why a person must read the complaint instead (the
        repaired answer is invalid too, or leaves out a grievance the first answer made:
        :func:`claims_left_out`); with the answer they were read from. Each answer read is
        added to ``answers`` with the problems found in it, as it is read (so they hold the
        first answer when the endpoint refuses the repair)."""
        request = build_extractor_request(complaint.text, items, prompt=self._prompt)
        key = extractor_cache_key(complaint.dispute_id, sha256_hex(complaint.text), snapshot_sha)
        made = await self._call(key, request, complaint.dispute_id)
        answer = not_whole.read(made.answer)
        try:
            grievances = validate_extraction(
                _document(answer), complaint.text, items, not_whole=answer.not_whole
            )
        except ExtractionInvalid as first:
            answers.append(_kept(1, made, first.problems))
            repair = _repair_request(request, answer.text, first.problems)
            made = await self._call(f"{key}:repair", repair, complaint.dispute_id)
            repair_answer = not_whole.read(made.answer)
            if repair_answer.not_whole is not None:
                answers.append(_kept(2, made, [repair_answer.not_whole]))
                return f"{REVIEW_REASON}: {repair_answer.not_whole}", made
            try:
                repaired = validate_extraction(_json(repair_answer.text), complaint.text, items)
            except ExtractionInvalid as second:
                answers.append(_kept(2, made, second.problems))
                return f"{REVIEW_REASON}: {_problems_in_short(second.problems)}", made
            left_out = claims_left_out(
                first.passed, repaired, first.unresolved, first.uncategorised
            )
            changed = quantities_changed(first.quantities, repaired)
            problems: tuple[str, ...] = (*left_out, *changed)
            reason = ""
            if left_out:
                reason = f"{LEFT_OUT_REASON}: {_problems_in_short(problems)}"
            elif changed:
                reason = f"{CHANGED_REASON}: {_problems_in_short(changed)}"
            elif not repaired and answer.not_whole and answer.text.strip():
                # Cut short or withheld as it named grievances (or before it could): what came
                # after its fault is unknown, and "none" is no repair of it.
                problems = (NOT_WHOLE_PROBLEM,)
                reason = f"{NOT_WHOLE_REASON} ({answer.not_whole})"
            answers.append(_kept(2, made, problems))
            if problems:
                return reason, made
            return repaired, made
        answers.append(_kept(1, made, ()))
        return grievances, made

    async def _call(self, key: str, request: LlmRequest, dispute_id: str) -> MadeAnswer:
        """The answer cached under ``key``, or the endpoint's (then cached, and the model and
        prompt version that wrote it beside it). Raises :class:`RefusedBefore` when the
        endpoint refuses the request, now or before."""

        served: LlmAnswer | None = None

        async def compute() -> str:
            nonlocal served
            try:
                served = await self._llm.complete_json(
                    request.messages, request.schema_name, request.schema, None, dispute_id
                )
            except MalformedAnswer as exc:
                # Cut short, withheld or empty: never read as an answer; the repair follows.
                served = LlmAnswer(exc.raw, exc.served_model, exc.system_fingerprint)
                self._on_call("unreadable")
                return not_whole.mark(exc.raw, exc.reason)
            if not _readable(served.text):  # read as an invalid answer, and repaired
                self._on_call("unreadable")
            return not_whole.whole(served.text)

        answer, from_cache = await cached_call(
            self._cache, key, compute, self._on_call, keep_refusals=True, in_flight=self._in_flight
        )
        # Recorded once the answer is stored, by the call that drew it: a record never names
        # an answer that was not stored, nor blocks the one that was.
        mine = None
        if not from_cache and served is not None:
            mine = Maker(
                self._llm.model,
                request.prompt_version,
                served.served_model,
                served.system_fingerprint,
            )
        return MadeAnswer(answer, await made_by(self._cache, key, answer, mine))

    def _unpriced(
        self,
        complaint: ev.ComplaintReceived,
        snapshot: dict[str, Any],
        snapshot_sha: str,
        review_reason: str | None,
    ) -> Emit:
        """The outcome of a complaint with nothing to judge: a reply, and a review item when
        ``review_reason`` says why a person must read the complaint."""
        order = snapshot["order"]
        decision = Decision.NOTHING_TO_PAY if review_reason is None else Decision.HELD_FOR_REVIEW
        reason = review_reason or NOTHING_REASON
        priced = ev.RefundPriced(
            dispute_id=complaint.dispute_id,
            order_id=complaint.order_id,
            round=1,
            pricing_version=PRICING_VERSION,
            currency=order["currency"],
            order_total_minor=order["charged_total_minor"],
            lines=[],
            total_minor=0,
            already_paid_minor=0,
            payable_minor=0,
            cap_minor=cap_for(order["currency"], self._cap_minor, self._cap_currency),
            decision=decision.value,
            held_grievances=[],
            reason=reason,
            snapshot_sha256=snapshot_sha,
            priced_at=ev.now(),
        )
        return Emit(t.REFUND_PRICED.name, complaint.dispute_id, priced.to_avro())


def _kept(attempt: int, made: MadeAnswer, problems: Sequence[str]) -> ev.ExtractorAnswer:
    """``made`` as ``complaint.extracted`` keeps it (the model's text, without the cache's mark
    of an answer that is not whole), with the problems code found in it."""
    kept = [storable(p, KEPT_PROBLEM_CHARS) for p in problems[:MAX_KEPT_PROBLEMS]]
    if len(problems) > MAX_KEPT_PROBLEMS:
        kept[-1] = f"(and {len(problems) - MAX_KEPT_PROBLEMS + 1} more problems)"
    return ev.ExtractorAnswer(
        attempt=attempt,
        raw_answer=storable(not_whole.read(made.answer).text, MAX_KEPT_ANSWER_CHARS),
        problems=kept,
        # The answer's fields say who wrote it as Maker does; none when that is not known.
        **({} if made.maker is None else made.maker._asdict()),
    )


def _record(
    complaint: ev.ComplaintReceived,
    snapshot_sha: str,
    outcome: ExtractionOutcome,
    grievance_total: int,
    reason: str | None,
    answers: Sequence[ev.ExtractorAnswer],
    extracted_at: datetime | None = None,
) -> Emit:
    """The complaint's ``complaint.extracted``: what became of it, and the answers read."""
    record = ev.ComplaintExtracted(
        dispute_id=complaint.dispute_id,
        order_id=complaint.order_id,
        snapshot_sha256=snapshot_sha,
        complaint_sha256=sha256_hex(complaint.text),
        outcome=outcome.value,
        grievance_total=grievance_total,
        reason=reason,
        answers=list(answers),
        extracted_at=extracted_at or ev.now(),
    )
    return Emit(t.COMPLAINT_EXTRACTED.name, complaint.dispute_id, record.to_avro())


def _unusable(order_id: str, order: OrderRecord | UnreadableOrder | None) -> str:
    """Why the order store's ``order`` cannot be the evidence of a new dispute, if it cannot
    (for an order that reads, the reason it belongs to another customer)."""
    if order is None:
        return f"unknown order {order_id!r}"
    if isinstance(order, UnreadableOrder):
        return f"order {order_id!r} in the order store cannot be used as evidence: {order.reason}"
    return f"order {order_id!r} belongs to another customer"


PROBLEMS_SHOWN = 3
PROBLEM_CHARS = 160


def _problems_in_short(problems: Sequence[str]) -> str:
    """The first few problems of an invalid answer, each cut short: a reviewer sees why the
    extraction failed, and a model's runaway output does not fill the review queue."""
    shown = [p if len(p) <= PROBLEM_CHARS else p[: PROBLEM_CHARS - 1] + "…" for p in problems]
    more = len(problems) - PROBLEMS_SHOWN
    text = "; ".join(shown[:PROBLEMS_SHOWN])
    return text + (f" (and {more} more)" if more > 0 else "")


def _document(answer: not_whole.CachedAnswer) -> object:
    """The first answer's document: parsed (:func:`_json`), or, for one that is not whole, the
    grievances it holds whole before its fault, which its repair must keep."""
    if answer.not_whole is None:
        return _json(answer.text)
    return {"grievances": not_whole.whole_grievances(answer.text)}


def _json(raw: str) -> object:
    """The parsed answer; unparseable text becomes an invalid extraction (repairable)."""
    try:
        return loads_answer(raw)
    except ValueError as exc:
        raise ExtractionInvalid([f"the answer is not JSON: {exc}"]) from exc


def _readable(raw: str) -> bool:
    """Whether ``raw`` is the document asked for, whatever its grievances: JSON, an object,
    its ``grievances`` a list (an endpoint ignoring the schema answers otherwise)."""
    try:
        document = loads_answer(raw)
    except ValueError:
        return False
    return isinstance(document, dict) and isinstance(document.get("grievances"), list)


def _repair_request(request: LlmRequest, raw: str, problems: Sequence[str]) -> LlmRequest:
    """The one repair attempt: the same task, plus the previous answer and what was wrong."""
    document = json.loads(request.user_document)
    document["previous_answer"] = raw[:4000]
    document["problems_with_previous_answer"] = list(problems)
    system, _user = request.messages
    return LlmRequest(
        messages=(
            system,
            {"role": "user", "content": json.dumps(document, ensure_ascii=False, sort_keys=True)},
        ),
        schema_name=request.schema_name,
        schema=request.schema,
        prompt_version=request.prompt_version,
    )
