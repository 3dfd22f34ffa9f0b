"""The Postgres adapters meet their ports' contracts, on a real server (a schema per test)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest

from sagacity.config._defaults import DEFAULT_ARCHIVE_GROUP as DEFAULT_GROUP
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
from sagacity.postgres import (
    PostgresClaimStore,
    PostgresConsoleSessions,
    PostgresKeyStore,
    PostgresNoticeClaims,
    PostgresRequestStore,
    PostgresSagaIndex,
    PostgresSlackTables,
)
from sagacity.postgres.archive import migrate
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._operator_signature import OperatorVerifier
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

pytestmark = [pytest.mark.postgres]


class TestPostgresClaimStore(ClaimStoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_store(self, *, journal: str = JOURNAL) -> ClaimStore:
        return PostgresClaimStore(self.dsn, instance="contract", journal=journal)

    def put_unbound(
        self, store: ClaimStore, saga_id: str, step_seq: int, status: ClaimStatus
    ) -> None:
        settled = status is not ClaimStatus.CLAIMED
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO sagacity_compensation_claims (journal, saga_id, step_seq, step_hash,"
                " target, idempotency_key, instance, status, result, result_encoding,"
                " finished_at) VALUES ('', %s, %s, '', 'undo', 'k', 'previous-release', %s, %s,"
                " %s, CASE WHEN %s THEN now() END)",
                (
                    saga_id,
                    step_seq,
                    status.value,
                    "from an older release" if status is ClaimStatus.COMPENSATED else None,
                    "text" if status is ClaimStatus.COMPENSATED else None,
                    settled,
                ),
            )


class TestPostgresKeyStore(KeyStoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_store(self) -> KeyStore:
        return PostgresKeyStore(self.dsn)


class TestPostgresConsoleSessions(ConsoleSessionTableContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_table(self) -> ConsoleSessionTable:
        return PostgresConsoleSessions(self.dsn)


class TestPostgresNoticeClaims(NoticeClaimsContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_claims(self) -> NoticeClaims:
        return PostgresNoticeClaims(self.dsn)


class TestPostgresSlackTables(SlackTablesContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_tables(self) -> SlackTables:
        return PostgresSlackTables(self.dsn)


class TestPostgresRequestStore(RequestStoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_store(
        self,
        *,
        verifier: DecisionVerifier | None = None,
        operator: OperatorVerifier | None = None,
    ) -> RequestStore:
        return PostgresRequestStore(self.dsn, verifier=verifier, journal=JOURNAL, operator=operator)


class TestPostgresFoldingRequestStore(FoldingRequestStoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_dsn: str) -> None:
        self.dsn = pg_dsn

    def create_store(self) -> FoldingRequestStore:
        return PostgresRequestStore(self.dsn, journal=JOURNAL)


class TestPostgresSagaIndex(SagaIndexContract):
    """The index reads an archive whose rows are written here as the archiver writes them."""

    @pytest.fixture(autouse=True)
    def _archive(self, pg_dsn: str) -> Iterator[None]:
        yield from self._archive_at(pg_dsn)

    def _archive_at(self, dsn: str) -> Iterator[None]:
        self.dsn = dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
        self.conn = psycopg.connect(dsn, autocommit=True)
        try:
            yield
        finally:
            self.conn.close()

    def create_index(self) -> SagaIndex:
        return PostgresSagaIndex(self.dsn)

    def archive(self, *, topic: str, partition: int, offset: int, entry: JournalEntry) -> None:
        self.conn.execute("SELECT sgc_ensure_month(%s)", (entry.recorded_at_us,))
        self.conn.execute(
            "INSERT INTO side_effect_journal (saga_id, seq, event_type, tool, payload, result,"
            " error, actor, attributes, recorded_at_us, hash, prev_hash, topic, kafka_partition,"
            " kafka_offset) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s, %s,"
            " %s, %s)",
            (
                entry.saga_id,
                entry.seq,
                str(entry.event_type),
                entry.tool,
                entry.payload,
                entry.result,
                entry.error,
                entry.actor,
                json.dumps(dict(entry.attributes)),
                entry.recorded_at_us,
                entry.hash,
                entry.prev_hash,
                topic,
                partition,
                offset,
            ),
        )
        self.conn.execute(
            "INSERT INTO archive_saga_head (saga_id, head_seq, head_hash) VALUES (%s, %s, %s)"
            " ON CONFLICT (saga_id) DO UPDATE SET head_seq = EXCLUDED.head_seq,"
            " head_hash = EXCLUDED.head_hash WHERE archive_saga_head.head_seq < EXCLUDED.head_seq",
            (entry.saga_id, entry.seq, entry.hash),
        )

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
        self.conn.execute(
            "INSERT INTO archive_quarantine (reason, detail, topic, kafka_partition, kafka_offset,"
            " raw_key, raw_value) VALUES (%s, 'refused by the contract', %s, %s, %s, %s, %s)",
            (reason, topic, partition, offset, key, value),
        )

    def cover(self, *, topic: str, partition: int, next_offset: int) -> None:
        self.conn.execute(
            "INSERT INTO archive_consumer_offset (consumer_group, topic, kafka_partition,"
            " next_offset, keys_checked_from) VALUES (%s, %s, %s, %s, 0)"
            " ON CONFLICT (consumer_group, topic, kafka_partition)"
            " DO UPDATE SET next_offset = EXCLUDED.next_offset",
            (DEFAULT_GROUP, topic, partition, next_offset),
        )


# The same contracts on a database set up as users' often are (``users_pg_dsn``: ICU's en-US
# collation, a time zone far from UTC), where the suite's own database is C-collated in UTC.


class TestPostgresClaimStoreOnAUsersDatabase(TestPostgresClaimStore):
    @pytest.fixture(autouse=True)
    def _database(self, users_pg_dsn: str) -> None:
        self.dsn = users_pg_dsn


class TestPostgresKeyStoreOnAUsersDatabase(TestPostgresKeyStore):
    @pytest.fixture(autouse=True)
    def _database(self, users_pg_dsn: str) -> None:
        self.dsn = users_pg_dsn


class TestPostgresRequestStoreOnAUsersDatabase(TestPostgresRequestStore):
    @pytest.fixture(autouse=True)
    def _database(self, users_pg_dsn: str) -> None:
        self.dsn = users_pg_dsn


class TestPostgresFoldingRequestStoreOnAUsersDatabase(TestPostgresFoldingRequestStore):
    @pytest.fixture(autouse=True)
    def _database(self, users_pg_dsn: str) -> None:
        self.dsn = users_pg_dsn


class TestPostgresSagaIndexOnAUsersDatabase(TestPostgresSagaIndex):
    @pytest.fixture(autouse=True)
    def _archive(self, users_pg_dsn: str) -> Iterator[None]:
        yield from self._archive_at(users_pg_dsn)
