"""Which COMPENSATION_REQUESTED stands: after a saga's end, only the operator's signed one, or
one a person's first settlement of a suspect step reopened the saga for."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal, JournalEntry
from sagacity.consumers.compensation import pending_request
from sagacity.signing._operator_signature import OperatorSigner, OperatorVerifier, append_signed
from sagacity.signing._operator_signature import generate_key as generate_operator_key
from sagacity.undo._standing import standing

E = EventType


@pytest.fixture
def signer(tmp_path: Path) -> OperatorSigner:
    return generate_operator_key(tmp_path / "operator.pem")


def _saga(journal: InMemoryJournal, *events: tuple[EventType, str | None]) -> list[JournalEntry]:
    for event, result in events:
        attributes = {"ref_seq": "2", "outcome": "executed", "phase": "call"}
        journal.append(
            EntryDraft(
                saga_id="s",
                event_type=event,
                result=result,
                attributes=attributes if event is E.SUSPECT_SETTLED else {},
            )
        )
    return list(journal.entries("s"))


@pytest.mark.parametrize("end", ["COMPLETED", "COMPENSATED", "COMPENSATION_FAILED", "REJECTED"])
def test_an_unsigned_request_after_the_end_does_not_stand(end: str, signer: OperatorSigner) -> None:
    journal = InMemoryJournal()
    chain = _saga(
        journal, (E.SAGA_OPENED, None), (E.SAGA_ENDED, end), (E.COMPENSATION_REQUESTED, None)
    )
    found = standing(chain, operator=OperatorVerifier([signer.public_raw]))
    assert found.request is None
    refused = found.refusal_of(3)
    assert refused is not None
    assert refused.reason == "unsigned_operator_event"
    assert f"ended {end} (seq 2)" in refused.detail
    assert pending_request(chain) is None


def test_the_operators_request_after_the_end_stands(signer: OperatorSigner) -> None:
    journal = InMemoryJournal()
    _saga(journal, (E.SAGA_OPENED, None), (E.SAGA_ENDED, "COMPLETED"))
    request = append_signed(
        journal,
        EntryDraft(saga_id="s", event_type=E.COMPENSATION_REQUESTED, attributes={"reason": "r"}),
        signer,
    )
    chain = list(journal.entries("s"))
    assert standing(chain, operator=OperatorVerifier([signer.public_raw])).request == request
    assert standing(chain).request is None  # no key pinned: nothing after an end stands
    # Once the service ended it again, a further unsigned request does not stand.
    chain = _saga(journal, (E.SAGA_ENDED, "COMPENSATED"), (E.COMPENSATION_REQUESTED, None))
    assert standing(chain, operator=OperatorVerifier([signer.public_raw])).request is None


def test_requests_of_a_live_or_suspended_saga_stand_unsigned() -> None:
    journal = InMemoryJournal()
    chain = _saga(
        journal,
        (E.SAGA_OPENED, None),
        (E.SAGA_ENDED, "AWAITING_APPROVAL"),  # a gate: a rejection's request follows
        (E.COMPENSATION_REQUESTED, None),
        (E.SAGA_ENDED, "COMPENSATION_PENDING"),
    )
    found = standing(chain)
    assert found.request is not None
    assert found.request.seq == 3
    assert found.refused == ()


def test_a_first_settlement_that_counts_reopens_an_ended_saga_and_a_copy_does_not() -> None:
    journal = InMemoryJournal()
    chain = _saga(
        journal,
        (E.SAGA_OPENED, None),
        (E.SAGA_ENDED, "COMPENSATION_FAILED"),
        (E.SUSPECT_SETTLED, None),
        (E.COMPENSATION_REQUESTED, None),
    )
    assert standing(chain, settlement_counts=lambda e: True).request == chain[-1]
    unverified = standing(chain, settlement_counts=lambda e: False)
    assert unverified.request is None
    refusal = unverified.refusal_of(chain[-1].seq)
    assert refusal is not None
    assert "the SUSPECT_SETTLED at seq 3 does not count" in refusal.detail
    # The settled saga ended again; a copy of the same settlement and a request follow.
    chain = _saga(
        journal,
        (E.SAGA_ENDED, "COMPENSATED"),
        (E.SUSPECT_SETTLED, None),
        (E.COMPENSATION_REQUESTED, None),
    )
    found = standing(chain, settlement_counts=lambda e: True)
    assert found.request is None
    assert found.refusal_of(chain[-1].seq) is not None


def _erase(journal: InMemoryJournal, signer: OperatorSigner) -> JournalEntry:
    """The operator's ERASED, as ``sagacity erase`` appends it."""
    return append_signed(
        journal,
        EntryDraft(saga_id="s", event_type=E.ERASED, attributes={"reason": "art. 17"}),
        signer,
    )


def test_an_erased_saga_takes_no_request_not_even_the_operators(signer: OperatorSigner) -> None:
    """After an erasure that counts nothing stands: the undo's arguments and every result it
    would journal are erased."""
    journal = InMemoryJournal()
    _saga(journal, (E.SAGA_OPENED, None), (E.SAGA_ENDED, "COMPLETED"))
    _erase(journal, signer)
    _saga(journal, (E.COMPENSATION_REQUESTED, None))
    append_signed(
        journal,
        EntryDraft(saga_id="s", event_type=E.COMPENSATION_REQUESTED, attributes={"reason": "r"}),
        signer,
    )
    chain = list(journal.entries("s"))
    found = standing(
        chain, operator=OperatorVerifier([signer.public_raw]), settlement_counts=lambda e: True
    )
    assert found.request is None
    for seq in (4, 5):
        refusal = found.refusal_of(seq)
        assert refusal is not None
        assert refusal.reason == "saga_erased"
        assert "was erased (seq 3)" in refusal.detail


@pytest.mark.parametrize("forgery", ["unsigned", "other key"])
def test_a_forged_erased_neither_ends_a_pending_request_nor_closes_the_saga(
    forgery: str, signer: OperatorSigner, tmp_path: Path
) -> None:
    """Any writer can append ERASED: one no pinned operator key signed leaves a pending
    request standing, and a live saga's next request stands as before."""
    journal = InMemoryJournal()
    _saga(journal, (E.SAGA_OPENED, None), (E.COMPENSATION_REQUESTED, None))
    if forgery == "unsigned":
        _saga(journal, (E.ERASED, None))
    else:
        _erase(journal, generate_operator_key(tmp_path / "mallory.pem"))
    chain = list(journal.entries("s"))
    pinned = OperatorVerifier([signer.public_raw])
    assert standing(chain, operator=pinned).request == chain[1]
    assert pending_request(chain, operator=pinned) == chain[1]
    # The operator's own erasure does end it.
    _erase(journal, signer)
    assert standing(list(journal.entries("s")), operator=pinned).request is None
