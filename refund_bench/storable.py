"""Text a stage keeps from a model or an endpoint: bounded, and storable everywhere it goes.

A model's answer, or an endpoint's error message, may hold a NUL (PostgreSQL text cannot store
one) or half of a surrogate pair (UTF-8, and so Avro and Redis, cannot encode one), and may run
to megabytes. Copied into an event as it is, such text would stop the recorder on every
redelivery, or send its input to the dead-letter topic.
"""

from __future__ import annotations

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str, limit: int) -> str:
    """``text`` as a stage keeps it: at most ``limit`` characters (and a note of how many more
    there were), with each NUL or half of a surrogate pair replaced by U+FFFD."""
    if len(text) > limit:
        text = f"{text[:limit]} [... {len(text) - limit} more characters not kept]"
    return _UNSTORABLE.sub("\ufffd", text)
