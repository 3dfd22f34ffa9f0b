"""The composition root of the services: each one's :class:`~sagacity.ports.Dependencies`,
built here from its settings and handed to it by the CLI (``sagacity serve …``).

With :mod:`sagacity._env` (the journal's ``SAGACITY_*`` variables, the key service), this is
the layer that imports the Kafka and the Postgres adapters together; a service imports neither
this module nor ``sagacity._env`` (tests/architecture/test_layers.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from sagacity._env import (
    client_settings,
    kafka_journal,
    kafka_settings_from_env,
    read_index,
    starting_keys,
)
from sagacity.config._read_index import ReadIndexSettings
from sagacity.errors import ConfigurationError
from sagacity.journal import Journal
from sagacity.ports import (
    ClaimStore,
    ConsoleSessionTable,
    Dependencies,
    NoticeClaims,
    RequestStore,
    SagaIndex,
    SlackTables,
    TopicJournal,
)
from sagacity.privacy._keys import KeyService
from sagacity.producer import (
    KAFKA_PARTITIONER,
    KafkaConsumers,
    KafkaJournal,
    KafkaJournalSettings,
    KafkaTopicPasses,
)
from sagacity.schemas import JOURNAL_WIRE, decode_entry
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._operator_signature import OperatorVerifier
from sagacity.signing._writer_signature import WriterKey, WriterRegistry

__all__ = [
    "Dependencies",
    "approvals",
    "approvals_of",
    "approvals_on",
    "archive",
    "client_settings",
    "compensation",
    "compensation_of",
    "erasure",
    "starting_keys",
]


class CompensationWhere(Protocol):
    """What :func:`compensation_of` reads of the compensation service's settings."""

    @property
    def bootstrap_servers(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def journal_name(self) -> str | None: ...
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


def _requests(
    database_url: str,
    topic: str,
    *,
    verifier: DecisionVerifier | None,
    journal: str | None,
    operator: OperatorVerifier | None = None,
) -> RequestStore:
    from sagacity.postgres import PostgresRequestStore  # the driver, only here

    return PostgresRequestStore(
        database_url, topic=topic, verifier=verifier, journal=journal, operator=operator
    )


def _console_sessions(database_url: str) -> ConsoleSessionTable:
    from sagacity.postgres import PostgresConsoleSessions  # the driver, only here

    return PostgresConsoleSessions(database_url)


def _notice_claims(database_url: str) -> NoticeClaims:
    from sagacity.postgres import PostgresNoticeClaims  # the driver, only here

    return PostgresNoticeClaims(database_url)


def _slack_tables(database_url: str) -> SlackTables:
    from sagacity.postgres import PostgresSlackTables  # the driver, only here

    return PostgresSlackTables(database_url)


def _index(settings: ReadIndexSettings) -> SagaIndex | None:
    return read_index(settings)


@dataclass(frozen=True, kw_only=True)
class _WorkerJournals:
    """New Kafka journals on one topic, each with its own reader (a worker thread's):
    :class:`~sagacity.ports.TopicJournals`."""

    bootstrap_servers: str
    topic: str
    client: Mapping[str, str]
    keys: KeyService | None
    index: Callable[[], SagaIndex | None]
    journal_name: str | None

    def __call__(
        self,
        *,
        writer_id: str | None = None,
        writer_key: WriterKey | None = None,
        writers: WriterRegistry | None = None,
    ) -> TopicJournal:
        return KafkaJournal(
            self.bootstrap_servers,
            topic=self.topic,
            client=dict(self.client),
            writer_id=writer_id,
            index=self.index(),
            writer_key=writer_key,
            keys=self.keys,
            journal_name=self.journal_name,
            writers=writers,
        )


@dataclass(frozen=True, kw_only=True)
class _SettingsJournals:
    """New Kafka journals as ``SAGACITY_*`` configure them (their writer key and registry
    included): :class:`~sagacity.ports.TopicJournals`."""

    settings: KafkaJournalSettings
    keys: KeyService | None

    def __call__(
        self,
        *,
        writer_id: str | None = None,
        writer_key: WriterKey | None = None,
        writers: WriterRegistry | None = None,
    ) -> TopicJournal:
        if writer_key is not None or writers is not None:
            raise ConfigurationError(
                "this journal signs and reads as SAGACITY_WRITER_KEY and "
                "SAGACITY_WRITER_REGISTRY say; it takes no other key or registry"
            )
        return kafka_journal(self.settings, writer_id=writer_id, keys=self.keys)


def archive(*, keys: KeyService | None = None) -> Dependencies:
    """The archive service's dependencies: the consumer runtime on Kafka, the journal's wire
    format, its partitioner, the passes over the topic of the archive's own readers (the
    placement check's partition count, catch-up, replay), the decoder of the topic's messages
    (opening with ``keys``), the key service that opens sealed events and the archiver's store
    (the Postgres archive at the database URL of its settings)."""
    from sagacity.postgres.archive import PostgresArchiveIngest  # the driver, only here

    return Dependencies(
        keys=keys,
        consumers=KafkaConsumers(),
        wire=JOURNAL_WIRE,
        partitioner=KAFKA_PARTITIONER,
        topic_passes=KafkaTopicPasses(),
        decode=decode_entry if keys is None else partial(decode_entry, keys=keys),
        archive_store=PostgresArchiveIngest,
    )


def compensation(
    *,
    bootstrap_servers: str,
    topic: str,
    database_url: str,
    read_index: ReadIndexSettings | None = None,
    keys: KeyService | None = None,
    client: Mapping[str, str] | None = None,
    journal_name: str | None = None,
) -> Dependencies:
    """The compensation service's dependencies: its claims in ``database_url``, its worker
    journals on ``topic`` (Kafka at ``bootstrap_servers``, ``client`` its librdkafka
    settings, ``journal_name`` their name) and their read index (``read_index``, else the
    archive in ``database_url``; none when ``keys`` seal the data: the archive keeps no
    sealed openings yet, so reads scan the topic), the decoder of the topic's messages, the
    consumer runtime on Kafka, and ``keys``, which the service is handed."""
    index = read_index or ReadIndexSettings(database_url=database_url)
    if index.database_url is None:
        index = index.model_copy(update={"database_url": database_url})
    indexes = partial(_index, index) if keys is None else Dependencies().read_index
    return Dependencies(
        claims=partial(_claims, database_url),
        keys=keys,
        read_index=indexes,
        client=dict(client or {}),
        journals=_WorkerJournals(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            client=dict(client or {}),
            keys=keys,
            index=indexes,
            journal_name=journal_name,
        ),
        decode=decode_entry,
        consumers=KafkaConsumers(),
    )


def compensation_of(settings: CompensationWhere, *, keys: KeyService | None) -> Dependencies:
    """:func:`compensation` for the service's settings."""
    return compensation(
        bootstrap_servers=settings.bootstrap_servers,
        topic=settings.topic,
        database_url=settings.database_url,
        read_index=settings.read_index,
        keys=keys,
        client=settings.client,
        journal_name=settings.journal_name,
    )


def erasure(
    settings: KafkaJournalSettings,
    *,
    database_url: str,
    archive_database_url: str,
    keys: KeyService | None,
) -> Dependencies:
    """What ``sagacity erase`` composes: the journal ``settings`` configure (opening sealed
    sagas with ``keys``), the key store and the services' tables in ``database_url``, and the
    archive in ``archive_database_url`` (its schema in the connection's search path).  The
    caller closes the journal it makes, the key store and ``keys``."""
    from sagacity.postgres import (  # the driver, only here
        ArchiveEraser,
        PostgresKeyStore,
        PostgresServiceTables,
    )

    return Dependencies(
        keys=keys,
        journals=_SettingsJournals(settings=settings, keys=keys),
        key_store=PostgresKeyStore(database_url),
        service_tables=PostgresServiceTables(database_url),
        archive=ArchiveEraser(archive_database_url),
    )


_APPROVALS = "APPROVALS"


def approvals(*, bootstrap_servers: str | None, topic: str, database_url: str) -> Dependencies:
    """The approvals service's dependencies: the Kafka journal its settings name, opening
    sealed sagas with the key service ``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` configures, and
    the librdkafka settings and the Kafka consumer runtime of its request consumer.

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
    return Dependencies(
        journal=journal,
        keys=keys,
        client=client_settings(),
        requests=partial(_requests, database_url, topic),
        console_sessions=_console_sessions(database_url),
        notice_claims=_notice_claims(database_url),
        slack_tables=_slack_tables(database_url),
        decode=decode_entry,
        consumers=KafkaConsumers(),
    )


def approvals_of(settings: ApprovalsWhere) -> Dependencies:
    """:func:`approvals` for the service's settings."""
    return approvals(
        bootstrap_servers=settings.bootstrap_servers,
        topic=settings.topic,
        database_url=settings.database_url,
    )


def approvals_on(journal: Journal, settings: ApprovalsWhere) -> Dependencies:
    """The approvals service's dependencies on a journal its caller made (an in-memory one in
    a test, or a journal with its own key service): the request store in the settings'
    database, the Kafka consumer runtime; the server closes the journal, never its key
    service (none is handed)."""
    return Dependencies(
        journal=journal,
        requests=partial(_requests, settings.database_url, settings.topic),
        console_sessions=_console_sessions(settings.database_url),
        notice_claims=_notice_claims(settings.database_url),
        slack_tables=_slack_tables(settings.database_url),
        decode=decode_entry,
        consumers=KafkaConsumers(),
    )
