"""The contract every :class:`~sagacity.ports.SlackTables` meets; subclass it per adapter.

A subclass provides :meth:`SlackTablesContract.create_tables`: tables on the test's database
(one fresh database per test, shared by every one the test makes), not yet migrated.
"""

from __future__ import annotations

import abc

import pytest

from sagacity.ports import SlackMessage, SlackTables

SECOND_US = 1_000_000


class SlackTablesContract(abc.ABC):
    """A request is claimed for posting once until released, its message found once posted
    and listed until settled; a signature is accepted once until it is forgotten."""

    @abc.abstractmethod
    def create_tables(self) -> SlackTables:
        """Tables on the test's database (shared by the test's), not yet migrated."""

    @pytest.fixture
    def tables(self) -> SlackTables:
        """Migrated tables."""
        tables = self.create_tables()
        tables.migrate()
        tables.migrate()  # repeatable
        return tables

    def test_it_implements_the_protocol(self, tables: SlackTables) -> None:
        assert isinstance(tables, SlackTables)
        assert tables.message("s-1", 1) is None
        assert tables.unsettled() == []

    def test_a_request_is_claimed_once_and_released_only_before_it_is_posted(
        self, tables: SlackTables
    ) -> None:
        other = self.create_tables()
        assert tables.claim("s-1", 1, now_us=10)
        assert not other.claim("s-1", 1, now_us=11)
        assert tables.message("s-1", 1) is None  # claimed, not posted
        tables.release("s-1", 1)
        assert other.claim("s-1", 1, now_us=12)
        other.posted("s-1", 1, channel="C1", ts="1.5")
        tables.release("s-1", 1)  # posted: the claim stays
        assert not tables.claim("s-1", 1, now_us=13)
        assert tables.message("s-1", 1) == SlackMessage(
            saga_id="s-1", seq=1, channel="C1", ts="1.5"
        )

    def test_posted_messages_are_unsettled_oldest_first_until_settled(
        self, tables: SlackTables
    ) -> None:
        for saga_id, claimed in (("s-b", 20), ("s-a", 10), ("s-c", 30)):
            assert tables.claim(saga_id, 1, now_us=claimed)
        tables.posted("s-b", 1, channel="C", ts="2")
        tables.posted("s-a", 1, channel="C", ts="1")
        assert [m.saga_id for m in tables.unsettled()] == ["s-a", "s-b"]  # s-c: not posted
        assert [m.saga_id for m in tables.unsettled(limit=1)] == ["s-a"]
        tables.settle("s-a", 1)
        assert [m.saga_id for m in tables.unsettled()] == ["s-b"]
        assert tables.message("s-a", 1) is not None  # settled messages are still found

    def test_a_signature_is_accepted_once_until_it_is_forgotten(self, tables: SlackTables) -> None:
        now = 1_000 * SECOND_US
        assert tables.first_sight("v0=aa", request_ts=1_000, now_us=now, keep_s=300)
        assert not self.create_tables().first_sight(
            "v0=aa", request_ts=1_000, now_us=now, keep_s=300
        )
        assert tables.first_sight("v0=bb", request_ts=1_000, now_us=now, keep_s=300)
        later = now + 301 * SECOND_US  # request_ts 1000 is now older than the window
        assert tables.first_sight("v0=aa", request_ts=1_301, now_us=later, keep_s=300)
