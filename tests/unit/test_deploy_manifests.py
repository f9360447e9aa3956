"""The Kubernetes manifests against the code they deploy (no cluster needed).

The settings classes ignore environment variables they do not have, so a misspelt key in a
manifest would be dropped without a word and the code default (a loopback address) used in the
pod. These tests read ``deploy/k8s`` and check that every key reaches a setting, that the values
validate, that each secret and address an entry point reads is given (secrets from the Secret),
that the probes hit the port the process serves, and that the Strimzi topics are the topics the
flow creates.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from refund_bench.config import StackSettings, StageSettings
from refund_bench.kafka_acls import user_grants
from refund_bench.llm_setup import JudgePanelSettings, LlmStageSettings
from refund_bench.runtime.runner import TXN_CALL_MIN_S, RuntimeConfig
from refund_bench.topics import CHANGELOG_CONFIG, all_topic_specs, min_insync_replicas
from services.api.intake import READINESS_WAIT_S
from services.api.server import GRACEFUL_SHUTDOWN_S
from services.api.settings import ApiSettings
from services.extractor.__main__ import Settings as ExtractorSettings
from services.payout.__main__ import Settings as PayoutSettings
from services.pricing.__main__ import Settings as PricingSettings
from services.recorder.__main__ import Settings as RecorderSettings
from services.settler.__main__ import Settings as SettlerSettings

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
CONFIG_MAP = "refund-bench-config"
SECRET = "refund-bench-secrets"

SETTINGS_OF: dict[str, type[BaseSettings]] = {
    "services.api": ApiSettings,
    "services.extractor": ExtractorSettings,
    "services.judge": JudgePanelSettings,
    "services.tally": StageSettings,
    "services.pricing": PricingSettings,
    "services.settler": SettlerSettings,
    "services.payout": PayoutSettings,
    "services.recorder": RecorderSettings,
    "refund_bench.provision": StackSettings,
}
"""The settings class each entry point reads (``python -m <module>``)."""

# A stand-in for every Secret key: long enough for SESSION_SECRET's minimum.
SECRET_PLACEHOLDER = "x" * 48
SECRET_URL_PLACEHOLDERS = {
    "DATABASE_URL": "postgresql://refund_bench:" + "x" * 48 + "@postgres:5432/refund_bench",
    "REDIS_URL": "redis://:" + "x" * 48 + "@redis:6379/0",
}
"""Secrets the settings read as URLs: a placeholder of the shape an operator stores."""


@functools.cache
def _documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of ``path``, parsed once per test session (read them, do not change
    them)."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _all_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in _documents(path)]


def _env_file(path: Path) -> dict[str, str]:
    """A kustomize ``envs`` file as the generated ConfigMap holds it: ``KEY=value`` lines (leading
    blanks dropped, the value verbatim after the first ``=``), ``#`` comment lines and blank
    lines skipped. A line without ``=`` (kustomize would copy that variable from the
    environment of whoever renders) and trailing blanks (kept in the value) are refused."""
    data: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        where = f"{path.name}:{number}"
        assert sep, f"{where}: not KEY=value: {raw!r}"
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", key), f"{where}: key {key!r}"
        assert value == value.rstrip(), f"{where}: trailing blanks would stay in {key}'s value"
        assert key not in data, f"{where}: {key} given twice"
        data[key] = value
    return data


def _config_map() -> dict[str, str]:
    """The shared ConfigMap's data, from the generator in ``kustomization.yaml``."""
    (kustomization,) = _documents(K8S / "kustomization.yaml")
    (generator,) = [g for g in kustomization["configMapGenerator"] if g["name"] == CONFIG_MAP]
    data: dict[str, str] = {}
    for env_file in generator["envs"]:
        data.update(_env_file(K8S / env_file))
    return data


def _workloads() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, pod template, container) for every container of a Deployment or Job."""
    for doc in _all_documents():
        if doc["kind"] in ("Deployment", "Job"):
            template = doc["spec"]["template"]
            for container in template["spec"]["containers"]:
                yield doc["metadata"]["name"], template, container


def _containers() -> Iterator[tuple[str, dict[str, Any]]]:
    """(workload name, container) for every Deployment and Job."""
    for name, _, container in _workloads():
        yield name, container


def _module(container: dict[str, Any]) -> str:
    command = container["command"]
    assert command[:2] == ["python", "-m"], f"{container['name']}: {command}"
    module: str = command[2]
    return module


def _environment(container: dict[str, Any], *, optional: bool = True) -> dict[str, str]:
    """What the container's process finds in its environment (Secret values as placeholders);
    ``optional=False``: as when the Secret holds none of the keys the manifest marks optional."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert source["configMapRef"]["name"] == CONFIG_MAP
        env.update(_config_map())
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            if ref.get("optional") and not optional:
                continue
            ref = {key: value for key, value in ref.items() if key != "optional"}
            own_kafka_user = entry["name"] == "KAFKA_SASL_PASSWORD" and ref == {
                "name": env.get("KAFKA_SASL_USERNAME"),
                "key": "password",
            }
            assert ref["name"] == SECRET or own_kafka_user, f"{entry['name']}: secret {ref}"
            env[entry["name"]] = SECRET_URL_PLACEHOLDERS.get(entry["name"], SECRET_PLACEHOLDER)
    return env


def _fields(settings: type[BaseSettings]) -> set[str]:
    return {name.upper() for name in settings.model_fields}


def _settings(container: dict[str, Any], *, optional: bool = True) -> BaseSettings:
    """The container's settings as its process reads them (``optional=False``: without the
    Secret's optional keys); raises on a value the code would refuse."""
    settings = SETTINGS_OF[_module(container)]
    fields = _fields(settings)
    env = _environment(container, optional=optional)
    return settings.model_validate({k.lower(): v for k, v in env.items() if k in fields})


def _read_by(module: str, settings: type[BaseSettings]) -> set[str]:
    """The fields the entry point's code reads: ``settings.<field>`` in its package (or module),
    in the stage runtime's start-up and the LLM set-up where they apply, and the fields a
    settings method it calls reads (``self.<field>``)."""
    base = REPO / module.replace(".", "/")
    paths = sorted(base.glob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    if issubclass(settings, StageSettings):
        paths.append(REPO / "refund_bench" / "service.py")
    if issubclass(settings, LlmStageSettings):
        paths.append(REPO / "refund_bench" / "llm_setup.py")
    fields = set(settings.model_fields)
    read: set[str] = set()
    for name in re.findall(r"\bsettings\.(\w+)", "\n".join(p.read_text() for p in paths)):
        member = getattr(settings, name, None)
        if name in fields:
            read.add(name)
        elif callable(member):
            read |= set(re.findall(r"\bself\.(\w+)", inspect.getsource(member))) & fields
    return read


def _needs_a_value(settings: type[BaseSettings], name: str) -> bool:
    """A secret, or a setting whose default is an address on the developer's machine."""
    default = settings.model_fields[name].default
    if isinstance(default, SecretStr):
        return True
    return isinstance(default, str) and ("127.0.0.1" in default or "localhost" in default)


def test_every_entry_point_has_its_settings_class() -> None:
    assert {_module(container) for _, container in _containers()} == set(SETTINGS_OF)


@pytest.mark.parametrize("module", sorted(SETTINGS_OF))
def test_each_entry_point_reads_the_settings_class_the_tests_assume(module: str) -> None:
    base = REPO / module.replace(".", "/")
    main = base / "__main__.py" if base.is_dir() else base.with_suffix(".py")
    settings = SETTINGS_OF[module]
    assert f"{settings.__name__}()" in main.read_text(), f"{main} builds another settings class"
    if settings.__name__ == "Settings":
        assert settings.__module__ == f"{module}.__main__"


def test_every_config_map_key_is_a_setting_of_some_workload() -> None:
    known = set().union(*(_fields(settings) for settings in SETTINGS_OF.values()))
    assert set(_config_map()) - known == set()


def test_config_map_values_carry_no_quotes() -> None:
    # kustomize keeps quotes in an envs file as part of the value: "12" would be a string
    # with quote marks, which the integer settings refuse and the string ones keep.
    quoted = {key for key, value in _config_map().items() if value[:1] in ('"', "'")}
    assert quoted == set()


def test_the_shared_config_map_is_generated_so_a_change_rolls_the_pods() -> None:
    # A plain ConfigMap keeps its name when its data changes, so running pods keep the old
    # values. The generator names it by its content's hash and rewrites every reference.
    plain = [d for d in _all_documents() if d["kind"] == "ConfigMap"]
    assert plain == [], "the shared settings are config.env, generated by kustomize"
    references = [
        source["configMapRef"]["name"]
        for _, container in _containers()
        for source in container.get("envFrom", [])
    ]
    assert references, "the workloads read the shared settings"
    assert set(references) == {CONFIG_MAP}


@pytest.mark.parametrize("workload", sorted({name for name, _ in _containers()}))
def test_each_workloads_own_variables_are_its_settings_and_validate(workload: str) -> None:
    for name, container in _containers():
        if name != workload:
            continue
        settings = SETTINGS_OF[_module(container)]
        own = {entry["name"] for entry in container.get("env", [])}
        assert own - _fields(settings) == set(), f"{workload} sets variables it never reads"
        _settings(container)
        _settings(container, optional=False)  # the usual Secret: no optional key in it


@pytest.mark.parametrize("workload", sorted({name for name, _ in _containers()}))
def test_secrets_and_addresses_a_workload_reads_are_given_and_secrets_come_from_the_secret(
    workload: str,
) -> None:
    for name, container in _containers():
        if name != workload:
            continue
        module = _module(container)
        settings = SETTINGS_OF[module]
        read = _read_by(module, settings)
        assert read, f"{workload}: found no settings read in the source of {module}"
        given = set(_environment(container))
        from_secret = {entry["name"] for entry in container.get("env", []) if "valueFrom" in entry}
        for field in sorted(read):
            key = field.upper()
            if not _needs_a_value(settings, field):
                continue
            assert key in given, f"{workload} reads {key} but the manifest leaves the default"
            if isinstance(settings.model_fields[field].default, SecretStr):
                assert key in from_secret, f"{workload}: {key} must come from a Secret"


@pytest.mark.parametrize("workload", sorted({name for name, _ in _containers()}))
def test_probes_and_scrapes_reach_the_port_the_process_serves(workload: str) -> None:
    for name, template, container in _workloads():
        if name != workload or "ports" not in container:
            continue
        served = _settings(container)
        assert isinstance(served, ApiSettings | StageSettings)
        probed = served.api_port if isinstance(served, ApiSettings) else served.metrics_port
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        # Liveness on /readyz would restart a stage while it restores state or drains to stop.
        paths = {
            "startupProbe": "/healthz",
            "livenessProbe": "/healthz",
            "readinessProbe": "/readyz",
        }
        for probe, path in paths.items():
            target = container[probe]["httpGet"]
            assert ports[target["port"]] == probed, f"{workload} {probe}"
            assert target["path"] == path, f"{workload} {probe}"
        annotations = template["metadata"].get("annotations", {})
        if annotations.get("prometheus.io/scrape") == "true":
            assert annotations["prometheus.io/port"] == str(served.metrics_port), workload
            assert served.metrics_port in ports.values(), workload


def test_the_apis_counters_are_not_behind_the_service_clients_reach() -> None:
    """The Service (and so the Ingress) carries the API's port, not its ``/metrics`` port."""
    documents = list(yaml.safe_load_all((K8S / "api.yaml").read_text()))
    (service,) = [d for d in documents if d["kind"] == "Service"]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    served = _settings(container)
    assert isinstance(served, ApiSettings)
    names = {p["containerPort"]: p["name"] for p in container["ports"]}
    assert served.metrics_port != served.api_port
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [names[served.api_port]]


def test_pods_run_unprivileged_and_read_only() -> None:
    for workload, template, container in _workloads():
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, workload
        assert pod["automountServiceAccountToken"] is False, workload
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False, workload
        assert security["readOnlyRootFilesystem"] is True, workload
        assert security["capabilities"]["drop"] == ["ALL"], workload
        assert set(container["resources"]) == {"requests", "limits"}, workload


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = _documents(K8S / "kustomization.yaml")
    manifests = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests


def test_autoscalers_target_existing_deployments() -> None:
    documents = _all_documents()
    deployments = {doc["metadata"]["name"] for doc in documents if doc["kind"] == "Deployment"}
    for doc in documents:
        if doc["kind"] == "HorizontalPodAutoscaler":
            assert doc["spec"]["scaleTargetRef"]["name"] in deployments
            # A consumer beyond the partition count gets no partition and sits idle.
            partitions = int(_config_map()["TOPIC_PARTITIONS"])
            assert doc["spec"]["maxReplicas"] <= partitions, doc["metadata"]["name"]


def test_min_insync_replicas_leaves_one_broker_to_lose() -> None:
    assert [min_insync_replicas(n) for n in (1, 2, 3, 5)] == [1, 1, 2, 2]


def test_stateful_stages_give_a_new_pod_time_to_restore_before_the_next_moves() -> None:
    for doc in _all_documents():
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] in ("tally", "pricing"):
            assert doc["spec"]["minReadySeconds"] >= 30, doc["metadata"]["name"]


def test_every_deployment_spreads_its_own_pods_over_nodes_and_zones() -> None:
    deployments = [doc for doc in _all_documents() if doc["kind"] == "Deployment"]
    assert len(deployments) == 8
    for doc in deployments:
        name = doc["metadata"]["name"]
        spread = doc["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in spread] == [
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        ], name
        for constraint in spread:
            # Its own pods only (another stage's pods must not count), and never unschedulable.
            assert constraint["labelSelector"] == doc["spec"]["selector"], name
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", name
            assert constraint["maxSkew"] == 1, name


def _selects(match_labels: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in match_labels.items())


def test_every_deployment_has_a_disruption_budget_over_its_own_pods() -> None:
    """A node drain evicts at most one pod of each Deployment at a time: each has a
    PodDisruptionBudget (``maxUnavailable: 1``) whose selector picks its pods and no other
    Deployment's (a budget that selects nothing protects nothing, silently)."""
    documents = _all_documents()
    deployments = [doc for doc in documents if doc["kind"] == "Deployment"]
    budgets = [doc for doc in documents if doc["kind"] == "PodDisruptionBudget"]
    assert deployments
    for budget in budgets:
        name = budget["metadata"]["name"]
        assert budget["apiVersion"] == "policy/v1", name
        assert set(budget["spec"]["selector"]) == {"matchLabels"}, name
        assert budget["spec"]["maxUnavailable"] == 1, name
        assert "minAvailable" not in budget["spec"], name
    for doc in deployments:
        name = doc["metadata"]["name"]
        pod_labels = doc["spec"]["template"]["metadata"]["labels"]
        covering = [
            budget
            for budget in budgets
            if _selects(budget["spec"]["selector"]["matchLabels"], pod_labels)
        ]
        assert len(covering) == 1, f"{name}: {len(covering)} PodDisruptionBudgets select its pods"
        (budget,) = covering
        assert budget["spec"]["selector"] == doc["spec"]["selector"], name
        for other in deployments:
            if other is not doc:
                other_labels = other["spec"]["template"]["metadata"]["labels"]
                selector = budget["spec"]["selector"]["matchLabels"]
                other_name = other["metadata"]["name"]
                assert not _selects(selector, other_labels), f"{name}'s budget selects {other_name}"


def test_strimzi_topics_are_the_topics_the_flow_creates() -> None:
    topics = {
        doc["spec"]["topicName"]: doc["spec"] for doc in _documents(K8S / "strimzi" / "topics.yaml")
    }
    specs = {spec.name: spec for spec in all_topic_specs()}
    assert set(topics) == set(specs)
    partitions = int(_config_map()["TOPIC_PARTITIONS"])
    for name, spec in topics.items():
        assert spec["partitions"] == (specs[name].partitions or partitions), name
        compacted = spec["config"]["cleanup.policy"] == "compact"
        assert compacted == specs[name].compacted, name
        if compacted:
            assert {k: spec["config"][k] for k in CHANGELOG_CONFIG} == CHANGELOG_CONFIG, name


def _strimzi_rules() -> dict[str, set[tuple[str, str, bool, str]]]:
    """Per KafkaUser of strimzi/users.yaml: (resource type, name, prefixed, operation)."""
    rules: dict[str, set[tuple[str, str, bool, str]]] = {}
    for doc in _documents(K8S / "strimzi" / "users.yaml"):
        assert doc["kind"] == "KafkaUser"
        assert doc["spec"]["authentication"] == {"type": "scram-sha-512"}
        assert doc["spec"]["authorization"]["type"] == "simple"
        rules[doc["metadata"]["name"]] = {
            (
                acl["resource"]["type"],
                acl["resource"]["name"],
                acl["resource"]["patternType"] == "prefix",
                operation,
            )
            for acl in doc["spec"]["authorization"]["acls"]
            for operation in acl["operations"]
        }
    return rules


def test_strimzi_users_hold_each_clients_rules_and_no_more() -> None:
    expected = {
        f"refund-bench-{client}": {
            (g.resource.value, g.name, g.prefixed, g.operation.value) for g in grants
        }
        for client, grants in user_grants().items()
    }
    assert _strimzi_rules() == expected


def test_each_stage_and_the_api_sign_in_to_kafka_as_their_own_user() -> None:
    users = set(_strimzi_rules())
    signed_in = {}
    for name, container in _containers():
        env = {e["name"]: e for e in container.get("env", [])}
        user = env["KAFKA_SASL_USERNAME"]["value"]
        assert env["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": user,
            "key": "password",
        }, name
        signed_in[name] = user
    assert signed_in == {name: f"refund-bench-{name}" for name in signed_in}
    assert set(signed_in.values()) == users


def test_every_kafka_client_mounts_the_brokers_ca_where_the_config_names_it() -> None:
    """The shipped sign-in is TLS: each workload finds the CA file ``KAFKA_SSL_CA_LOCATION``
    names, read-only, from the one Secret the README tells how to fill (optional, for brokers
    with a public CA)."""
    ca_file = PurePosixPath(_config_map()["KAFKA_SSL_CA_LOCATION"])
    assert ca_file.name == "ca.crt"
    mounted = {}
    for name, template, container in _workloads():
        settings = _settings(container)
        assert isinstance(settings, StackSettings), name
        assert settings.kafka_security_protocol.endswith("SSL"), name
        assert PurePosixPath(settings.kafka_ssl_ca_location) == ca_file, name
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        sources = {
            m["mountPath"]: (volumes[m["name"]], m.get("readOnly", False))
            for m in container["volumeMounts"]
        }
        volume, read_only = sources[str(ca_file.parent)]
        assert read_only, name
        mounted[name] = volume["secret"]
    assert mounted == {
        name: {"secretName": "refund-bench-kafka-ca", "optional": True} for name in mounted
    }


def test_a_stopping_stage_has_time_to_drain_and_commit_before_it_is_killed() -> None:
    """A stage killed with its transaction open stalls the read_committed readers of what it
    wrote until the broker aborts it (60 s): each stage's grace period covers its drain
    (``DRAIN_TIMEOUT_S``, async stages) and its last commit at its longest."""
    stages = [(n, t, c) for n, t, c in _workloads() if n != "api" and n != "provision"]
    assert len(stages) == 7
    commit_s = RuntimeConfig("", "", "").commit_timeout_s + TXN_CALL_MIN_S
    for name, template, container in stages:
        settings = _settings(container)
        assert isinstance(settings, StageSettings), name
        needed = settings.drain_timeout_s + commit_s
        assert template["spec"]["terminationGracePeriodSeconds"] >= needed, name


def test_the_api_leaves_the_load_balancer_before_it_stops_and_has_time_to_finish() -> None:
    """Its endpoints are removed while preStop sleeps, so no request meets a closed listener;
    the grace period covers that, uvicorn's graceful shutdown and the producer's flush."""
    [(template, container)] = [(t, c) for n, t, c in _workloads() if n == "api"]
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    settings = _settings(container)
    assert isinstance(settings, ApiSettings)
    assert sleep >= 5
    needed = sleep + GRACEFUL_SHUTDOWN_S + settings.publish_timeout_s
    assert template["spec"]["terminationGracePeriodSeconds"] >= needed


def test_network_policies_let_in_only_prometheus_and_the_ingress() -> None:
    """Every pod is under a default deny of ingress; what is let in goes to a port the
    selected pods name (a name no pod has would let nothing in, silently): the metrics port of
    every pod (where the stages' scrapes and probes are), and the API's own port. No other
    port of any pod is reachable."""
    policies = [doc for doc in _all_documents() if doc["kind"] == "NetworkPolicy"]
    assert policies
    allowed: dict[str, set[str]] = {}
    named_somewhere: set[str] = set()
    for name, template, container in _workloads():
        labels = template["metadata"]["labels"]
        ports = {port["name"] for port in container.get("ports", [])}
        selecting = [
            p for p in policies if _selects(p["spec"]["podSelector"]["matchLabels"], labels)
        ]
        assert any("ingress" not in p["spec"] for p in selecting), f"{name}: no default deny"
        opened = {
            str(port["port"])
            for policy in selecting
            for rule in policy["spec"].get("ingress", [])
            for port in rule["ports"]
        }
        named_somewhere |= opened & ports
        allowed[name] = opened & ports
    every_opened = {
        str(port["port"])
        for policy in policies
        for rule in policy["spec"].get("ingress", [])
        for port in rule["ports"]
    }
    assert every_opened <= named_somewhere, "a policy opens a port no pod it selects names"
    for name, template, _ in _workloads():
        scraped = template["metadata"].get("annotations", {}).get("prometheus.io/port")
        if scraped:
            assert "metrics" in allowed[name], f"{name}: Prometheus cannot scrape it"
    assert allowed.pop("api") == {"http", "metrics"}
    assert {name: opened - {"metrics"} for name, opened in allowed.items()} == {
        name: set() for name in allowed
    }


def test_the_apis_readiness_answers_within_its_probes_timeout() -> None:
    """``/readyz`` waits for PostgreSQL at most ``READINESS_WAIT_S``: a probe that timed out
    first would count a slow answer as a failure, not the 503 or 200 it was about to get."""
    [(_template, container)] = [(t, c) for n, t, c in _workloads() if n == "api"]
    assert container["readinessProbe"]["timeoutSeconds"] > READINESS_WAIT_S


def test_the_settings_production_needs_other_than_their_defaults_are_set() -> None:
    """Defaults made for a developer's machine that production must not keep: no registry (the
    development-only framing), topics with one replica, a session cookie sent over plain HTTP,
    the API's schema pages open without sign-in."""
    for name, _template, container in _workloads():
        settings = _settings(container)
        if isinstance(settings, StackSettings):
            assert settings.schema_registry_url.startswith("http"), name
        if name == "provision":
            assert isinstance(settings, StackSettings)
            assert settings.topic_replication_factor >= 3, name
        if isinstance(settings, ApiSettings):
            assert settings.session_cookie_secure, name
            assert not settings.api_docs, name
