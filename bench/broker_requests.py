"""The broker's requests per complaint, by kind, in a burst and under a steady input.

Kafka's CPU per complaint is about three times higher under a steady input than in a burst,
and the broker's CPU goes with its request count more than with its bytes. This script counts
the requests the local broker completes while the six stages work: it turns the broker's
request logger (``kafka.request.logger``) to DEBUG for each measured run, counts the completed
requests in ``.stack/logs/kafka.log`` by API, and turns the logger back to WARN. The logging
itself costs the broker CPU, so the CPU figures of these runs are not comparable with
``make bench``'s; the counts are the point.

``python -m bench.broker_requests`` (stack up, ``. .stack/env.sh``); not part of ``make bench``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from bench import cli
from bench import pipeline_throughput as pt
from refund_bench.launcher import REPO

KAFKA_LOG = REPO / ".stack" / "logs" / "kafka.log"
KAFKA_LIBS = REPO / ".stack" / "cache" / "kafka-libs"
_API = re.compile(rb'"requestApiKeyName":"(\w+)"')
_CLIENT = re.compile(rb'"clientId":"([^"]*)"')


def set_request_logging(kafka: str, level: str) -> None:
    """Set broker 1's ``kafka.request.logger`` to ``level`` (Kafka's own config tool; the
    Python admin client has no broker-logger resource)."""
    java = (
        os.path.join(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else None
    )
    java = java or shutil.which("java")
    if java is None:
        raise RuntimeError("no java on PATH (Kafka's config tool needs it)")
    subprocess.run(
        [
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            f"{KAFKA_LIBS}/*",
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            kafka,
            "--alter",
            "--entity-type",
            "broker-loggers",
            "--entity-name",
            "1",
            "--add-config",
            f"kafka.request.logger={level}",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def count_requests(log: Path, start: int) -> Counter[str]:
    """Completed requests logged after byte ``start`` of ``log``, by API; the broker's own
    requests (its partition-verification client, ``AddPartitionsManager``) apart."""
    counts: Counter[str] = Counter()
    with log.open("rb") as fh:
        fh.seek(start)
        for line in fh:
            api = _API.search(line)
            if api is None:
                continue
            client = _CLIENT.search(line)
            name = api.group(1).decode()
            if client is not None and client.group(1).startswith(b"AddPartitionsManager"):
                name += " (broker's verification)"
            counts[name] += 1
    return counts


def measured(kafka: str, label: str, run: Callable[[], pt.Result]) -> None:
    """One run with request logging on; prints its requests per complaint."""
    start = KAFKA_LOG.stat().st_size
    set_request_logging(kafka, "DEBUG")
    try:
        result = run()
    finally:
        set_request_logging(kafka, "WARN")
    counts = count_requests(KAFKA_LOG, start)
    per = ", ".join(f"{name} {n / result.complaints:.2f}" for name, n in counts.most_common(8))
    total = sum(counts.values()) / result.complaints
    print(
        f"{label}: {result.rate:.1f} complaints/s; broker requests per complaint {total:.1f}:"
        f" {per}",
        flush=True,
    )


def main() -> None:
    with pt.running_pipeline() as stack:
        stack.burst(0, 300)  # connections, schema ids
        measured(stack.kafka, "burst of 1000", lambda: stack.burst(0, 1000))
        for rate in (100.0, 30.0):

            def steady(rate: float = rate) -> pt.Result:
                return stack.paced(0, rate, 10)

            measured(stack.kafka, f"steady {rate:g}/s for 10 s", steady)


if __name__ == "__main__":
    cli.run(main)
