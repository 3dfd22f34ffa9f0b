"""Claims bound to their journal and step: the upgrade of the claims table, and what the
service does with a claim of another step or written before claims named theirs."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from sagacity.chain import link
from sagacity.consumers.compensation._invoker import ClaimingInvoker
from sagacity.consumers.compensation._job import _step_claims
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType
from sagacity.errors import CompensationInDoubtError
from sagacity.ports import Claim, ClaimStatus
from sagacity.postgres._claims import COMPONENT, TABLE, PostgresClaimStore, _migrations
from sagacity.postgres._migrate import migrate
from sagacity.testing import InMemoryClaimStore
from sagacity.undo._compensation import CompensationCall

JOURNAL = "kafka:cluster/journal"


def _call(saga: str, seq: int, calls: list[int], *, idempotent: bool = False) -> CompensationCall:
    step = link(
        EntryDraft(saga_id=saga, event_type=EventType.EXECUTED, tool="reserve"),
        seq=seq,
        prev_hash=GENESIS_HASH,
    )
    return CompensationCall(
        step=step,
        target="release",
        function=lambda: calls.append(seq),
        args=(),
        kwargs={},
        payload=None,
        idempotent=idempotent,
    )


@pytest.mark.postgres
def test_claims_of_the_previous_release_become_unbound_and_never_skip_an_undo(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn, COMPONENT, _migrations()[:1])  # the table as the previous release made it
        for seq, status in ((3, "COMPENSATED"), (4, "FAILED"), (5, "CLAIMED")):
            conn.execute(
                f"INSERT INTO {TABLE} (saga_id, step_seq, target, idempotency_key, instance,"
                " status, result) VALUES ('s', %s, 'release', 'k', 'old', %s, 'old result')",
                (seq, status),
            )
    store = PostgresClaimStore(pg_dsn, instance="new", journal=JOURNAL)
    store.ensure_schema()
    try:
        assert [(c.step_seq, c.unbound, c.result) for c in store.claims("s")] == [
            (3, True, None),
            (4, True, None),
            (5, True, None),
        ]
        calls: list[int] = []
        invoker = ClaimingInvoker(store, timeout_s=5)
        # COMPENSATED before the upgrade, perhaps by this step, perhaps by another journal's:
        # neither skipped as done nor called again; a person decides.
        with pytest.raises(CompensationInDoubtError, match="before claims named their journal"):
            invoker(_call("s", 3, calls))
        with pytest.raises(CompensationInDoubtError):
            invoker(_call("s", 5, calls))
        assert calls == []
        invoker(_call("s", 4, calls))  # it failed: nothing to undo twice
        invoker(_call("s", 5, calls, idempotent=True))  # its key makes a repeat harmless
        assert calls == [4, 5]
        bound = {c.step_seq: c for c in store.claims("s") if not c.unbound}
        assert bound[4].status is ClaimStatus.COMPENSATED
        assert bound[3].status is ClaimStatus.CLAIMED
        with psycopg.connect(pg_dsn) as conn:
            key = conn.execute(
                "SELECT array_agg(a.attname::text ORDER BY k.n) FROM pg_index i"
                " CROSS JOIN unnest(i.indkey) WITH ORDINALITY k(attnum, n)"
                " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
                " WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (TABLE,),
            ).fetchone()
        assert key == (["journal", "saga_id", "step_seq", "step_hash"],)
    finally:
        store.close()


def test_a_claim_of_another_journal_or_entry_is_not_the_steps() -> None:
    calls: list[int] = []
    mine = InMemoryClaimStore(journal=JOURNAL)
    theirs = InMemoryClaimStore(journal="kafka:cluster/other", sharing=mine)
    call = _call("s", 2, calls)
    theirs.claim("s", 2, step_hash=call.step.hash, target="release", key="k")
    theirs.record("s", 2, ClaimStatus.COMPENSATED, step_hash=call.step.hash, result="theirs")
    other_entry = hashlib.sha256(b"another entry at seq 2").hexdigest()
    mine.claim("s", 2, step_hash=other_entry, target="release", key="k")
    mine.record("s", 2, ClaimStatus.COMPENSATED, step_hash=other_entry, result="not this one")
    ClaimingInvoker(mine, timeout_s=5)(call)
    assert calls == [2]


def test_the_reconciler_takes_only_the_steps_own_claim() -> None:
    calls: list[int] = []
    step = _call("s", 2, calls).step
    other = hashlib.sha256(b"x").hexdigest()

    def claim(step_hash: str, *, unbound: bool = False) -> Claim:
        return Claim(
            saga_id="s",
            step_seq=2,
            step_hash=step_hash,
            status=ClaimStatus.COMPENSATED,
            attempts=1,
            unbound=unbound,
        )

    assert _step_claims([claim(other)], [step]) == {}
    assert _step_claims([claim("", unbound=True), claim(step.hash)], [step]) == {
        2: claim(step.hash)
    }
    assert _step_claims([claim("", unbound=True)], [step]) == {2: claim("", unbound=True)}
    assert _step_claims([claim(step.hash)], []) == {}  # no such step on the chain
