"""An LLM endpoint of set answers, for handler tests that need no HTTP: the
:class:`~refund_bench.llm.client.JsonCompleter` a stage's handler calls."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from refund_bench.llm.client import LlmAnswer
from refund_bench.llm.roles import ChatMessage


class ScriptedLlm:
    """Answers with ``answers`` in turn (each JSON-encoded), the last one again once they are
    used up; ``draws`` counts the calls, each paid for."""

    temperature = 0.7

    def __init__(self, answers: Sequence[object], model: str = "scripted") -> None:
        if not answers:
            raise ValueError("a scripted endpoint needs at least one answer")
        self.model = model
        self._answers = [json.dumps(answer) for answer in answers]
        self.draws = 0

    async def complete_json(
        self,
        messages: Sequence[ChatMessage],
        schema_name: str,
        schema: Mapping[str, Any],
        seed: int | None,
        dispute_id: str,
    ) -> LlmAnswer:
        text = self._answers[min(self.draws, len(self._answers) - 1)]
        self.draws += 1
        return LlmAnswer(text, None, None)
