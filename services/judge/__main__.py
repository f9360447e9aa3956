"""``python -m services.judge``: K independent judges per grievance, many calls in flight."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from refund_bench.llm.roles import load_prompt
from refund_bench.llm_setup import (
    JudgePanelSettings,
    call_counter,
    client,
    redis_client,
    response_cache,
)
from refund_bench.resources import lifecycle
from refund_bench.runtime.metrics import PrometheusMetrics
from refund_bench.service import configure_logging, run_stage
from services.judge.handler import JudgeHandler, Seat


def main() -> None:
    settings = JudgePanelSettings()
    configure_logging(settings.log_level)
    registry = CollectorRegistry()
    metrics = PrometheusMetrics("judge", registry)
    redis = redis_client(settings)
    inflight: dict[int, int] = {}

    def track(seat: int) -> Callable[[int], None]:
        def on_inflight(n: int) -> None:
            inflight[seat] = n
            metrics.set("inflight_llm_calls", sum(inflight.values()))

        return on_inflight

    clients = [
        client(
            settings,
            model=settings.seat_model(seat),
            temperature=settings.judge_temperature,
            redis=redis,
            access=settings.seat_access(seat),
            on_inflight=track(seat),
            metrics=metrics,
        )
        for seat in range(settings.judge_count)
    ]
    seats = [
        Seat(index=seat, llm=llm, seed=settings.seat_seed(seat)) for seat, llm in enumerate(clients)
    ]
    handler = JudgeHandler(
        seats,
        response_cache(settings, redis),
        load_prompt(settings.judge_prompt_version),
        on_call=call_counter(metrics),
        max_inflight=settings.max_inflight,
    )
    closers = [llm.aclose for llm in clients]
    spec = dataclasses.replace(
        handler.spec(),
        startup=lifecycle(redis.ping),
        shutdown=lifecycle(*closers, redis.aclose),
    )
    run_stage(spec, settings, registry, metrics)


if __name__ == "__main__":
    main()
