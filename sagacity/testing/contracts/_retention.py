"""The contract every :class:`~sagacity.ports.RetentionMonths` meets; subclass it per adapter.

A subclass provides :meth:`RetentionMonthsContract.create_retention` (the months of the
archive on the test's database) and, as for :class:`ArchiveIngestContract`, the archive's store
and its journal row, through which the suite writes the months it then exports and drops.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from sagacity.ports import ArchiveIngest, ArchiveMonth, RetentionMonths

OLD_US = 1_728_000_000_000_000  # 2024-10-04
NEW_US = 1_780_000_000_000_000  # 2026-05-28
ROWS = (("a", 1, OLD_US), ("a", 2, OLD_US + 1), ("B", 1, OLD_US + 2), ("a", 3, NEW_US))


@dataclass(frozen=True, kw_only=True)
class Record:
    """A signed retention record (:class:`~sagacity.ports.SignedRecordFields`)."""

    partition_name: str
    range_from_us: int
    range_to_us: int
    row_count: int
    export_sha256: str = "e" * 64
    anchor_count: int = 2
    anchors_root: str = "root"
    signed_at_us: int = 7
    key_id: str = "key-1"
    signature: str | None = None


class RetentionMonthsContract(abc.ABC):
    """Months read oldest first; one month's export, record and drop are one transaction."""

    @abc.abstractmethod
    def create_ingest(self) -> ArchiveIngest:
        """The archive's store on the test's database, not prepared."""

    @abc.abstractmethod
    def journal_row(
        self, saga_id: str, seq: int, hash: str, *, recorded_at_us: int, offset: int
    ) -> tuple[Sequence[str], Sequence[Any]]:
        """The columns the archiver writes and one event's values for them."""

    @abc.abstractmethod
    def create_retention(self) -> RetentionMonths:
        """The months of the (prepared) archive on the test's database."""

    @pytest.fixture
    def retention(self) -> RetentionMonths:
        """An archive holding :data:`ROWS` (two months), and its months."""
        ingest = self.create_ingest()
        try:
            ingest.prepare()
            with ingest.batch() as batch:
                assert batch.make_months({202410: OLD_US, 202605: NEW_US}) == {}
                for offset, (saga_id, seq, at_us) in enumerate(ROWS):
                    columns, row = self.journal_row(
                        saga_id, seq, f"{saga_id}{seq}", recorded_at_us=at_us, offset=offset
                    )
                    batch.write_rows(columns, [row])
        finally:
            ingest.close()
        return self.create_retention()

    @staticmethod
    def _old(retention: RetentionMonths) -> ArchiveMonth:
        old, new = retention.months()
        assert old.range_from_us <= OLD_US < old.range_to_us <= new.range_from_us
        assert new.range_from_us <= NEW_US < new.range_to_us
        return old

    def test_months_are_read_oldest_first_with_their_rows(self, retention: RetentionMonths) -> None:
        old = self._old(retention)
        assert [retention.row_count(m) for m in retention.months()] == [3, 1]
        assert retention.months()[0] == old

    def test_a_month_is_exported_recorded_and_dropped(self, retention: RetentionMonths) -> None:
        old = self._old(retention)
        new = retention.months()[1]
        record = Record(
            partition_name=old.name,
            range_from_us=old.range_from_us,
            range_to_us=old.range_to_us,
            row_count=3,
        )
        with retention.dropping(old) as unit:
            with unit.export_lines() as lines:
                exported = [json.loads(line) for line in lines]
            with unit.anchors() as anchors:
                assert list(anchors) == [("B", 1, "B1"), ("a", 2, "a2")]  # saga id byte order
            unit.register_key("key-1", "aa" * 32)
            unit.store_record(record, export_file="old.jsonl")
            unit.drop()
        assert [(e["saga_id"], e["seq"], e["hash"]) for e in exported] == [
            ("B", 1, "B1"),
            ("a", 1, "a1"),
            ("a", 2, "a2"),
        ]
        assert retention.months() == [new]
        with retention.signing() as signing:
            (unsigned,) = signing.unsigned_months()
            assert (unsigned.name, unsigned.row_count, unsigned.export_sha256) == (
                old.name,
                3,
                record.export_sha256,
            )
            assert (unsigned.range_from_us, unsigned.range_to_us) == (
                old.range_from_us,
                old.range_to_us,
            )
            assert signing.leaf_ordered_anchors(old.name) == [("B", 1, "B1"), ("a", 2, "a2")]
            signing.store_signature(dataclasses.replace(record, signature="sig"))
        with retention.signing() as signing:
            assert signing.unsigned_months() == []

    def test_a_month_whose_drop_raises_is_all_kept(self, retention: RetentionMonths) -> None:
        old = self._old(retention)
        record = Record(
            partition_name=old.name,
            range_from_us=old.range_from_us,
            range_to_us=old.range_to_us,
            row_count=3,
        )

        def drop_then_fail() -> None:
            with retention.dropping(old) as unit:
                unit.register_key("key-1", "aa" * 32)
                unit.store_record(record, export_file="old.jsonl")
                unit.drop()
                raise RuntimeError("the export failed")

        with pytest.raises(RuntimeError, match="the export failed"):
            drop_then_fail()
        assert old in retention.months()
        assert retention.row_count(old) == 3
        with retention.signing() as signing:
            assert signing.unsigned_months() == []
