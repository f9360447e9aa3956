"""Plain-language names of priced lines, for the reply (pure)."""

from __future__ import annotations

from refund_bench import events as ev

_SUBJECTS = {
    "LATE_DELIVERY": "the late delivery",
    "MISSING_ITEM": "the missing {item}",
    "WRONG_ITEM": "the wrong {item}",
    "QUALITY": "the quality of the {item}",
    "PACKAGING": "the packaging of the {item}",
    "PARTNER_CONDUCT": "the delivery partner's conduct",
    "BILLING": "the billing error",
}


def describe(line: ev.PricedLineEvent) -> str:
    """e.g. "the missing Hyderabadi Biryani", "the packaging of the Raita"."""
    template = _SUBJECTS.get(line.category, "your {item} claim")
    return template.format(item=line.item_name or "order").replace("the the ", "the ")
