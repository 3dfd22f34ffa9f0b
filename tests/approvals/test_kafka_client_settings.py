"""The approvals service's Kafka clients take the ``SAGACITY_KAFKA_*`` settings (TLS, SASL …)
and the journal settings from the composition root, like every other service (real Kafka)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sagacity import compose
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.errors import JournalUnavailableError
from sagacity.ports import Dependencies
from sagacity.producer import KafkaJournal

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def _settings(
    bootstrap: str, topic: str, dsn: str, auth_file: Path, signing_key: str | None = None
) -> ApprovalsSettings:
    return ApprovalsSettings(
        database_url=dsn,
        bootstrap_servers=bootstrap,
        topic=topic,
        auth_file=str(auth_file),
        signing_key=signing_key,
    )


def _handed(settings: ApprovalsSettings) -> Dependencies:
    """The dependencies the composition root hands the service, as ``serve approvals`` does."""
    return compose.approvals(
        bootstrap_servers=settings.bootstrap_servers,
        topic=settings.topic,
        database_url=settings.database_url,
    )


def journal_for(settings: ApprovalsSettings) -> Any:
    """The journal the composition root assembles for the service."""
    return _handed(settings).journal


def _close(journal: object) -> None:
    """Close a journal ``journal_for`` made, and its key service (the session runs sealed:
    the server that made them would close both)."""
    keys = getattr(journal, "keys", None)
    journal.close()  # type: ignore[attr-defined]
    if keys is not None:
        keys.close()


def test_the_journal_takes_the_kafka_client_settings(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAGACITY_KAFKA_CLIENT_ID", "approvals-under-test")
    monkeypatch.setenv("SAGACITY_READ_INDEX", "off")
    journal = journal_for(_settings(kafka_bootstrap, make_topic(), pg_dsn, auth_file))
    try:
        assert isinstance(journal, KafkaJournal)
        assert journal._client_config["client.id"] == "approvals-under-test"
        assert journal._client_config["bootstrap.servers"] == kafka_bootstrap
    finally:
        _close(journal)


def test_a_tls_setting_reaches_the_journal_client(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The broker listens in plain text: a client that took the setting cannot reach it.
    monkeypatch.setenv("SAGACITY_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("SAGACITY_APPROVALS_STARTUP_TIMEOUT_S", "2")
    monkeypatch.setenv("SAGACITY_READ_INDEX", "off")
    with pytest.raises(JournalUnavailableError):
        journal_for(_settings(kafka_bootstrap, make_topic(), pg_dsn, auth_file))


def test_the_settings_given_win_over_the_variables(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = make_topic()
    monkeypatch.setenv("SAGACITY_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("SAGACITY_APPROVALS_TOPIC", "not-this-topic")
    monkeypatch.setenv("SAGACITY_APPROVALS_WRITER_ID", "approvals-7")
    monkeypatch.setenv("SAGACITY_READ_INDEX", "off")
    journal = journal_for(_settings(kafka_bootstrap, topic, pg_dsn, auth_file))
    try:
        assert isinstance(journal, KafkaJournal)
        assert (journal.topic, journal.writer_id) == (topic, "approvals-7")
    finally:
        _close(journal)


def test_the_request_consumer_takes_the_kafka_client_settings(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sagacity.signing._decision_signature import generate_key

    generate_key(tmp_path / "approvals.pem")
    monkeypatch.setenv("SAGACITY_KAFKA_CLIENT_ID", "approvals-under-test")
    topic = make_topic()
    settings = _settings(kafka_bootstrap, topic, pg_dsn, auth_file, str(tmp_path / "approvals.pem"))
    server = ApprovalsServer(settings, dependencies=_handed(settings))
    try:
        assert server.consumer is not None
        assert server.consumer.runtime.options.config["client.id"] == "approvals-under-test"
    finally:
        server.stop()


def test_the_server_closes_the_key_service_of_a_journal_it_made_only(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    auth_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sagacity.keys import KEK_SETTING, KeyService, write_key_encryption_key
    from sagacity.signing._decision_signature import generate_key

    generate_key(tmp_path / "approvals.pem")
    write_key_encryption_key(tmp_path / "journal.kek")
    monkeypatch.setenv(KEK_SETTING, str(tmp_path / "journal.kek"))
    monkeypatch.setenv("SAGACITY_DATABASE_URL", pg_dsn)
    settings = _settings(
        kafka_bootstrap, make_topic(), pg_dsn, auth_file, str(tmp_path / "approvals.pem")
    )
    closed: list[str] = []

    def counted(keys: KeyService, name: str) -> None:
        close = keys.close
        monkeypatch.setattr(keys, "close", lambda: (closed.append(name), close()))

    made = ApprovalsServer(settings, dependencies=_handed(settings), consume=False)
    keys = made.journal.keys  # type: ignore[attr-defined]
    assert isinstance(keys, KeyService)
    counted(keys, "made")
    made.stop()
    assert closed == ["made"]
    given: Any = journal_for(settings)  # with its own key service, from the same variables
    given_keys = given.keys  # type: ignore[attr-defined]
    assert isinstance(given_keys, KeyService)
    counted(given_keys, "given")
    server = ApprovalsServer(
        settings, dependencies=compose.approvals_on(given, settings), consume=False
    )
    server.stop()
    assert closed == ["made"]  # the caller's journal is closed, its key service is not
    given_keys.close()
    assert closed == ["made", "given"]
