"""The tally stage: ruling.cast -> verdict.decided, exactly once.

Per grievance, the bench state lives in the ``tally.benches`` store, whose changelog is written
in the same transaction as the verdict and the consumed offsets. Until the K-th seat is in, the
state holds the rulings so far and what the first ruling said of the grievance
(``{"bench": ..., "facts": ...}``); a redelivered ruling of a seat already counted is ignored,
and a ruling that says otherwise of the grievance (its category, item, quantity, order,
snapshot or grievance count) is dead-lettered, so the verdict carries what every seat judged.
When the K-th seat is in, the verdict is emitted once and the state shrinks to a marker
(``{"decided_at": ...}``): the rulings travel in the verdict, and every later ruling of that
grievance is a redelivery to ignore. The store's retention (see
:class:`refund_bench.runtime.state.StateStore`) bounds how long markers are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.domain import MAX_JUDGES
from refund_bench.errors import InvalidInput
from refund_bench.runtime import Context, Emit, Message, StageSpec
from refund_bench.stages import TALLY
from services.tally.votes import (
    BenchState,
    RulingSummary,
    add_ruling,
    is_complete,
    tally,
)

RETENTION_S = 7 * 24 * 3600.0
"""How long a grievance's state outlives its last write, by default: redeliveries come within
minutes; a replay older than this would count the grievance again (the payout ledger still pays
a dispute at most once)."""
DECIDED = "decided_at"
"""The key of a decided grievance's marker: when its verdict went out (ISO 8601)."""


def bench_key(dispute_id: str, grievance_id: str) -> str:
    return f"{dispute_id}/{grievance_id}"


def handle(message: Message, ctx: Context) -> Sequence[Emit]:
    cast_ = ev.parse(ev.RulingCast, message.value)
    message.require_key(cast_.dispute_id)
    if not 0.0 <= cast_.confidence <= 1.0:  # NaN too: the bench's state could not hold it
        raise InvalidInput(f"ruling confidence {cast_.confidence} is outside 0..1")
    if not 1 <= cast_.judge_count <= MAX_JUDGES:
        raise InvalidInput(f"judge_count {cast_.judge_count} is outside 1..{MAX_JUDGES}")
    store = ctx.store()
    key = bench_key(cast_.dispute_id, cast_.grievance_id)
    stored: dict[str, Any] | None = store.get(key)
    if stored is not None and DECIDED in stored:
        return ()
    facts = _grievance_facts(cast_)
    # A bench stored before the facts were kept takes this ruling's.
    first = stored.get("facts", facts) if stored else facts
    ev.agrees(
        facts,
        first,
        f"ruling of seat {cast_.judge_seat} disagrees with the grievance's first ruling",
    )
    try:
        bench = BenchState.from_dict(stored["bench"]) if stored else None
    except ValidationError as exc:
        reason = ev.validation_reason(exc, "bench")
        raise InvalidInput(f"ruling cannot be counted: the stored {reason}") from exc
    try:
        summary = RulingSummary.from_ruling_cast(message.value)
        bench, is_new = add_ruling(bench, cast_.judge_seat, summary, cast_.judge_count)
    except ValidationError as exc:  # before ValueError, which it is: its text quotes the input
        reason = ev.validation_reason(exc, whole="the ruling")
        raise InvalidInput(f"ruling cannot be counted: {reason}") from exc
    except ValueError as exc:  # add_ruling's own, naming seats and counts only
        raise InvalidInput(f"ruling cannot be counted: {exc}") from exc
    if not is_new:
        return ()
    if not is_complete(bench):
        store.put(key, {"bench": bench.to_dict(), "facts": facts})
        return ()
    verdict = _verdict(cast_, bench)
    store.put(key, {DECIDED: verdict.decided_at.isoformat()})
    return (Emit(t.VERDICT_DECIDED.name, cast_.dispute_id, verdict.to_avro()),)


def _grievance_facts(cast_: ev.RulingCast) -> dict[str, Any]:
    """What every seat's ruling says alike of the grievance (the verdict carries it)."""
    return {
        "order_id": cast_.order_id,
        "grievance_total": cast_.grievance_total,
        "category": cast_.category,
        "item_name": cast_.item_name,
        "item_quantity": cast_.item_quantity,
        "snapshot_sha256": cast_.snapshot_sha256,
    }


def _verdict(cast_: ev.RulingCast, bench: BenchState) -> ev.VerdictDecided:
    count = tally(bench)
    return ev.VerdictDecided(
        dispute_id=cast_.dispute_id,
        order_id=cast_.order_id,
        grievance_id=cast_.grievance_id,
        grievance_total=cast_.grievance_total,
        category=cast_.category,
        item_name=cast_.item_name,
        item_quantity=cast_.item_quantity,
        snapshot_sha256=cast_.snapshot_sha256,
        outcome=count.outcome.value,
        votes_upheld=count.votes_upheld,
        votes_rejected=count.votes_rejected,
        votes_escalate=count.votes_escalate,
        split=count.split,
        unanimous=count.unanimous,
        rulings=[
            ev.RulingSummary(
                judge_seat=r.judge_seat,
                ruling=r.ruling.value,
                model_ruling=r.model_ruling,
                confidence=r.confidence,
                evidence_cited=list(r.evidence_cited),
                reasoning=r.reasoning,
                model=r.model,
                prompt_version=r.prompt_version,
                cites_missing_evidence=r.cites_missing_evidence,
            )
            for r in bench.rulings
        ],
        decided_at=ev.now(),
    )


def spec() -> StageSpec:
    return StageSpec.of(TALLY, handle, store_retention_s=RETENTION_S)
