"""The benchmark's CPU accounting: which process counts for which part of the stack."""

from __future__ import annotations

import pytest

from bench import cpu


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        ("/work/main/.venv/bin/python -m services.judge ", "judge"),
        ("/usr/bin/redis-server 127.0.0.1:16379", "redis"),
        ("redis-rdb-bgsave 127.0.0.1:16379", "redis"),
        ("redis-aof-rewrite 127.0.0.1:16379", "redis"),
        ("postgres: refund_bench refund_bench 127.0.0.1(37156) idle", "postgres"),
        ("/usr/bin/java -Xmx1g -server kafka.Kafka config/server.properties", "kafka"),
        ("/usr/bin/java -jar apicurio-registry-app-runner.jar", "registry"),
        (".stack/cache/bin/stripe-mock -http-addr 127.0.0.1:12111", "stripe-mock"),
        ("/usr/sbin/sshd -D", None),
    ],
)
def test_label_names_the_part_of_the_stack_a_process_belongs_to(
    cmdline: str, expected: str | None
) -> None:
    assert cpu.label(cmdline) == expected


def test_used_puts_the_unlabelled_part_of_the_machines_busy_time_under_other() -> None:
    before = {"machine": 100.0, "judge": 10.0, "redis": 1.0, "bench": 2.0}
    after = {"machine": 110.0, "judge": 14.0, "redis": 3.0, "bench": 3.0, "tally": 1.0}
    used = cpu.used(before, after)
    assert used == {"judge": 4.0, "redis": 2.0, "bench": 1.0, "tally": 1.0, cpu.OTHER: 2.0}
    assert list(used)[:2] == ["judge", "redis"]


def test_used_never_reports_negative_other_work() -> None:
    """/proc/stat and the processes' counters tick apart, so the labelled sum can exceed it."""
    used = cpu.used({"machine": 0.0, "judge": 0.0}, {"machine": 1.0, "judge": 1.02})
    assert used[cpu.OTHER] == 0.0


def test_a_snapshot_counts_this_process_as_the_load_generator() -> None:
    assert cpu.snapshot()[cpu.LOAD_GENERATOR] > 0
