"""Backward-compatibility check of the Avro contracts: the current schema must read what every
earlier version wrote (new readers, old data), so consumers can be upgraded first.

``python -m refund_bench.schema_compat`` checks every ``schemas/avro/*.avsc`` against each of
its versions in git history; the unit tests run the same check.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import fastavro
from fastavro.utils import generate_many

from refund_bench.codec import SCHEMA_DIR

REPO = SCHEMA_DIR.parent.parent


def incompatibilities(old: dict[str, Any], new: dict[str, Any], samples: int = 25) -> list[str]:
    """Why data written with ``old`` cannot be read with ``new`` (empty when it can)."""
    writer = fastavro.parse_schema(old)
    reader = fastavro.parse_schema(new)
    problems: list[str] = []
    for datum in generate_many(old, samples):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, writer, datum)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, writer, reader)
        except Exception as exc:  # noqa: BLE001 - every resolution failure is a finding
            problems.append(f"{type(exc).__name__}: {exc}")
            break
    return problems


def historical_versions(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(commit, schema) for every committed version of ``path``, newest first."""
    rel = path.resolve().relative_to(REPO)
    try:
        log = subprocess.run(  # noqa: S603 - fixed git arguments
            ["git", "log", "--format=%H", "--", str(rel)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return []
    versions = []
    for commit in log:
        shown = subprocess.run(  # noqa: S603 - fixed git arguments
            ["git", "show", f"{commit}:{rel}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode == 0:
            versions.append((commit, json.loads(shown.stdout)))
    return versions


def check_all(schema_dir: Path = SCHEMA_DIR) -> dict[str, list[str]]:
    """Problems per schema file, against each of its earlier committed versions."""
    report: dict[str, list[str]] = {}
    for path in sorted(schema_dir.glob("*.avsc")):
        current = json.loads(path.read_text(encoding="utf-8"))
        for commit, old in historical_versions(path):
            for problem in incompatibilities(old, current):
                report.setdefault(path.name, []).append(f"vs {commit[:10]}: {problem}")
    return report


if __name__ == "__main__":
    found = check_all()
    for name, problems in found.items():
        for problem in problems:
            print(f"{name}: {problem}")
    raise SystemExit(1 if found else 0)
