"""Kafka access rules for each client of the flow, made from the stage table
(:mod:`refund_bench.stages`): what each stage's Kafka user may do, and nothing more.

A stage's user may read (and describe) its inputs; write (and describe) its outputs and its
inputs' dead-letter topics; read and write its state changelog; use its consumer group and its
changelog's restore group; and use the transactional ids that begin with ``<stage>-``. The
API's user may write the topics it publishes. So a stage cannot write another stage's topic,
and the internal topics hold only what the stage that owns them wrote.

The provision Job's user may create (and describe) the flow's topics, and nothing more: not
read or write them, nor change access rules.

``deploy/k8s/strimzi/users.yaml`` holds the same rules as Strimzi ``KafkaUser`` resources (a
unit test keeps the two equal); :func:`apply_acls` creates them on any other cluster, and with
``prune`` removes the rules those users hold beyond them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from refund_bench.stages import API_WRITES, STAGES, StageTopics
from refund_bench.topics import Topic, TopicSpec, all_topic_specs, restore_group

API = "api"
"""The API's client name (its user: ``<prefix>api``)."""
PROVISION = "provision"
"""The provision Job's name (its user: ``<prefix>provision``)."""


class Resource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactionalId"


class Operation(StrEnum):
    READ = "Read"
    WRITE = "Write"
    DESCRIBE = "Describe"
    CREATE = "Create"


@dataclass(frozen=True, order=True)
class Grant:
    """One allowed operation on one resource (``prefixed``: every name beginning so)."""

    resource: Resource
    name: str
    operation: Operation
    prefixed: bool = False


def _topics(topics: Iterable[Topic | str], *operations: Operation) -> set[Grant]:
    names = {topic if isinstance(topic, str) else topic.name for topic in topics}
    return {Grant(Resource.TOPIC, name, op) for name in names for op in operations}


def stage_grants(stage: StageTopics) -> frozenset[Grant]:
    """What ``stage``'s user may do (see the module)."""
    grants = _topics(stage.inputs, Operation.READ, Operation.DESCRIBE)
    grants |= _topics((*stage.outputs, *stage.dead_letters), Operation.WRITE, Operation.DESCRIBE)
    grants.add(Grant(Resource.GROUP, stage.name, Operation.READ))
    if stage.changelog is not None:
        grants |= _topics((stage.changelog,), Operation.READ, Operation.WRITE, Operation.DESCRIBE)
        grants.add(Grant(Resource.GROUP, restore_group(stage.changelog), Operation.READ))
    grants |= {
        Grant(Resource.TRANSACTIONAL_ID, f"{stage.name}-", op, prefixed=True)
        for op in (Operation.WRITE, Operation.DESCRIBE)
    }
    return frozenset(grants)


def client_grants() -> dict[str, frozenset[Grant]]:
    """Every client of the flow by name (the stages, then ``api``) and what it may do."""
    grants = {stage.name: stage_grants(stage) for stage in STAGES}
    grants[API] = frozenset(_topics(API_WRITES, Operation.WRITE, Operation.DESCRIBE))
    return grants


def provision_grants(topics: Iterable[TopicSpec] | None = None) -> frozenset[Grant]:
    """What the provision Job's user may do: create and describe ``topics`` (default: every
    topic of the flow, :func:`~refund_bench.topics.all_topic_specs`)."""
    specs = all_topic_specs() if topics is None else topics
    return frozenset(_topics((spec.name for spec in specs), Operation.CREATE, Operation.DESCRIBE))


def user_grants() -> dict[str, frozenset[Grant]]:
    """Every Kafka user's rules by client name: the flow's clients and the provision Job."""
    return {**client_grants(), PROVISION: provision_grants()}


_RESOURCE_TYPES = {
    Resource.TOPIC: ResourceType.TOPIC,
    Resource.GROUP: ResourceType.GROUP,
    Resource.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
}
_OPERATIONS = {
    Operation.READ: AclOperation.READ,
    Operation.WRITE: AclOperation.WRITE,
    Operation.DESCRIBE: AclOperation.DESCRIBE,
    Operation.CREATE: AclOperation.CREATE,
}


def acl_bindings(principal: str, grants: Iterable[Grant]) -> list[AclBinding]:
    """``grants`` as ALLOW bindings for ``principal`` (e.g. ``User:refund-bench-judge``)."""
    return [
        AclBinding(
            _RESOURCE_TYPES[grant.resource],
            grant.name,
            ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
            principal,
            "*",
            _OPERATIONS[grant.operation],
            AclPermissionType.ALLOW,
        )
        for grant in sorted(grants)
    ]


class AclChanges(NamedTuple):
    """What :func:`apply_acls` did: bindings asked for (created, or there already) and removed."""

    asked: int
    removed: int


def _binding_key(binding: AclBinding) -> tuple[Any, ...]:
    """What identifies a rule: its resource, pattern, principal, host, operation, permission."""
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def apply_acls(
    bootstrap_servers: str,
    principal_prefix: str,
    security: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    *,
    prune: bool = False,
) -> AclChanges:
    """Create every user's rules (:func:`user_grants`) for the principal
    ``<principal_prefix><client>`` (e.g. ``User:refund-bench-`` + ``judge``). Idempotent: a
    rule that exists is left as it is.

    ``prune``: also remove every other ALLOW rule of those principals (e.g. for a topic renamed
    since), after the rules are created, so a client never loses a rule it still needs. DENY
    rules, and the rules of other principals, are never touched.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(security or {})})
    wanted = {
        f"{principal_prefix}{client}": acl_bindings(f"{principal_prefix}{client}", grants)
        for client, grants in user_grants().items()
    }
    bindings = [binding for listed in wanted.values() for binding in listed]
    for future in admin.create_acls(bindings, request_timeout=timeout_s).values():
        future.result()
    if not prune:
        return AclChanges(len(bindings), 0)
    keep = {_binding_key(binding) for binding in bindings}
    stale = [
        binding
        for principal in wanted
        for binding in _principal_rules(admin, principal, timeout_s)
        if binding.permission_type == AclPermissionType.ALLOW and _binding_key(binding) not in keep
    ]
    if stale:
        filters = [exact_filter(binding) for binding in stale]
        for future in admin.delete_acls(filters, request_timeout=timeout_s).values():
            future.result()
    return AclChanges(len(bindings), len(stale))


def exact_filter(binding: AclBinding) -> AclBindingFilter:
    """A filter matching ``binding`` and nothing else (to delete it)."""
    return AclBindingFilter(*_binding_key(binding))


def principal_filter(principal: str) -> AclBindingFilter:
    """A filter matching every rule of ``principal``, whatever its resource."""
    # None matches any name and host (documented); the library's annotations say ``str``.
    anything: Any = None
    return AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        principal,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def _principal_rules(admin: AdminClient, principal: str, timeout_s: float) -> list[AclBinding]:
    """Every rule the cluster holds for ``principal``."""
    found: list[AclBinding] = admin.describe_acls(
        principal_filter(principal), request_timeout=timeout_s
    ).result()
    return found
