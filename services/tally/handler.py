"""The tally stage: ruling.cast -> verdict.decided, exactly once.

Per grievance, the bench state (rulings by seat, and whether the verdict went out) lives in the
``tally.benches`` store, whose changelog is written in the same transaction as the verdict and
the consumed offsets. A redelivered ruling of a seat already counted is ignored; the verdict is
emitted once, when the K-th seat is in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from refund_bench import events as ev
from refund_bench import topics as t
from refund_bench.errors import InvalidInput
from refund_bench.runtime import Context, Emit, Message, StageSpec
from services.tally.votes import (
    BenchState,
    RulingSummary,
    add_ruling,
    mark_emitted,
    should_emit,
    tally,
)

STORE = "benches"


def bench_key(dispute_id: str, grievance_id: str) -> str:
    return f"{dispute_id}/{grievance_id}"


def handle(message: Message, ctx: Context) -> Sequence[Emit]:
    cast_ = ev.parse(ev.RulingCast, message.value)
    store = ctx.store()
    key = bench_key(cast_.dispute_id, cast_.grievance_id)
    stored: dict[str, Any] | None = store.get(key)
    try:
        bench = BenchState.from_dict(stored["bench"]) if stored else None
        summary = RulingSummary.from_ruling_cast(message.value)
        bench, is_new = add_ruling(bench, cast_.judge_seat, summary, cast_.judge_count)
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"ruling cannot be counted: {exc}") from exc
    if not is_new:
        return ()
    meta = stored["meta"] if stored else _meta(cast_)
    outputs: list[Emit] = []
    if should_emit(bench):
        outputs.append(_verdict(cast_, bench))
        bench = mark_emitted(bench)
    store.put(key, {"bench": bench.to_dict(), "meta": meta})
    return outputs


def _meta(cast_: ev.RulingCast) -> dict[str, Any]:
    return {"category": cast_.category, "snapshot_sha256": cast_.snapshot_sha256}


def _verdict(cast_: ev.RulingCast, bench: BenchState) -> Emit:
    count = tally(bench)
    verdict = ev.VerdictDecided(
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
            )
            for r in bench.rulings
        ],
        decided_at=ev.now(),
    )
    return Emit(t.VERDICT_DECIDED.name, cast_.dispute_id, verdict.to_avro())


def spec() -> StageSpec:
    return StageSpec("tally", (t.RULING_CAST,), (t.VERDICT_DECIDED,), handle, store=STORE)
