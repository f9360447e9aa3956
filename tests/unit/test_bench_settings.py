"""The settings the benchmark gives its services, read as the stages read them."""

from __future__ import annotations

import pytest

from bench.pipeline_throughput import SERVICE_ENV
from refund_bench.llm_setup import LlmStageSettings


def test_the_benchmarks_services_keep_their_answers_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SERVICE_ENV.items():
        monkeypatch.setenv(name, value)

    settings = LlmStageSettings()

    assert settings.llm_cache_ttl_seconds == 3600
    default = LlmStageSettings.model_fields["llm_cache_ttl_seconds"].default
    assert settings.llm_cache_ttl_seconds < default
