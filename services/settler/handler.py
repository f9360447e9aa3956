"""The settler stage: refund.priced -> reply.published (+ payout.requested).

A low-temperature model words the customer reply from the final verdicts and the amount code
already computed (formatted by code). A guard in code checks the reply: exactly the approved
amount, no other amount, the review mentioned when something is held, at most one apology.
On any failure the deterministic template is used. The reply is stored once per (dispute,
round) before it is published, so a replay publishes the same words. Only approved amounts
above zero become a payout request; the model's text never feeds an amount.

An order is refunded automatically for one dispute only (the payout's rule). Before a reply
that promises money is stored, the settler reserves the round in the payout ledger
(:mod:`refund_bench.db.payout_rounds`), the same row the payout opens later. When the ledger
holds the round because another dispute of the same payment came first, the reply promises
nothing: the lines it would pay wait for a person, like the lines held by the cap. The payout
request is still made, so that the payout reports the round (``ORDER_ALREADY_REFUNDED``) and
puts it in the review queue. So the reply and the payment decide alike, however close together
two disputes of one order come.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.coalesce import TickBatcher
from refund_bench.db.payout_rounds import Reservation, RoundToReserve, reserve_rounds
from refund_bench.db.snapshots import AsyncSnapshotReader, payment_reference
from refund_bench.domain import Category, Decision
from refund_bench.errors import InvalidInput
from refund_bench.llm.cache import (
    InFlight,
    OnCall,
    ResponseCache,
    cached_call,
    settler_cache_key,
    uncounted,
)
from refund_bench.llm.client import (
    JsonCompleter,
    LlmFailedAlone,
    LlmRejected,
    LlmUnavailable,
)
from refund_bench.llm.provenance import DrawnBy, Provenance
from refund_bench.llm.roles import (
    HeldForReply,
    LlmRequest,
    MalformedAnswer,
    Prompt,
    ResolvedForReply,
    build_settler_request,
    parse_customer_reply,
)
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.stages import SETTLER
from refund_bench.storable import storable
from services.settler.amounts import format_amount
from services.settler.guard import check_reply
from services.settler.phrases import describe
from services.settler.template import template_reply

log = logging.getLogger(__name__)

_PAYING = (Decision.AUTO_APPROVED.value, Decision.REVIEW_APPROVED.value)
WHOLE_CLAIM = "your whole claim"
DECLINED = Decision.DECLINED.value
"""The outcome a reply tells of a line upheld in a dispute a reviewer declined."""


_REPLY_SQL = """
SELECT text, amount_minor, currency, source, guard_failures, model, prompt_version, created_at,
       approved_minor
FROM replies WHERE dispute_id = %s AND round = %s
"""
_INPUTS_SQL = """
SELECT q.dispute_id, q.round, r.text, r.amount_minor, r.currency, r.source, r.guard_failures,
       r.model, r.prompt_version, r.created_at, r.approved_minor, d.complaint_text,
       (
           SELECT coalesce(bool_or(e.amount_minor > 0), false) OR count(*) < q.round - 1
           FROM replies e
           WHERE e.dispute_id = q.dispute_id AND e.round < q.round
       ) AS told_refunded
FROM unnest(%s::text[], %s::integer[]) AS q (dispute_id, round)
LEFT JOIN replies r ON r.dispute_id = q.dispute_id AND r.round = q.round
LEFT JOIN disputes d ON d.dispute_id = q.dispute_id
"""
"""What each (dispute, round) needs first, for many rounds in one round trip: its stored reply,
if there is one (the columns ``_REPLY_SQL`` returns, NULL otherwise), the complaint text, and
whether a reply of an earlier round told the customer of a refund, or may have: an earlier
round whose reply is not stored yet (the settler handles rounds concurrently, and a reviewer
may decide before it replied to the round before) counts as told."""
Inputs = tuple["StoredReply | None", str, bool]
"""A round's stored reply (``None``: none yet), the complaint text ("" if unknown here), and
whether an earlier round's reply stated a refund (an amount above zero), or is not stored yet."""
_STORE_REPLY_SQL = """
INSERT INTO replies (dispute_id, round, text, amount_minor, currency, source, guard_failures,
                     model, prompt_version, approved_minor, model_answer, served_model,
                     system_fingerprint)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (dispute_id, round) DO NOTHING
RETURNING text, amount_minor, currency, source, guard_failures, model, prompt_version, created_at,
          approved_minor
"""


def _waiting(
    priced: ev.RefundPriced,
) -> tuple[list[ev.PricedLineEvent], list[ev.PricedLineEvent]]:
    """(lines that wait for a reviewer, lines decided) for the reply. Held by the cap, the lines
    upheld so far wait too: nothing is paid until a reviewer approves the total. Declined, the
    dispute is final: nothing waits, and its held lines are left out."""
    if priced.decision == Decision.DECLINED.value:
        return [], [line for line in priced.lines if line.status != "HELD"]
    cap_held = (
        priced.decision == Decision.HELD_FOR_REVIEW.value and priced.total_minor > priced.cap_minor
    )
    waiting = ("HELD", "PAY") if cap_held else ("HELD",)
    held = [line for line in priced.lines if line.status in waiting]
    return held, [line for line in priced.lines if line.status not in waiting]


def approved_minor(priced: ev.RefundPriced) -> int:
    """What the round approves for refund: its payable amount when it is approved, else 0."""
    return priced.payable_minor if priced.decision in _PAYING else 0


class ReplyLines(NamedTuple):
    """A round's lines as its reply tells them (:func:`reply_lines`)."""

    held_lines: list[ev.PricedLineEvent]
    """The lines that wait for a person."""
    resolved: list[ev.PricedLineEvent]
    """The lines decided, each ``status`` the outcome the reply states: ``PAY`` only in a round
    whose reply states a refund."""
    held: list[str]
    """What the reply must send to review, described; empty when nothing waits."""


def reply_lines(priced: ev.RefundPriced, says: int) -> ReplyLines:
    """The round's lines as its reply tells them; ``says`` is what the reply states refunded:
    the round's :func:`approved_minor`, or 0 when the payout ledger holds the round for a person.

    Held by the ledger, the lines the round would pay wait for a person too. A reply that states
    no refund tells of no line as paid (a model told ``PAY`` beside "INR 0" writes "refunded"):
    in a declined dispute every line upheld is ``DECLINED``; otherwise a ``PAY`` line (refunded
    in an earlier round, or below the currency's smallest refund) is ``ZERO``, nothing refunded
    for it now."""
    held_lines, resolved = _waiting(priced)
    held = [describe(line) for line in held_lines]
    if priced.decision == Decision.HELD_FOR_REVIEW.value and not held:
        held = [WHOLE_CLAIM]
    if says == 0 < approved_minor(priced):  # the ledger holds the round for a person
        held_lines = [*held_lines, *(line for line in resolved if line.status == "PAY")]
        resolved = [line for line in resolved if line.status != "PAY"]
        held = [describe(line) for line in held_lines] or [WHOLE_CLAIM]
    if says == 0:
        declined = priced.decision == Decision.DECLINED.value
        resolved = [_unpaid(line, declined=declined) for line in resolved]
    return ReplyLines(held_lines, resolved, held)


def _unpaid(line: ev.PricedLineEvent, *, declined: bool) -> ev.PricedLineEvent:
    """``line`` told in a reply that states no refund (:func:`reply_lines`)."""
    if declined and line.status in ("PAY", "ZERO"):
        return line.model_copy(update={"status": DECLINED})
    if line.status == "PAY":
        return line.model_copy(update={"status": "ZERO"})
    return line


def reply_request(
    complaint: str,
    amount_text: str,
    lines: ReplyLines,
    *,
    prompt: Prompt,
    earlier_refund: bool,
) -> LlmRequest:
    """The model's request for a round's reply: ``amount_text`` the amount the reply states
    (formatted by code), ``lines`` as the reply tells them (:func:`reply_lines`)."""
    return build_settler_request(
        complaint,
        amount_text,
        [
            ResolvedForReply(
                category=Category(line.category), text=describe(line), outcome=line.status
            )
            for line in lines.resolved
        ],
        [
            HeldForReply(category=Category(line.category), text=describe(line))
            for line in lines.held_lines
        ]
        # A complaint held before anything was judged: its whole claim, as the guard
        # expects the reply to send to review.
        or [HeldForReply(category=None, text=text) for text in lines.held],
        prompt=prompt,
        earlier_refund=earlier_refund,
    )


def _only_held(
    held_lines: Sequence[ev.PricedLineEvent], resolved: Sequence[ev.PricedLineEvent]
) -> list[str]:
    """The items that only held lines name: the reply's refund sentence must not claim them (an
    item also on a decided line, "the missing Biryani" held for its quality, it may name)."""
    decided = {line.item_name for line in resolved}
    return sorted({line.item_name for line in held_lines if line.item_name} - decided)


def template_for(
    approved: int,
    currency: str,
    resolved: Sequence[ev.PricedLineEvent],
    held: Sequence[str],
    *,
    held_names: Sequence[str],
    earlier_refund: bool = False,
    item_names: Sequence[str] = (),
) -> str:
    """The template reply for a round: ``approved`` refunded for the lines ``resolved`` pays,
    prices at zero or declines (:func:`reply_lines`), ``held`` (described) sent to review,
    ``held_names`` the items only held lines name (:func:`_only_held`), ``item_names`` those
    the round's lines name."""
    done = [describe(line) for line in resolved if line.status in ("PAY", "ZERO", DECLINED)]
    return template_reply(
        approved,
        currency,
        done,
        held,
        earlier_refund=earlier_refund,
        held_names=held_names,
        item_names=item_names,
    )


class Written(NamedTuple):
    """A round's reply as written, before it is stored."""

    text: str
    source: str
    """``MODEL``: the model's reply passed the guard; ``TEMPLATE``: the template replaced it."""
    failures: list[str]
    """Why the template replaced the model's reply (the guard's failures, or no answer)."""
    model_answer: str | None
    """The model's answer the template replaced, bounded; ``None`` when none was replaced."""
    served_model: str | None
    """What the endpoint's response named for the model's answer (sent or replaced; for an
    unreadable draw, what it named for that); ``None`` when no answer came, it named none, or
    this process did not draw the answer it read (a redelivery to another process, or to this
    one after it restarted, found it in the cache; another process's answer won the cache)."""
    system_fingerprint: str | None
    """The backend configuration the same response reported, likewise."""


_GUARD_ERROR_CHARS = 200
"""How much of an error the guard raised is stored with the reply."""
MAX_MODEL_ANSWER_CHARS = 16_000
"""How much of a model answer the template replaced is kept with the reply, for audit."""


def guard_failures(
    text: str,
    approved: int,
    currency: str,
    held: Sequence[str],
    *,
    earlier_refund: bool,
    held_names: Sequence[str],
    where: str,
    whole_order: bool = False,
    item_names: Sequence[str] = (),
    check: Callable[..., Sequence[str]] = check_reply,
) -> list[str]:
    """``check``'s failures (the guard, :func:`check_reply`) for the model's ``text``. An error
    the guard raises is logged (with ``where``) and becomes the one failure, never raised: the
    model's answer is cached before the guard reads it, so a reply that made the guard raise
    would stop the stage on every redelivery of the round. With a failure, the template is sent
    instead."""
    try:
        return list(
            check(
                text,
                approved,
                currency,
                held,
                earlier_refund=earlier_refund,
                held_names=held_names,
                whole_order=whole_order,
                item_names=item_names,
            )
        )
    except Exception as exc:  # any fault of the guard's, on any model answer
        log.exception("the reply guard raised on the model's reply for %s", where)
        return [
            storable(
                f"the guard could not read the reply: {type(exc).__name__}: {exc}",
                _GUARD_ERROR_CHARS,
            )
        ]


@dataclass(frozen=True)
class StoredReply:
    """A round's stored reply: its event, and what pricing approved for the round when it was
    written (``None`` for a reply stored before that was kept)."""

    event: ev.ReplyPublished
    approved_minor: int | None

    def check_priced_alike(self, approved: int) -> None:
        """Raise :class:`InvalidInput` when the round now approves another amount than its reply
        was written for: the round was priced again (a verdict replayed after pricing's state
        of the dispute expired, say). Its payout would pay what the customer was never told, or
        pay a round a reviewer declined; a person must look at it."""
        if self.approved_minor is not None and self.approved_minor != approved:
            raise InvalidInput(
                f"round {self.event.round} was priced again: its reply was written for"
                f" {self.approved_minor} approved, this event approves {approved};"
                " nothing is paid for it"
            )


def _reply(dispute_id: str, round_: int, row: Sequence[Any]) -> StoredReply:
    """A ``replies`` row as ``_REPLY_SQL`` and ``_STORE_REPLY_SQL`` return it."""
    text, amount, currency, source, failures, model, version, created, approved = row
    event = ev.ReplyPublished(
        dispute_id=dispute_id,
        round=round_,
        text=text,
        amount_minor=amount,
        currency=currency,
        source=source,
        guard_failures=list(failures),
        model=model,
        prompt_version=version,
        published_at=created.replace(microsecond=created.microsecond // 1000 * 1000),
    )
    return StoredReply(event, approved)


class SettlerHandler:
    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        llm: JsonCompleter,
        cache: ResponseCache,
        prompt: Prompt,
        on_call: OnCall | None = None,
    ) -> None:
        self._pool = pool
        self._llm = llm
        self._cache = cache
        self._prompt = prompt
        self._on_call: OnCall = on_call or uncounted
        self._in_flight = InFlight()
        self._drawn = DrawnBy()
        self._snapshots = AsyncSnapshotReader(pool)
        self._inputs: TickBatcher[tuple[str, int], Inputs] = TickBatcher(self._read_inputs)
        """The rounds whose handlers start in one event-loop iteration are read together."""
        self._reservations: TickBatcher[RoundToReserve, Reservation] = TickBatcher(
            lambda rounds: reserve_rounds(pool, rounds)
        )

    def spec(self) -> StageSpec:
        return StageSpec.of(SETTLER, self.handle)

    async def handle(self, message: Message, _ctx: Context) -> Sequence[Emit]:
        priced = ev.parse(ev.RefundPriced, message.value)
        ev.known(Decision, priced.decision, "decision")  # never read as "pay nothing"
        for line in priced.lines:  # before anything is reserved or stored for the round
            ev.known(Category, line.category, f"line {line.grievance_id}")
        approved = approved_minor(priced)
        if approved < 0:
            raise InvalidInput(f"negative payable amount {approved}")
        # Checked before a reply that says "refunded" is stored: without it nothing is paid.
        reference = await self._payment_reference(priced) if approved > 0 else ""
        stored, complaint, told_refunded = await self._inputs.submit(
            (priced.dispute_id, priced.round)
        )
        if stored is not None:
            stored.check_priced_alike(approved)
        else:
            says = approved
            if approved > 0 and not await self._reserve(priced, approved, reference):
                # The ledger holds this round for a person: promise nothing, as under the cap.
                says = 0
            # "In addition to our earlier refund" only where an earlier reply said refunded: a
            # round approved earlier may have been held back by the ledger and told so.
            earlier_refund = priced.already_paid_minor > 0 and told_refunded
            written = await self._write(
                priced, complaint, says, reply_lines(priced, says), earlier_refund
            )
            stored = await self._store(priced, says, approved, written)
            stored.check_priced_alike(approved)  # another handler's, priced otherwise, won
        outputs = [Emit(t.REPLY_PUBLISHED.name, priced.dispute_id, stored.event.to_avro())]
        if approved > 0:
            request = ev.PayoutRequested(
                dispute_id=priced.dispute_id,
                order_id=priced.order_id,
                round=priced.round,
                amount_minor=approved,
                currency=priced.currency,
                payment_reference=reference,
                requested_at=ev.now(),
            )
            outputs.append(Emit(t.PAYOUT_REQUESTED.name, priced.dispute_id, request.to_avro()))
        return outputs

    async def _write(
        self,
        priced: ev.RefundPriced,
        complaint: str,
        approved: int,
        lines: ReplyLines,
        earlier_refund: bool,
    ) -> Written:
        """The model's reply if it passes the guard, else the template; ``approved``: what the
        reply states refunded; ``earlier_refund``: the reply must mention the refund an earlier
        reply stated."""
        request = reply_request(
            complaint,
            format_amount(approved, priced.currency),
            lines,
            prompt=self._prompt,
            earlier_refund=earlier_refund,
        )
        held_lines, resolved, held = lines
        key = settler_cache_key(
            priced.dispute_id, priced.round, request.inputs_sha256(), self._prompt.version
        )

        async def compute() -> str:
            try:
                drawn = await self._llm.complete_json(
                    request.messages, request.schema_name, request.schema, None, priced.dispute_id
                )
            except MalformedAnswer:  # paid for, and nothing stored: the cache counts nothing
                self._on_call("made")
                self._on_call("unreadable")
                raise
            self._drawn.keep(
                key,
                drawn.text,
                Provenance(drawn.served_model, drawn.system_fingerprint, self._llm.temperature),
            )
            return drawn.text

        # What the endpoint named for the answer, known to the process that drew it (this call,
        # one it joined, an earlier attempt whose cache write failed): none for an answer
        # another process drew, nothing of which is kept beside the answer.
        served: Provenance | None = None

        held_names = _only_held(held_lines, resolved)
        item_names = sorted({line.item_name for line in priced.lines if line.item_name})
        failures: list[str]
        raw: str | None = None
        try:
            raw, from_cache = await cached_call(
                self._cache, key, compute, self._on_call, in_flight=self._in_flight
            )
            served = self._drawn.get(key, raw)
            try:
                text = parse_customer_reply(raw).reply
            except MalformedAnswer:
                if not from_cache:  # counted by the call that drew it
                    self._on_call("unreadable")
                raise
            failures = guard_failures(
                text,
                approved,
                priced.currency,
                held,
                earlier_refund=earlier_refund,
                held_names=held_names,
                where=f"{priced.dispute_id} round {priced.round}",
                whole_order=approved + priced.already_paid_minor >= priced.order_total_minor > 0,
                item_names=item_names,
            )
        except MalformedAnswer as exc:
            failures = [f"unreadable model answer: {exc.reason}"]
            if raw is None:  # the draw itself was unreadable (not the answer after it)
                served = Provenance(exc.served_model, exc.system_fingerprint, self._llm.temperature)
                raw = exc.raw or None  # kept like any answer replaced: what it held
        except (LlmUnavailable, LlmFailedAlone) as exc:
            # The model only: any other transient failure (the answer cache's or the rate
            # limit's Redis) is raised, and the handler retried, rather than putting a template
            # reply on record for every replay.
            failures = [f"model unavailable: {type(exc).__name__}"]
        except LlmRejected as exc:
            if not exc.refused_input:
                raise  # the settings are wrong for every reply: stop, so the alerts fire
            failures = [f"model refused the request: HTTP {exc.status}"]
        served_model = None if served is None else served.served_model
        fingerprint = None if served is None else served.system_fingerprint
        if not failures:
            return Written(text, "MODEL", [], None, served_model, fingerprint)
        replaced = None if raw is None else storable(raw, MAX_MODEL_ANSWER_CHARS)
        reply = template_for(
            approved,
            priced.currency,
            resolved,
            held,
            held_names=held_names,
            earlier_refund=earlier_refund,
            item_names=item_names,
        )
        return Written(reply, "TEMPLATE", failures, replaced, served_model, fingerprint)

    async def _read_inputs(self, rounds: list[tuple[str, int]]) -> list[Inputs]:
        """Each round's :data:`Inputs`, in the order asked for (a round asked for twice is read
        once)."""
        distinct = list(dict.fromkeys(rounds))
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                _INPUTS_SQL,
                ([dispute for dispute, _ in distinct], [round_ for _, round_ in distinct]),
            )
            rows = await cur.fetchall()
        found: dict[tuple[str, int], Inputs] = {}
        for dispute_id, round_, *reply, complaint, told_refunded in rows:
            stored = None if reply[0] is None else _reply(dispute_id, round_, reply)
            found[(dispute_id, round_)] = (stored, complaint or "", told_refunded)
        return [found[key] for key in rounds]

    async def _reserve(self, priced: ev.RefundPriced, approved: int, reference: str) -> bool:
        """Reserve the round in the payout ledger; True if the payout will pay ``approved``."""
        reservation = await self._reservations.submit(
            RoundToReserve(
                dispute_id=priced.dispute_id,
                round=priced.round,
                amount_minor=approved,
                currency=priced.currency,
                payment_reference=reference,
            )
        )
        return reservation.promises(approved, priced.currency)

    async def _stored_reply(self, dispute_id: str, round_: int) -> StoredReply | None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(_REPLY_SQL, (dispute_id, round_))
            row = await cur.fetchone()
        return None if row is None else _reply(dispute_id, round_, row)

    async def _store(
        self, priced: ev.RefundPriced, says: int, approved: int, written: Written
    ) -> StoredReply:
        """Insert the reply (stating ``says``, written for ``approved``) unless one exists;
        return whichever is stored (first writer wins)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                _STORE_REPLY_SQL,
                (
                    priced.dispute_id,
                    priced.round,
                    written.text,
                    says,
                    priced.currency,
                    written.source,
                    Jsonb(written.failures),
                    self._llm.model,
                    self._prompt.version,
                    approved,
                    written.model_answer,
                    written.served_model,
                    written.system_fingerprint,
                ),
            )
            row = await cur.fetchone()
        if row is not None:
            return _reply(priced.dispute_id, priced.round, row)
        stored = await self._stored_reply(priced.dispute_id, priced.round)
        if stored is None:
            raise RuntimeError(f"reply {priced.dispute_id}/{priced.round} was not stored")
        return stored

    async def _payment_reference(self, priced: ev.RefundPriced) -> str:
        """The payment to refund: carried by the event, or (in an event priced before it was)
        read from the evidence snapshot."""
        if priced.payment_reference:
            return priced.payment_reference
        reference = payment_reference(await self._snapshots.get(priced.snapshot_sha256))
        if reference is None:
            raise InvalidInput("the order has no payment reference to refund against")
        return reference
