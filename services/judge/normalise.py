"""Code-side normalisation of one judge's answer into the ruling the tally counts.

The model's word is taken only when it is one of the three rulings and, for UPHELD or REJECTED,
when it cites at least one field that exists in the frozen snapshot. A decisive ruling grounded
in nothing the judge was shown is treated as the evidence being silent: ESCALATE. A REJECTED
that cites any field holding no record (a null delivery time, no packaging record), or an
object or list with such a field in it (the missing-unit estimates when one item's is null, the
line items when one has no unit weight: which part it rests on is not on record), rests, at
least in part, on missing evidence, which is never a rejection: ESCALATE too, whatever else it
cites. An UPHELD that cites a field holding no record stands as the seat's ruling, marked
(:attr:`NormalisedRuling.cites_missing_evidence`): the tally lets it count in the split, never
towards an UPHELD majority, so missing evidence comes out ESCALATE however many seats take the
customer at their word. A decisive ruling whose citations could not all be kept for the record
(more of them, or longer ones, than a ruling keeps) is ESCALATE too: what it rests on beyond
them could not be checked, now or on replay, so it neither moves money nor refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from refund_bench.domain import Ruling

_PREFIXES = ("evidence.", "snapshot.")
_STRIP = " \t\r\n\"'`"


@dataclass(frozen=True)
class NormalisedRuling:
    """The effective ruling, what the model said, and why they differ (for audit)."""

    ruling: Ruling
    model_ruling: str
    cited_known: tuple[str, ...]
    cited_unknown: tuple[str, ...]
    reason: str
    cites_missing_evidence: bool = False
    """The answer cites a field of the snapshot that holds no record (one of ``silent_fields``,
    :func:`services.extractor.evidence.silent_fields`; for a REJECTED, also an object or list
    with one in it), or rules on a claim whose records are absent: it rests, at least in part,
    on silence. An UPHELD citing a whole object is not marked for a null elsewhere in it: a
    missing-item claim citing every item's estimate rests on its own item's, which may be on
    record."""

    @property
    def changed(self) -> bool:
        """True when code overrode the model's ruling."""
        return self.ruling.value != self.model_ruling.strip().upper()


def _citations(evidence_cited: Sequence[str], allowed: frozenset[str]) -> list[str]:
    """The fields ``evidence_cited`` names: an entry that is a field of the snapshot as it
    stands, else every field named in it with something said of it (``order.packaging_notes:
    null``, ``derived.delay_minutes is 12 and order.delivered_at is null``:
    :func:`_fields_named`), and each part of it between commas, semicolons and newlines that
    names none, as an unknown citation."""
    out: list[str] = []
    for entry in evidence_cited:
        whole = entry.strip(_STRIP)
        if _key(whole) in allowed:
            out.append(whole)
            continue
        named = _fields_named(entry, allowed)
        out.extend(field for _, _, field in named)
        for part in _PART.finditer(entry):
            cleaned = part.group().strip(_STRIP)
            if cleaned and not any(b < part.end() and part.start() < e for b, e, _ in named):
                out.append(cleaned)
    return out


_PART = re.compile(r"[^,;\n]+")
_WORD_START = re.compile(r"(?<![\w.])\w")
"""Where a field's name may begin: a word that does not go on from another or a dot."""
_WORD_END = re.compile(r"(?=\W)|$")
"""Where a field's name may end: before any character that is not a letter, digit or ``_``."""
_ANNOTATED = re.compile(r"\s*[:=]")


def _fields_named(entry: str, allowed: frozenset[str]) -> list[tuple[int, int, str]]:
    """The fields of the snapshot ``entry`` names, with where each stands: at each word, the
    longest field that begins there (an item's name may hold a space, a comma or a bracket:
    "Chicken Biryani (Large): null" is not "Chicken"). A name counts when it reads as a path
    (a ``.`` or ``_`` in it) or a colon or equals sign follows it ("currency: INR"), so that a
    plain word of the judge's ("currency mismatch") cites nothing."""
    longest_key, first_steps = _shape(allowed)
    reach = longest_key + 16  # a prefix (``evidence.``) and quotes around a field
    ends = [end.start() for end in _WORD_END.finditer(entry)]
    found: list[tuple[int, int, str]] = []
    taken = 0
    for word in _WORD_START.finditer(entry):
        begin = word.start()
        if begin < taken:
            continue
        lead = _key(entry[begin : begin + reach])
        if _FIRST_STEP.split(lead, maxsplit=1)[0] not in first_steps:
            continue  # the cheap test first: most words of a judge's sentence begin no field
        longest = None
        for end in ends:
            if end <= begin or end - begin > reach:
                continue
            head = entry[begin:end]
            if (
                head[-1] not in _STRIP
                and _key(head) in allowed
                and ("." in head or "_" in head or _ANNOTATED.match(entry, end) is not None)
            ):
                longest = (begin, end, head)
        if longest is not None:
            found.append(longest)
            taken = longest[1]
    return found


_FIRST_STEP = re.compile(r"\W")


@lru_cache(maxsize=256)
def _shape(allowed: frozenset[str]) -> tuple[int, frozenset[str]]:
    """The longest comparison key of a snapshot's fields, and the first step of each
    (``order``, ``derived``, ``delivered_at``): where a field's name may begin."""
    longest = max(map(len, allowed), default=0)
    return longest, frozenset(_FIRST_STEP.split(key, maxsplit=1)[0] for key in allowed)


def _key(field: str) -> str:
    key = field.strip(_STRIP).casefold()
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


@lru_cache(maxsize=256)
def _keys(allowed_fields: frozenset[str]) -> frozenset[str]:
    """The comparison keys of a snapshot's fields (every seat of every grievance shares them)."""
    return frozenset(_key(field) for field in allowed_fields)


_STEP = re.compile(r"[.\[]")
"""Where a path steps into a child: ``a.b``, ``a.0`` and ``a[0]`` (the forms of
:func:`services.extractor.evidence.evidence_fields`)."""


@lru_cache(maxsize=256)
def _holding_silence(silent_fields: frozenset[str]) -> frozenset[str]:
    """The comparison keys of the silent fields and of every path above one: an object or list
    with a field in it that holds no record (``derived.missing_units_estimate`` when one item's
    estimate is null, ``order.line_items`` when one item has no unit weight). An item name
    holding a ``.`` or ``[`` adds a path above that names no field, or another item's: the
    latter is then taken to hold silence too, which only ever escalates."""
    keys: set[str] = set()
    for key in _keys(silent_fields):
        keys.add(key)
        keys.update(key[: step.start()] for step in _STEP.finditer(key) if step.start())
    return frozenset(keys)


def normalise(
    model_ruling: str,
    evidence_cited: Sequence[str],
    allowed_fields: frozenset[str],
    silent_fields: frozenset[str] = frozenset(),
    claim_unrecorded: bool = False,
    citations_cut: bool = False,
) -> NormalisedRuling:
    """Normalise one answer; see :func:`normalise_ruling` for the rule. ``claim_unrecorded``:
    a record the grievance's kind of claim rests on is absent from the snapshot
    (:func:`services.extractor.evidence.claim_unrecorded`), so a decisive ruling rests on
    silence whatever it cites. ``citations_cut``: ``evidence_cited`` is what the ruling keeps
    of the model's citations, and the model cited more, or longer entries, than that.

    Ruling words are matched case-insensitively after trimming. Citations are trimmed of quotes
    and compared case-insensitively, with an optional ``evidence.`` or ``snapshot.`` prefix
    ignored; an entry that is no field whole cites each field it names with something said of
    it (``order.packaging_notes: null``), and each part of it between commas, semicolons and
    newlines that names none is an unknown citation.
    """
    allowed = _keys(allowed_fields)
    cited = _citations(evidence_cited, allowed)
    known = tuple(c for c in cited if _key(c) in allowed)
    unknown = tuple(c for c in cited if _key(c) not in allowed)

    try:
        ruling = Ruling(model_ruling.strip().upper())
    except ValueError:
        return NormalisedRuling(
            Ruling.ESCALATE, model_ruling, known, unknown, f"unknown ruling {model_ruling!r}"
        )
    if ruling is not Ruling.ESCALATE and not known:
        reason = (
            f"{ruling} cites no field of the evidence snapshot"
            if not cited
            else f"{ruling} cites only fields not in the snapshot: {', '.join(unknown)}"
        )
        return NormalisedRuling(Ruling.ESCALATE, model_ruling, known, unknown, reason)
    # A REJECTED citing an object with a null in it may rest on the null: never a rejection.
    # An UPHELD citing it (every item's estimate, for one item's claim) is marked only for a
    # null it cites itself, or a missing-item claim on an order with one unweighed item would
    # never be upheld.
    silent = _holding_silence(silent_fields) if ruling is Ruling.REJECTED else _keys(silent_fields)
    resting_on_nothing = [c for c in known if _key(c) in silent]
    # An ESCALATE needs no record: it is marked only for what it cites.
    on_silence = bool(resting_on_nothing) or (claim_unrecorded and ruling is not Ruling.ESCALATE)
    if ruling is Ruling.REJECTED and on_silence:
        what = (
            "cites evidence the order store has no record of, in whole or in part:"
            f" {', '.join(resting_on_nothing)}"
            if resting_on_nothing
            else "rules on a claim whose records the order store does not have"
        )
        reason = f"REJECTED {what} (missing evidence is never a rejection)"
        return NormalisedRuling(Ruling.ESCALATE, model_ruling, known, unknown, reason, on_silence)
    if ruling is not Ruling.ESCALATE and citations_cut:
        reason = (
            f"{ruling} cites more evidence than a ruling keeps: what it rests on beyond the kept"
            " citations cannot be checked"
        )
        return NormalisedRuling(Ruling.ESCALATE, model_ruling, known, unknown, reason, on_silence)
    return NormalisedRuling(
        ruling, model_ruling, known, unknown, "as ruled by the model", on_silence
    )


def normalise_ruling(
    model_ruling: str,
    evidence_cited: Sequence[str],
    allowed_fields: frozenset[str],
    silent_fields: frozenset[str] = frozenset(),
    claim_unrecorded: bool = False,
    citations_cut: bool = False,
) -> Ruling:
    """The ruling the tally counts.

    Unknown ruling -> ESCALATE; UPHELD or REJECTED citing no field in ``allowed_fields`` ->
    ESCALATE; REJECTED citing any field in ``silent_fields`` (evidence with no record) or any
    field above one (``a.b`` above ``a.b.c``, ``a.b.0.c`` or ``a.b[0].c``), or on a claim
    whose records are absent (``claim_unrecorded``) -> ESCALATE; UPHELD or REJECTED whose
    citations were cut to what a ruling keeps (``citations_cut``) -> ESCALATE; otherwise the
    model's ruling. An UPHELD citing silent evidence (the null field itself), or on a claim whose
    records are absent, stands as the seat's ruling, marked ``cites_missing_evidence``: it
    counts in the split, and never towards an UPHELD majority
    (:func:`services.tally.votes.count_votes`).
    """
    return normalise(
        model_ruling,
        evidence_cited,
        allowed_fields,
        silent_fields,
        claim_unrecorded,
        citations_cut,
    ).ruling
