"""The streaming runtime shared by every stage: see :mod:`refund_bench.runtime.runner`."""

from refund_bench.runtime.messages import Context, Emit, Guarantee, Message
from refund_bench.runtime.runner import RuntimeConfig, StageRunner, StageSpec

__all__ = ["Context", "Emit", "Guarantee", "Message", "RuntimeConfig", "StageRunner", "StageSpec"]
