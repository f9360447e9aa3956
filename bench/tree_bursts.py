"""Bursts at 0 ms on the code of one source tree: for comparing two commits side by side.

The six stages run from the tree this module is imported from (its ``refund_bench.launcher``
starts them with the tree as their working directory), so running it alternately from two
trees, on one stack and one machine, compares their code and nothing else::

    git archive <commit> | tar -x -C /tmp/before        # the other tree
    for tree in /tmp/before "$PWD" /tmp/before "$PWD"; do
        (cd "$tree" && PYTHONPATH="$tree" python -m bench.tree_bursts --bursts 2)
    done

Each variant warms up as ``make bench`` does, with 300 complaints and then a burst of
``warm_up`` (not counted: the first burst after the stages start is slower), then runs
``bursts`` bursts of ``complaints``. Not part of
``make bench``; the stack must be up (``. .stack/env.sh``).
"""

from __future__ import annotations

from collections.abc import Sequence

from bench import cli
from bench import pipeline_throughput as pt


def main(bursts: int = 2, complaints: int = 1200, warm_up: int = 300) -> Sequence[tuple[str, str]]:
    """Each burst's complaints/s, the rate of its middle 80% and its CPU per complaint."""
    rows: list[tuple[str, str]] = []
    with pt.running_pipeline() as stack:
        pt.warm_up(stack, warm_up, 1)
        for n in range(1, bursts + 1):
            run = stack.burst(0, complaints)
            print(f"  burst {n}: {run.rate:.1f}/s, middle 80% {run.steady_rate:.1f}/s", flush=True)
            print(f"    {run.cpu_line()}", flush=True)
            rows.append(
                (f"burst {n}, complaints/s (middle 80%)", f"{run.rate:.1f} ({run.steady_rate:.1f})")
            )
    return rows


if __name__ == "__main__":
    cli.run(main)
