"""Kafka's refusals of a principal, as one clear error: the one place they are recognised.

A secured cluster (SASL, ACLs, ``allow.everyone.if.no.acl.found=false``) answers a principal
that lacks an ACL with an authorization error code; librdkafka reports it in several places (a
metadata or config request, a delivery report, a fatal producer error when the idempotent
producer is refused ``IdempotentWrite``, a consumer's error message).  Each of those paths asks
:func:`access_denied`, which turns such an error into :class:`KafkaAccessDeniedError` naming the
principal, the broker and what was refused, so the command or service stops with one line
instead of retrying, or waiting out a timeout, on something only an operator can change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from sagacity.errors import KafkaAccessDeniedError

_REFUSED: Mapping[int, str] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "the topic (its Read, Write, Describe or "
    "DescribeConfigs ACL)",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "the consumer group (its Read ACL)",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "the cluster (an idempotent producer needs "
    "IdempotentWrite on it)",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "the transactional id",
}
_UNAUTHENTICATED = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})

ACL_PAGE = "docs/operations/kafka-security.md"
"""Where the ACLs each role needs are listed."""


def kafka_error(error: object) -> KafkaError | None:
    """The :class:`KafkaError` ``error`` is or carries (a ``KafkaException``'s first arg)."""
    if isinstance(error, KafkaError):
        return error
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0]
    return None


def is_denial(error: object) -> bool:
    """Whether ``error`` is Kafka refusing the principal (authentication or authorization)."""
    found = kafka_error(error)
    return found is not None and (found.code() in _REFUSED or found.code() in _UNAUTHENTICATED)


def access_denied(
    error: object, config: Mapping[str, Any], *, doing: str
) -> KafkaAccessDeniedError | None:
    """``error`` as :class:`KafkaAccessDeniedError` when it is a refusal, else ``None``.

    Args:
        error: a ``KafkaError`` or ``KafkaException`` (anything else is no refusal).
        config: the client's librdkafka settings (``sasl.username``, ``bootstrap.servers``).
        doing: what was refused, for the message (``"writing topic 'sagacity.journal'"``).
    """
    found = kafka_error(error)
    if found is None:
        return None
    code = found.code()
    principal = config.get("sasl.username")
    who = f"principal {principal!r}" if principal else "this client (no SASL user)"
    servers = config.get("bootstrap.servers", "?")
    detail = f"{found.name()}: {found.str()}"
    if code in _UNAUTHENTICATED:
        return KafkaAccessDeniedError(
            f"Kafka at {servers} did not accept the credentials of {who} ({detail}): check "
            "SAGACITY_KAFKA_SASL_USERNAME / _PASSWORD / _MECHANISM",
            principal=principal,
            code=found.name(),
        )
    what = _REFUSED.get(code)
    if what is None:
        return None
    return KafkaAccessDeniedError(
        f"Kafka at {servers} refused {who} {doing}: not authorized for {what} ({detail}); "
        f"grant the role's ACLs ({ACL_PAGE})",
        principal=principal,
        code=found.name(),
    )
