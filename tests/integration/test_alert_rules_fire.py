"""The alerting rules run in Prometheus's own rule engine: ``promtool test rules``.

``deploy/prometheus/rules.test.yaml`` feeds each alert the series that must fire it and the
series that must not, and states when it fires, with which labels and which text. promtool
comes from ``make stack-up`` (``.stack/cache/bin``) or the PATH.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from refund_bench.launcher import SERVICES
from tests.conftest import unavailable

REPO = Path(__file__).resolve().parents[2]
RULES_DIR = REPO / "deploy" / "prometheus"


def _promtool() -> str:
    cached = REPO / ".stack" / "cache" / "bin" / "promtool"
    found = str(cached) if cached.is_file() else shutil.which("promtool")
    if found is None:
        unavailable("promtool (make stack-up fetches it)")
    assert found is not None
    return found


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rules_file_passes_promtools_checks() -> None:
    checked = _run("check", "rules", "rules.yaml", cwd=RULES_DIR)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout + checked.stderr


def test_every_alert_fires_and_stays_quiet_as_its_tests_say() -> None:
    tested = _run("test", "rules", "rules.test.yaml", cwd=RULES_DIR)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_an_alert_that_fires_later_than_stated_fails_the_tests(tmp_path: Path) -> None:
    rules = (RULES_DIR / "rules.yaml").read_text()
    stage_down = rules.index("- alert: RefundBenchStageDown")
    slower = rules[:stage_down] + rules[stage_down:].replace("for: 5m", "for: 10m", 1)
    assert slower != rules
    (tmp_path / "rules.yaml").write_text(slower)
    shutil.copy(RULES_DIR / "rules.test.yaml", tmp_path / "rules.test.yaml")

    tested = _run("test", "rules", "rules.test.yaml", cwd=tmp_path)

    assert tested.returncode != 0
    assert "RefundBenchStageDown" in tested.stdout + tested.stderr


@pytest.mark.parametrize("missing", SERVICES)
def test_a_stage_with_no_series_at_all_is_reported_down(tmp_path: Path, missing: str) -> None:
    """Every stage but ``missing`` reports; the rule names exactly the missing one."""
    down = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'refund_bench_assigned_partitions{{stage="{stage}"}}',
                        "values": "12x20",
                    }
                    for stage in SERVICES
                    if stage != missing
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "RefundBenchStageDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "page", "stage": missing},
                                "exp_annotations": {
                                    "summary": f"no instance of {missing} reports metrics: "
                                    "the stage is down, or not scraped",
                                    "runbook": "docs/operations.md#refundbenchstagedown",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    shutil.copy(RULES_DIR / "rules.yaml", tmp_path / "rules.yaml")
    (tmp_path / "down.test.yaml").write_text(yaml.safe_dump(down))

    tested = _run("test", "rules", "down.test.yaml", cwd=tmp_path)

    assert tested.returncode == 0, tested.stdout + tested.stderr
