"""The judge stage: grievance.extracted -> K x ruling.cast.

Each of the K seats is an independent call: fresh context (no history, no other seat's
answer), its own seed, temperature above zero, optionally its own model. Every seat reads the
same evidence: the frozen snapshot without the order's identifiers. All K calls of all
grievances in a batch are in flight together. Each seat's answer is cached under (dispute,
grievance, seat, model, snapshot hash, prompt version, and the hash of what the seat reads): a
redelivered grievance reuses the rulings it already paid for, and a seat given another model,
or a grievance id that comes back with another claim, draws anew. Rulings are normalised
in code, on exactly the citations a ruling keeps (:func:`kept_citations`): an unreadable
answer, or an UPHELD/REJECTED that cites no field of the evidence, or more than a ruling keeps,
counts as ESCALATE; so does a seat whose request the endpoint refuses for its content (HTTP
400, 413, 422) or fails alone (:class:`~refund_bench.llm.client.LlmFailedAlone`), cached so.
An unreadable answer (or one cut short or withheld, however its text reads) is drawn again, up
to :data:`DRAWS_PER_SEAT` draws; a seat none of whose draws could be read is cached marked so
(:func:`seal`), and is UNREADABLE, ESCALATE, on every delivery. A grievance of a category this
code does not know goes to the dead-letter topic.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.domain import Category, Ruling
from refund_bench.errors import InvalidInput, TransientError
from refund_bench.llm.cache import (
    UNWRITTEN_LIMIT,
    InFlight,
    OnCall,
    RefusedBefore,
    ResponseCache,
    cached_call,
    judge_cache_key,
    uncounted,
)
from refund_bench.llm.client import JsonCompleter, failed_alone
from refund_bench.llm.provenance import DrawnBy, Provenance
from refund_bench.llm.roles import (
    GrievanceForJudge,
    JudgeAnswer,
    LlmRequest,
    MalformedAnswer,
    Prompt,
    build_judge_request,
    parse_judge_ruling,
)
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.stages import JUDGE
from refund_bench.storable import storable
from services.extractor.evidence import (
    claim_unrecorded,
    evidence_fields,
    judges_view,
    load_snapshot,
    silent_fields,
)
from services.judge.normalise import normalise

DRAWS_PER_SEAT = 3
"""A seat whose answer is unreadable is asked again, up to this many draws in all."""
REDRAW_SEED_STRIDE = 1_000_003
"""Seed offset of each redraw: a seat's redraws use seeds no other seat's first draw uses
(seeds are ``JUDGE_SEED_BASE + seat``)."""


def redraw_seed(seed: int, attempt: int) -> int:
    """The seed of a seat's ``attempt``-th draw (0: its own seed). A redraw with the same
    request and seed would most likely repeat the unreadable answer it replaces."""
    return seed + attempt * REDRAW_SEED_STRIDE


MAX_REASONING_CHARS = 2_000
"""A ruling keeps this much of the model's reasoning (and, after it, any note code adds)."""
MAX_CITATIONS = 16
"""A ruling keeps this many distinct entries of the fields the model cited, and is judged on
them alone (:func:`kept_citations`)."""
MAX_CITATION_CHARS = 200
"""A kept citation holds at most this many characters of the model's entry."""
MAX_RAW_CHARS = 64_000
"""A ruling keeps this much of the model's raw answer. With the limits above, a ruling, and a
verdict of the largest bench (``MAX_JUDGES`` seats), fit one Kafka record whatever the model
writes: one that did not would be dead-lettered, and its grievance would never be decided."""

_SEALED_PREFIX = "seed="
_UNREADABLE_MARK = " unreadable="
MAX_UNREADABLE_REASON_CHARS = 1_000
"""A seat's cache value keeps this much of why its last draw could not be read."""


class Sealed(NamedTuple):
    """A seat's cache value read back (:func:`unseal`)."""

    raw: str
    """The answer of the seat's last draw."""
    seed: int | None
    """The seed it was drawn with; ``None`` in a value cached before values carried it."""
    unreadable: str | None
    """Why no draw of the seat could be read (the last one's fault), or ``None`` when the
    last draw was read; always ``None`` in a value cached before values recorded it."""


def seal(raw: str, seed: int, unreadable: str | None = None) -> str:
    """The cache value of a seat's answer: ``raw`` with the seed it was drawn with, so that a
    redelivery served from the cache names the same seed, and, when every draw of the seat was
    malformed, why the last one was (``unreadable``), so that a redelivery counts it ESCALATE
    too instead of reading the text of an answer cut short."""
    head = f"{_SEALED_PREFIX}{seed}"
    if unreadable is not None:
        reason = storable(unreadable, MAX_UNREADABLE_REASON_CHARS)
        head += _UNREADABLE_MARK + json.dumps(reason, ensure_ascii=True)
    return f"{head}\n{raw}"


def unseal(value: str) -> Sealed:
    """A cache value read back (:func:`seal`). A value cached before values carried the seed
    (the bare answer, a JSON object) is that answer, with no seed; one cached before values
    recorded an unreadable draw is read as readable (its text is parsed as it comes)."""
    if not value.startswith(_SEALED_PREFIX):
        return Sealed(value, None, None)
    head, _, raw = value.partition("\n")
    seed_text, marked, reason_json = head.removeprefix(_SEALED_PREFIX).partition(_UNREADABLE_MARK)
    try:
        seed = int(seed_text)
        reason = json.loads(reason_json) if marked else None
    except (ValueError, RecursionError):
        return Sealed(value, None, None)
    if marked and not isinstance(reason, str):
        return Sealed(value, None, None)
    return Sealed(raw, seed, reason)


@dataclass(frozen=True)
class Seat:
    index: int
    llm: JsonCompleter
    seed: int


class JudgeHandler:
    def __init__(
        self,
        seats: Sequence[Seat],
        cache: ResponseCache,
        prompt: Prompt,
        on_call: OnCall | None = None,
        max_inflight: int = 1,
    ) -> None:
        """``max_inflight``: the most records the runtime hands the handler at once
        (``MAX_INFLIGHT``); an answer drawn for each of their seats whose cache write failed is
        kept until the retry stores it, not drawn and paid again."""
        if not seats:
            raise ValueError("a bench needs at least one seat")
        self._seats = tuple(seats)
        self._cache = cache
        self._prompt = prompt
        self._on_call: OnCall = on_call or uncounted
        self._in_flight = InFlight(max(UNWRITTEN_LIMIT, max_inflight * len(self._seats)))
        # A handler retried after one seat failed casts the others' rulings from the cache, and
        # they still name what drew them.
        self._drawn = DrawnBy()

    def spec(self) -> StageSpec:
        return StageSpec.of(JUDGE, self.handle)

    async def handle(self, message: Message, _ctx: Context) -> Sequence[Emit]:
        grievance = ev.parse(ev.GrievanceExtracted, message.value)
        try:
            category = Category(grievance.category)
        except ValueError as exc:
            raise InvalidInput(f"unknown grievance category {grievance.category!r}") from exc
        snapshot, citable = _evidence(grievance.snapshot_json, grievance.snapshot_sha256)
        allowed = citable.for_claim(category, grievance.item_name)
        request = build_judge_request(
            GrievanceForJudge.of(grievance, category), snapshot, prompt=self._prompt
        )
        inputs_sha256 = request.inputs_sha256()
        # Every seat's call runs to its end, even when another's failed: a retried handler
        # then makes one new call per seat still without an answer, instead of joining calls
        # left running, so each retry counts once for each request the endpoint fails alone.
        results = await asyncio.gather(
            *(self._rule(seat, grievance, request, inputs_sha256, allowed) for seat in self._seats),
            return_exceptions=True,
        )
        rulings: list[ev.RulingCast] = []
        failures: list[BaseException] = []
        for result in results:
            if isinstance(result, BaseException):
                failures.append(result)
            else:
                rulings.append(result)
        if failures:
            # One that is not transient first: it stops the stage, however the others ended.
            raise next((f for f in failures if not isinstance(f, TransientError)), failures[0])
        return [Emit(t.RULING_CAST.name, grievance.dispute_id, r.to_avro()) for r in rulings]

    def _unread(self, attempt: int) -> None:
        """Count a seat's draw ``attempt`` that could not be read: paid for (``made``) when it
        is thrown away for another draw; the last one is the answer stored (the cache counts
        it)."""
        self._on_call("unreadable")
        if attempt < DRAWS_PER_SEAT - 1:
            self._on_call("made")

    async def _rule(
        self,
        seat: Seat,
        grievance: ev.GrievanceExtracted,
        request: LlmRequest,
        inputs_sha256: str,
        allowed: _Citable,
    ) -> ev.RulingCast:
        key = judge_cache_key(
            grievance.dispute_id,
            grievance.grievance_id,
            seat.index,
            seat.llm.model,
            grievance.snapshot_sha256,
            self._prompt.version,
            inputs_sha256,
        )
        # The answer as parsed while drawing; a cached answer is parsed below instead.
        drawn: JudgeAnswer | None = None

        async def draw() -> str:
            nonlocal drawn
            raw, seed, unreadable = "", seat.seed, ""
            served: tuple[str | None, str | None] = (None, None)
            for attempt in range(DRAWS_PER_SEAT):
                seed = redraw_seed(seat.seed, attempt)
                try:
                    answer = await seat.llm.complete_json(
                        request.messages,
                        request.schema_name,
                        request.schema,
                        seed,
                        grievance.dispute_id,
                    )
                except MalformedAnswer as exc:  # cut short, withheld or empty
                    raw, unreadable = exc.raw, exc.reason
                    served = (exc.served_model, exc.system_fingerprint)
                    self._unread(attempt)
                    continue
                raw, served = answer.text, (answer.served_model, answer.system_fingerprint)
                try:
                    drawn = parse_judge_ruling(raw)
                except MalformedAnswer as exc:  # unreadable
                    raw, unreadable = exc.raw, exc.reason
                    self._unread(attempt)
                    continue
                answer_value = seal(raw, seed)
                break
            else:
                # Every draw was malformed: the ruling is UNREADABLE, on this delivery and every
                # one served from the cache, even when the last text would parse (cut short at
                # a closing brace).
                answer_value = seal(raw, seed, unreadable)
            self._drawn.keep(key, answer_value, Provenance(*served, seat.llm.temperature))
            return answer_value

        provenance: Provenance | None = None
        try:
            value, from_cache = await cached_call(
                self._cache, key, draw, self._on_call, keep_refusals=True, in_flight=self._in_flight
            )
        except RefusedBefore as exc:
            # Cached in the answer's place: a redelivery casts the same ruling, with no call.
            sealed, fields = Sealed("", None, None), _refused_fields(str(exc))
        else:
            # Known to the process that drew the answer (a retried handler included); a ruling
            # cast again from the cache elsewhere names none: keeping them beside the answer in
            # Redis would cost a write more per draw.
            provenance = self._drawn.get(key, value)
            sealed = unseal(value)
            if sealed.unreadable is not None:
                fields = _unreadable_fields(sealed.unreadable)
            else:
                fields = _ruling_fields(sealed.raw, allowed, None if from_cache else drawn)
        return ev.RulingCast(
            dispute_id=grievance.dispute_id,
            order_id=grievance.order_id,
            grievance_id=grievance.grievance_id,
            grievance_total=grievance.grievance_total,
            category=grievance.category,
            item_name=grievance.item_name,
            item_quantity=grievance.item_quantity,
            judge_seat=seat.index,
            judge_count=len(self._seats),
            model=seat.llm.model,
            prompt_version=self._prompt.version,
            snapshot_sha256=grievance.snapshot_sha256,
            raw_response=storable(sealed.raw, MAX_RAW_CHARS),
            cast_at=ev.now(),
            seed=sealed.seed,
            # The ruling's fields say what drew it as Provenance does; none when not known.
            **({} if provenance is None else provenance._asdict()),
            **fields,
        )


@dataclass(frozen=True)
class _Citable:
    """A snapshot's citable fields, those of them that hold no record, and (for one grievance)
    whether a record its kind of claim rests on is absent."""

    fields: frozenset[str]
    silent: frozenset[str]
    claim_unrecorded: bool = False

    def for_claim(self, category: Category, item_name: str | None) -> _Citable:
        """These fields, for a claim of ``category`` about ``item_name`` (if it names one)."""
        unrecorded = claim_unrecorded(category, self.fields, self.silent, item_name)
        return _Citable(self.fields, self.silent, unrecorded)


@lru_cache(maxsize=1024)
def _evidence(snapshot_json: str, snapshot_sha256: str) -> tuple[dict[str, Any], _Citable]:
    """What judges are shown of the verified snapshot (:func:`judges_view`: no identifiers), and
    its citable fields; the N grievances of a dispute share one.

    Read-only: the dict is shared by every caller with the same snapshot.
    """
    snapshot = load_snapshot(snapshot_json, snapshot_sha256)
    citable = _Citable(evidence_fields(snapshot), silent_fields(snapshot))
    return judges_view(snapshot), citable


def _refused_fields(reason: str) -> dict[str, Any]:
    """The ruling of a seat whose request the endpoint refused for its content, or failed
    alone (``reason``: the endpoint's answer, or what it failed): no answer is no evidence
    either way, so ESCALATE (``model_ruling`` ``REFUSED`` or ``NO_ANSWER``)."""
    if failed_alone(reason):
        model_ruling, what = "NO_ANSWER", "The model endpoint gave no answer to the request"
    else:
        model_ruling, what = "REFUSED", "The model endpoint refused the request"
    return {
        "ruling": Ruling.ESCALATE.value,
        "model_ruling": model_ruling,
        "confidence": 0.0,
        "evidence_cited": [],
        "reasoning": storable(f"{what} ({reason}); counted as ESCALATE.", MAX_REASONING_CHARS),
    }


def _unreadable_fields(reason: str) -> dict[str, Any]:
    """The ruling of a seat whose answer could not be read (``reason``: why): ESCALATE."""
    return {
        "ruling": Ruling.ESCALATE.value,
        "model_ruling": "UNREADABLE",
        "confidence": 0.0,
        "evidence_cited": [],
        "reasoning": storable(
            f"The model's answer could not be read ({reason}); counted as ESCALATE.",
            MAX_REASONING_CHARS,
        ),
    }


def kept_citations(cited: Sequence[str]) -> tuple[list[str], int, bool]:
    """What a ruling keeps of the entries a model cited, which is all it is judged on: each
    distinct entry once, in the model's order, cut to ``MAX_CITATION_CHARS`` and made storable,
    at most ``MAX_CITATIONS`` of them. Also how many distinct entries were left out, and
    whether anything the model cited was left out or cut short (a repeated entry loses
    nothing)."""
    distinct = list(dict.fromkeys(storable(entry, MAX_CITATION_CHARS) for entry in cited))
    kept = distinct[:MAX_CITATIONS]
    left_out = len(distinct) - len(kept)
    cut = left_out > 0 or any(len(entry) > MAX_CITATION_CHARS for entry in cited)
    return kept, left_out, cut


def _ruling_fields(
    raw: str, allowed: _Citable, parsed: JudgeAnswer | None = None
) -> dict[str, Any]:
    """The ruling fields of ``raw`` (``parsed``: ``raw`` already parsed, if it was)."""
    try:
        answer = parsed if parsed is not None else parse_judge_ruling(raw)
    except MalformedAnswer as exc:
        return _unreadable_fields(exc.reason)
    # Judged on exactly what is stored: an auditor replaying the ruling from the record
    # (its citations, the snapshot by hash, and the note of what was not kept) gets it again.
    cited, left_out, cut = kept_citations(answer.evidence_cited)
    normalised = normalise(
        answer.ruling.value,
        cited,
        allowed.fields,
        allowed.silent,
        allowed.claim_unrecorded,
        citations_cut=cut,
    )
    reasoning = storable(answer.reasoning, MAX_REASONING_CHARS)
    if left_out:
        reasoning += f" [{left_out} more citations not kept]"
    if normalised.changed:
        note = f"counted as {normalised.ruling.value}: {normalised.reason}"
        reasoning += f" [{storable(note, MAX_REASONING_CHARS)}]"
    return {
        "ruling": normalised.ruling.value,
        "model_ruling": answer.ruling.value,
        "confidence": answer.confidence,
        "evidence_cited": cited,
        "reasoning": reasoning,
        "cites_missing_evidence": normalised.cites_missing_evidence,
    }
