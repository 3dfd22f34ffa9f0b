"""Typed settings of the approvals service, from ``SAGACITY_*`` environment variables.

Every setting ``X`` is read from ``SAGACITY_APPROVALS_X`` first, then ``SAGACITY_X`` (so the
shared ``SAGACITY_DATABASE_URL`` / ``SAGACITY_BOOTSTRAP_SERVERS`` / ``SAGACITY_TOPIC`` work and
the service can override them).  Command-line options override both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sagacity.consumers.approvals._api import DEFAULT_MAX_BODY
from sagacity.consumers.approvals._consumer import DEFAULT_GROUP
from sagacity.errors import ConfigurationError

DEFAULT_PORT = 8085
DEFAULT_TTL_S = 86400.0


@dataclass(frozen=True, kw_only=True)
class ApprovalsSettings:
    """How one replica of the approvals service runs.

    Attributes:
        database_url: PostgreSQL for the working table (``DATABASE_URL``).
        bootstrap_servers / topic / group_id: the journal topic and the consumer group.
        host / port: where the HTTP API listens.
        auth_file: the principals file (TOML or JSON); required unless ``insecure_dev``.
        insecure_dev: take approver names from request bodies (demo only).
        policy_version: recorded on every decision.
        approval_ttl_s: requests lapse this long after they were journaled (or earlier, at
            their own ``expires_at_us``); ``None`` disables the service's bound.
        sweep_interval_s: how often overdue requests are journaled ``EXPIRED``.
        max_body_bytes: the largest request body accepted.
        stats_window_s: the window of ``/metrics``.
        lock_timeout_s: how long a decision waits for another on the same request.
        tools: ``package.module:attr`` specs of the tools resume may run.
        console_session_ttl_s: how long a console sign-in lasts.
        public_url: the service's address as people reach it (links in notifications;
            default ``http://HOST:PORT``).
        notify: webhook URLs told of new requests, requests about to expire and sagas that
            need a person.
        notify_format: ``json`` or ``slack`` (an incoming-webhook body).
        notify_before_expiry_s: how long before a request's deadline its warning is sent.
        notify_interval_s: how often the notifier looks for something to tell.
        archive_database_url: the archive, for the console's verdict and audit bundle.
    """

    database_url: str
    bootstrap_servers: str | None = None
    topic: str = "sagacity.journal"
    group_id: str = DEFAULT_GROUP
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    auth_file: str | None = None
    insecure_dev: bool = False
    policy_version: str = "1"
    approval_ttl_s: float | None = DEFAULT_TTL_S
    sweep_interval_s: float = 5.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    stats_window_s: float = 86400.0
    lock_timeout_s: float = 30.0
    tools: tuple[str, ...] = field(default_factory=tuple)
    console_session_ttl_s: float = 8 * 3600.0
    public_url: str | None = None
    notify: tuple[str, ...] = field(default_factory=tuple)
    notify_format: str = "json"
    notify_before_expiry_s: float = 900.0
    notify_interval_s: float = 2.0
    archive_database_url: str | None = None

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> ApprovalsSettings:
        """Settings from ``environ`` (default ``os.environ``), then ``overrides`` (not None).

        Raises:
            ConfigurationError: a value is missing or does not parse.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            return env.get(f"SAGACITY_APPROVALS_{name}") or env.get(f"SAGACITY_{name}") or None

        def number(name: str, kind: type[float] | type[int]) -> float | int | None:
            raw = get(name)
            if raw is None:
                return None
            try:
                return kind(raw)
            except ValueError as exc:
                raise ConfigurationError(
                    f"SAGACITY_APPROVALS_{name}={raw!r} is not a number"
                ) from exc

        values: dict[str, Any] = {
            "database_url": get("DATABASE_URL"),
            "bootstrap_servers": get("BOOTSTRAP_SERVERS"),
            "topic": get("TOPIC"),
            "group_id": get("GROUP_ID"),
            "host": get("HOST"),
            "port": number("PORT", int),
            "auth_file": get("AUTH_FILE"),
            "policy_version": get("POLICY_VERSION"),
            "approval_ttl_s": number("APPROVAL_TTL_S", float),
            "sweep_interval_s": number("SWEEP_INTERVAL_S", float),
            "max_body_bytes": number("MAX_BODY_BYTES", int),
            "stats_window_s": number("STATS_WINDOW_S", float),
            "console_session_ttl_s": number("CONSOLE_SESSION_TTL_S", float),
            "public_url": get("PUBLIC_URL"),
            "notify": tuple(u for u in (get("NOTIFY") or "").split() if u) or None,
            "notify_format": get("NOTIFY_FORMAT"),
            "notify_before_expiry_s": number("NOTIFY_BEFORE_EXPIRY_S", float),
            "archive_database_url": env.get("SAGACITY_ARCHIVE_DATABASE_URL") or None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        present = {k: v for k, v in values.items() if v is not None}
        if "database_url" not in present:
            raise ConfigurationError(
                "the approvals service needs PostgreSQL: set SAGACITY_DATABASE_URL "
                "(or SAGACITY_APPROVALS_DATABASE_URL, or --database-url)"
            )
        settings = cls(**present)
        if settings.approval_ttl_s is not None and settings.approval_ttl_s <= 0:
            settings = replace(settings, approval_ttl_s=None)
        if settings.notify_format not in ("json", "slack"):
            raise ConfigurationError(
                f"--notify-format must be json or slack, got {settings.notify_format!r}"
            )
        if not settings.insecure_dev and settings.auth_file is None:
            raise ConfigurationError(
                "the approvals service authenticates approvers: pass --auth FILE (or set "
                "SAGACITY_APPROVALS_AUTH_FILE); --insecure-dev is for the demo only"
            )
        return settings
