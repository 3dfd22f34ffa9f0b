"""What a run of the demonstration sets up before its scenarios: the topic, the shop's tables,
and the Sagacity it reads the chains with."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sagacity.demo import DemoError, DemoSettings


@contextmanager
def sagacity_on_kafka(env: Mapping[str, str], approvals_public_key: str) -> Iterator[Any]:
    """The demo's own Sagacity on the Kafka journal of the run's environment ``env``, to read
    the chains the run wrote (their sealed fields opened with the run's key-encryption key)."""
    from sagacity._env import client_settings, key_service_from_env
    from sagacity.producer import KafkaJournal
    from sagacity.saga._saga import Sagacity

    keys = key_service_from_env(env)
    try:
        journal = KafkaJournal(
            env["SAGACITY_BOOTSTRAP_SERVERS"],
            topic=env["SAGACITY_TOPIC"],
            client=client_settings(env),
            keys=keys,
        )
    except BaseException:
        if keys is not None:
            keys.close()
        raise
    try:
        yield Sagacity(journal, compensation="delegated", approvals_public_key=approvals_public_key)
    finally:
        journal.close()
        if keys is not None:
            keys.close()


def prepare_shop(settings: DemoSettings) -> None:
    """Reset the shop's tables (:func:`.tools.prepare`)."""
    import psycopg

    from sagacity.demo import tools

    try:
        tools.prepare(settings.database_url)
    except psycopg.Error as exc:
        raise DemoError("shop", f"cannot prepare the shop's tables: {exc}") from exc


def ensure_topic(settings: DemoSettings) -> tuple[int, bool]:
    """The topic's partition count, creating it with the journal's settings if missing."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from sagacity.errors import JournalError, TopicConfigError
    from sagacity.producer import with_logger
    from sagacity.producer._topic import TopicSpec, check, create, describe

    bootstrap = settings.bootstrap_servers
    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
    refusal: Exception | None = None
    try:
        created = settings.topic not in admin.list_topics(timeout=30).topics
        info = None
        if created:
            try:
                info = create(admin, settings.topic, TopicSpec(), bootstrap=bootstrap, timeout=30)
            except TopicConfigError as exc:
                # Created meanwhile, or not yet in the metadata we listed: use it if it exists.
                refusal = exc
                created = False
        if info is None:
            try:
                info = describe(admin, settings.topic, bootstrap=bootstrap, timeout=30)
            except JournalError as exc:
                raise DemoError("topic", str(refusal or exc)) from exc
    except (KafkaException, JournalError) as exc:
        raise DemoError("topic", str(exc)) from exc
    fatal = [f.detail for f in check(info) if f.fatal]
    if fatal:
        raise DemoError("topic", "; ".join(fatal))
    return info.partitions, created
