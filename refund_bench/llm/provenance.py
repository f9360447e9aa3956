"""What drew the model answers a process drew, kept in memory beside the answer cache.

An answer in the cache is just its text: a call that reads it there (a handler retried after
a cache write failed, one that joined the call drawing it, a redelivery to the same process)
learns what the endpoint named for it only from the process that drew it. :class:`DrawnBy`
keeps that, keyed by cache key and the answer's text, so that another process's answer stored
first under the same key is not named by this one's draw: unless the two are word for word
the same (a deterministic model), when the answer that counts is named as this draw was.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple


class Provenance(NamedTuple):
    """What drew an answer: what the endpoint named, and the temperature asked for."""

    served_model: str | None
    """The model the endpoint said served the answer (``None``: it named none)."""
    system_fingerprint: str | None
    """The backend configuration it named (``None``: it named none)."""
    temperature: float
    """The sampling temperature the request asked for."""


MAX_DRAWN_KEPT = 20_000
"""How many answers' :class:`Provenance` a process keeps (about 1,700 complaints' worth of
judge answers, 20,000 of replies)."""


class DrawnBy:
    """What drew each answer this process drew, by cache key, the most recent
    :data:`MAX_DRAWN_KEPT`."""

    def __init__(self, limit: int = MAX_DRAWN_KEPT) -> None:
        self._limit = limit
        self._kept: OrderedDict[str, tuple[int, Provenance]] = OrderedDict()

    def keep(self, key: str, value: str, provenance: Provenance) -> None:
        """``value``, drawn for ``key``, was drawn so."""
        self._kept[key] = (hash(value), provenance)
        self._kept.move_to_end(key)
        while len(self._kept) > self._limit:
            self._kept.popitem(last=False)

    def get(self, key: str, value: str) -> Provenance | None:
        """What drew ``value``, the answer cached under ``key``, if this process drew it (not
        another answer for the key, stored first by another process)."""
        kept = self._kept.get(key)
        return kept[1] if kept is not None and kept[0] == hash(value) else None
