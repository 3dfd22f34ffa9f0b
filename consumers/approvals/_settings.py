"""Typed settings of the approvals service, from ``SAGACITY_*`` environment variables.

Every setting ``X`` is read from ``SAGACITY_APPROVALS_X`` first, then ``SAGACITY_X`` (so the
shared ``SAGACITY_DATABASE_URL`` / ``SAGACITY_BOOTSTRAP_SERVERS`` / ``SAGACITY_TOPIC`` work and
the service can override them), through pydantic-settings.  Command-line options override both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from sagacity.config._defaults import DEFAULT_APPROVALS_GROUP, DEFAULT_TOPIC
from sagacity.config._settings import SagacitySettings
from sagacity.consumers.approvals._api_limits import DEFAULT_MAX_BODY

DEFAULT_PORT = 8085
DEFAULT_TTL_S = 86400.0


class ApprovalsSettings(SagacitySettings):
    """How one replica of the approvals service runs.

    Each setting ``x`` is read from ``SAGACITY_APPROVALS_X``, then ``SAGACITY_X``
    (``from_env`` or the constructor; keywords win).

    Attributes:
        database_url: PostgreSQL for the working table (``DATABASE_URL``).
        bootstrap_servers / topic / group_id: the journal topic and the consumer group
            (``GROUP``, or ``GROUP_ID`` as earlier releases spelt it).
        host / port: where the HTTP API listens.
        auth_file: the principals file (TOML or JSON); required unless ``insecure_dev``.
        insecure_dev: take approver names from request bodies (demo only; an option only).
        policy_version: recorded on every decision.
        approval_ttl_s: requests lapse this long after they were journaled (or earlier, at
            their own ``expires_at_us``); ``None`` (or ``0``) disables the service's bound.
        sweep_interval_s: how often overdue requests are journaled ``EXPIRED``.
        max_body_bytes: the largest request body accepted.
        stats_window_s: the window of ``/metrics``.
        lock_timeout_s: how long a decision waits for another on the same request.
        tools: ``package.module:attr`` specs of the tools resume may run.
        signing_key: the Ed25519 private key file decisions are signed with
            (``SIGNING_KEY``; ``sagacity approvals keygen``); required on Kafka.
        public_key: further pinned approvals public keys resume accepts (``PUBLIC_KEY``,
            i.e. ``SAGACITY_APPROVALS_PUBLIC_KEY``), e.g. the previous key during a rotation;
            the signing key's own public key is always pinned.
        console_session_ttl_s: how long a console sign-in lasts.
        public_url: the service's address as people reach it (links in notifications;
            default ``http://HOST:PORT``).
        notify: webhook URLs told of new requests, requests about to expire and sagas that
            need a person (``NOTIFY``, space separated).
        notify_format: ``json`` or ``slack`` (an incoming-webhook body).
        notify_before_expiry_s: how long before a request's deadline its warning is sent.
        notify_interval_s: how often the notifier looks for something to tell.
        archive_database_url: the archive, for the console's verdict and audit bundle
            (``SAGACITY_ARCHIVE_DATABASE_URL``).
        slack_signing_secret_file / slack_bot_token_file: the Slack app's signing secret and
            bot token, each in a file (docs/operations/slack.md); both or neither.
        slack_channel: the channel new requests are posted to.
        slack_api_url: Slack's Web API base URL (tests point it at a loopback server).
    """

    env_service: ClassVar[str] = "APPROVALS"
    env_names: ClassVar[Mapping[str, tuple[str, ...]]] = {"group_id": ("GROUP",)}
    env_excluded: ClassVar[frozenset[str]] = frozenset({"insecure_dev"})

    database_url: str = ""
    bootstrap_servers: str | None = None
    topic: str = DEFAULT_TOPIC
    group_id: str = DEFAULT_APPROVALS_GROUP
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    auth_file: str | None = None
    insecure_dev: bool = False
    policy_version: str = "1"
    approval_ttl_s: float | None = DEFAULT_TTL_S
    sweep_interval_s: float = Field(default=5.0, gt=0)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY, gt=0)
    stats_window_s: float = Field(default=86400.0, gt=0)
    lock_timeout_s: float = Field(default=30.0, gt=0)
    tools: tuple[str, ...] = ()
    signing_key: str | None = None
    public_key: str | None = None
    console_session_ttl_s: float = Field(default=8 * 3600.0, gt=0)
    public_url: str | None = None
    notify: tuple[str, ...] = ()
    notify_format: str = "json"
    notify_before_expiry_s: float = Field(default=900.0, ge=0)
    notify_interval_s: float = Field(default=2.0, gt=0)
    archive_database_url: str | None = None
    slack_signing_secret_file: str | None = None
    slack_bot_token_file: str | None = None
    slack_channel: str | None = None
    slack_api_url: str = "https://slack.com/api/"

    @field_validator("notify_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in ("json", "slack"):
            raise ValueError(f"--notify-format must be json or slack, got {value!r}")
        return value

    @field_validator("approval_ttl_s")
    @classmethod
    def _no_bound_at_zero(cls, value: float | None) -> float | None:
        return None if value is not None and value <= 0 else value

    @model_validator(mode="after")
    def _needs_database_and_authentication(self) -> ApprovalsSettings:
        if not self.database_url:
            raise ValueError(
                "the approvals service needs PostgreSQL: set SAGACITY_DATABASE_URL "
                "(or SAGACITY_APPROVALS_DATABASE_URL, or --database-url)"
            )
        if not self.insecure_dev and self.auth_file is None:
            raise ValueError(
                "the approvals service authenticates approvers: pass --auth FILE (or set "
                "SAGACITY_APPROVALS_AUTH_FILE); --insecure-dev is for the demo only"
            )
        return self
