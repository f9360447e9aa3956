"""CPU time per component during a benchmark run, from /proc (Linux).

Every process of the local stack and the pipeline is labelled by what it is (a stage name, or
kafka, registry, postgres, redis, stripe-mock); :func:`snapshot` sums user+system CPU seconds
per label, with the CPU of the children each process has reaped: Redis's snapshot writer and
PostgreSQL's finished backends count for Redis and PostgreSQL. The benchmark's own process is
``bench`` (the load generator), and the whole machine's busy time from /proc/stat is kept too,
so that two snapshots also tell what other work on the machine took.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_STAGE = re.compile(r"-m services\.(\w+)")
LOAD_GENERATOR = "bench"
OTHER = "other"
"""The label :func:`used` gives to the machine's busy time that no labelled process used."""
_MACHINE = "machine"


def label(cmdline: str) -> str | None:
    """What a process is, from its command line; ``None`` for processes outside the stack.

    Redis's forked children name themselves ``redis-rdb-bgsave`` and ``redis-aof-rewrite``.
    """
    stage = _STAGE.search(cmdline)
    if stage:
        return stage.group(1)
    if "java" in cmdline:
        return "registry" if "apicurio" in cmdline.lower() or "quarkus" in cmdline else "kafka"
    for name in ("postgres", "redis", "stripe-mock"):
        if name in cmdline:
            return name
    return None


def _machine_busy_seconds() -> float:
    """CPU seconds the machine has been busy (user, nice, system, irq, softirq) since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / _TICKS


def snapshot() -> dict[str, float]:
    """CPU seconds used so far, per label, by the live processes of the stack and this one.

    A process that exits between two snapshots takes its CPU with it unless its parent reaps
    it: take both while the pipeline runs.
    """
    me = str(os.getpid())
    totals: dict[str, float] = {_MACHINE: _machine_busy_seconds()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name: str | None
        if entry.name == me:  # its children are the stages, labelled on their own
            name, times = LOAD_GENERATOR, fields[11:13]
        else:  # utime, stime, then cutime, cstime: the children it has waited for
            name, times = label(cmdline), fields[11:15]
        if name is not None:
            seconds = sum(int(f) for f in times) / _TICKS
            totals[name] = totals.get(name, 0.0) + seconds
    return totals


def used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per label between two snapshots, largest first, and :data:`OTHER`: what the
    machine was busy with besides (never below zero)."""
    machine = after.get(_MACHINE, 0.0) - before.get(_MACHINE, 0.0)
    deltas = {name: after[name] - before.get(name, 0.0) for name in after if name != _MACHINE}
    ranked = dict(sorted(deltas.items(), key=lambda item: -item[1]))
    ranked[OTHER] = max(0.0, machine - sum(deltas.values()))
    return ranked
