"""The ACLs of docs/production-checklist.md, as data: the secured dev stack makes exactly these.

One row per grant: principal, resource type, resource name (``{T}`` is the journal topic),
whether the name is a prefix, and the operations.  :func:`acl_commands` renders them as the
``kafka-acls.sh`` lines the checklist shows (a test keeps the two equal);
:func:`apply_acls` makes them on a broker as the super user.

The reader and the lease check use random ``sagacity-reader-*`` / ``sagacity-lease-*`` groups
that never commit, hence the prefixed group grants.  Nobody but the services' principals has
Write on ``{T}.dlq`` or Read on the services' groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sagacity.config._defaults import (
    DEFAULT_APPROVALS_GROUP,
    DEFAULT_ARCHIVE_GROUP,
    DEFAULT_COMPENSATION_GROUP,
)
from sagacity.errors import DevStackError


@dataclass(frozen=True, kw_only=True)
class Grant:
    """One ACL row: ``principal`` may do ``operations`` on a resource.

    Attributes:
        principal: the SASL user (``User:<principal>``).
        resource: ``topic``, ``group`` or ``cluster``.
        name: the resource's name (``{T}``: the journal topic); ``kafka-cluster`` for the cluster.
        prefixed: ``name`` is a prefix (``--resource-pattern-type prefixed``).
        operations: Kafka operation names (``Read``, ``Write``, ``Describe``,
            ``DescribeConfigs``, ``IdempotentWrite``).
    """

    principal: str
    resource: str
    name: str
    operations: tuple[str, ...]
    prefixed: bool = False


# Every journal client reads the topic's settings at start (it refuses a compacted topic).
# Every journal client reads the topic's settings at start (it refuses a compacted topic).
_RW = ("Read", "Write", "Describe", "DescribeConfigs")
_RO = ("Read", "Describe", "DescribeConfigs")
_IDEMPOTENT = ("IdempotentWrite",)
_READ = ("Read",)
_CLUSTER = "kafka-cluster"
_READERS = "sagacity-reader-"


def _grant(
    principal: str, resource: str, name: str, ops: tuple[str, ...], *, prefix: bool = False
) -> Grant:
    return Grant(principal=principal, resource=resource, name=name, operations=ops, prefixed=prefix)


GRANTS: tuple[Grant, ...] = (
    _grant("agents", "topic", "{T}", _RW),
    _grant("agents", "cluster", _CLUSTER, _IDEMPOTENT),
    _grant("agents", "group", _READERS, _READ, prefix=True),
    _grant("agents", "group", "sagacity-lease-", _READ, prefix=True),
    _grant("approvals", "topic", "{T}", _RW),
    _grant("approvals", "cluster", _CLUSTER, _IDEMPOTENT),
    _grant("approvals", "group", DEFAULT_APPROVALS_GROUP, _READ),
    _grant("approvals", "group", _READERS, _READ, prefix=True),
    _grant("compensation", "topic", "{T}", _RW),
    _grant("compensation", "topic", "{T}.dlq", ("Write", "Describe")),
    _grant("compensation", "cluster", _CLUSTER, _IDEMPOTENT),
    _grant("compensation", "group", DEFAULT_COMPENSATION_GROUP, _READ),
    _grant("compensation", "group", _READERS, _READ, prefix=True),
    _grant("archive", "topic", "{T}", _RO),
    _grant("archive", "group", DEFAULT_ARCHIVE_GROUP, _READ),
    _grant("auditors", "topic", "{T}", _RO),
    _grant("auditors", "group", _READERS, _READ, prefix=True),
)
"""Every grant of the checklist, in its order."""

_COMMENTS = {
    "agents": "agents: read and write the journal, idempotent producer, throwaway reader groups",
    "approvals": "approvals service: the only principal that decides; its own group",
    "compensation": "compensation service: the journal, its group and its dead-letter topic",
    "archive": "archive: read only, its own group",
    "auditors": "auditors (replay): read only",
}


def _operations_flags(grant: Grant) -> str:
    return " ".join(f"--operation {op}" for op in grant.operations)


def acl_commands(grants: Sequence[Grant] = GRANTS) -> list[str]:
    """The grants as the checklist's ``$ACL …`` lines (``$T`` the journal topic), with a
    comment before each principal's."""
    lines: list[str] = []
    seen: set[str] = set()
    for grant in grants:
        if grant.principal not in seen:
            seen.add(grant.principal)
            lines.append(f"# {_COMMENTS[grant.principal]}")
        if grant.resource == "cluster":
            target = "--cluster"
        else:
            target = f"--{grant.resource} {grant.name.replace('{T}', '$T')}"
        if grant.prefixed:
            target += " --resource-pattern-type prefixed"
        lines.append(
            f"$ACL --allow-principal User:{grant.principal} {_operations_flags(grant)} {target}"
        )
    return lines


def acl_bindings(topic: str, grants: Sequence[Grant] = GRANTS) -> list[Any]:
    """The grants as confluent-kafka ``AclBinding`` objects for ``topic``."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    kinds = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP}
    bindings = []
    for grant in grants:
        kind = kinds.get(grant.resource, ResourceType.BROKER)
        name = grant.name.replace("{T}", topic)
        pattern = ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL
        for operation in grant.operations:
            bindings.append(
                AclBinding(
                    kind,
                    name,
                    pattern,
                    f"User:{grant.principal}",
                    "*",
                    getattr(AclOperation, _OPERATION_NAMES[operation]),
                    AclPermissionType.ALLOW,
                )
            )
    return bindings


_OPERATION_NAMES = {
    "Read": "READ",
    "Write": "WRITE",
    "Describe": "DESCRIBE",
    "IdempotentWrite": "IDEMPOTENT_WRITE",
    "DescribeConfigs": "DESCRIBE_CONFIGS",
}


def apply_acls(admin_config: Mapping[str, Any], topic: str, *, timeout: float = 30.0) -> int:
    """Create the grants for ``topic`` on the brokers of ``admin_config`` (a super user's
    settings); creating one that exists is a no-op.  Returns how many bindings were sent.

    Raises:
        DevStackError: the brokers refused one.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from sagacity.producer import with_logger

    admin = AdminClient(with_logger(dict(admin_config)))
    bindings = acl_bindings(topic)
    for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            raise DevStackError(f"the broker refused ACL {binding}: {exc}") from exc
    return len(bindings)
