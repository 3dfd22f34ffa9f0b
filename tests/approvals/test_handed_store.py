"""The approvals server is handed its request store (``Dependencies.requests``); it builds
none itself, and refuses one its other tables cannot live beside."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.entries._memory import InMemoryJournal
from sagacity.errors import ConfigurationError
from sagacity.ports import Dependencies, RequestStore
from sagacity.postgres import PostgresRequestStore
from sagacity.schemas import decode_entry
from sagacity.testing import InMemoryConsoleSessions, InMemoryNoticeClaims, InMemoryRequestStore

NOWHERE = "postgresql://nobody@127.0.0.1:9/none"


def _settings() -> ApprovalsSettings:
    return ApprovalsSettings(database_url=NOWHERE, insecure_dev=True)


def test_the_server_runs_on_the_store_it_is_handed_made_for_its_keys_and_journal() -> None:
    asked: list[dict[str, Any]] = []

    def requests(**given: Any) -> RequestStore:
        asked.append(given)
        return PostgresRequestStore(NOWHERE, **given)

    handed = Dependencies(
        journal=InMemoryJournal(),
        requests=requests,
        console_sessions=InMemoryConsoleSessions(),
        notice_claims=InMemoryNoticeClaims(),
        decode=decode_entry,
    )
    server = ApprovalsServer(_settings(), dependencies=handed, consume=False)
    assert len(asked) == 1
    assert asked[0]["verifier"] is server.sagacity.decision_verifier
    assert asked[0]["journal"] == server.sagacity.journal_identity
    assert isinstance(server.store, PostgresRequestStore)


class _NotFolding:
    """A request store without the request consumer's batches (it only decides)."""

    def __init__(self, store: InMemoryRequestStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in ("folding", "offsets"):
            raise AttributeError(name)
        return getattr(self._store, name)


def test_a_store_the_consumer_cannot_fold_into_is_refused() -> None:
    handed = Dependencies(
        journal=InMemoryJournal(),
        decode=decode_entry,
        console_sessions=InMemoryConsoleSessions(),
        notice_claims=InMemoryNoticeClaims(),
        requests=lambda *, verifier, journal, operator=None: _NotFolding(
            InMemoryRequestStore(verifier=verifier, journal=journal)
        ),
    )
    with pytest.raises(ConfigurationError, match="FoldingRequestStore"):
        ApprovalsServer(_settings(), dependencies=handed, consume=False)


def test_a_server_handed_no_store_says_where_to_build_one() -> None:
    with pytest.raises(ConfigurationError, match=r"sagacity\.compose\.approvals"):
        ApprovalsServer(
            _settings(), dependencies=Dependencies(journal=InMemoryJournal()), consume=False
        )


def test_a_consuming_server_handed_no_consumer_runtime_says_where_to_build_one() -> None:
    """The request consumer runs on the consumer runtime the server is handed
    (``Dependencies.consumers``); the server never makes a Kafka consumer of its own."""
    handed = Dependencies(
        journal=InMemoryJournal(),
        requests=lambda **given: PostgresRequestStore(NOWHERE, **given),
        console_sessions=InMemoryConsoleSessions(),
        notice_claims=InMemoryNoticeClaims(),
        decode=decode_entry,
    )
    with pytest.raises(ConfigurationError, match=r"Dependencies\.consumers.*compose\.approvals"):
        ApprovalsServer(_settings(), dependencies=handed)


def test_the_console_keeps_its_sessions_on_the_table_it_is_handed() -> None:
    table = InMemoryConsoleSessions()
    handed = Dependencies(
        journal=InMemoryJournal(),
        requests=lambda **given: PostgresRequestStore(NOWHERE, **given),
        console_sessions=table,
        notice_claims=InMemoryNoticeClaims(),
        decode=decode_entry,
    )
    server = ApprovalsServer(_settings(), dependencies=handed, consume=False)
    session_id, session = server.sessions.create(token_sha256="t" * 64, principal="alice", now_us=1)
    assert server.sessions.get(session_id, now_us=2) == session
    server.sessions.delete(session_id)
    assert server.sessions.get(session_id, now_us=2) is None
