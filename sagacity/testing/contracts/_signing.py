"""The contract every :class:`~sagacity.ports.CheckpointSigning` (its
:class:`~sagacity.ports.SigningUnit`) and the :class:`~sagacity.ports.RoundLog` it reads meet;
subclass it per adapter.

A subclass provides :meth:`CheckpointSigningContract.create_ingest`: the archive's store on the
test's own database (every one it makes sharing it), not yet prepared.  The suite signs through
the store's :meth:`~sagacity.ports.ArchiveIngest.signing` and prepares heads and positions
through its batches.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sagacity.ports import ArchiveIngest, CheckpointRow, CheckpointSigning, RoundRow

KEY = "key-1"
OTHER_KEY = "key-2"
TOPIC = "journal.contract"
GROUP = "archiver"


@dataclass(frozen=True, kw_only=True)
class Signed:
    """A signed round (:class:`~sagacity.ports.SignedRoundFields`)."""

    round_id: int
    leaf_count: int
    root: str
    prev_root: str
    signed_at_us: int
    key_id: str = KEY
    signature: str = "sig"
    format: int = 2
    tree_size: int | None = None

    def row(self, frontier: str) -> RoundRow:
        """The round as the log reads it back."""
        return RoundRow(
            round_id=self.round_id,
            leaf_count=self.leaf_count,
            root=self.root,
            prev_root=self.prev_root,
            signed_at_us=self.signed_at_us,
            key_id=self.key_id,
            signature=self.signature,
            format=self.format,
            tree_size=self.tree_size,
            frontier=frontier,
        )


@dataclass(frozen=True)
class _Position:
    topic: str
    partition: int
    offset: int
    key: bytes | None = None
    value: bytes | None = None


class CheckpointSigningContract(abc.ABC):
    """A round is one transaction, one signer at a time; rounds read back as written, in id
    order; round ids only grow."""

    @abc.abstractmethod
    def create_ingest(self) -> ArchiveIngest:
        """The archive's store on the test's database (shared by the test's), not prepared."""

    @pytest.fixture
    def ingest(self) -> Iterator[ArchiveIngest]:
        """A prepared store with the signing keys registered."""
        ingest = self.create_ingest()
        ingest.prepare()
        ingest.signing().register_key(KEY, "aa" * 32)
        ingest.signing().register_key(KEY, "aa" * 32)  # once per key id
        ingest.signing().register_key(OTHER_KEY, "bb" * 32)
        yield ingest
        ingest.close()

    @staticmethod
    def _heads(ingest: ArchiveIngest, heads: dict[str, tuple[int, str]]) -> None:
        with ingest.batch() as batch:
            batch.move_heads(batch.read_heads(list(heads)), heads)

    @staticmethod
    def _sign(
        signing: CheckpointSigning, heads: list[tuple[str, int, str]], root: str, at_us: int
    ) -> Signed:
        with signing.signing_round() as unit:
            last = unit.last_round()
            signed = Signed(
                round_id=unit.next_round_id(),
                leaf_count=len(heads),
                root=root,
                prev_root=last.root if last else "",
                signed_at_us=at_us,
            )
            unit.record_round(signed, frontier=f"frontier {root}", heads=heads)
        return signed

    def test_a_fresh_archive_has_no_rounds(self, ingest: ArchiveIngest) -> None:
        with ingest.signing().signing_round() as unit:
            assert unit.last_round() is None
            assert unit.log.rounds_after(0, limit=None) == []
            assert unit.log.round(1) is None
            assert unit.table_heads(["s-1"]) == {}

    def test_rounds_read_back_as_written_in_id_order(self, ingest: ArchiveIngest) -> None:
        self._heads(ingest, {"s-1": (2, "a2"), "s-2": (1, "b1")})
        signing = ingest.signing()
        first = self._sign(signing, [("s-1", 2, "a2"), ("s-2", 1, "b1")], "r1", 10)
        self._heads(ingest, {"s-1": (3, "a3")})
        second = self._sign(signing, [("s-1", 3, "a3")], "r2", 20)
        assert second.prev_root == "r1"
        reader = self.create_ingest()
        try:
            self._read_back(reader.signing(), first, second)
        finally:
            reader.close()

    @staticmethod
    def _read_back(log: CheckpointSigning, first: Signed, second: Signed) -> None:
        with log.signing_round() as unit:
            assert unit.last_round() == second.row("frontier r2")
            assert unit.log.rounds_after(0, limit=None) == [
                first.row("frontier r1"),
                second.row("frontier r2"),
            ]
            assert unit.log.rounds_after(first.round_id, limit=None) == [second.row("frontier r2")]
            assert unit.log.rounds_after(0, limit=1) == [first.row("frontier r1")]
            assert unit.log.round(first.round_id) == first.row("frontier r1")
            assert unit.log.previous_round_id(second.round_id) == first.round_id
            assert unit.log.previous_round_id(first.round_id) is None
            assert unit.log.round_leaves(first.round_id) == [
                (0, "s-1", 2, "a2"),
                (1, "s-2", 1, "b1"),
            ]
            with unit.log.log_leaves(after=None, upto=second.round_id) as leaves:
                assert list(leaves) == [("s-1", 2, "a2"), ("s-2", 1, "b1"), ("s-1", 3, "a3")]
            with unit.log.log_leaves(after=first.round_id, upto=second.round_id) as leaves:
                assert list(leaves) == [("s-1", 3, "a3")]
            assert unit.log.checkpoints_of(["s-1"], [KEY]) == [
                CheckpointRow(
                    saga_id="s-1",
                    seq=seq,
                    hash=h,
                    signed_at_us=at,
                    key_id=KEY,
                    signature=None,
                    round_id=r.round_id,
                    leaf_index=0,
                )
                for seq, h, at, r in ((3, "a3", 20, second), (2, "a2", 10, first))
            ]
            assert unit.log.checkpoints_of(["s-1"], [OTHER_KEY]) == []
            heads = [("s-1", 3, "a3"), ("s-2", 1, "b1"), ("s-2", 2, "b2")]
            assert unit.signed_by(heads, KEY) == {("s-1", 3), ("s-2", 1)}
            assert unit.signed_by(heads, OTHER_KEY) == set()
            assert unit.table_heads(["s-1", "s-2", "s-3"]) == {"s-1": (3, "a3"), "s-2": (1, "b1")}

    def test_a_signed_head_is_no_longer_unsigned(self, ingest: ArchiveIngest) -> None:
        self._heads(ingest, {"s-1": (2, "a2"), "s-2": (1, "b1")})
        with ingest.head_findings().finding("read") as unit:
            assert sorted(unit.unsigned_heads()) == [("s-1", 2, "a2"), ("s-2", 1, "b1")]
        self._sign(ingest.signing(), [("s-1", 2, "a2")], "r1", 10)
        with ingest.head_findings().finding("read") as unit:
            assert unit.unsigned_heads() == [("s-2", 1, "b1")]

    def test_a_round_that_raises_keeps_nothing_and_its_id_is_not_given_again(
        self, ingest: ArchiveIngest
    ) -> None:
        self._heads(ingest, {"s-1": (1, "a1")})
        signing = ingest.signing()
        given: list[int] = []

        def sign_then_fail() -> None:
            with signing.signing_round() as unit:
                given.append(unit.next_round_id())
                signed = Signed(
                    round_id=given[0], leaf_count=1, root="r", prev_root="", signed_at_us=1
                )
                unit.record_round(signed, frontier="f", heads=[("s-1", 1, "a1")])
                raise RuntimeError("the round fails")

        with pytest.raises(RuntimeError, match="the round fails"):
            sign_then_fail()
        with signing.signing_round() as unit:
            assert unit.last_round() is None
            assert unit.log.round_leaves(given[0]) == []
            assert unit.signed_by([("s-1", 1, "a1")], KEY) == set()
            assert unit.next_round_id() > given[0]
        with ingest.head_findings().finding("read") as findings:
            assert findings.unsigned_heads() == [("s-1", 1, "a1")]

    def test_round_ids_only_grow(self, ingest: ArchiveIngest) -> None:
        ids: list[int] = []
        other = self.create_ingest()
        try:
            for signing in (ingest.signing(), other.signing(), ingest.signing()):
                with signing.signing_round() as unit:
                    ids.append(unit.next_round_id())
                    ids.append(unit.next_round_id())
        finally:
            other.close()
        assert ids == sorted(set(ids))

    def test_a_second_signer_waits_for_the_round_in_progress(self, ingest: ArchiveIngest) -> None:
        self._heads(ingest, {"s-1": (1, "a1")})
        other = self.create_ingest()
        trying, entered = threading.Event(), threading.Event()
        seen: list[RoundRow | None] = []

        def second() -> None:
            trying.set()
            with other.signing().signing_round() as unit:
                seen.append(unit.last_round())
                entered.set()

        thread = threading.Thread(target=second)
        try:
            with ingest.signing().signing_round() as unit:
                signed = Signed(
                    round_id=unit.next_round_id(),
                    leaf_count=1,
                    root="r1",
                    prev_root="",
                    signed_at_us=1,
                )
                unit.record_round(signed, frontier="f", heads=[("s-1", 1, "a1")])
                thread.start()
                assert trying.wait(10)
                # The second signer is kept out while this round is open; had it come in, it
                # would have read no round (this one is not committed yet) before this wait ends.
                entered.wait(1)
            thread.join(10)
            assert seen == [signed.row("f")]
        finally:
            thread.join(10)
            other.close()

    def test_signed_offsets_move_only_up(self, ingest: ArchiveIngest) -> None:
        with ingest.batch() as batch:
            batch.store_offsets(GROUP, [_Position(TOPIC, 0, o) for o in (10, 19)])
        assert ingest.offsets(GROUP, TOPIC) == {0: (20, 10)}
        signing = ingest.signing()
        signing.record_signed_offsets(GROUP, {(TOPIC, 0): 15})
        assert ingest.offsets(GROUP, TOPIC) == {0: (20, 15)}
        signing.record_signed_offsets(GROUP, {(TOPIC, 0): 12})
        assert ingest.offsets(GROUP, TOPIC) == {0: (20, 15)}
        signing.record_signed_offsets("another group", {(TOPIC, 0): 20})
        assert ingest.offsets(GROUP, TOPIC) == {0: (20, 15)}
