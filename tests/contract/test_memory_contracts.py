"""The in-memory fakes of sagacity.testing meet their ports' contracts."""

from __future__ import annotations

from sagacity.entries._events import JournalEntry
from sagacity.ports import (
    ClaimStatus,
    ClaimStore,
    ConsoleSessionTable,
    FoldingRequestStore,
    KeyStore,
    NoticeClaims,
    RequestStore,
    SagaIndex,
    SlackTables,
)
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._operator_signature import OperatorVerifier
from sagacity.testing import (
    InMemoryClaimStore,
    InMemoryConsoleSessions,
    InMemoryKeyStore,
    InMemoryNoticeClaims,
    InMemoryRequestStore,
    InMemorySagaIndex,
    InMemorySlackTables,
)
from sagacity.testing.contracts import (
    JOURNAL,
    ClaimStoreContract,
    ConsoleSessionTableContract,
    FoldingRequestStoreContract,
    KeyStoreContract,
    NoticeClaimsContract,
    RequestStoreContract,
    SagaIndexContract,
    SlackTablesContract,
)


class TestInMemoryClaimStore(ClaimStoreContract):
    first: InMemoryClaimStore | None = None

    def create_store(self, *, journal: str = JOURNAL) -> ClaimStore:
        # One memory per test, shared by the test's stores (one database, many journals).
        store = InMemoryClaimStore(journal=journal, sharing=self.first)
        self.first = self.first or store
        return store

    def put_unbound(
        self, store: ClaimStore, saga_id: str, step_seq: int, status: ClaimStatus
    ) -> None:
        assert isinstance(store, InMemoryClaimStore)
        store.add_unbound(saga_id, step_seq, status)


class TestInMemoryKeyStore(KeyStoreContract):
    def create_store(self) -> KeyStore:
        # One memory per test, shared by the test's stores (one database).
        self.shared = getattr(self, "shared", None) or InMemoryKeyStore()
        return self.shared


class TestInMemoryConsoleSessions(ConsoleSessionTableContract):
    def create_table(self) -> ConsoleSessionTable:
        return InMemoryConsoleSessions()


class TestInMemoryNoticeClaims(NoticeClaimsContract):
    def create_claims(self) -> NoticeClaims:
        # One memory per test, shared by the test's claimers (one database).
        self.shared = getattr(self, "shared", None) or InMemoryNoticeClaims()
        return self.shared


class TestInMemorySlackTables(SlackTablesContract):
    def create_tables(self) -> SlackTables:
        # One memory per test, shared by the test's replicas (one database).
        self.shared = getattr(self, "shared", None) or InMemorySlackTables()
        return self.shared


class TestInMemoryRequestStore(RequestStoreContract):
    def create_store(
        self,
        *,
        verifier: DecisionVerifier | None = None,
        operator: OperatorVerifier | None = None,
    ) -> RequestStore:
        return InMemoryRequestStore(verifier=verifier, journal=JOURNAL, operator=operator)


class TestInMemorySagaIndex(SagaIndexContract):
    def create_index(self) -> SagaIndex:
        self.fake = InMemorySagaIndex()
        return self.fake

    def archive(self, *, topic: str, partition: int, offset: int, entry: JournalEntry) -> None:
        self.fake.archive(topic=topic, partition=partition, offset=offset, entry=entry)

    def refuse(
        self,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        reason: str,
    ) -> None:
        self.fake.refuse(
            topic=topic, partition=partition, offset=offset, key=key, value=value, reason=reason
        )

    def cover(self, *, topic: str, partition: int, next_offset: int) -> None:
        self.fake.cover(topic=topic, partition=partition, next_offset=next_offset)


class TestInMemoryFoldingRequestStore(FoldingRequestStoreContract):
    def create_store(self) -> FoldingRequestStore:
        return InMemoryRequestStore()
