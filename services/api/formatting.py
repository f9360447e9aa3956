"""Pure helpers for the desk's pages: timestamps, URL path segments, highlighted spans, pretty
JSON (money: :func:`refund_bench.money.format_minor`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote


def when(value: datetime | None) -> str:
    """A timestamp as ``2026-09-14 14:45:00 UTC`` (empty for ``None``)."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def path_segment(value: str) -> str:
    """``value`` as one URL path segment, every reserved character escaped (``/`` too):
    ``"acme/d-1"`` -> ``"acme%2Fd-1"``. The routes that take a dispute id read ``/`` in it
    (``{dispute_id:path}``), so a link built with this opens the dispute whatever its id holds."""
    return quote(value, safe="")


def pretty_json(text: str) -> str:
    """Indented JSON for reading (the stored canonical form is what is hashed)."""
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return text


@dataclass(frozen=True)
class Span:
    grievance_id: str
    start: int
    end: int
    label: str


@dataclass(frozen=True)
class Segment:
    """A run of the complaint text covered by the same grievances (none: plain text)."""

    text: str
    spans: tuple[Span, ...]

    @property
    def grievance_ids(self) -> tuple[str, ...]:
        return tuple(s.grievance_id for s in self.spans)

    @property
    def title(self) -> str:
        return "; ".join(f"{s.grievance_id} {s.label}" for s in self.spans)


def highlight(text: str, spans: Iterable[Span]) -> list[Segment]:
    """Cut ``text`` at every span boundary; each piece knows which spans cover it.

    Spans are clamped to the text; empty or inverted spans are ignored; overlaps are kept.
    """
    valid = []
    for span in spans:
        start, end = max(0, span.start), min(len(text), span.end)
        if start < end:
            valid.append(Span(span.grievance_id, start, end, span.label))
    cuts = sorted({0, len(text), *(s.start for s in valid), *(s.end for s in valid)})
    segments = []
    for left, right in itertools.pairwise(cuts):
        covering = tuple(s for s in valid if s.start <= left and right <= s.end)
        segments.append(Segment(text[left:right], covering))
    return segments
