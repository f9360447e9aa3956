"""A handle on the LLM stand-in for tests: its OpenAI base URL, its fault and stats admin."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import SecretStr

from refund_bench.llm.client import LlmClient, LlmEndpoint


@dataclass
class Standin:
    base_url: str  # .../v1, for the openai client
    admin: httpx.Client = field(repr=False)

    def faults(self, **settings: Any) -> None:
        self.admin.post("/admin/faults", json=settings).raise_for_status()

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.admin.get("/stats").raise_for_status().json()
        return stats

    def client(self, model: str, temperature: float) -> LlmClient:
        """A client of the stand-in for one role (close it with ``aclose``)."""
        endpoint = LlmEndpoint(
            base_url=self.base_url,
            api_key=SecretStr("stand-in"),
            model=model,
            temperature=temperature,
            timeout_seconds=10,
        )
        return LlmClient(endpoint)
