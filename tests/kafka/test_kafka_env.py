"""Variables reach a journal only through the composition root (``sagacity._env``): a journal
built in code is configured by its code alone; ``from_env`` reads ``SAGACITY_<SERVICE>_X``,
then ``SAGACITY_X``, then the default."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from sagacity import Sagacity
from sagacity._env import journal_from_env, kafka_settings_from_env, read_index_settings_from_env
from sagacity.errors import ConfigurationError
from sagacity.producer import KafkaJournal, KafkaJournalSettings

pytestmark = pytest.mark.kafka

UNREACHABLE_DB = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``SAGACITY_*`` variable of the runner's environment leaks into the test; its
    journals run in clear, said explicitly (the read index is not used for sealed sagas)."""
    import os

    for var in list(os.environ):
        if var.startswith("SAGACITY_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("SAGACITY_ALLOW_CLEAR_DATA", "1")
    return monkeypatch


@contextlib.contextmanager
def _closing(journal: KafkaJournal) -> Iterator[KafkaJournal]:
    try:
        yield journal
    finally:
        journal.close()


def test_a_journal_built_in_code_reads_no_variable(
    clean_env: pytest.MonkeyPatch, kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    topic, elsewhere = make_topic(), make_topic()
    for var, value in {
        "SAGACITY_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "SAGACITY_TOPIC": elsewhere,
        "SAGACITY_ACK_TIMEOUT_S": "2.5",
        "SAGACITY_WRITER_ID": "from-the-environment",
        "SAGACITY_DATABASE_URL": UNREACHABLE_DB,
        "SAGACITY_KAFKA_CLIENT_ID": "from-the-environment",
    }.items():
        clean_env.setenv(var, value)
    settings = KafkaJournalSettings(bootstrap_servers=kafka_bootstrap, topic=topic)
    assert (settings.ack_timeout_s, settings.writer_id, settings.client) == (10.0, None, {})
    assert settings.read_index.database_url is None
    saga = f"code-{uuid.uuid4().hex[:8]}"
    for journal in (
        KafkaJournal.from_settings(settings),
        KafkaJournal(kafka_bootstrap, topic=topic),
    ):
        with _closing(journal):
            assert journal.topic == topic
            assert journal.writer_id != "from-the-environment"
            read = journal.read(saga)
            assert (read.source, read.index_fallback) == ("scan", None)  # no index configured


def test_from_env_reads_the_service_variable_then_the_shared_one(
    clean_env: pytest.MonkeyPatch, kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    shared, own = make_topic(), make_topic()
    clean_env.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    clean_env.setenv("SAGACITY_TOPIC", shared)
    clean_env.setenv("SAGACITY_APPROVALS_TOPIC", own)
    clean_env.setenv("SAGACITY_APPROVALS_WRITER_ID", "approvals-1")
    clean_env.setenv("SAGACITY_WRITER_ID", "agent-1")
    clean_env.setenv("SAGACITY_READ_INDEX", "off")
    with _closing(journal_from_env()) as agent:
        assert (agent.topic, agent.writer_id) == (shared, "agent-1")
    with _closing(journal_from_env(service="approvals")) as service:
        assert (service.topic, service.writer_id) == (own, "approvals-1")
    clean_env.setenv("SAGACITY_APPROVALS_TOPIC", "")  # empty is unset: the shared one
    with _closing(journal_from_env(service="APPROVALS")) as service:
        assert service.topic == shared
    built = Sagacity.from_env()
    assert isinstance(built.journal, KafkaJournal)
    with _closing(built.journal):
        assert (built.journal.topic, built.writer_id) == (shared, "agent-1")


def test_from_env_builds_the_read_index_its_variables_name(
    clean_env: pytest.MonkeyPatch, kafka_bootstrap: str, make_topic: Callable[..., str]
) -> None:
    clean_env.setenv("SAGACITY_BOOTSTRAP_SERVERS", kafka_bootstrap)
    clean_env.setenv("SAGACITY_TOPIC", make_topic())
    clean_env.setenv("SAGACITY_DATABASE_URL", UNREACHABLE_DB)
    with _closing(journal_from_env()) as journal:
        read = journal.read(f"indexed-{uuid.uuid4().hex[:8]}")
        assert read.source == "scan"
        assert read.index_fallback is not None  # an index was configured, and could not answer


def test_settings_from_env_take_the_service_prefix_first() -> None:
    env = {
        "SAGACITY_BOOTSTRAP_SERVERS": "shared:9092",
        "SAGACITY_COMPENSATION_BOOTSTRAP_SERVERS": "own:9092",
        "SAGACITY_ACK_TIMEOUT_S": "2.5",
        "SAGACITY_DATABASE_URL": "postgresql://h/shared",
        "SAGACITY_COMPENSATION_DATABASE_URL": "postgresql://h/own",
    }
    agent = kafka_settings_from_env(env)
    assert (agent.bootstrap_servers, agent.ack_timeout_s) == ("shared:9092", 2.5)
    assert agent.read_index.database_url == "postgresql://h/shared"
    service = kafka_settings_from_env(env, service="compensation")
    assert (service.bootstrap_servers, service.ack_timeout_s) == ("own:9092", 2.5)
    assert service.read_index.database_url == "postgresql://h/own"
    # The archive's own database first, then the service's database given, then the shared.
    archive = {**env, "SAGACITY_ARCHIVE_DATABASE_URL": "postgresql://a/archive"}
    given = "postgresql://x/given"
    assert read_index_settings_from_env(archive, database_url=given).database_url == (
        "postgresql://a/archive"
    )
    assert read_index_settings_from_env(env, database_url=given).database_url == given


def test_a_bad_service_prefix_or_a_missing_bootstrap_is_refused_clearly() -> None:
    with pytest.raises(ConfigurationError, match="service prefix"):
        kafka_settings_from_env({"SAGACITY_BOOTSTRAP_SERVERS": "k:9092"}, service="no such")
    with pytest.raises(
        ConfigurationError,
        match="SAGACITY_APPROVALS_BOOTSTRAP_SERVERS or SAGACITY_BOOTSTRAP_SERVERS is not set",
    ):
        kafka_settings_from_env({}, service="approvals")
