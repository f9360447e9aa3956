"""CPU time per component during a benchmark run, from /proc (Linux).

Every process of the local stack and the pipeline is labelled by what it is (a stage name, or
kafka, registry, postgres, redis, stripe-mock); :func:`snapshot` sums user+system CPU seconds
per label. Two snapshots give each component's share of a run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_STAGE = re.compile(r"-m services\.(\w+)")


def label(cmdline: str) -> str | None:
    """What a process is, from its command line; ``None`` for processes outside the stack."""
    stage = _STAGE.search(cmdline)
    if stage:
        return stage.group(1)
    if "java" in cmdline:
        return "registry" if "apicurio" in cmdline.lower() or "quarkus" in cmdline else "kafka"
    for name in ("postgres", "redis-server", "stripe-mock"):
        if name in cmdline:
            return name.removesuffix("-server")
    return None


def snapshot() -> dict[str, float]:
    """CPU seconds used so far, per label, by the live processes of the stack.

    A process that exits between two snapshots takes its CPU with it: take both while the
    pipeline runs.
    """
    totals: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = label(cmdline)
        if name is not None:
            seconds = (int(fields[11]) + int(fields[12])) / _TICKS
            totals[name] = totals.get(name, 0.0) + seconds
    return totals


def used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per label between two snapshots, largest first."""
    deltas = {name: after[name] - before.get(name, 0.0) for name in after}
    return dict(sorted(deltas.items(), key=lambda item: -item[1]))
