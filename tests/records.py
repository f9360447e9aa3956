"""Records as a faulty or foreign producer would change them, for tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from refund_bench.runtime.messages import Message


def with_fields(message: Message, **fields: Any) -> Message:
    """``message`` with some of its value's fields changed."""
    return dataclasses.replace(message, value={**message.value, **fields})
