"""The contract every :class:`~sagacity.ports.ConsoleSessionTable` meets; subclass it per
adapter.

A subclass provides :meth:`ConsoleSessionTableContract.create_table`: a table on the test's
database (one fresh database per test), not yet migrated.
"""

from __future__ import annotations

import abc

import pytest

from sagacity.ports import ConsoleSession, ConsoleSessionTable


def _session(principal: str, *, expires_at_us: int) -> ConsoleSession:
    return ConsoleSession(
        token_sha256="t" * 64,
        principal=principal,
        csrf=f"csrf-{principal}",
        expires_at_us=expires_at_us,
    )


class ConsoleSessionTableContract(abc.ABC):
    """A session is found by its key until deleted; inserting purges only sessions expired
    before the insert's time."""

    @abc.abstractmethod
    def create_table(self) -> ConsoleSessionTable:
        """A table on the test's database, not yet migrated."""

    @pytest.fixture
    def table(self) -> ConsoleSessionTable:
        """A migrated table."""
        table = self.create_table()
        table.migrate()
        table.migrate()  # repeatable
        return table

    def test_it_implements_the_protocol(self, table: ConsoleSessionTable) -> None:
        assert isinstance(table, ConsoleSessionTable)
        assert table.find("a" * 64) is None

    def test_a_session_is_found_by_its_key_until_deleted(self, table: ConsoleSessionTable) -> None:
        alice = _session("alice", expires_at_us=2_000)
        table.insert("a" * 64, alice, now_us=1_000)
        table.insert("b" * 64, _session("bob", expires_at_us=2_000), now_us=1_000)
        assert table.find("a" * 64) == alice
        table.delete("a" * 64)
        table.delete("a" * 64)  # deleting twice is harmless
        assert table.find("a" * 64) is None
        assert table.find("b" * 64) is not None

    def test_an_expired_session_is_found_until_an_insert_purges_it(
        self, table: ConsoleSessionTable
    ) -> None:
        table.insert("a" * 64, _session("alice", expires_at_us=1_500), now_us=1_000)
        table.insert("b" * 64, _session("bob", expires_at_us=3_000), now_us=1_000)
        # Expiry is the console's judgement: the table still returns the row.
        assert table.find("a" * 64) is not None
        table.insert("c" * 64, _session("carol", expires_at_us=4_000), now_us=1_500)
        assert table.find("a" * 64) is not None  # expiring at the insert's time: kept
        table.insert("d" * 64, _session("dave", expires_at_us=4_000), now_us=1_501)
        assert table.find("a" * 64) is None
        assert table.find("b" * 64) is not None
