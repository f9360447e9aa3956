"""Extraction answers that are not the model's whole answer: cut short at the token limit,
withheld by a content filter, empty, or holding no text
(:class:`~refund_bench.llm.roles.MalformedAnswer`).

Such an answer is never read as the complaint's grievances, however its text reads: a filter
may have withheld a claim from an answer that still parses, and one cut short names only the
claims before the cut. It is cached with why it is not whole (:func:`mark`), so that a
redelivery served from the cache treats it the same, and the grievances it holds whole before
its fault (:func:`whole_grievances`) are what its repair must keep, as for any invalid answer.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from refund_bench.storable import storable

_PREFIX = "not-whole="
_WHOLE = "whole:\n"
"""Before a whole answer that begins as a marked one would (:func:`whole`)."""
MAX_REASON_CHARS = 500
"""A cached answer keeps this much of why it is not whole."""

_GRIEVANCES = re.compile(r'"grievances"\s*:\s*\[')
_BETWEEN = frozenset(" \t\r\n,")
_DECODER = json.JSONDecoder()


class CachedAnswer(NamedTuple):
    """An extraction answer as the cache holds it, read back (:func:`read`)."""

    text: str
    """The model's text, as it came."""
    not_whole: str | None
    """Why it is not the model's whole answer, or ``None`` for an answer that is (and for
    every answer cached before answers recorded it)."""


def whole(text: str) -> str:
    """The cache value of ``text``, a whole answer: itself, unless it begins as a marked one
    (or as one escaped so), which a model can be made to write: then escaped."""
    return _WHOLE + text if text.startswith((_PREFIX, _WHOLE)) else text


def mark(text: str, reason: str) -> str:
    """The cache value of ``text``, an answer that is not whole for ``reason``."""
    return f"{_PREFIX}{json.dumps(storable(reason, MAX_REASON_CHARS), ensure_ascii=True)}\n{text}"


def read(value: str) -> CachedAnswer:
    """A cache value read back: ``read(mark(t, r)) == (t, r)`` for a reason ``storable`` keeps
    whole, ``read(whole(t)) == (t, None)``; any other value (an answer cached before answers
    were marked, a JSON object) is that answer, whole."""
    if value.startswith(_WHOLE):
        return CachedAnswer(value.removeprefix(_WHOLE), None)
    if not value.startswith(_PREFIX):
        return CachedAnswer(value, None)
    head, newline, text = value.partition("\n")
    try:
        reason = json.loads(head.removeprefix(_PREFIX))
    except (ValueError, RecursionError):
        reason = None
    if not newline or not isinstance(reason, str):
        return CachedAnswer(value, None)
    return CachedAnswer(text, reason)


def whole_grievances(text: str) -> list[object]:
    """The elements of the answer's ``grievances`` list that ``text`` holds whole, in order, up
    to the first that is cut or unreadable: all of them in a whole answer, those before the cut
    in one cut short. Empty when ``text`` has no such list."""
    found = _GRIEVANCES.search(text)
    if found is None:
        return []
    grievances: list[object] = []
    at = found.end()
    while True:
        while at < len(text) and text[at] in _BETWEEN:
            at += 1
        if at >= len(text) or text[at] == "]":
            return grievances
        try:
            grievance, at = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            return grievances
        grievances.append(grievance)
