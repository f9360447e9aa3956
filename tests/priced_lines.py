"""The lines of a ``refund.priced`` round, as pricing writes them, for the settler's tests."""

from __future__ import annotations

from collections.abc import Iterable

from refund_bench import events as ev

LineSpec = tuple[str, str, str, str, int, str | None]
"""A line: grievance id, category, verdict outcome, line status, amount, item name."""


def priced_lines(
    lines: Iterable[LineSpec], *, proposed_when_zero: int = 0
) -> list[ev.PricedLineEvent]:
    """``lines`` as events: one unit of the item each names, the amount proposed (or
    ``proposed_when_zero`` for a line that pays nothing)."""
    return [
        ev.PricedLineEvent(
            grievance_id=gid,
            category=category,
            outcome=outcome,
            status=status,
            amount_minor=amount,
            proposed_minor=amount or proposed_when_zero,
            rule=f"{category}: as priced",
            item_name=item,
            quantity=1 if item else None,
        )
        for gid, category, outcome, status, amount, item in lines
    ]
