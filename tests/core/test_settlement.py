"""Settling a SUSPECT step: a person's word on the chain, then the saga's end follows."""

from __future__ import annotations

from typing import Any

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal, Sagacity, SagaStatus, verify
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalNotFound,
    DecisionInProgressError,
    InvalidArgumentError,
    UnknownSagaError,
)
from sagacity.gate._settlement import open_suspects, suspect_steps

from .conftest import Ledger, only

E = EventType


def _suspect_call(sagacity: Sagacity, journal: InMemoryJournal, saga_id: str, tools: Any) -> int:
    """A saga whose writer died between a reservation's INTENT and its outcome, compensated."""
    sagacity.saga(saga_id, lambda: tools.reserve_inventory("p", 1))
    intent = journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.INTENT,
            tool="reserve_inventory",
            payload='{"product_id":"q","quantity":2}',
            attributes={"reversibility": "REVERSIBLE"},
        )
    )
    result = sagacity.compensate(saga_id)
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.seq for s in result.suspects] == [intent.seq]
    return intent.seq


def _undone(ledger: Ledger) -> int:
    """How many times the suspect reservation (product q) was released."""
    return sum(1 for c in ledger.contexts if c.arguments.get("product_id") == "q")


def _suspect_undo(sagacity: Sagacity, journal: InMemoryJournal, saga_id: str, tools: Any) -> int:
    """A saga whose non-idempotent undo (release_inventory) was interrupted mid-call."""
    sagacity.saga(saga_id, lambda: tools.reserve_inventory("p", 1))
    executed = only(journal.entries(saga_id), E.EXECUTED)[-1]
    journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=E.COMPENSATION_INTENT,
            tool=executed.tool,
            attributes={"ref_seq": str(executed.seq)},
        )
    )
    assert sagacity.compensate(saga_id).status is SagaStatus.COMPENSATION_FAILED
    return executed.seq


def test_executed_call_is_undone_once_and_the_saga_ends_compensated(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any, ledger: Ledger
) -> None:
    seq = _suspect_call(sagacity, journal, "s-exec", tools)
    assert _undone(ledger) == 0
    result = sagacity.settle("s-exec", seq, "executed", "ops@example.com", note="stock held")
    assert result.status is SagaStatus.COMPENSATED
    assert _undone(ledger) == 1
    entries = journal.entries("s-exec")
    (settled,) = only(entries, E.SUSPECT_SETTLED)
    assert settled.actor == "ops@example.com"
    assert settled.ref_seq == seq
    assert settled.attributes["outcome"] == "executed"
    assert settled.attributes["note"] == "stock held"
    assert settled.attributes["phase"] == "call"
    assert only(entries, E.COMPENSATED)[-1].ref_seq == seq
    assert verify(entries).ok
    # Running compensation again undoes nothing twice.
    assert sagacity.compensate("s-exec").status is SagaStatus.COMPENSATED
    assert _undone(ledger) == 1
    assert open_suspects(entries) == []


def test_not_executed_and_fixed_by_hand_close_the_step_without_an_undo(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any, ledger: Ledger
) -> None:
    for saga_id, outcome in (("s-not", "not-executed"), ("s-hand", "fixed-by-hand")):
        seq = _suspect_call(sagacity, journal, saga_id, tools)
        result = sagacity.settle(saga_id, seq, outcome, "ops", note="checked the bank")
        assert result.status is SagaStatus.COMPENSATED
        assert result.suspects == ()
        assert sagacity.outcome(saga_id).status is SagaStatus.COMPENSATED  # type: ignore[union-attr]
    assert _undone(ledger) == 0


def test_settling_twice_says_who_settled_it(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any
) -> None:
    seq = _suspect_call(sagacity, journal, "s-twice", tools)
    sagacity.settle("s-twice", seq, "not-executed", "alice", note="n")
    with pytest.raises(AlreadyDecidedError, match="settled not-executed by alice"):
        sagacity.settle("s-twice", seq, "executed", "bob", note="n")
    assert len(only(journal.entries("s-twice"), E.SUSPECT_SETTLED)) == 1


def test_bad_input_is_refused_and_journals_nothing(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any
) -> None:
    seq = _suspect_call(sagacity, journal, "s-bad", tools)
    before = len(journal.entries("s-bad"))
    with pytest.raises(InvalidArgumentError, match="outcome must be one of"):
        sagacity.settle("s-bad", seq, "maybe", "ops", note="n")
    with pytest.raises(InvalidArgumentError, match="note"):
        sagacity.settle("s-bad", seq, "executed", "ops", note="  ")
    with pytest.raises(InvalidArgumentError):
        sagacity.settle("s-bad", seq, "executed", "", note="n")
    with pytest.raises(ApprovalNotFound, match="no suspect step at seq 1"):
        sagacity.settle("s-bad", 1, "executed", "ops", note="n")
    with pytest.raises(UnknownSagaError):
        sagacity.settle("nope", 1, "executed", "ops", note="n")
    assert len(journal.entries("s-bad")) == before


def test_a_saga_being_compensated_cannot_be_settled(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any
) -> None:
    seq = _suspect_call(sagacity, journal, "s-busy", tools)
    journal.append(
        EntryDraft(
            saga_id="s-busy",
            event_type=E.SAGA_ENDED,
            result=SagaStatus.COMPENSATION_PENDING.value,
        )
    )
    with pytest.raises(DecisionInProgressError, match="being compensated"):
        sagacity.settle("s-busy", seq, "executed", "ops", note="n")


def test_an_undo_in_doubt_settled_executed_is_done_and_not_executed_is_called_again(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any, ledger: Ledger
) -> None:
    seq = _suspect_undo(sagacity, journal, "u-exec", tools)
    result = sagacity.settle("u-exec", seq, "executed", "ops", note="stock was released")
    assert result.status is SagaStatus.COMPENSATED
    assert "release_inventory" not in ledger.names()
    assert result.compensated == ()

    seq = _suspect_undo(sagacity, journal, "u-not", tools)
    (step,) = suspect_steps(journal.entries("u-not"))
    assert step.phase == "compensation"
    result = sagacity.settle("u-not", seq, "not-executed", "ops", note="still reserved")
    assert result.status is SagaStatus.COMPENSATED
    assert ledger.names().count("release_inventory") == 1
    assert result.compensated == (seq,)


def test_a_copy_of_a_settlement_appended_later_does_not_call_the_undo_again(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any, ledger: Ledger
) -> None:
    """A writer copies the step's "not-executed" settlement after the step was undone: the
    step is settled once, so the copy is no new word and the undo is not called twice."""
    seq = _suspect_undo(sagacity, journal, "u-copy", tools)
    sagacity.settle("u-copy", seq, "not-executed", "ops", note="still reserved")
    assert ledger.names().count("release_inventory") == 1
    (settled,) = only(journal.entries("u-copy"), E.SUSPECT_SETTLED)
    journal.append(
        EntryDraft(
            saga_id="u-copy",
            event_type=E.SUSPECT_SETTLED,
            tool=settled.tool,
            actor=settled.actor,
            attributes=dict(settled.attributes),
        )
    )
    assert sagacity.compensate("u-copy").status is SagaStatus.COMPENSATED
    assert ledger.names().count("release_inventory") == 1


def test_delegated_settlement_hands_the_saga_to_the_compensation_service(
    sagacity: Sagacity, journal: InMemoryJournal, tools: Any
) -> None:
    seq = _suspect_call(sagacity, journal, "s-del", tools)
    desk = Sagacity(journal, compensation="delegated", writer_id="approvals")
    result = desk.settle("s-del", seq, "executed", "ops", note="n")
    assert result.status is SagaStatus.COMPENSATION_PENDING
    tail = [e.event_type for e in journal.entries("s-del")[-3:]]
    assert tail == [E.SUSPECT_SETTLED, E.COMPENSATION_REQUESTED, E.SAGA_ENDED]
    assert journal.entries("s-del")[-2].attributes["reason"] == "SUSPECT_SETTLED"


def test_a_settlement_by_a_signing_service_carries_a_verifying_signature(
    journal: InMemoryJournal, order_tools: Any, approvals_key: Any
) -> None:
    from sagacity import DecisionVerifier

    service = Sagacity(journal=journal, decision_signer=approvals_key)
    tools = service.wrap(order_tools)
    seq = _suspect_call(service, journal, "s-signed", tools)
    service.settle("s-signed", seq, "not-executed", "ops@example.com", note="nothing held")
    (settled,) = only(journal.entries("s-signed"), E.SUSPECT_SETTLED)
    verifier = DecisionVerifier([approvals_key.public_raw])
    assert verifier.check(settled) is None
    # The outcome and the phase are covered: a settlement turned into another one fails.
    altered = EntryDraft(
        saga_id=settled.saga_id,
        event_type=settled.event_type,
        tool=settled.tool,
        actor=settled.actor,
        attributes={**settled.attributes, "outcome": "executed"},
        recorded_at_us=settled.recorded_at_us,
    )
    assert verifier.check(altered) == "bad_decision_signature"
    moved = EntryDraft(
        saga_id=settled.saga_id,
        event_type=settled.event_type,
        tool=settled.tool,
        actor=settled.actor,
        attributes={**settled.attributes, "phase": "compensation"},
        recorded_at_us=settled.recorded_at_us,
    )
    assert verifier.check(moved) == "bad_decision_signature"


def test_a_forged_settlement_is_not_acted_on(
    journal: InMemoryJournal, order_tools: Any, ledger: Ledger, approvals_key: Any
) -> None:
    """Only the approvals service's word settles a step: an unsigned SUSPECT_SETTLED
    "executed" appended by any writer does not make the compensation undo anything."""
    service = Sagacity(journal=journal, decision_signer=approvals_key)
    tools = service.wrap(order_tools)
    seq = _suspect_call(service, journal, "s-forged", tools)
    journal.append(
        EntryDraft(
            saga_id="s-forged",
            event_type=E.SUSPECT_SETTLED,
            tool="reserve_inventory",
            actor="ops@example.com",
            attributes={"ref_seq": str(seq), "phase": "call", "outcome": "executed"},
        )
    )
    result = service.compensate("s-forged")
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert [s.seq for s in result.suspects] == [seq]
    assert _undone(ledger) == 0
    # The service's own settlement is acted on.
    done = service.settle("s-forged", seq, "executed", "ops@example.com", note="checked")
    assert done.status is SagaStatus.COMPENSATED
    assert _undone(ledger) == 1
