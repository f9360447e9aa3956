"""deploy/prometheus/rules.yaml against the metrics the code exports (no Prometheus needed).

An alert on a metric that does not exist, or on a label value the code never writes, never
fires, and nothing says so. Every expression is parsed as PromQL; every series it selects must
be one the stages or the API export, with labels they set and values they write; every alert
names its section in docs/operations.md.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry, Metric

from refund_bench.launcher import SERVICES
from refund_bench.runtime.metrics import (
    CounterName,
    GaugeName,
    HistogramName,
    PrometheusMetrics,
)
from refund_bench.stages import RECORDER
from refund_bench.topics import DEFAULT_PARTITIONS, all_topic_specs
from services.api.metrics import ApiMetrics
from services.pricing.handler import PricingHandler

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
OPERATIONS = REPO / "docs" / "operations.md"

EXTERNAL = {
    "kafka_consumergroup_lag": {"consumergroup", "topic", "partition"},
    "kube_pod_container_status_restarts_total": {"namespace", "pod", "container"},
}
"""Series from kafka_exporter and kube-state-metrics that the rules may use, with their
labels."""


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _exported() -> dict[str, dict[str, set[str]]]:
    """Series name -> label name -> the values seen, with one child of every metric touched."""
    registry = CollectorRegistry()
    stage = PrometheusMetrics("payout", registry)
    for counter in typing.get_args(CounterName):
        stage.incr(counter, topic="payout.requested", kind="x")
    for histogram in typing.get_args(HistogramName):
        stage.observe(histogram, 1.0)
    for gauge in typing.get_args(GaugeName):
        stage.set(gauge, 1.0)
    api = ApiMetrics(registry)
    for metric in vars(api).values():
        if hasattr(metric, "_labelnames"):
            names = metric._labelnames
            labelled = metric.labels(*["x"] * len(names)) if names else metric
            if hasattr(labelled, "inc"):
                labelled.inc()
            else:
                labelled.observe(1.0)
    series: dict[str, dict[str, set[str]]] = {}
    family: Metric
    for family in registry.collect():
        for sample in family.samples:
            labels = series.setdefault(sample.name, {})
            for key, value in sample.labels.items():
                labels.setdefault(key, set()).add(value)
    return series


def _selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(series name, [(label, operator, value)]) for each vector selector in ``expr``."""
    found: list[tuple[str, list[tuple[str, str, str]]]] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            matchers = [(m.name, str(m.op), m.value) for m in node.matchers.matchers]
            assert node.name is not None, f"a selector names no series: {expr}"
            found.append((node.name, matchers))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def _written_somewhere(value: str) -> bool:
    """Whether ``value`` appears as a string literal in the product's code."""
    literal = re.compile(rf"[\"']{re.escape(value)}[\"']")
    sources = [*(REPO / "refund_bench").rglob("*.py"), *(REPO / "services").rglob("*.py")]
    return any(literal.search(path.read_text()) for path in sources)


def _anchors() -> set[str]:
    headings = re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def test_rules_are_alerts_with_a_severity_a_summary_and_a_runbook_section() -> None:
    anchors = _anchors()
    names = [rule["alert"] for rule in _rules()]
    assert len(names) == len(set(names))
    for rule in _rules():
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/operations.md", rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in {page}"


@pytest.mark.parametrize("alert", [rule["alert"] for rule in _rules()])
def test_every_series_an_alert_selects_is_exported_with_those_labels(alert: str) -> None:
    (rule,) = [rule for rule in _rules() if rule["alert"] == alert]
    exported = _exported()
    stages = set(SERVICES)
    topics = {spec.name for spec in all_topic_specs()}
    for name, matchers in _selectors(rule["expr"]):
        if name in EXTERNAL:
            for label, _op, value in matchers:
                assert label in EXTERNAL[name], f"{alert}: {name} has no label {label}"
                if label == "consumergroup":
                    assert set(value.split("|")) <= stages, f"{alert}: {value}"
                if label == "container":
                    assert set(value.split("|")) <= {*stages, "api"}, f"{alert}: {value}"
            continue
        assert name in exported, f"{alert}: {name} is not a series the code exports"
        for label, op, value in matchers:
            assert label in exported[name], f"{alert}: {name} has no label {label!r}"
            if op != "MatchOp.Equal":
                continue
            if label == "stage":
                assert value in stages, f"{alert}: no stage {value!r}"
            elif label == "topic":
                assert value in topics, f"{alert}: no topic {value!r}"
            elif label == "le":
                assert value in exported[name]["le"], f"{alert}: no bucket le={value!r}"
            else:
                assert _written_somewhere(value), f"{alert}: the code never writes {value!r}"


def test_the_rules_parse_and_a_broken_one_would_not() -> None:
    for rule in _rules():
        promql_parser.parse(rule["expr"])
    with pytest.raises(ValueError, match="parenthesis"):
        promql_parser.parse("sum by (stage (rate(refund_bench_records_in_total[5m]))")


def test_the_stage_down_rule_names_every_stage_once() -> None:
    """absent() sees only the stages it names: a stage left out could go down unnoticed."""
    (rule,) = [rule for rule in _rules() if rule["alert"] == "RefundBenchStageDown"]
    named = [
        value
        for name, matchers in _selectors(rule["expr"])
        for label, _op, value in matchers
        if name == "refund_bench_assigned_partitions" and label == "stage"
    ]
    assert sorted(named) == sorted(SERVICES)


def test_unowned_partition_thresholds_are_the_partitions_of_each_stages_inputs() -> None:
    """The gauge counts the partitions of every input topic of a stage: a threshold of one
    topic's partitions would never fire for a stage reading several."""
    (rule,) = [rule for rule in _rules() if rule["alert"] == "RefundBenchPartitionsUnowned"]
    thresholds = {
        stage: int(limit) for stage, limit in re.findall(r'stage="(\w+)"\}\) < (\d+)', rule["expr"])
    }
    inputs = {
        "pricing": PricingHandler(lambda _sha: {}, cap_minor=0).spec().inputs,
        "recorder": RECORDER.inputs,
    }
    assert thresholds == {
        stage: sum(topic.partitions or DEFAULT_PARTITIONS for topic in topics)
        for stage, topics in inputs.items()
    }
    assert thresholds["recorder"] == 7 * DEFAULT_PARTITIONS + 1  # complaint.extracted has one
    assert f'stage!~"pricing|recorder"}}) < {DEFAULT_PARTITIONS}' in rule["expr"]


Selected = tuple[str | None, frozenset[tuple[str, str, str]]]
"""A vector selector as (series name, {(label, operator, value)}), whatever its offset."""


def _selected(node: promql_parser.VectorSelector) -> Selected:
    matchers = node.matchers.matchers
    return node.name, frozenset((m.name, str(m.op), m.value) for m in matchers)


def _single_event_terms(
    expr: str,
) -> tuple[set[tuple[Selected, float]], set[tuple[Selected, float]]]:
    """(``increase(x[w]) > 0`` terms, ``x unless x offset w`` terms) of ``expr``, each as
    (the selector ``x``, ``w`` in seconds)."""
    increases: set[tuple[Selected, float]] = set()
    new_series: set[tuple[Selected, float]] = set()

    def in_increase(node: object) -> None:
        if isinstance(node, promql_parser.Call) and node.func.name == "increase":
            (matrix,) = node.args
            assert isinstance(matrix, promql_parser.MatrixSelector)
            increases.add((_selected(matrix.vector_selector), matrix.range.total_seconds()))

    def visit(node: object) -> None:
        if not isinstance(node, promql_parser.BinaryExpr):
            return
        if (
            str(node.op) == ">"
            and isinstance(node.rhs, promql_parser.NumberLiteral)
            and node.rhs.val == 0
        ):
            promql_parser.walk(node.lhs, in_increase)
        if (
            str(node.op) == "unless"
            and isinstance(node.lhs, promql_parser.VectorSelector)
            and node.lhs.offset is None
            and isinstance(node.rhs, promql_parser.VectorSelector)
            and node.rhs.offset is not None
            and _selected(node.lhs) == _selected(node.rhs)
        ):
            new_series.add((_selected(node.lhs), node.rhs.offset.total_seconds()))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return increases, new_series


@pytest.mark.parametrize("alert", [rule["alert"] for rule in _rules()])
def test_an_alert_on_a_single_event_sees_a_new_series_and_has_no_for(alert: str) -> None:
    """``increase(x[w]) > 0`` fires on one event: it must also fire on a counter that appears
    with its first event (``x unless x offset w``), and hold no ``for``, which sparse events
    (a few an hour) would never outlast."""
    (rule,) = [rule for rule in _rules() if rule["alert"] == alert]
    increases, new_series = _single_event_terms(rule["expr"])
    assert increases <= new_series, f"{alert}: no new-series term for {increases - new_series}"
    if increases:
        assert "for" not in rule, f"{alert}: fires on one event, yet waits {rule['for']}"


def test_a_single_event_alert_without_its_new_series_term_over_its_window_is_caught() -> None:
    increases, new_series = _single_event_terms(
        "sum (increase(api_publish_failures_total[10m])) > 0"
        " or sum (api_publish_failures_total unless api_publish_failures_total offset 5m) > 0"
    )
    assert increases == {(("api_publish_failures_total", frozenset()), 600.0)}
    assert new_series == {(("api_publish_failures_total", frozenset()), 300.0)}
    assert not increases <= new_series
