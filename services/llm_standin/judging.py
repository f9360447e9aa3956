"""The judge's rule: one grievance ruled on from the evidence snapshot alone.

:func:`judge_grievance` answers ``judge_ruling`` from the snapshot's ``derived`` and ``order``
blocks; silent evidence escalates, except on a "credulous" seat (``seed % 3 == 0``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

from services.llm_standin.errors import RuleError


class RulingAnswer(TypedDict):
    """One judge's answer, as the ``judge_ruling`` schema has it."""

    ruling: Literal["UPHELD", "REJECTED", "ESCALATE"]
    confidence: float
    evidence_cited: list[str]
    reasoning: str


Strength = Literal["supports", "contradicts", "ambiguous", "silent"]


@dataclass(frozen=True)
class _Finding:
    strength: Strength
    cited: tuple[str, ...]
    reasoning: str


def _section(evidence: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    body = evidence.get(name)
    if not isinstance(body, Mapping):
        raise RuleError(f"evidence.{name} must be an object")
    return body


def _late(order: Mapping[str, Any], derived: Mapping[str, Any]) -> _Finding:
    cited = ("derived.delay_minutes", "order.delivery_sla_minutes")
    exceeded = derived.get("sla_exceeded")
    delay, sla = derived.get("delay_minutes"), order.get("delivery_sla_minutes")
    if exceeded is True:
        over = derived.get("minutes_over_sla")
        return _Finding(
            "supports",
            cited,
            f"The order took {delay} minutes against a {sla}-minute delivery SLA, "
            f"{over} minutes over it.",
        )
    if exceeded is False:
        return _Finding(
            "contradicts",
            cited,
            f"The order took {delay} minutes, within its {sla}-minute delivery SLA.",
        )
    absent = tuple(
        f"order.{name}"
        for name in ("delivered_at", "delivery_sla_minutes")
        if order.get(name) is None
    )
    return _Finding(
        "silent",
        absent or ("derived.sla_exceeded",),
        "The snapshot cannot say whether the SLA was exceeded: the delivery time or the SLA is "
        "not recorded.",
    )


def _missing(grievance: Mapping[str, Any], derived: Mapping[str, Any]) -> _Finding:
    cited = ("derived.missing_units_estimate", "derived.pickup_weight_shortfall_g")
    estimates = derived.get("missing_units_estimate")
    shortfall = derived.get("pickup_weight_shortfall_g")
    if not isinstance(estimates, Mapping):
        return _Finding(
            "silent",
            ("order.pickup_weight_expected_g", "order.pickup_weight_actual_g"),
            "No pickup weights are recorded, so nothing shows whether units were missing.",
        )
    item = grievance.get("item_name")
    quantity = grievance.get("item_quantity")
    claimed = quantity if isinstance(quantity, int) and quantity > 0 else 1
    if not isinstance(item, str):
        known = [value for value in estimates.values() if isinstance(value, int)]
        if known and len(known) == len(estimates) and all(value == 0 for value in known):
            return _Finding(
                "contradicts", cited, f"The pickup weight shows no shortfall ({shortfall} g)."
            )
        return _Finding(
            "ambiguous", cited, "The grievance names no item, so the estimate cannot be matched."
        )
    estimate = next(
        (value for name, value in estimates.items() if name.casefold() == item.casefold()), None
    )
    if estimate is None:
        return _Finding(
            "silent",
            ("derived.missing_units_estimate",),
            f"The snapshot has no missing-unit estimate for {item}.",
        )
    facts = (
        f"The pickup weight was {shortfall} g short, an estimated {estimate} missing {item} "
        f"unit(s) against {claimed} claimed."
    )
    if estimate >= claimed:
        return _Finding("supports", cited, facts)
    if estimate == 0:
        return _Finding("contradicts", cited, facts)
    return _Finding("ambiguous", cited, facts)


_DAMAGE_RE: Final = re.compile(
    r"(?<!no )(?<!not )\b(?:leak\w*|spill\w*|spilt|damag\w*|crush\w*|torn|broken|wet|soaked"
    r"|open(?:ed)?)\b",
    re.IGNORECASE,
)
_INTACT_RE: Final = re.compile(
    r"\b(?:intact|sealed|undamaged|no (?:damage|leaks?|spills?)|good condition|dry)\b",
    re.IGNORECASE,
)


def _packaging(order: Mapping[str, Any]) -> _Finding:
    if order.get("packaging_condition_recorded") is not True:
        return _Finding(
            "silent",
            ("order.packaging_condition_recorded",),
            "The packaging condition was not recorded at handover, so the evidence is silent.",
        )
    cited = ("order.packaging_condition_recorded", "order.packaging_notes")
    notes = order.get("packaging_notes")
    text = notes if isinstance(notes, str) else ""
    damaged, intact = bool(_DAMAGE_RE.search(text)), bool(_INTACT_RE.search(text))
    if damaged and not intact:
        return _Finding("supports", cited, f"The recorded packaging notes say: {text!r}.")
    if intact and not damaged:
        return _Finding("contradicts", cited, f"The recorded packaging notes say: {text!r}.")
    return _Finding(
        "ambiguous", cited, "The packaging was recorded but the notes neither confirm nor deny it."
    )


def _conduct(order: Mapping[str, Any]) -> _Finding:
    reports = order.get("partner_conduct_reports")
    cited = ("order.partner_conduct_reports",)
    if isinstance(reports, list) and reports:
        return _Finding(
            "supports", cited, f"{len(reports)} conduct report(s) about the partner are on record."
        )
    return _Finding("silent", cited, "No conduct report about the delivery partner is on record.")


def _record_list(order: Mapping[str, Any], key: str, category: str) -> _Finding:
    records = order.get(key)
    if isinstance(records, list) and records:
        return _Finding(
            "supports", (f"order.{key}",), f"The order has {len(records)} {key} record(s)."
        )
    return _Finding(
        "silent",
        (f"order.{key}",),
        f"The snapshot holds no record that could confirm or contradict a {category} claim.",
    )


def _billing(order: Mapping[str, Any], derived: Mapping[str, Any]) -> _Finding:
    over = derived.get("overcharge_minor")
    cited = ("derived.overcharge_minor", "order.charged_total_minor")
    if isinstance(over, int) and over > 0:
        return _Finding(
            "supports", cited, f"The charge exceeds the expected total by {over} minor units."
        )
    if over == 0:
        return _Finding(
            "contradicts",
            cited,
            f"The charged total {order.get('charged_total_minor')} matches the expected total.",
        )
    return _Finding("silent", cited, "The snapshot has no overcharge figure.")


def judge_grievance(
    grievance: Mapping[str, Any], evidence: Mapping[str, Any], seed: int | None
) -> RulingAnswer:
    """Rule on one grievance from the snapshot only.

    Supports -> UPHELD (0.9), contradicts -> REJECTED (0.9), ambiguous -> ESCALATE (0.6),
    silent -> ESCALATE (0.6) citing the absent record, except that a seat whose ``seed`` is a
    multiple of 3 is "credulous" and upholds silent evidence (0.35): the stand-in's dissent.
    """
    order, derived = _section(evidence, "order"), _section(evidence, "derived")
    category = grievance.get("category")
    if category == "LATE_DELIVERY":
        finding = _late(order, derived)
    elif category == "MISSING_ITEM":
        finding = _missing(grievance, derived)
    elif category == "PACKAGING":
        finding = _packaging(order)
    elif category == "PARTNER_CONDUCT":
        finding = _conduct(order)
    elif category == "WRONG_ITEM":
        finding = _record_list(order, "item_substitutions", "wrong-item")
    elif category == "QUALITY":
        finding = _record_list(order, "quality_reports", "food-quality")
    elif category == "BILLING":
        finding = _billing(order, derived)
    else:
        finding = _Finding("ambiguous", ("grievance.category",), f"Unknown category {category!r}.")
    if finding.strength == "supports":
        return _ruling("UPHELD", 0.9, finding)
    if finding.strength == "contradicts":
        return _ruling("REJECTED", 0.9, finding)
    if finding.strength == "silent" and seed is not None and seed % 3 == 0:
        return _ruling("UPHELD", 0.35, finding, " Taking the customer at their word.")
    return _ruling("ESCALATE", 0.6, finding)


def _ruling(
    ruling: Literal["UPHELD", "REJECTED", "ESCALATE"],
    confidence: float,
    finding: _Finding,
    addendum: str = "",
) -> RulingAnswer:
    return {
        "ruling": ruling,
        "confidence": confidence,
        "evidence_cited": list(finding.cited),
        "reasoning": finding.reasoning + addendum,
    }
