"""Validation of the extraction model's answer against the complaint text and the order.

The model proposes grievances; this code decides whether the proposal is well-formed: known
category, a real span of the complaint, an item that is on the order, a plausible quantity, no
duplicates. It never looks at evidence and never decides whether a grievance is true.

Spans are offsets in the complaint as a Python ``str`` (code points), ``span_end`` exclusive.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from refund_bench.domain import Category, LineItem, name_key
from refund_bench.errors import InvalidInput
from refund_bench.events import readable_text

REQUIRED_KEYS = ("text", "category", "span_start", "span_end", "item_name", "item_quantity")
NEEDS_ITEM = frozenset({Category.MISSING_ITEM, Category.WRONG_ITEM})
DEFAULT_MAX_GRIEVANCES = 20
MAX_GRIEVANCE_TEXT_CHARS = 500
"""A grievance's text restates one checkable claim; judges, reviewers and customers read it."""


class ExtractedGrievance(BaseModel):
    """One validated grievance; ``item_name`` is the exact name of a line item of the order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grievance_id: str
    category: Category
    text: str
    span_start: int = Field(ge=0)
    span_end: int = Field(ge=1)
    item_name: str | None = None
    item_quantity: int | None = Field(default=None, ge=1)


Claim = tuple[Category, str | None]
"""What one grievance claims: its category and the line item it names (the order's spelling)."""


Unresolved = tuple[Category, str]
"""A grievance whose item could not be placed on the order: its category, and how it names the
item (or that it names none, where its category needs one), in readable words."""


Uncategorised = tuple[str, str | None]
"""A grievance whose category is none of the fixed set, or not given: how it was said, in
readable words, and the line item it names (the order's spelling), if its item was placed."""


class ExtractionInvalid(InvalidInput):
    """The model's answer is unusable; ``problems`` lists every reason, in readable words, and
    ``passed`` what a repair must keep of the grievances whose category and text say what they
    claim: groups of claims, of each of which the repair must make one. A claim nothing was
    found wrong with is a group of its own, and so is one at fault for its span, its text's
    length or its quantity (its item is on the order, or it needs none); the claims one text is
    said as about one item are one group (the repair keeps either), and about two items, two;
    in an answer over the grievance limit, all are one group (the repair drops some, not all).
    ``quantities``: the units each claim on an item without fault, made once, claims (all
    the units ordered for an item named without a number): a repair that makes the claim keeps
    them (:func:`quantities_changed`). ``unresolved``: the grievances whose item could not be
    placed (not on the order, ambiguous, or none named where the category needs one); for
    each, the repair must make a claim of its category about an item no claim of ``passed``
    names, or, where its category needs no item, a claim of it about none, since what the
    customer said is still a grievance even when the model could not place it on the order
    (none in an answer over the limit). ``uncategorised``: the grievances whose text says
    something but whose category is none of the fixed set, or not given; for each, the repair
    must make a claim no claim of ``passed`` names, of any category (the one the model meant
    cannot be told), about the item it names if it placed one (in an answer over the limit,
    one claim in all, and only when no other claim is kept). A grievance said in the text and
    about the item of a claim of ``passed``, or in the text of an ``unresolved`` one, is that
    claim said again; two of one category label and item are one claim, as two of one
    category and item are.

    A grievance missing some of its keys is read as if those were null, and one in an answer
    of the wrong shape (a bare list; the object holding ``grievances`` inside another) as if
    the shape were right: either is at fault, but what its category and text say it claims
    is kept all the same.

    A handler may re-ask the model with the problems; unhandled, it goes to the DLQ.
    """

    def __init__(
        self,
        problems: Sequence[str],
        passed: Sequence[Sequence[Claim]] = (),
        unresolved: Sequence[Unresolved] = (),
        quantities: Mapping[Claim, int] | None = None,
        uncategorised: Sequence[Uncategorised] = (),
    ) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.quantities: dict[Claim, int] = dict(quantities or {})
        groups = (tuple(dict.fromkeys(group)) for group in passed if group)
        self.passed: tuple[tuple[Claim, ...], ...] = tuple(dict.fromkeys(groups))
        self.unresolved: tuple[Unresolved, ...] = tuple(unresolved)
        self.uncategorised: tuple[Uncategorised, ...] = tuple(uncategorised)
        super().__init__("; ".join(self.problems))


def _claim_described(claim: Claim) -> str:
    category, item = claim
    return f"{category}" + (f" for {item!r}" if item is not None else "")


def claims_left_out(
    passed: Sequence[Sequence[Claim]],
    grievances: Sequence[ExtractedGrievance],
    unresolved: Sequence[Unresolved] = (),
    uncategorised: Sequence[Uncategorised] = (),
) -> tuple[str, ...]:
    """The groups of ``passed`` (:attr:`ExtractionInvalid.passed`) of which ``grievances`` (the
    answer repairing it) makes no claim, the ``unresolved`` grievances
    (:attr:`ExtractionInvalid.unresolved`) of a category it makes too few new claims of, and,
    when it makes too few new claims for them, the ``uncategorised`` ones
    (:attr:`ExtractionInvalid.uncategorised`), in readable words. Each new claim (one no claim
    of ``passed`` names) stands for one of these at most. A repair fixes what was wrong; a
    claim it drops that had nothing wrong with it is the complaint read differently, and one it
    drops because its item or its category could not be placed is a grievance left unjudged:
    which reading is right is for a person. No grievance is judged here: only the two answers
    are compared, by category and item."""
    made = {(g.category, g.item_name) for g in grievances}
    left_out = [
        _claim_described(group[0])
        if len(group) == 1
        else "one of " + ", ".join(_claim_described(claim) for claim in group)
        for group in passed
        if not made.intersection(group)
    ]
    named = {claim for group in passed for claim in group}
    made_in_order = dict.fromkeys((g.category, g.item_name) for g in grievances)
    new = [claim for claim in made_in_order if claim not in named]
    wants: list[tuple[Category | None, str | None]] = []  # of each: the category, or the item
    merged: set[Claim] = set()
    categories = list(dict.fromkeys(category for category, _ in unresolved))
    for category in categories:
        if category not in NEEDS_ITEM and (category, None) in made:
            merged.add((category, None))  # kept, or merged into that one: it stands for no other
            continue  # placed on no item, as its category may be
        wants += [(category, None) for of, _ in unresolved if of is category]
    wants += [(None, item) for _, item in uncategorised]
    unmet = _unmet(wants, [claim for claim in new if claim not in merged])
    for category in categories:
        if any(wants[at][0] is category for at in unmet):
            left_out += [f"{category} {said}" for of, said in unresolved if of is category]
    if any(wants[at][0] is None for at in unmet):
        left_out += [said for said, _ in uncategorised]
    return tuple(left_out)


def _unmet(
    wants: Sequence[tuple[Category | None, str | None]], claims: Sequence[Claim]
) -> set[int]:
    """The indexes of ``wants`` left without a claim of ``claims`` when each claim stands for
    one of them at most, as many met as can be (augmenting paths). A want ``(category, _)``
    takes a claim of that category; ``(None, item)`` any claim, about ``item`` if not None."""

    def takes(want: tuple[Category | None, str | None], claim: Claim) -> bool:
        category, item = want
        if category is not None:
            return claim[0] is category
        return item is None or claim[1] == item

    holder: dict[Claim, int] = {}

    def meet(at: int, tried: set[Claim]) -> bool:
        for claim in claims:
            if claim in tried or not takes(wants[at], claim):
                continue
            tried.add(claim)
            if claim not in holder or meet(holder[claim], tried):
                holder[claim] = at
                return True
        return False

    return {at for at in range(len(wants)) if not meet(at, set())}


def quantities_changed(
    quantities: Mapping[Claim, int], grievances: Sequence[ExtractedGrievance]
) -> tuple[str, ...]:
    """The claims of ``grievances`` (the answer repairing one) that claim other units of their
    item than the same claim without fault did in the answer repaired (``quantities``:
    :attr:`ExtractionInvalid.quantities`), in readable words. A repair mends what was wrong;
    two of four biryanis become four only by reading the complaint anew, which is for a
    person."""
    return tuple(
        f"{g.category} for {g.item_name!r}: {quantities[claim]} units in the first answer,"
        f" {g.item_quantity} in the repair"
        for g in grievances
        if (claim := (g.category, g.item_name)) in quantities
        and g.item_quantity != quantities[claim]
    )


def _norm_statement(text: str) -> str:
    return name_key(text).rstrip(".!?;:, ")


_WORD = re.compile(r"[^\W_]+")
"""A word of letters and digits: all of one in ASCII text."""


def _word_list(text: str) -> list[str]:
    """The words of ``text``: runs of letters and digits, with the combining marks written on
    them. Devanagari's, Tamil's and other scripts' vowel signs are marks, not letters: without
    them "बिरयानी" would be the fragments "ब", "रय", "न", and parts of words would match."""
    if text.isascii():
        return _WORD.findall(text)
    words: list[str] = []
    start: int | None = None
    for at, char in enumerate(text):
        if char.isalnum() or (start is not None and unicodedata.category(char)[0] == "M"):
            if start is None:
                start = at
        elif start is not None:
            words.append(text[start:at])
            start = None
    if start is not None:
        words.append(text[start:])
    return words


def _singular(word: str) -> str:
    """A plural's usual singular ("biryanis", "sandwiches", "potatoes"); other words as they
    are."""
    if (
        len(word) > 4
        and word.endswith("es")
        and word[:-2].endswith(("ch", "sh", "x", "ss", "z", "o"))
    ):
        return word[:-2]
    if len(word) > 2 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


_FILLER = frozenset(
    {"the", "a", "an", "my", "our", "your", "their", "of", "some", "both", "all", "whole", "one"}
)
"""Words a claim wraps around an item's name ("the fries", "both of my biryanis")."""


def _words(text: str) -> frozenset[str]:
    return frozenset(_singular(word) for word in _word_list(name_key(text)))


_COUNTS = frozenset(
    {
        *("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
        *("eleven", "twelve", "dozen", "half", "halve", "couple", "pair"),
    }
)
"""Words that say how many: with the digits, a count in a claimed item's name."""


def _is_count(word: str) -> bool:
    """Whether ``word`` may say how many: it holds a digit ("2", "x2", "500ml"), or is a number
    word, in the singular or not ("two", "halves", "pairs")."""
    return any(char.isdigit() for char in word) or _singular(word) in _COUNTS


def counts_named(claimed: str, item: LineItem) -> list[str]:
    """The words of ``claimed`` (an item's name as a claim gives it) that say how many of
    ``item`` it claims ("2 biryanis", "biryani x2", "two of the biryanis", "half the naans"):
    words with digits and number words, but those of the item's own name ("7 Up", "Two-Cheese
    Pizza", "Cola 500ml", and "500ml" of "Cola (500 ml)")."""
    own = _words(item.name)
    listed = _word_list(name_key(item.name))
    joined = {first + second for first, second in itertools.pairwise(listed)}
    return [
        word
        for word in _word_list(name_key(claimed))
        if _is_count(word) and _singular(word) not in own and word not in joined
    ]


def _claim_words(text: str) -> frozenset[str]:
    """The words of a claimed name that may name the item: not its filler, nor a number."""
    return frozenset(word for word in _words(text) if word not in _FILLER and not word.isdigit())


def _matching(words: frozenset[str], line_items: Sequence[LineItem]) -> list[LineItem]:
    return [
        item
        for item in line_items
        if words and (named := _words(item.name)) and (words <= named or named <= words)
    ]


def _pick(
    words: frozenset[str], line_items: Sequence[LineItem]
) -> tuple[LineItem | None, list[LineItem]]:
    """The one item ``words`` name (:func:`resolve_item`), if one, and every item they match."""
    matches = _matching(words, line_items)
    if len(matches) == 1:
        return matches[0], matches
    same = [item for item in matches if _words(item.name) == words]
    # "my biryanis" on an order of "Biryani" and "Chicken Biryani": the name it states.
    return (same[0] if len(same) == 1 else None), matches


def resolve_item(claimed: str, line_items: Sequence[LineItem]) -> tuple[LineItem | None, str]:
    """Resolve a claimed item name to one line item, or ``(None, problem)``.

    Case-insensitive; an exact name wins. Otherwise whole words, plurals made singular: the
    claim's words all in the item's name ("biryanis" -> "Hyderabadi Biryani"), or the name's
    words all in the claim ("the Raita container" -> "Raita"), and only one item may match,
    unless exactly one of them is named by the claim's words and no more ("the biryanis" ->
    "Biryani", not "Chicken Biryani").
    The claim's numbers and filler words ("the", "my", "both of") are left out, and when they
    pick out no one item, its counts too ("two of the biryanis", "two diet cokes" from "Coke"
    and "Diet Coke"), but not before: "half tandoori chicken" is the "Tandoori Chicken (Half)"
    of an order that has a "(Full)" too. A claim that picks one item with its count words and
    another without them ("two cheese pizzas" on "Two-Cheese Pizza" and "Cheese Pizza") is
    ambiguous.
    Parts of words never match: "Steak" is not "Tea". A claim may add words to a name, so "Iced
    Tea" still resolves to an order's only "Tea": the judges and the item's price bound what
    follows.
    """
    wanted = name_key(claimed)
    if not wanted:
        return None, "item_name is empty (use null when the claim names no item)"
    exact = [item for item in line_items if name_key(item.name) == wanted]
    if len(exact) == 1:
        return exact[0], ""
    words = _claim_words(claimed)
    item, matches = _pick(words, line_items)
    uncounted = frozenset(word for word in words if not _is_count(word))
    if uncounted != words:  # a count the claim may wrap around the name: "two of the biryanis"
        without, more = _pick(uncounted, line_items)
        if item is None:
            item, matches = without, matches or more
        elif without is not None and without is not item:
            # "two cheese pizzas" on "Two-Cheese Pizza" and "Cheese Pizza": name or count?
            matches = [item, without]
            item = None
    if item is not None:
        return item, ""
    if len(matches) > 1:
        listed = ", ".join(repr(item.name) for item in matches)
        return None, f"item_name {claimed!r} is ambiguous: it matches {listed}"
    return None, f"item_name {claimed!r} is not on the order"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Fault:
    """A grievance at fault whose text still says what it claims: its category (None when it
    is none of the fixed set, or not given: ``label`` is the one given, if any), its text, and
    whether its claim is ``placed`` (its item resolved, though its quantity or span may be
    wrong, or none named where its category needs none: ``item_name``, the order's spelling)
    or its item could not be placed on the order (``claimed`` says how it was named)."""

    category: Category | None
    text: str
    placed: bool
    item_name: str | None
    claimed: str | None
    label: str | None = None


def _check_one(
    index: int, raw: object, complaint: str, line_items: Sequence[LineItem]
) -> tuple[list[str], dict[str, Any] | None, _Fault | None]:
    """Problems of one grievance (``where`` prefixed), and its cleaned fields when it has none,
    or, with problems, what it claims when its text says something and its category, if given,
    is a string (whatever else is wrong: its span, its item, its quantity, its category, keys
    left out). A grievance missing keys has that one problem, and claims what it would with
    them null (an endpoint without the strict schema leaves null keys out)."""
    where = f"grievance {index}"
    if not isinstance(raw, Mapping):
        return [f"{where} is not an object (got {type(raw).__name__})"], None, None
    missing = [key for key in REQUIRED_KEYS if key not in raw]
    if missing:
        filled = {**dict.fromkeys(missing), **raw}
        _, fields, fault = _check_fields(where, filled, complaint, line_items, "category" in raw)
        if fields is not None:  # nothing else wrong: the claim it makes is known
            item = fields["item_name"]
            fault = _Fault(fields["category"], fields["text"], True, item, item)
        return [f"{where} is missing keys: {', '.join(missing)}"], None, fault
    return _check_fields(where, raw, complaint, line_items, True)


def _check_fields(
    where: str,
    raw: Mapping[str, Any],
    complaint: str,
    line_items: Sequence[LineItem],
    category_given: bool,
) -> tuple[list[str], dict[str, Any] | None, _Fault | None]:
    """:func:`_check_one` of a grievance that has the six keys (``category_given``: whether its
    category was the answer's, or stands in for one it left out)."""
    problems: list[str] = []
    text, category_raw = raw["text"], raw["category"]
    start, end = raw["span_start"], raw["span_end"]
    item_name, quantity = raw["item_name"], raw["item_quantity"]

    if not isinstance(text, str):
        problems.append(f"{where}: text must be a string")
    elif not text.strip():
        problems.append(f"{where}: text is empty")
    elif len(text) > MAX_GRIEVANCE_TEXT_CHARS:
        problems.append(
            f"{where}: text is {len(text)} characters, more than the"
            f" {MAX_GRIEVANCE_TEXT_CHARS} of one short statement"
        )
    else:
        try:
            readable_text(text)
        except ValueError as exc:
            problems.append(f"{where}: text {exc}")

    category: Category | None = None
    if not isinstance(category_raw, str):
        problems.append(f"{where}: category must be a string")
    else:
        try:
            category = Category(category_raw.strip())
        except ValueError:
            known = " | ".join(c.value for c in Category)
            problems.append(f"{where}: unknown category {category_raw!r} (expected {known})")

    if not _is_int(start) or not _is_int(end):
        problems.append(f"{where}: span_start and span_end must be integers")
    elif start < 0 or end > len(complaint):
        problems.append(
            f"{where}: span {start}..{end} is outside the complaint (length {len(complaint)})"
        )
    elif start > end:
        problems.append(f"{where}: span_start {start} is after span_end {end}")
    elif start == end or not complaint[start:end].strip():
        problems.append(f"{where}: span {start}..{end} is empty")

    item: LineItem | None = None
    about_item: list[str] = []  # the item's or quantity's problems: the claim stands otherwise
    if item_name is not None and not isinstance(item_name, str):
        about_item.append(f"{where}: item_name must be a string or null")
    elif isinstance(item_name, str):
        item, problem = resolve_item(item_name, line_items)
        if item is None:
            about_item.append(f"{where}: {problem}")
    elif category in NEEDS_ITEM:
        about_item.append(f"{where}: {category} needs the item_name of a line item")

    if quantity is None and item is not None and isinstance(item_name, str):
        counts = counts_named(item_name, item)
        if counts:
            # Left to the contract's "named without a number", it would claim all the units.
            about_item.append(
                f"{where}: item_name {item_name!r} says how many ({', '.join(counts)}) but"
                " item_quantity is null: give the item's name alone and the count as"
                " item_quantity"
            )
    if quantity is not None and not _is_int(quantity):
        about_item.append(f"{where}: item_quantity must be an integer or null")
    elif quantity is not None:
        if item_name is None:
            about_item.append(f"{where}: item_quantity is given but item_name is null")
        elif item is not None and not 1 <= quantity <= item.quantity:
            about_item.append(
                f"{where}: item_quantity {quantity} is out of range 1..{item.quantity} "
                f"for {item.name!r}"
            )

    if problems or about_item:
        fault = None
        says = isinstance(category_raw, str) or not category_given
        if says and isinstance(text, str) and text.strip():
            claimed = item_name if isinstance(item_name, str) else None
            placed = item is not None or (item_name is None and category not in NEEDS_ITEM)
            named = None if item is None else item.name
            label = category_raw.strip() if category is None and category_given else None
            fault = _Fault(category, text, placed, named, claimed, label)
        return problems + about_item, None, fault
    if item is not None and quantity is None:
        # The contract's meaning of an item named without a number (the prompt asks for it,
        # the judges rule on it): all its units, not one.
        quantity = item.quantity
    return (
        [],
        {
            "category": category,
            "text": text.strip(),
            "span_start": start,
            "span_end": end,
            "item_name": None if item is None else item.name,
            "item_quantity": quantity,
        },
        None,
    )


def validate_extraction(
    answer: object,
    complaint_text: str,
    line_items: Sequence[LineItem],
    *,
    max_grievances: int = DEFAULT_MAX_GRIEVANCES,
    not_whole: str | None = None,
) -> tuple[ExtractedGrievance, ...]:
    """Validate the parsed answer ``{"grievances": [...]}``; ids g1..gN follow span order.

    Returns the grievances (possibly none: nothing checkable was said), or raises
    :class:`ExtractionInvalid` listing every problem found. Keys other than the six of the
    contract (e.g. a model-chosen ``grievance_id``) are ignored. ``not_whole``: why the answer
    is not the model's whole answer (cut short, withheld), if it is not; it is then invalid
    whatever it holds, with that as its first problem, and the grievances it holds are what a
    repair must keep, as for any invalid answer. An answer of the wrong shape has that one
    problem, and the grievances it holds (:func:`_grievances_in`) are what a repair must keep.
    """
    problems: list[str] = [] if not_whole is None else [not_whole]
    items, shape = _grievances_in(answer)
    if shape is not None:
        problems.append(shape)
    elif len(items) > max_grievances:
        problems.append(f"{len(items)} grievances is more than the limit of {max_grievances}")

    cleaned: list[tuple[int, dict[str, Any]]] = []
    faults: list[_Fault] = []
    for index, raw in enumerate(items, start=1):
        found, fields, fault = _check_one(index, raw, complaint_text, line_items)
        if shape is None:  # in an answer of the wrong shape, read for its claims alone
            problems.extend(found)
        if fields is not None:
            cleaned.append((index, fields))
        if fault is not None:
            faults.append(fault)

    by_claim: dict[tuple[Category, str | None], int] = {}
    by_text: dict[str, int] = {}
    # The claims each text is said as about one item (or none): a repair keeps one of them.
    said_as: dict[tuple[str, str | None], list[Claim]] = {}
    for index, fields in cleaned:
        claim: Claim = (fields["category"], fields["item_name"])
        said_as.setdefault((_norm_statement(fields["text"]), claim[1]), []).append(claim)
        duplicates: list[str] = []
        if claim in by_claim:
            item = f" for {fields['item_name']!r}" if fields["item_name"] else " without an item"
            duplicates.append(
                f"grievance {index} duplicates grievance {by_claim[claim]}: "
                f"same category {fields['category']}{item}"
            )
        else:
            by_claim[claim] = index
        statement = _norm_statement(fields["text"])
        if statement in by_text:
            duplicates.append(
                f"grievance {index} duplicates grievance {by_text[statement]}: same text"
            )
        else:
            by_text[statement] = index
        if shape is None:
            problems.extend(duplicates)

    if problems:
        raise _invalid(problems, cleaned, faults, said_as, len(items) > max_grievances)

    ordered = sorted(
        cleaned, key=lambda pair: (pair[1]["span_start"], pair[1]["span_end"], pair[0])
    )
    return tuple(
        ExtractedGrievance(grievance_id=f"g{number}", **fields)
        for number, (_, fields) in enumerate(ordered, start=1)
    )


SHAPE_PROBLEM = "answer must be an object with a 'grievances' list"


def _grievances_in(answer: object) -> tuple[list[object], str | None]:
    """The grievances of ``answer``, and the problem of its shape if it is not the object
    asked for. Of an answer of the wrong shape, what still holds grievances: a bare list, the
    ``grievances`` lists of the objects it holds when it has none of its own (``{"result":
    {"grievances": [...]}}``), or the one object ``grievances`` is instead of a list."""
    if isinstance(answer, list):
        return answer, f"{SHAPE_PROBLEM}, got a bare list"
    if not isinstance(answer, Mapping):
        return [], f"{SHAPE_PROBLEM}, got {type(answer).__name__}"
    if "grievances" not in answer:
        wrapped = {
            key: value["grievances"]
            for key, value in answer.items()
            if isinstance(value, Mapping) and isinstance(value.get("grievances"), list)
        }
        inside = "".join(
            f" (found inside {key!r}: answer with that object itself)" for key in wrapped
        )
        held = [grievance for items in wrapped.values() for grievance in items]
        return held, f"answer is missing the key 'grievances'{inside}"
    items = answer["grievances"]
    if isinstance(items, list):
        return items, None
    held = [items] if isinstance(items, Mapping) else []
    return held, f"'grievances' is not a list (got {type(items).__name__})"


TEXT_SHOWN = 80
"""How much of a grievance's text the claims a repair left out quote."""


def _uncategorised_said(fault: _Fault) -> str:
    """How a grievance of no category of the fixed set was said, in readable words (its
    category as given and its text, cut short, quoted)."""
    label = "no category" if fault.label is None else f"category {fault.label[:40]!r}"
    item = "" if fault.item_name is None else f" for {fault.item_name!r}"
    text = fault.text.strip()
    text = text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…"
    return f"a grievance of {label}, none of the fixed set{item}: {text!r}"


def _invalid(
    problems: Sequence[str],
    cleaned: Sequence[tuple[int, Mapping[str, Any]]],
    faults: Sequence[_Fault],
    said_as: dict[tuple[str, str | None], list[Claim]],
    over_limit: bool,
) -> ExtractionInvalid:
    """The invalid answer's :class:`ExtractionInvalid`: its ``problems``, and what a repair must
    keep of its grievances (``cleaned``, without fault; ``faults``; ``said_as``, the claims of
    each text, about one item, of those without fault, which this completes)."""
    unresolved: dict[tuple[Category, str], Unresolved] = {}
    for fault in faults:
        if fault.category is None:
            continue
        if fault.placed:  # its span or quantity is wrong: the claim is known
            said_as.setdefault((_norm_statement(fault.text), fault.item_name), []).append(
                (fault.category, fault.item_name)
            )
        else:
            said = (
                "naming no item of the order"
                if fault.claimed is None
                else f"for {fault.claimed!r}, which names no one item of the order"
            )
            unresolved.setdefault(
                (fault.category, _norm_statement(fault.text)), (fault.category, said)
            )
    unresolved_texts = {text for _, text in unresolved}
    uncategorised: dict[tuple[str, str | None], Uncategorised] = {}
    labelled: set[tuple[str, str | None]] = set()
    for fault in faults:
        if fault.category is not None:
            continue
        statement = _norm_statement(fault.text)
        item = fault.item_name or (None if fault.claimed is None else name_key(fault.claimed))
        if (statement, fault.item_name) in said_as or statement in unresolved_texts:
            continue  # a claim of the fixed set said again, under a category of none
        if (statement, item) in uncategorised or (
            fault.label is not None and (fault.label, item) in labelled
        ):
            continue  # said again, or one category label and item again: one claim
        if fault.label is not None:
            labelled.add((fault.label, item))
        uncategorised[(statement, item)] = (_uncategorised_said(fault), fault.item_name)
    groups = list(said_as.values())
    kept_uncategorised = list(uncategorised.values())
    if over_limit:  # the repair drops some: one of them all is kept
        groups = [[claim for group in groups for claim in group]]
        unresolved = {}
        if groups[0] or not kept_uncategorised:
            kept_uncategorised = []
        else:  # only of none of the fixed set: one claim, of any category and item
            said = f"one of {len(kept_uncategorised)} grievances of no category of the fixed set"
            kept_uncategorised = [(said, None)]
    # A claim made twice, whole or at fault, says no one quantity: a repair merges them.
    made = Counter((f["category"], f["item_name"]) for _, f in cleaned)
    made.update(
        (fault.category, fault.item_name)
        for fault in faults
        if fault.placed and fault.category is not None
    )
    quantities = {
        (f["category"], f["item_name"]): f["item_quantity"]
        for _, f in cleaned
        if f["item_name"] is not None and made[(f["category"], f["item_name"])] == 1
    }
    return ExtractionInvalid(
        problems, groups, list(unresolved.values()), quantities, kept_uncategorised
    )
