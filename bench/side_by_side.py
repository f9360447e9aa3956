"""Shared pieces of the side-by-side CPU benchmarks: the process's CPU time, and the report."""

from __future__ import annotations

import resource
import statistics


def cpu_seconds() -> float:
    """User plus system CPU time of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(
    results: dict[str, list[float]], *, unit: str, label: str, ratio_label: str, width: int
) -> list[tuple[str, str]]:
    """Print each variant's runs and median; rows of the medians and first / second ratio."""
    medians = {name: statistics.median(values) for name, values in results.items()}
    rows: list[tuple[str, str]] = []
    for name, values in results.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"  {name:{width}s} CPU ms per {unit}: {shown} (median {medians[name]:.2f})", flush=True
        )
        rows.append((f"{label}, {name}", f"{medians[name]:.2f}"))
    first, second = medians.values()
    rows.append((ratio_label, f"{first / second:.2f}x"))
    return rows
