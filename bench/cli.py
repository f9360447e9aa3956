"""The benchmark scripts' command lines: ``--help``, and one option per parameter of the
function a script runs (typer reads them from its signature)."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer


def print_rows(rows: Sequence[tuple[str, str]]) -> None:
    """A benchmark's figures, one ``name  value`` line each."""
    for name, value in rows:
        print(f"{name:50s} {value}")


def run(main: Callable[..., Sequence[tuple[str, str]] | None]) -> None:
    """Run ``main`` as a command and print the rows it returns, if any.

    SIGTERM (``timeout``, a CI job's end) exits through ``finally`` blocks like Ctrl-C does,
    so a script restores what it changed on the broker or the stand-in, and stops the stages it
    started.
    """
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    @functools.wraps(main)
    def command(**options: Any) -> None:
        rows = main(**options)
        if rows:
            print_rows(rows)

    typer.run(command)
