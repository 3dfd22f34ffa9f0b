"""Which COMPENSATION_REQUESTED stands: after a saga's end, only the operator's signed one, or
one a person's first settlement of a suspect step reopened the saga for."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal, JournalEntry
from sagacity._operator_signature import OperatorSigner, OperatorVerifier, append_signed
from sagacity._operator_signature import generate_key as generate_operator_key
from sagacity.consumers.compensation import pending_request
from sagacity.consumers.compensation._standing import standing

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


def test_an_erased_saga_takes_no_unsigned_request() -> None:
    journal = InMemoryJournal()
    chain = _saga(
        journal,
        (E.SAGA_OPENED, None),
        (E.SAGA_ENDED, "COMPLETED"),
        (E.ERASED, None),
        (E.COMPENSATION_REQUESTED, None),
    )
    found = standing(chain, settlement_counts=lambda e: True)
    assert found.request is None
    refusal = found.refusal_of(4)
    assert refusal is not None
    assert "was erased (seq 3)" in refusal.detail
