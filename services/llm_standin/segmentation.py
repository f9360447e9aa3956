"""Complaint text cut into sentences and clauses, each with its offsets in the text.

Offsets are Python ``str`` indices (Unicode code points), end exclusive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Segment:
    """A stretch of the complaint, ``text == complaint[start:end]``, trimmed of whitespace."""

    start: int
    end: int
    text: str


def _trimmed(text: str, start: int, end: int) -> Segment | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Segment(start, end, text[start:end]) if start < end else None


CLOSERS: Final = "\"'\u201d\u2019)"
"""Closing quotes and brackets that may follow a sentence's terminal punctuation."""


_SENTENCE_END_RE: Final = re.compile(r"[.!?]+[" + re.escape(CLOSERS) + r"]*(?=\s|$)|\n")


def sentences(text: str) -> list[Segment]:
    """Split ``text`` at ``.``, ``!``, ``?`` (followed by a space or the end) and at newlines.

    Each sentence keeps its terminal punctuation (and closing quotes) and is trimmed of
    surrounding whitespace. "8:15pm" or "2.5 hours" do not end a sentence.
    """
    out: list[Segment] = []
    start = 0
    for end in _SENTENCE_END_RE.finditer(text):
        stop = end.start() if end.group(0) == "\n" else end.end()
        segment = _trimmed(text, start, stop)
        if segment is not None:
            out.append(segment)
        start = end.end()
    tail = _trimmed(text, start, len(text))
    if tail is not None:
        out.append(tail)
    return out


_CLAUSE_SEPARATOR_RE: Final = re.compile(
    r"\s*;\s*|\s+[-\u2013\u2014]+\s+|\s*,\s*(?:and|but|so|plus|also)\s+|\s*,\s*|\s+but\s+",
    re.IGNORECASE,
)


def clauses(text: str, sentence: Segment) -> list[Segment]:
    """``sentence`` (a sentence of ``text``) split at ``;``, dashes, commas (with or without
    "and", "but", "so", "plus", "also") and "but", each clause trimmed, offsets in ``text``."""
    out: list[Segment] = []
    cursor = 0
    for separator in _CLAUSE_SEPARATOR_RE.finditer(sentence.text):
        piece = _trimmed(text, sentence.start + cursor, sentence.start + separator.start())
        if piece is not None:
            out.append(piece)
        cursor = separator.end()
    piece = _trimmed(text, sentence.start + cursor, sentence.end)
    if piece is not None:
        out.append(piece)
    return out
