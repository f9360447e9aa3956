"""``python -m services.llm_standin --host 127.0.0.1 --port 18090 [--latency-ms N] ...``"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import uvicorn

from refund_bench.gc_tuning import DEFAULT_YOUNG_THRESHOLD, tune_gc
from services.llm_standin.app import FaultSettings, create_app


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m services.llm_standin",
        description="Deterministic OpenAI-compatible LLM stand-in for Refund Bench.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18090)
    parser.add_argument("--latency-ms", type=int, default=0, help="added to every completion")
    parser.add_argument("--rate-429", type=float, default=0.0, help="share of calls answered 429")
    parser.add_argument("--rate-5xx", type=float, default=0.0, help="share answered 500")
    parser.add_argument(
        "--rate-timeout", type=float, default=0.0, help="share that hang, then answer 504"
    )
    parser.add_argument(
        "--timeout-seconds", type=float, default=30.0, help="how long a 'timeout' call hangs"
    )
    parser.add_argument(
        "--rate-malformed", type=float, default=0.0, help="share answered with truncated JSON"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument(
        "--gc-young-threshold",
        type=int,
        default=DEFAULT_YOUNG_THRESHOLD,
        help="allocations between young-generation collections; 0: Python's default",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    faults = FaultSettings(
        latency_ms=args.latency_ms,
        rate_429=args.rate_429,
        rate_5xx=args.rate_5xx,
        rate_timeout=args.rate_timeout,
        rate_malformed=args.rate_malformed,
        timeout_seconds=args.timeout_seconds,
    )
    app = create_app(faults, seed=args.seed)
    tune_gc(args.gc_young_threshold)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        http="httptools",
        proxy_headers=False,  # nothing proxies the stand-in; each request would pay for the check
        backlog=4096,
        timeout_keep_alive=30,
        # A stop waits this long for requests still hanging in a fault, then ends them.
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
