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
    """Print each variant's runs and median; rows of the medians and of each earlier variant's
    median over the last one's (``ratio_label`` names the first such ratio)."""
    medians = {name: statistics.median(values) for name, values in results.items()}
    rows: list[tuple[str, str]] = []
    for name, values in results.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(
            f"  {name:{width}s} CPU ms per {unit}: {shown} (median {medians[name]:.2f})", flush=True
        )
        rows.append((f"{label}, {name}", f"{medians[name]:.2f}"))
    *earlier, (last_name, last) = medians.items()
    for index, (name, median) in enumerate(earlier):
        ratio_name = ratio_label if index == 0 else f"{label}, {name} / {last_name}"
        rows.append((ratio_name, f"{median / last:.2f}x"))
    return rows
