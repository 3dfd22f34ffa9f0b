"""The composition root of the services: each one's :class:`~sagacity.ports.Dependencies`,
built here from its settings and handed to it by the CLI (``sagacity serve …``).

With :mod:`sagacity._env` (the journal's ``SAGACITY_*`` variables, the key service), this is
the layer that imports the Kafka and the Postgres adapters together; a service imports neither
this module nor ``sagacity._env`` (tests/architecture/test_layers.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Protocol

from sagacity._env import (
    client_settings,
    kafka_journal,
    kafka_settings_from_env,
    read_index,
    starting_keys,
)
from sagacity.errors import ConfigurationError
from sagacity.ports import ClaimStore, Dependencies, SagaIndex
from sagacity.privacy._keys import KeyService
from sagacity.producer import ReadIndexSettings

__all__ = [
    "Dependencies",
    "approvals",
    "approvals_of",
    "archive",
    "client_settings",
    "compensation",
    "compensation_of",
    "starting_keys",
]


class CompensationWhere(Protocol):
    """What :func:`compensation_of` reads of the compensation service's settings."""

    @property
    def database_url(self) -> str: ...
    @property
    def read_index(self) -> ReadIndexSettings | None: ...
    @property
    def client(self) -> Mapping[str, str]: ...


class ApprovalsWhere(Protocol):
    """What :func:`approvals_of` reads of the approvals service's settings."""

    @property
    def bootstrap_servers(self) -> str | None: ...
    @property
    def topic(self) -> str: ...
    @property
    def database_url(self) -> str: ...


def _claims(database_url: str, *, instance: str, journal: str) -> ClaimStore:
    from sagacity.postgres import PostgresClaimStore  # the driver, only here

    return PostgresClaimStore(database_url, instance=instance, journal=journal)


def _index(settings: ReadIndexSettings) -> SagaIndex | None:
    return read_index(settings)


def archive(*, keys: KeyService | None = None) -> Dependencies:
    """The archive service's dependencies: the key service that opens sealed events (the
    archive's own tables are its work, reached through its settings)."""
    return Dependencies(keys=keys)


def compensation(
    *,
    database_url: str,
    read_index: ReadIndexSettings | None = None,
    keys: KeyService | None = None,
    client: Mapping[str, str] | None = None,
) -> Dependencies:
    """The compensation service's dependencies: its claims in ``database_url``, its journals'
    read index (``read_index``, else the archive in ``database_url``; none when ``keys`` seal
    the data: the archive keeps no sealed openings yet, so reads scan the topic), and
    ``keys``, which the service is handed."""
    index = read_index or ReadIndexSettings(database_url=database_url)
    if index.database_url is None:
        index = index.model_copy(update={"database_url": database_url})
    return Dependencies(
        claims=partial(_claims, database_url),
        keys=keys,
        read_index=partial(_index, index) if keys is None else Dependencies().read_index,
        client=dict(client or {}),
    )


def compensation_of(settings: CompensationWhere, *, keys: KeyService | None) -> Dependencies:
    """:func:`compensation` for the service's settings."""
    return compensation(
        database_url=settings.database_url,
        read_index=settings.read_index,
        keys=keys,
        client=settings.client,
    )


_APPROVALS = "APPROVALS"


def approvals(*, bootstrap_servers: str | None, topic: str, database_url: str) -> Dependencies:
    """The approvals service's dependencies: the Kafka journal its settings name, opening
    sealed sagas with the key service ``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` configures, and
    the librdkafka settings of its request consumer.

    The journal's settings are read as every service's are (:func:`sagacity._env.
    kafka_settings_from_env` with the ``APPROVALS`` prefix): librdkafka settings from
    ``SAGACITY_KAFKA_*`` (TLS, SASL), ``SAGACITY_APPROVALS_X`` then ``SAGACITY_X`` for the
    others (writer id and key, timeouts, lease, read index); the bootstrap servers, topic and
    database given (options included) win over the variables.  Reads take sagas' archived
    prefixes from the archive when it shares the service's database (or
    ``SAGACITY_ARCHIVE_DATABASE_URL`` names it): docs/adr/0010-saga-read-index.md.

    Raises:
        ConfigurationError: no bootstrap servers, a variable is invalid, or no key-encryption
            key and clear data not allowed (``SAGACITY_ALLOW_CLEAR_DATA``).
        KeyEncryptionKeyError: the key-encryption key file is missing or malformed (the
            message names the setting).
    """
    if not bootstrap_servers:
        raise ConfigurationError(
            "the approvals service reads the journal topic: set SAGACITY_BOOTSTRAP_SERVERS"
        )
    given = {"BOOTSTRAP_SERVERS": bootstrap_servers, "TOPIC": topic, "DATABASE_URL": database_url}
    environ = {**os.environ, **{f"SAGACITY_{_APPROVALS}_{k}": v for k, v in given.items()}}
    journal_settings = kafka_settings_from_env(environ, service=_APPROVALS)
    # Sealed sagas are opened through the key service (docs/adr/0019-erasure.md §3); its keys
    # live in SAGACITY_DATABASE_URL, else the service's own database.
    if not environ.get("SAGACITY_DATABASE_URL") and database_url:
        environ["SAGACITY_DATABASE_URL"] = database_url
    with starting_keys(environ) as keys:
        journal = kafka_journal(journal_settings, keys=keys)
    return Dependencies(journal=journal, keys=keys, client=client_settings())


def approvals_of(settings: ApprovalsWhere) -> Dependencies:
    """:func:`approvals` for the service's settings."""
    return approvals(
        bootstrap_servers=settings.bootstrap_servers,
        topic=settings.topic,
        database_url=settings.database_url,
    )
