"""Orders shared by the unit tests: the article's order-1840 and a builder for variations."""

from __future__ import annotations

from typing import Any

from refund_bench.domain import OrderRecord
from refund_bench.samples import ARTICLE_COMPLAINT, ARTICLE_ORDER

BIRYANI = "Hyderabadi Biryani"
RAITA = "Raita"

__all__ = ["ARTICLE_COMPLAINT", "ARTICLE_ORDER", "BIRYANI", "RAITA", "article_order", "span_of"]


def article_order(**changes: Any) -> OrderRecord:
    """The article's order with some fields replaced (validated like a fresh record)."""
    return OrderRecord.model_validate({**ARTICLE_ORDER.model_dump(), **changes})


def span_of(text: str, phrase: str) -> tuple[int, int]:
    """The (start, end) offsets of ``phrase`` in ``text``; fails loudly when absent."""
    start = text.index(phrase)
    return start, start + len(phrase)
