"""The frozen evidence snapshot of one order: raw fields plus facts derived in code.

Every judge of a dispute sees the same snapshot, identified by the sha256 of its canonical JSON.
The ``derived`` block does the arithmetic (delays, weight shortfall, overcharge) so that no model
ever has to. The snapshot holds no floats: money is integer minor units, weights integer grams,
delays integer minutes, so the canonical JSON, and therefore the hash, is stable.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from refund_bench.domain import Category, LineItem, OrderRecord, name_key, round_half_up_div
from refund_bench.errors import InvalidInput, error_summary

SNAPSHOT_VERSION = "1"

MISSING_UNITS_BASIS = (
    "per item: the pickup-weight shortfall divided by that item's unit weight, rounded half up, "
    "between 0 and the ordered quantity, as if the whole shortfall were that item"
)


@dataclass(frozen=True)
class FrozenSnapshot:
    """A built snapshot: its canonical JSON, the hex sha256 of that JSON, and the parsed data.

    ``data`` is parsed back from ``json``, so it is exactly what was hashed; treat it as
    read-only.
    """

    json: str
    sha256: str
    data: dict[str, Any]


def _reject_floats(obj: object, path: str) -> None:
    if isinstance(obj, float):
        raise TypeError(f"float at {path or '<root>'}: the snapshot holds only ints and strings")
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"non-string key {key!r} at {path or '<root>'}")
            _reject_floats(value, f"{path}.{key}" if path else key)
    elif isinstance(obj, list | tuple):
        for index, value in enumerate(obj):
            _reject_floats(value, f"{path}[{index}]")


def canonical_json(obj: object) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8 characters kept (``ensure_ascii=False``).

    Raises ``TypeError`` for any float (their text form is not a stable contract), for non-string
    keys, and for anything ``json`` cannot encode.
    """
    _reject_floats(obj, "")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def snapshot_sha256(snapshot_json: str) -> str:
    """Hex sha256 of the UTF-8 bytes of ``snapshot_json``, hashed as given.

    Pass the output of :func:`canonical_json`; the string is not re-canonicalised, so the hash of
    the ``snapshot_json`` carried by an event can be checked against its ``snapshot_sha256``.
    """
    return hashlib.sha256(snapshot_json.encode("utf-8")).hexdigest()


def _parse_instant(name: str, value: str) -> datetime:
    try:
        instant = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidInput(f"order.{name} is not an ISO-8601 timestamp: {value!r}") from exc
    if instant.utcoffset() is None:
        raise InvalidInput(f"order.{name} has no UTC offset: {value!r}")
    return instant


def _missing_units(shortfall_g: int, item: LineItem) -> int | None:
    if item.unit_weight_g is None or item.unit_weight_g == 0:
        return None
    estimate = round_half_up_div(max(0, shortfall_g), item.unit_weight_g)
    return min(estimate, item.quantity)


def _check_unique_names(order: OrderRecord) -> None:
    seen: set[str] = set()
    for item in order.line_items:
        key = name_key(item.name)
        if key in seen:
            raise InvalidInput(
                f"order {order.order_id} has two line items named {item.name!r}; "
                "grievances name items, so names must be unique"
            )
        seen.add(key)


def derive(order: OrderRecord) -> dict[str, Any]:
    """The ``derived`` block: facts computed from the order so judges need no arithmetic.

    Delays are whole minutes, rounded up (a delivery 45 min 1 s after placing took 46 minutes),
    so ``sla_exceeded``, "the delay in whole minutes is strictly greater than the SLA", is
    exactly "delivered - placed exceeds the SLA", to the second. Values are ``None`` where the
    evidence they need is absent. Raises :class:`InvalidInput` for unparseable or offset-less
    timestamps, a delivery before placement, or duplicate line item names.
    """
    _check_unique_names(order)
    placed = _parse_instant("placed_at", order.placed_at)

    delay_minutes: int | None = None
    minutes_over_sla: int | None = None
    sla_exceeded: bool | None = None
    if order.delivered_at is not None:
        delivered = _parse_instant("delivered_at", order.delivered_at)
        if delivered < placed:
            raise InvalidInput(
                f"order {order.order_id}: delivered_at {order.delivered_at} is before "
                f"placed_at {order.placed_at}"
            )
        delay_minutes = -((placed - delivered) // timedelta(minutes=1))  # rounded up
        if order.delivery_sla_minutes is not None:
            minutes_over_sla = max(0, delay_minutes - order.delivery_sla_minutes)
            sla_exceeded = delay_minutes > order.delivery_sla_minutes

    shortfall_g = order.pickup_shortfall_g
    missing_units: dict[str, int | None] | None = None
    if shortfall_g is not None:
        missing_units = {item.name: _missing_units(shortfall_g, item) for item in order.line_items}

    items_total = order.items_total_minor
    expected_total = items_total + order.delivery_fee_minor
    return {
        "delay_minutes": delay_minutes,
        "minutes_over_sla": minutes_over_sla,
        "sla_exceeded": sla_exceeded,
        "pickup_weight_shortfall_g": shortfall_g,
        "missing_units_estimate": missing_units,
        "missing_units_estimate_basis": MISSING_UNITS_BASIS,
        "line_totals_minor": {
            item.name: item.unit_price_minor * item.quantity for item in order.line_items
        },
        "items_total_minor": items_total,
        "expected_items_total_minor": expected_total,
        "overcharge_minor": max(0, order.charged_total_minor - expected_total),
        "absent_records": absent_records(order),
    }


def absent_records(order: OrderRecord) -> list[str]:
    """Sorted names of the evidence the order store has no record of (silence, not contrary)."""
    absent: list[str] = []
    if order.delivered_at is None:
        absent.append("delivered_at")
    if order.delivery_sla_minutes is None:
        absent.append("delivery_sla_minutes")
    if order.pickup_weight_expected_g is None or order.pickup_weight_actual_g is None:
        absent.append("pickup_weights")
    if order.partner_rating_at_handover is None:
        absent.append("partner_rating")
    if not order.packaging_condition_recorded:
        absent.append("packaging_condition")
    elif not order.packaging_notes:  # a check recorded without what it found
        absent.append("packaging_notes")
    if not order.partner_conduct_reports:
        absent.append("partner_conduct_reports")
    return sorted(absent)


def build_snapshot(order: OrderRecord) -> dict[str, Any]:
    """The snapshot dict: ``{"order": <raw record>, "derived": {...}, "snapshot_version": "1"}``.

    Raises :class:`InvalidInput` when the order cannot be turned into consistent evidence.
    """
    return {
        "order": order.model_dump(mode="json"),
        "derived": derive(order),
        "snapshot_version": SNAPSHOT_VERSION,
    }


def freeze(order: OrderRecord) -> FrozenSnapshot:
    """Build, canonicalise and hash the snapshot of ``order``."""
    text = canonical_json(build_snapshot(order))
    data: dict[str, Any] = json.loads(text)
    return FrozenSnapshot(json=text, sha256=snapshot_sha256(text), data=data)


def load_snapshot(snapshot_json: str, expected_sha256: str) -> dict[str, Any]:
    """Parse a snapshot carried by an event, after checking it against its hash.

    Raises :class:`InvalidInput` when the hash does not match, the text is not canonical JSON of
    an object (or is nested too deeply to read), or the snapshot version is not one this code
    understands.
    """
    if snapshot_sha256(snapshot_json) != expected_sha256:
        raise InvalidInput("snapshot_json does not match snapshot_sha256")
    try:
        data = json.loads(snapshot_json)
        canonical = canonical_json(data)
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidInput(f"snapshot_json is not canonical JSON: {error_summary(exc)}") from exc
    if canonical != snapshot_json or not isinstance(data, dict):
        raise InvalidInput("snapshot_json is not the canonical JSON of an object")
    if data.get("snapshot_version") != SNAPSHOT_VERSION:
        raise InvalidInput(f"unknown snapshot_version {data.get('snapshot_version')!r}")
    return data


_SECTIONS = ("order", "derived")
ORDER_IDENTIFIERS = ("order_id", "customer_id", "payment_reference")
"""The order record's identifiers: they decide no claim, and a judge is not shown them."""
NOT_CITABLE = frozenset(
    {f"order.{name}" for name in ORDER_IDENTIFIERS} | {"derived.missing_units_estimate_basis"}
)
"""Identifiers and explanations: in the snapshot, but citing them grounds no ruling."""


def judges_view(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The evidence a judge is shown: ``snapshot`` without :data:`ORDER_IDENTIFIERS`, which
    would otherwise go to every seat's model provider on every call and ground nothing. Every
    seat reads the same view of the same snapshot; the snapshot hash still names the whole."""
    order = snapshot.get("order")
    if not isinstance(order, Mapping):
        return dict(snapshot)
    shown = {key: value for key, value in order.items() if key not in ORDER_IDENTIFIERS}
    return {**snapshot, "order": shown}


def _walk(value: object, path: str) -> Iterator[tuple[str, object]]:
    """``(path, value)`` of ``value`` and of everything under it; elements of lists of objects
    under both ``.0`` and ``[0]``."""
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _walk(child, f"{path}.{key}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            if isinstance(child, dict):
                yield from _walk(child, f"{path}.{index}")
                yield from _walk(child, f"{path}[{index}]")


def _citable(snapshot: dict[str, Any]) -> Iterator[tuple[str, str, object]]:
    """``(section, full path, value)`` of every citable field of ``snapshot``."""
    for section in _SECTIONS:
        body = snapshot.get(section)
        if not isinstance(body, dict):
            continue
        for key, value in body.items():
            if f"{section}.{key}" not in NOT_CITABLE:
                for path, found in _walk(value, f"{section}.{key}"):
                    yield section, path, found


def _in_both_forms(fields: Iterable[tuple[str, str]]) -> frozenset[str]:
    """Each ``(section, full path)`` as the full path and without its section prefix."""
    out: set[str] = set()
    for section, path in fields:
        out.add(path)
        out.add(path[len(section) + 1 :])
    return frozenset(out)


def evidence_fields(snapshot: dict[str, Any]) -> frozenset[str]:
    """Every field a judge may cite: dotted paths under ``order`` and ``derived``.

    Each path appears in full (``order.delivered_at``, ``derived.missing_units_estimate.Raita``)
    and short, without the section prefix (``delivered_at``). Elements of lists of objects are
    addressable as ``line_items.0.name`` and ``line_items[0].name``. The bare section names,
    ``snapshot_version`` and :data:`NOT_CITABLE` are not evidence and are not included. Each
    name in ``derived.absent_records`` is citable too (:func:`_absence_citations`).
    """
    return _in_both_forms((section, path) for section, path, _ in _citable(snapshot)) | (
        _absence_citations(snapshot)
    )


def _absence_citations(snapshot: dict[str, Any]) -> frozenset[str]:
    """How a judge may cite an absent record by its name in ``derived.absent_records``
    (``pickup_weights``): the name alone, ``absent_records.<name>`` and
    ``derived.absent_records.<name>``. Each cites silence."""
    derived = snapshot.get("derived")
    absent = derived.get("absent_records") if isinstance(derived, dict) else None
    if not isinstance(absent, list):
        return frozenset()
    names = [name for name in absent if isinstance(name, str) and name]
    return frozenset(
        form
        for name in names
        for form in (name, f"absent_records.{name}", f"derived.absent_records.{name}")
    )


_SILENT_WHEN_FALSE = frozenset({"order.packaging_condition_recorded"})
"""Flags whose ``false`` says that nothing was recorded, not that something was found."""
_RECORDS_OF_ABSENCE = frozenset({"derived.absent_records"})
"""Lists of what the order store has no record of: citing them cites silence."""


def _records_nothing(path: str, value: object) -> bool:
    """True for a value that records nothing: null, an empty string or list, an object all of
    whose values record nothing, a "not recorded" flag, or a list of absent records."""
    if path in _RECORDS_OF_ABSENCE or (path in _SILENT_WHEN_FALSE and value is False):
        return True
    if value is None or value == "" or value == []:
        return True
    if isinstance(value, dict):
        return all(_records_nothing(f"{path}.{k}", child) for k, child in value.items())
    return False


CLAIM_RECORDS: Mapping[Category, tuple[str, ...]] = {
    Category.LATE_DELIVERY: ("order.delivered_at", "order.delivery_sla_minutes"),
    Category.MISSING_ITEM: ("order.pickup_weight_expected_g", "order.pickup_weight_actual_g"),
    Category.WRONG_ITEM: ("order.item_substitutions",),
    Category.QUALITY: ("order.quality_reports",),
    Category.PACKAGING: ("order.packaging_condition_recorded", "order.packaging_notes"),
    Category.PARTNER_CONDUCT: ("order.partner_conduct_reports",),
    Category.BILLING: (),
}
"""The records a claim of each category rests on: without any of them the evidence is silent on
it, whatever a judge cites (a BILLING claim rests on the order's totals, always recorded). The
order store keeps no quality or substitution record, so those claims are always silent here. A
packaging check recorded with no notes says nothing of the packaging's condition: it is silent
too, whichever of the two fields a judge cites."""


ITEM_RECORDS: Mapping[Category, tuple[str, ...]] = {
    Category.MISSING_ITEM: ("derived.missing_units_estimate",),
}
"""The records a claim about one item rests on, per item (the path plus ``.<item name>``): the
pickup weights say nothing of how many units of an item with no unit weight are missing."""


def claim_unrecorded(
    category: Category,
    fields: frozenset[str],
    silent: frozenset[str],
    item_name: str | None = None,
) -> bool:
    """True when a record a ``category`` claim rests on (:data:`CLAIM_RECORDS`, and for a claim
    about ``item_name`` its entry of :data:`ITEM_RECORDS`) holds nothing in the snapshot whose
    citable ``fields`` and ``silent`` fields are given, or is not in it."""
    paths = list(CLAIM_RECORDS[category])
    if item_name is not None:
        paths += [f"{base}.{item_name}" for base in ITEM_RECORDS.get(category, ())]
    return any(path in silent or path not in fields for path in paths)


def silent_fields(snapshot: dict[str, Any]) -> frozenset[str]:
    """The citable fields (as :func:`evidence_fields` names them) that hold no record: null or
    empty values, ``order.packaging_condition_recorded`` when false, ``derived.absent_records``
    and each absent record by its name. A ruling citing any of these rests, at least in part,
    on missing evidence."""
    return _in_both_forms(
        (section, path)
        for section, path, value in _citable(snapshot)
        if _records_nothing(path, value)
    ) | _absence_citations(snapshot)
