"""Full compatibility check of the Avro contracts, as the registry's FULL_TRANSITIVE rule: the
current schema must read what every earlier version wrote (new readers, old data), and every
earlier version must read what the current one writes (old readers, new data), so writers and
readers can be upgraded in either order.

``python -m refund_bench.schema_compat`` checks every ``schemas/avro/*.avsc`` against each of
its versions in git history and in ``schemas/avro/history/`` (so a shallow clone is checked
too); the unit tests run the same check. With ``--write-history`` it
first adds every earlier version to ``schemas/avro/history/`` (what readers without a registry
resolve old records with, :func:`refund_bench.codec.earlier_schemas`); run it after committing
a contract change, and commit what it wrote before releasing.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Annotated, Any

import fastavro
import typer
from fastavro.utils import generate_many

from refund_bench.codec import HISTORY_DIR, SCHEMA_DIR, FingerprintFraming

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


class UnreadableHistoryError(RuntimeError):
    """The repository's git history cannot be read: no check against it can be made."""


def historical_versions(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(commit, schema) for every committed version of ``path``, newest first. In a shallow
    clone, those of the commits it holds only (:func:`check_all` also reads the kept history).

    Raises :class:`UnreadableHistoryError` when git cannot read the repository's history (no git,
    no repository): an empty answer would pass every check made against it."""
    if not path.resolve().is_relative_to(REPO):
        return []  # not in the repository: nothing of it was ever committed
    rel = path.resolve().relative_to(REPO)
    try:
        log = subprocess.run(  # noqa: S603 - fixed git arguments
            ["git", "log", "--format=%H", "--", str(rel)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        raise UnreadableHistoryError(f"git cannot read the history of {rel}: {detail}") from exc
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


def earlier_versions(
    path: Path, history_dir: Path = HISTORY_DIR
) -> list[tuple[str, dict[str, Any]]]:
    """(where, schema) for each earlier version of the contract at ``path``: every committed
    version (``where`` is its commit) and every one kept in ``history_dir`` (``where`` is the
    file), each schema once. The kept ones count even where git holds less (a shallow clone)."""
    seen: set[bytes] = set()
    versions: list[tuple[str, dict[str, Any]]] = []
    kept = sorted((history_dir / path.stem).glob("*.avsc"))
    found = [
        *((commit[:10], old) for commit, old in historical_versions(path)),
        *((file.name, json.loads(file.read_text("utf-8"))) for file in kept),
    ]
    for where, old in found:
        fingerprint = FingerprintFraming.fingerprint_of(old)
        if fingerprint not in seen:
            seen.add(fingerprint)
            versions.append((where, old))
    return versions


def check_all(
    schema_dir: Path = SCHEMA_DIR, history_dir: Path = HISTORY_DIR
) -> dict[str, list[str]]:
    """Problems per schema file, both ways against each of its earlier versions
    (:func:`earlier_versions`)."""
    report: dict[str, list[str]] = {}
    for path in sorted(schema_dir.glob("*.avsc")):
        current = json.loads(path.read_text(encoding="utf-8"))
        for where, old in earlier_versions(path, history_dir):
            for problem in incompatibilities(old, current):
                report.setdefault(path.name, []).append(f"reads {where}: {problem}")
            for problem in incompatibilities(current, old):
                report.setdefault(path.name, []).append(f"read by {where}: {problem}")
    return report


def missing_history(
    schema_dir: Path = SCHEMA_DIR, history_dir: Path = HISTORY_DIR
) -> dict[Path, dict[str, Any]]:
    """The earlier versions (by git history) of each contract that ``history_dir`` lacks: the
    file each should be written to, and the schema."""
    missing: dict[Path, dict[str, Any]] = {}
    for path in sorted(schema_dir.glob("*.avsc")):
        current = FingerprintFraming.fingerprint_of(json.loads(path.read_text(encoding="utf-8")))
        for _, old in historical_versions(path):
            fp = FingerprintFraming.fingerprint_of(old)
            target = history_dir / path.stem / f"{fp.hex()}.avsc"
            if fp != current and not target.exists():
                missing[target] = old
    return missing


def write_history() -> list[Path]:
    """Write :func:`missing_history`; returns the files written."""
    written = []
    for target, schema in missing_history().items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
        written.append(target)
    return written


app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def check(
    write: Annotated[
        bool,
        typer.Option(
            "--write-history",
            help="First add every earlier version of each contract to schemas/avro/history/.",
        ),
    ] = False,
) -> None:
    """Check every contract against its earlier versions; exit 1 on any incompatibility, 2
    when git cannot read the history."""
    try:
        if write:
            for path in write_history():
                typer.echo(f"wrote {path.relative_to(REPO)}")
        found = check_all()
    except UnreadableHistoryError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    for name, problems in found.items():
        for problem in problems:
            typer.echo(f"{name}: {problem}")
    raise typer.Exit(1 if found else 0)


if __name__ == "__main__":
    app()
