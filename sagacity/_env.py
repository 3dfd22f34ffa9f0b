"""The composition root: the Kafka journal and its Postgres read index from ``SAGACITY_*``.

The one module that imports both the Kafka adapter (:mod:`sagacity.producer`) and a Postgres
one (the read index); ``Sagacity.from_env()``, the services and the CLI assemble journals here.
The layer test (tests/architecture/test_layers.py) names it as the one exception to the
inward rule.

Variables are read here and nowhere else, through pydantic-settings: each setting ``x`` from
``SAGACITY_<SERVICE>_X`` first (``service="APPROVALS"``), then ``SAGACITY_X``; an empty
variable is unset.  The settings objects of the adapters (:class:`KafkaJournalSettings`,
:class:`ReadIndexSettings`) read no variable, so a journal built in code is configured by its
code alone.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from sagacity.config._defaults import (
    ALLOW_CLEAR_DATA_SETTING,
    DEFAULT_APPROVALS_GROUP,
    DEFAULT_ARCHIVE_GROUP,
    DEFAULT_COMPENSATION_GROUP,
    DEFAULT_TOPIC,
)
from sagacity.config._settings import SagacitySettings
from sagacity.errors import ConfigurationError
from sagacity.ports import ClaimStore
from sagacity.privacy._envelope import KEK_SETTING, KeyRing
from sagacity.privacy._keys import KEY_CACHE_TTL_SETTING, KeyService, key_cache_ttl
from sagacity.producer import (
    KafkaJournal,
    KafkaJournalSettings,
    ReadIndexSettings,
    SagaIndex,
    cluster_id,
)
from sagacity.producer import journal_identity as kafka_journal_identity

__all__ = [
    "DEFAULT_APPROVALS_GROUP",
    "DEFAULT_ARCHIVE_GROUP",
    "DEFAULT_COMPENSATION_GROUP",
    "DEFAULT_TOPIC",
    "JournalEnvironment",
    "claim_store",
    "client_settings",
    "journal_from_env",
    "journal_identity",
    "kafka_journal",
    "kafka_settings_from_env",
    "key_service_from_env",
    "read_index",
    "read_index_settings_from_env",
    "refuse_clear_data",
    "starting_keys",
]

log = logging.getLogger("sagacity.journal")

_CLIENT_PREFIX = "SAGACITY_KAFKA_"
_OFF = frozenset({"0", "off", "false", "no"})
_KAFKA_FIELDS = (
    "bootstrap_servers",
    "topic",
    "ack_timeout_s",
    "startup_timeout_s",
    "read_timeout_s",
    "lease_ttl_s",
    "max_clock_skew_s",
    "writer_id",
    "writer_key",
    "journal_name",
    "writer_registry",
)


class JournalEnvironment(SagacitySettings):
    """The variables behind a Kafka journal and its read index, as given (text, unchecked).

    Read only by the ``from_env`` functions below; :class:`KafkaJournalSettings` and
    :class:`ReadIndexSettings` check the values, so a bad one is refused by the same rules
    as in code.  Each field ``x`` is ``SAGACITY_X`` (``SAGACITY_<SERVICE>_X`` first in a
    service's subclass): ``archive_database_url`` is ``SAGACITY_ARCHIVE_DATABASE_URL``,
    ``read_index`` is ``SAGACITY_READ_INDEX`` (``off`` turns the index off).
    """

    bootstrap_servers: str | None = None
    topic: str | None = None
    ack_timeout_s: str | None = None
    startup_timeout_s: str | None = None
    read_timeout_s: str | None = None
    lease_ttl_s: str | None = None
    max_clock_skew_s: str | None = None
    writer_id: str | None = None
    writer_key: str | None = None
    journal_name: str | None = None
    writer_registry: str | None = None
    database_url: str | None = None
    archive_database_url: str | None = None
    archive_schema: str | None = None
    archive_group: str | None = None
    read_index: str | None = None


@functools.cache
def _environment_class(service: str) -> type[JournalEnvironment]:
    if not service:
        return JournalEnvironment
    namespace: dict[str, object] = {"env_service": service, "__module__": __name__}
    return type(f"{service.title()}JournalEnvironment", (JournalEnvironment,), namespace)


def _read(environ: Mapping[str, str] | None, service: str) -> JournalEnvironment:
    if service and not (service.isascii() and service.replace("_", "").isalnum()):
        raise ConfigurationError(f"a service prefix is letters, digits and '_', not {service!r}")
    return _environment_class(service.upper()).from_env(os.environ if environ is None else environ)


def client_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka settings from ``SAGACITY_KAFKA_<KEY_WITH_UNDERSCORES>`` variables.

    ``SAGACITY_KAFKA_SECURITY_PROTOCOL=SSL`` gives ``{"security.protocol": "SSL"}``; the bare
    prefix names no setting and is ignored.
    """
    env = os.environ if environ is None else environ
    return {
        var.removeprefix(_CLIENT_PREFIX).lower().replace("_", "."): val
        for var, val in env.items()
        if var.startswith(_CLIENT_PREFIX) and var != _CLIENT_PREFIX
    }


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
        for err in exc.errors()
    )


def _read_index_settings(found: JournalEnvironment, database_url: str | None) -> ReadIndexSettings:
    values: dict[str, object] = {
        "database_url": found.archive_database_url or database_url or found.database_url,
        "archive_schema": found.archive_schema,
        "enabled": (found.read_index or "on").strip().lower() not in _OFF,
    }
    if found.archive_group is not None:
        values["archive_group"] = found.archive_group
    return ReadIndexSettings.model_validate(values)


def read_index_settings_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    service: str = "",
    database_url: str | None = None,
) -> ReadIndexSettings:
    """Where readers find archived prefixes, from ``environ`` (default ``os.environ``).

    The archive's database is ``SAGACITY_ARCHIVE_DATABASE_URL``, else ``database_url`` (a
    service's own database), else ``SAGACITY_DATABASE_URL``; with ``SAGACITY_ARCHIVE_SCHEMA``,
    ``SAGACITY_ARCHIVE_GROUP`` and ``SAGACITY_READ_INDEX``.

    Raises:
        ConfigurationError: a value is invalid; the message names it.
    """
    try:
        return _read_index_settings(_read(environ, service), database_url)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid read index settings: {_problems(exc)}") from exc


def kafka_settings_from_env(
    environ: Mapping[str, str] | None = None, *, service: str = ""
) -> KafkaJournalSettings:
    """The Kafka journal's settings from ``environ`` (default ``os.environ``).

    Each is ``SAGACITY_<SERVICE>_X`` (when ``service`` is given), then ``SAGACITY_X``:
    ``BOOTSTRAP_SERVERS`` (required), ``TOPIC``, ``ACK_TIMEOUT_S``, ``STARTUP_TIMEOUT_S``,
    ``READ_TIMEOUT_S``, ``LEASE_TTL_S``, ``MAX_CLOCK_SKEW_S``, ``WRITER_ID``, ``WRITER_KEY``;
    librdkafka settings from ``SAGACITY_KAFKA_<KEY>``; the read index as
    :func:`read_index_settings_from_env`.

    Raises:
        ConfigurationError: a variable is missing or invalid; the message names it.
    """
    env = os.environ if environ is None else environ
    found = _read(env, service)
    if not found.bootstrap_servers:
        own = f"SAGACITY_{service.upper()}_BOOTSTRAP_SERVERS or " if service else ""
        raise ConfigurationError(
            f"{own}SAGACITY_BOOTSTRAP_SERVERS is not set: give the Kafka bootstrap servers "
            "(host:port[,host:port…])"
        )
    values: dict[str, object] = {
        name: value for name in _KAFKA_FIELDS if (value := getattr(found, name)) is not None
    }
    values["client"] = client_settings(env)
    try:
        values["read_index"] = _read_index_settings(found, None)
        return KafkaJournalSettings.model_validate(values)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid Kafka journal settings: {_problems(exc)}") from exc


def read_index(settings: ReadIndexSettings) -> SagaIndex | None:
    """The read index ``settings`` name (``None`` when off or without a database).

    Raises:
        ConfigurationError: the archive's database driver is not installed.
    """
    if not settings.enabled or not settings.database_url:
        return None
    try:
        from sagacity.postgres import PostgresSagaIndex
    except ImportError as exc:
        raise ConfigurationError(
            f"the read index needs the archive's database driver: {exc} "
            "(or set SAGACITY_READ_INDEX=off)"
        ) from exc
    return PostgresSagaIndex(
        settings.database_url, schema=settings.archive_schema, consumer_group=settings.archive_group
    )


def journal_identity(*, topic: str, kafka: Mapping[str, Any], name: str | None = None) -> str:
    """The identity of the journal on ``topic`` of the Kafka cluster ``kafka`` reaches, as a
    :class:`KafkaJournal` there has it (``identity``): ``name`` (``SAGACITY_JOURNAL_NAME``),
    else ``kafka:<cluster id>/<topic>`` (:func:`sagacity.producer.journal_identity`).  The
    cluster id comes from the brokers the caller itself connects to, not from any event.

    Raises:
        JournalUnavailableError: no ``name``, and the cluster did not answer or reports no id.
    """
    if name:
        return name
    return kafka_journal_identity(cluster_id(kafka), topic)


def claim_store(database_url: str, *, instance: str, journal: str) -> ClaimStore:
    """The compensation claims in ``database_url`` of the journal named ``journal`` (its
    :func:`journal_identity`)."""
    from sagacity.postgres import PostgresClaimStore  # the driver, only here

    return PostgresClaimStore(database_url, instance=instance, journal=journal)


_announced = False

_YES = frozenset({"1", "true", "yes", "on"})


def clear_data_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``SAGACITY_ALLOW_CLEAR_DATA`` says, explicitly, to run without a key-encryption
    key (``1``, ``true``, ``yes``, ``on``; unset, empty, ``0``, ``false``, ``no``, ``off``: no).

    Raises:
        ConfigurationError: any other value (the message names the setting).
    """
    env = os.environ if environ is None else environ
    value = env.get(ALLOW_CLEAR_DATA_SETTING, "").strip().lower()
    if value in _YES:
        return True
    if not value or value in _OFF:
        return False
    raise ConfigurationError(
        f"{ALLOW_CLEAR_DATA_SETTING}={value!r}: give 1 to run without a key-encryption key, "
        "or unset it"
    )


def refuse_clear_data(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start a component with no key-encryption key, unless
    ``SAGACITY_ALLOW_CLEAR_DATA`` allows it: a saga journaled in clear can never be erased
    (its chain hashes the data itself; docs/adr/0019-erasure.md), so clear data is chosen,
    never defaulted into.

    Raises:
        ConfigurationError: no key and clear data not allowed (the message names both
            settings and the command that makes a key).
    """
    if clear_data_allowed(environ):
        return
    raise ConfigurationError(
        f"no key-encryption key: {KEK_SETTING} is not set, so the journal's data would be "
        "written and archived in clear and no saga could ever be erased; create one with "
        f"`sagacity keys init --out FILE` and set {KEK_SETTING}=FILE "
        f"(docs/operations/keys.md), or run in clear knowingly with {ALLOW_CLEAR_DATA_SETTING}=1"
    )


def announce_clear_data() -> None:
    """Say, once per process, that no key-encryption key is configured: the journal's data
    travels and is archived in clear (docs/adr/0019-erasure.md §3).  Called once a component
    has started, so a start-up that fails says only why it failed, in one line."""
    global _announced
    if _announced:
        return
    _announced = True
    log.warning(
        "journal data is not encrypted: %s is not set (payloads and results travel and are "
        "archived in clear; docs/adr/0019-erasure.md)",
        KEK_SETTING,
    )


def key_service_from_env(environ: Mapping[str, str] | None = None) -> KeyService | None:
    """The key service ``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` configures (its keys stored in
    ``SAGACITY_DATABASE_URL`` and cached for ``SAGACITY_KEY_CACHE_TTL_S``, default 60 s), its
    store checked (:meth:`KeyService.check`: keys wrapped under a KEK not held are warned of,
    never refused: they are other sagas' data); ``None``
    when the variable is unset: the journal then writes its data in clear, as before, which
    the caller says once it has started (:func:`announce_clear_data`;
    docs/adr/0019-erasure.md §3).

    Raises:
        KeyEncryptionKeyError: the key file is missing or malformed (the message names the
            setting): the process's own configuration.
        ConfigurationError: ``SAGACITY_DATABASE_URL`` is not set, or the cache TTL is not a
            number of seconds in [0, 60].
        PersistenceError: the key store could not be reached.
    """
    env = os.environ if environ is None else environ
    value = env.get(KEK_SETTING, "").strip()
    if not value:
        return None
    keyring = KeyRing.from_setting(value)  # a bad file is named before a missing database
    ttl = key_cache_ttl(env.get(KEY_CACHE_TTL_SETTING))
    url = env.get("SAGACITY_DATABASE_URL", "").strip()
    if not url:
        raise ConfigurationError(
            f"{KEK_SETTING} is set: SAGACITY_DATABASE_URL must name the database holding the "
            "data keys"
        )
    from sagacity.postgres import PostgresKeyStore  # the driver, only here

    service = KeyService(PostgresKeyStore(url), keyring, cache_ttl=ttl)
    try:
        unheld = service.check()
    except BaseException:
        service.close()
        raise
    if unheld:
        logging.getLogger("sagacity.keys").warning(
            "%s: some data keys are wrapped under key-encryption key(s) %s, which this process "
            "does not hold (it holds %s): those sagas' sealed events cannot be opened here and "
            "are quarantined or dead-lettered one by one; add the key file if they should be "
            "(docs/operations/keys.md)",
            KEK_SETTING,
            ", ".join(unheld),
            ", ".join(keyring.key_ids),
        )
    return service


@contextmanager
def starting_keys(environ: Mapping[str, str] | None = None) -> Iterator[KeyService | None]:
    """The key service of :func:`key_service_from_env`, for a component that starts with it
    in the ``with`` block: when the block raises, the key service is closed and the error
    goes on; when it completes without one, the journal's data is said to travel in clear
    (:func:`announce_clear_data`, once the component has started).  After the block the
    component owns the key service: whoever closes the component closes it.

    Without a key the component starts only when ``SAGACITY_ALLOW_CLEAR_DATA`` allows it
    (:func:`refuse_clear_data`): every service and ``Sagacity.from_env()`` start here.

    Raises:
        as :func:`key_service_from_env` and :func:`refuse_clear_data`, before the block runs.
    """
    keys = key_service_from_env(environ)
    if keys is None:
        refuse_clear_data(environ)
    try:
        yield keys
    except BaseException:
        if keys is not None:
            keys.close()
        raise
    if keys is None:
        announce_clear_data()


def kafka_journal(
    settings: KafkaJournalSettings,
    *,
    writer_id: str | None = None,
    keys: KeyService | None = None,
) -> KafkaJournal:
    """A :class:`KafkaJournal` configured by ``settings``, reading through the index they name
    (none when ``keys`` seal its data: the archive does not keep sealed openings yet, so reads
    scan the topic).

    Raises:
        ConfigurationError: the read index's driver is missing, or the writer key is unusable.
        TopicNotFoundError / TopicConfigError / JournalUnavailableError: as
            :class:`KafkaJournal`.
    """
    index = None if keys is not None else read_index(settings.read_index)
    try:
        return KafkaJournal.from_settings(settings, writer_id=writer_id, index=index, keys=keys)
    except BaseException:
        if index is not None:
            index.close()
        raise


def journal_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    service: str = "",
    writer_id: str | None = None,
) -> KafkaJournal:
    """The Kafka journal ``SAGACITY_*`` variables configure (:func:`kafka_settings_from_env`),
    sealing its data with the key service of :func:`key_service_from_env` when
    ``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` is set.

    This is what ``Sagacity.from_env()`` uses: the same agent code runs against the in-memory
    journal in unit tests and against Kafka in production.

    Raises:
        ConfigurationError: a variable is missing or invalid.
        KeyEncryptionKeyError: the key-encryption key file is missing or malformed.
        TopicNotFoundError / TopicConfigError / JournalUnavailableError: as
            :class:`KafkaJournal`.
    """
    settings = kafka_settings_from_env(environ, service=service)
    with starting_keys(environ) as keys:
        journal = kafka_journal(settings, writer_id=writer_id, keys=keys)
    return journal
