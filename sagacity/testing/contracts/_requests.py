"""The contract every :class:`~sagacity.ports.RequestStore` meets; subclass it per adapter.

A subclass provides :meth:`RequestStoreContract.create_store`: a store on a fresh database
for each call, its tables not yet created, counting approvals with the verifier given.  The
rows a store folds from a chain are the ones the core's fold gives
(:meth:`sagacity.ports.RequestRow.from_state`).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.chain import link, payload_sha256
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.gate._deadline_extension import counted_extensions
from sagacity.gate._requests import request_states, verified_by
from sagacity.ports import RequestRow, RequestStore, RowState
from sagacity.signing._decision_signature import DecisionSigner, DecisionVerifier
from sagacity.signing._operator_signature import OperatorSigner, OperatorVerifier
from sagacity.testing.contracts._chains import PAYLOAD, PAYLOAD_SHA, E, _Chain, _saga
from sagacity.testing.contracts._claims import JOURNAL
from sagacity.testing.contracts._decisions import RequestDecisionContract


class RequestStoreContract(RequestDecisionContract, abc.ABC):
    """Fold requests, signatures and closings idempotently; list, age and count them."""

    @abc.abstractmethod
    def create_store(
        self,
        *,
        verifier: DecisionVerifier | None = None,
        operator: OperatorVerifier | None = None,
    ) -> RequestStore:
        """A store on a fresh database, its tables not yet created; ``verifier`` (the
        approvals service's decision keys) decides which approvals sign, ``None``: all;
        ``operator`` (the pinned operator keys) which deadline extensions count, ``None``:
        none.  The store is made for the journal named :data:`JOURNAL`."""

    def fold(self, store: RequestStore, entries: Sequence[JournalEntry]) -> None:
        """Fold ``entries`` as a consumer would: one event at a time, each replayed once."""
        for entry in entries:
            store.apply([entry])
        store.apply(entries)

    def test_it_implements_the_protocol(self, store: RequestStore) -> None:
        assert isinstance(store, RequestStore)
        store.ping()
        store.migrate()  # repeatable

    def test_a_request_is_folded_pending_with_its_fields(self, store: RequestStore) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request(signatures=2, expires_at_us=1_800_000_000_000_000)
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.open, row.tool, row.payload) == (
            RowState.PENDING,
            True,
            "wire",
            PAYLOAD,
        )
        assert row.payload_sha256 == payload_sha256(PAYLOAD)
        assert (row.signatures_required, row.policy_version, row.reversibility) == (
            2,
            "7",
            "IRREVERSIBLE",
        )
        assert (row.requested_at_us, row.expires_at_us) == (
            chain.entries[-1].recorded_at_us,
            1_800_000_000_000_000,
        )
        assert row.signed_by == ()
        assert (row.decision, row.decided_by, row.closed_at_us) == (None, None, None)
        assert store.get(chain.saga_id, seq + 1) is None
        assert store.get(_saga(), 1) is None

    def test_distinct_signatures_until_fully_signed(self, store: RequestStore) -> None:
        chain = _Chain()
        seq = chain.request(signatures=2)
        chain.add(E.APPROVED, actor="nadia", ref=seq, policy_version="7")
        chain.add(E.APPROVED, actor="nadia", ref=seq, policy_version="7")
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by, row.decision) == (RowState.PENDING, ("nadia",), None)
        completing = chain.add(E.APPROVED, actor="omar", ref=seq, policy_version="8")
        chain.add(E.APPROVED, actor="pia", ref=seq, policy_version="9")
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.open, row.signed_by) == (RowState.APPROVED, True, ("nadia", "omar"))
        assert (row.decision, row.decided_by, row.decided_at_us, row.decision_policy_version) == (
            "approved",
            "omar",
            completing.recorded_at_us,
            "8",
        )
        assert row.closed_at_us is None

    def test_a_rejection_decides_and_closes(self, store: RequestStore) -> None:
        chain = _Chain()
        seq = chain.request(signatures=2)
        chain.add(E.APPROVED, actor="nadia", ref=seq)
        rejection = chain.add(E.REJECTED, actor="omar", ref=seq, policy_version="7")
        chain.add(E.APPROVED, actor="pia", ref=seq)  # too late: closed
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.open, row.signed_by) == (RowState.REJECTED, False, ("nadia",))
        assert (row.decision, row.decided_by, row.decided_at_us) == (
            "rejected",
            "omar",
            rejection.recorded_at_us,
        )
        assert row.closed_at_us == rejection.recorded_at_us

    def test_closing_an_approved_request_keeps_its_decision(self, store: RequestStore) -> None:
        chain = _Chain()
        seq = chain.request()
        approval = chain.add(E.APPROVED, actor="nadia", ref=seq)
        expiry = chain.add(E.EXPIRED, ref=seq)
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.decision, row.decided_by) == (RowState.EXPIRED, "approved", "nadia")
        assert (row.decided_at_us, row.closed_at_us) == (
            approval.recorded_at_us,
            expiry.recorded_at_us,
        )

    @pytest.mark.parametrize(
        ("closing", "state", "decision"),
        [
            (E.EXPIRED, RowState.EXPIRED, "expired"),
            (E.RESUME_REFUSED, RowState.REFUSED, None),
            (E.CONSTRAINT_VIOLATED, RowState.REFUSED, None),
            (E.INTENT, RowState.RESUMED, None),
        ],
    )
    def test_each_closing_event(
        self, store: RequestStore, closing: EventType, state: RowState, decision: str | None
    ) -> None:
        chain = _Chain()
        seq = chain.request()
        closer = chain.add(closing, ref=seq)
        chain.add(E.REJECTED, actor="late", ref=seq)  # the first closing wins
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.decision, row.closed_at_us) == (
            state,
            decision,
            closer.recorded_at_us,
        )

    def test_the_end_of_the_saga_closes_what_is_open(self, store: RequestStore) -> None:
        chain = _Chain()
        first = chain.request()
        second = chain.request()
        chain.add(E.REJECTED, actor="omar", ref=first)
        chain.add(E.SAGA_ENDED, result="AWAITING_APPROVAL")  # leaves requests open
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, second)
        assert row is not None
        assert row.state is RowState.PENDING
        end = chain.add(E.COMPENSATION_REQUESTED)
        later = chain.request()
        self.fold(store, chain.entries)
        first_row, second_row, later_row = (
            store.get(chain.saga_id, s) for s in (first, second, later)
        )
        assert first_row is not None
        assert first_row.state is RowState.REJECTED
        assert second_row is not None
        assert (second_row.state, second_row.closed_at_us) == (RowState.ENDED, end.recorded_at_us)
        assert later_row is not None
        assert later_row.state is RowState.PENDING

    def test_decisions_without_a_request_change_nothing(self, store: RequestStore) -> None:
        chain = _Chain()
        seq = chain.request()
        chain.add(E.APPROVED, actor="nadia", ref=seq + 10)
        chain.add(E.REJECTED, actor="omar", ref=seq + 10)
        chain.add(E.APPROVED, actor="", ref=seq)  # no approver: not a signature
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by) == (RowState.PENDING, ())
        assert store.get(chain.saga_id, seq + 10) is None

    def test_listing_filters_and_orders(self, store: RequestStore) -> None:
        chains = [_Chain(start_us=1_700_000_000_000_000 + n * 10_000_000) for n in range(4)]
        seqs = [
            chain.request(tool=tool)
            for chain, tool in zip(chains, ("wire", "wire", "delete", "wire"), strict=True)
        ]
        chains[1].add(E.REJECTED, actor="omar", ref=seqs[1])
        for chain in reversed(chains):
            self.fold(store, chain.entries)
        ids = [c.saga_id for c in chains]
        assert [r.saga_id for r in store.requests()] == [ids[0], ids[2], ids[3]]
        assert [r.saga_id for r in store.requests(tools=["wire"])] == [ids[0], ids[3]]
        assert [r.saga_id for r in store.requests(limit=1)] == [ids[0]]
        assert [r.saga_id for r in store.requests(states=["rejected"])] == [ids[1]]
        assert [r.saga_id for r in store.requests(states=["pending", "rejected"])] == ids
        assert [r.saga_id for r in store.requests(tools=["nothing"])] == []

    def test_decided_and_closed_since(self, store: RequestStore) -> None:
        approved, rejected, open_ = _Chain(), _Chain(), _Chain()
        a = approved.request()
        approval = approved.add(E.APPROVED, actor="nadia", ref=a)
        r = rejected.request()
        rejection = rejected.add(E.REJECTED, actor="omar", ref=r, after_us=5_000_000)
        open_.request()
        for chain in (approved, rejected, open_):
            self.fold(store, chain.entries)
        assert [x.saga_id for x in store.decided(since_us=approval.recorded_at_us)] == [
            approved.saga_id,
            rejected.saga_id,
        ]
        assert [x.saga_id for x in store.decided(since_us=approval.recorded_at_us + 1)] == [
            rejected.saga_id
        ]
        assert [
            x.saga_id for x in store.closed(["rejected"], since_us=rejection.recorded_at_us)
        ] == [rejected.saga_id]
        assert store.closed(["rejected"], since_us=rejection.recorded_at_us + 1) == []
        assert store.closed(["approved"], since_us=0) == []  # approved is open, not closed

    def test_overdue_by_own_deadline_or_ttl(self, store: RequestStore) -> None:
        own, by_ttl, fresh, closed = _Chain(), _Chain(), _Chain(), _Chain()
        base = own.now_us
        own.request(expires_at_us=base + 5_000_000)
        by_ttl.request()
        fresh.request(expires_at_us=base + 100_000_000)
        seq = closed.request(expires_at_us=base + 5_000_000)
        closed.add(E.REJECTED, actor="omar", ref=seq)
        for chain in (own, by_ttl, fresh, closed):
            self.fold(store, chain.entries)
        now = base + 10_000_000
        assert {r.saga_id for r in store.overdue(now, None)} == {own.saga_id}
        # The earlier of the two deadlines counts.
        assert {r.saga_id for r in store.overdue(now, 100_000_000)} == {own.saga_id}
        assert {r.saga_id for r in store.overdue(now, 2_000_000)} == {
            own.saga_id,
            by_ttl.saga_id,
            fresh.saga_id,
        }
        assert len(store.overdue(now, 2_000_000, limit=1)) == 1

    def test_a_verified_extension_moves_the_rows_deadline(self) -> None:
        """Only an extension the pinned operator key signed counts: the sweep's ``overdue``
        leaves the extended request alone until its later deadline, and the row says by how
        much (the inbox and the notices add it)."""
        operator = OperatorSigner(Ed25519PrivateKey.generate())
        other = OperatorSigner(Ed25519PrivateKey.generate())
        store = self.create_store(operator=OperatorVerifier([operator.public_raw]))
        store.migrate()
        kept, forged, plain = _Chain(), _Chain(), _Chain()
        base = kept.now_us
        for chain in (kept, forged, plain):
            chain.now_us = base
            seq = chain.request(expires_at_us=base + 5_000_000)
            assert seq == 1
        kept.extend(1, 60_000_000, operator)
        kept.extend(1, 30_000_000, operator)
        forged.extend(1, 60_000_000, other)  # a key nobody pinned
        for chain in (kept, forged, plain):
            self.fold(store, chain.entries)
        rows = {c.saga_id: store.get(c.saga_id, 1) for c in (kept, forged, plain)}
        assert {k: r.extended_by_us if r else None for k, r in rows.items()} == {
            kept.saga_id: 90_000_000,
            forged.saga_id: 0,
            plain.saga_id: 0,
        }
        now = base + 10_000_000
        assert {r.saga_id for r in store.overdue(now, None)} == {forged.saga_id, plain.saga_id}
        later = base + 96_000_000
        assert {r.saga_id for r in store.overdue(later, None)} == {
            kept.saga_id,
            forged.saga_id,
            plain.saga_id,
        }
        # The row is the core's fold, with the same rule the expiry counts by.
        expected = request_states(
            kept.entries,
            extends=counted_extensions(OperatorVerifier([operator.public_raw]), journal=JOURNAL),
        )
        assert rows[kept.saga_id] == RequestRow.from_state(expected[0])

    def test_stats_over_a_window(self, store: RequestStore) -> None:
        chains = [_Chain() for _ in range(4)]
        seqs = [chain.request() for chain in chains]
        chains[0].add(E.APPROVED, actor="a", ref=seqs[0], after_us=2_000_000)
        chains[1].add(E.APPROVED, actor="b", ref=seqs[1], after_us=4_000_000)
        chains[2].add(E.REJECTED, actor="c", ref=seqs[2], after_us=6_000_000)
        for chain in chains:
            self.fold(store, chain.entries)
        now = chains[2].now_us + 1_000_000
        stats = store.stats(now_us=now, window_s=3600)
        assert (stats.approved, stats.rejected, stats.expired, stats.pending) == (2, 1, 0, 3)
        assert stats.approve_ratio == pytest.approx(2 / 3)
        assert stats.latency_p50_s == pytest.approx(4.0)
        assert stats.latency_p95_s == pytest.approx(5.8)
        assert stats.oldest_pending_age_s == pytest.approx(
            (now - chains[0].entries[0].recorded_at_us) / 1e6
        )
        empty = store.stats(now_us=now + 10**10, window_s=1)
        assert (empty.approved, empty.latency_p50_s, empty.approve_ratio) == (0, None, None)

    def test_the_attention_queue(self, store: RequestStore) -> None:
        chain = _Chain()
        failed = chain.add(E.SAGA_ENDED, result="COMPENSATION_FAILED", dirty="refund@3")
        self.fold(store, chain.entries)
        (row,) = [r for r in store.attention() if r.saga_id == chain.saga_id]
        assert (row.status, row.detail, row.since_us, row.ended_seq) == (
            "COMPENSATION_FAILED",
            "refund@3",
            failed.recorded_at_us,
            failed.seq,
        )
        chain.add(E.SAGA_ENDED, result="COMPENSATED")
        self.fold(store, chain.entries)
        assert [r for r in store.attention() if r.saga_id == chain.saga_id] == []

    def rows(self, store: RequestStore, chain: _Chain) -> list[RequestRow]:
        """The rows ``store`` holds for ``chain``'s requests."""
        seqs = [e.seq for e in chain.entries if e.event_type is E.AWAITING_APPROVAL]
        return [row for row in (store.get(chain.saga_id, s) for s in seqs) if row is not None]

    def test_rows_are_the_core_fold(self) -> None:
        signer = DecisionSigner.ephemeral()
        verifier = DecisionVerifier([signer.public_raw])
        store = self.create_store(verifier=verifier)
        store.migrate()
        chain = _Chain()
        first = chain.request(signatures=2)
        second = chain.request()
        chain.add(E.APPROVED, actor="nadia", ref=first, signer=signer, payload_sha256=PAYLOAD_SHA)
        chain.add(E.APPROVED, actor="mallory", ref=first)
        chain.add(E.REJECTED, actor="omar", ref=second, signer=signer)
        chain.add(E.SAGA_ENDED, result="COMPENSATED")
        self.fold(store, chain.entries)
        expected = [
            RequestRow.from_state(s)
            for s in request_states(chain.entries, counts=verified_by(verifier, journal=JOURNAL))
        ]
        assert self.rows(store, chain) == expected
        assert [r.state for r in expected] == [RowState.ENDED, RowState.REJECTED]

    def test_an_approval_the_service_did_not_sign_is_no_signature(self) -> None:
        service = DecisionSigner.ephemeral()
        store = self.create_store(verifier=DecisionVerifier([service.public_raw]))
        store.migrate()
        chain = _Chain()
        seq = chain.request(signatures=2)
        # Forged on the topic: unsigned, signed with another key, signed for another payload,
        # a genuine signature moved to another approver.
        chain.add(E.APPROVED, actor="mallory", ref=seq, payload_sha256=PAYLOAD_SHA)
        other = DecisionSigner.ephemeral()
        chain.add(E.APPROVED, actor="eve", ref=seq, signer=other, payload_sha256=PAYLOAD_SHA)
        chain.add(E.APPROVED, actor="trent", ref=seq, signer=service, payload_sha256="0" * 64)
        genuine = service.sign(
            EntryDraft(
                saga_id=chain.saga_id,
                event_type=E.APPROVED,
                tool="wire",
                actor="nadia",
                attributes={
                    "ref_seq": str(seq),
                    "payload_sha256": PAYLOAD_SHA,
                    "request_hash": chain.entries[seq - 1].hash,
                    "journal": JOURNAL,
                },
                recorded_at_us=chain.now_us + 1,
            )
        )
        chain.add(
            E.APPROVED,
            actor="victor",
            ref=seq,
            payload_sha256=PAYLOAD_SHA,
            decision_signature=genuine.attributes["decision_signature"],
        )
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by, row.decision, row.decided_by) == (
            RowState.PENDING,
            (),
            None,
            None,
        )
        assert store.stats(now_us=chain.now_us, window_s=3600).approved == 0
        # One approval the service signed counts; the second completes the request.
        chain.add(E.APPROVED, actor="nadia", ref=seq, signer=service, payload_sha256=PAYLOAD_SHA)
        chain.add(E.APPROVED, actor="mallory", ref=seq, payload_sha256=PAYLOAD_SHA)
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by) == (RowState.PENDING, ("nadia",))
        done = chain.add(
            E.APPROVED, actor="omar", ref=seq, signer=service, payload_sha256=PAYLOAD_SHA
        )
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by, row.decided_by, row.decided_at_us) == (
            RowState.APPROVED,
            ("nadia", "omar"),
            "omar",
            done.recorded_at_us,
        )

    def test_a_repeated_entry_changes_nothing(self, store: RequestStore) -> None:
        chain = _Chain()
        seq = chain.request(signatures=2)
        approval = chain.add(E.APPROVED, actor="nadia", ref=seq)
        self.fold(store, chain.entries)
        before = self.rows(store, chain)
        # The same entry delivered again, alone and in a batch, and another entry at its seq
        # (a fork of the chain): the first entry at a seq is the one folded.
        store.apply([approval])
        store.apply([approval, approval])
        fork = dataclasses.replace(approval, actor="mallory")
        closing = dataclasses.replace(approval, event_type=E.REJECTED, actor="mallory")
        store.apply([fork, closing])
        assert self.rows(store, chain) == before
        assert before[0].signed_by == ("nadia",)

    # -- the acceptance rule: only the chain's events are folded (docs/adr/0025) -----------
    def _decoy(self, chain: _Chain, *, seq: int, tool: str, payload: str) -> JournalEntry:
        """What any producer to the topic can write: a request with a valid hash at ``seq``
        whose previous hash does not link to the chain."""
        return link(
            EntryDraft(
                saga_id=chain.saga_id,
                event_type=E.AWAITING_APPROVAL,
                tool=tool,
                payload=payload,
                attributes={
                    "payload_sha256": payload_sha256(payload),
                    "signatures_required": "1",
                    "policy_version": "7",
                    "reversibility": "IRREVERSIBLE",
                },
                recorded_at_us=chain.now_us,
            ),
            seq=seq,
            prev_hash="ab" * 32,
        )

    def test_a_decoy_request_is_quarantined_and_the_chains_request_shown(
        self, store: RequestStore
    ) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        decoy = self._decoy(chain, seq=2, tool="lookup", payload='{"q":"harmless"}')
        seq = chain.request()
        assert seq == decoy.seq
        # The decoy reaches the store first, then the chain's own request at the same seq.
        store.apply([chain.entries[0], decoy, chain.entries[1]])
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.tool, row.payload, row.entry_hash) == ("wire", PAYLOAD, chain.entries[1].hash)
        [refused] = store.quarantined(saga_id=chain.saga_id)
        assert (refused.seq, refused.kind, refused.entry_hash) == (seq, "fork", decoy.hash)
        assert [r.saga_id for r in store.requests()] == [chain.saga_id]

    def test_events_off_the_chain_fold_nothing(self, store: RequestStore) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request(signatures=2)
        approval = chain.add(E.APPROVED, actor="nadia", ref=seq)
        store.apply(chain.entries[:2])
        edited = dataclasses.replace(chain.entries[2], actor="mallory")  # content ≠ its hash
        ahead = self._decoy(chain, seq=seq + 2, tool="wire", payload=PAYLOAD)  # a seq skipped
        # A second, differently signed approval at the approval's seq after it (a fork).
        fork = link(
            EntryDraft(
                saga_id=chain.saga_id,
                event_type=E.REJECTED,
                tool="wire",
                actor="mallory",
                attributes={"ref_seq": str(seq)},
                recorded_at_us=chain.now_us,
            ),
            seq=approval.seq,
            prev_hash=chain.entries[1].hash,
        )
        store.apply([edited, ahead, approval, fork])
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by) == (RowState.PENDING, ("nadia",))
        kinds = [(q.seq, q.kind) for q in store.quarantined(saga_id=chain.saga_id)]
        assert kinds == [(approval.seq, "edited"), (seq + 2, "fork"), (approval.seq, "fork")]

    def test_a_saga_first_seen_past_its_start_is_not_folded(self, store: RequestStore) -> None:
        chain = _Chain()
        chain.add(E.SAGA_OPENED)
        seq = chain.request()
        store.apply(chain.entries[1:])  # its first event never reached the store
        assert store.get(chain.saga_id, seq) is None
        [refused] = store.quarantined(saga_id=chain.saga_id)
        assert (refused.seq, refused.kind) == (seq, "unknown_prefix")

    def test_a_damaged_reference_refers_to_nothing(self, store: RequestStore) -> None:
        chain = _Chain()
        seq = chain.request()
        chain.add(E.APPROVED, actor="nadia", ref_seq="first")
        chain.add(E.REJECTED, actor="omar", ref_seq=f"{seq}x")
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by) == (RowState.PENDING, ())
        chain.add(E.APPROVED, actor="nadia", ref=seq)
        self.fold(store, chain.entries)
        row = store.get(chain.saga_id, seq)
        assert row is not None
        assert (row.state, row.signed_by) == (RowState.APPROVED, ("nadia",))
