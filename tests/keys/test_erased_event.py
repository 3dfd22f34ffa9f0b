"""The ``ERASED`` event (docs/adr/0019-erasure.md §4): written after a saga's end, it links the
chain like any event, travels the wire, and every fold over a chain reads it as neutral — an
erased saga is not reopened, handed to compensation or given a pending request by it."""

from __future__ import annotations

import json

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity import EntryDraft, EventType, InMemoryJournal, verify
from sagacity.chain import committing
from sagacity.consumers.compensation import pending_request
from sagacity.entries import _attributes as attr
from sagacity.entries._events import JournalEntry, event_type_of
from sagacity.gate._requests import pending_requests
from sagacity.producer._reader import ownership
from sagacity.saga._outcome import outcome_from_chain
from sagacity.schemas import decode_entry, encode_entry
from sagacity.signing._operator_signature import OperatorSigner, OperatorVerifier, append_signed

SAGA = "erased-saga"


OPERATOR = OperatorSigner(Ed25519PrivateKey.generate())
PINNED = OperatorVerifier([OPERATOR.public_raw])


def _chain(*, erased: bool, form: int = 1, signed: bool = True) -> list[JournalEntry]:
    journal = InMemoryJournal()
    drafts = [
        EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_OPENED, actor="writer-1"),
        EntryDraft(saga_id=SAGA, event_type=EventType.INTENT, tool="mail", payload="{}"),
        EntryDraft(
            saga_id=SAGA,
            event_type=EventType.COMPENSATION_REQUESTED,
            attributes={attr.REF_SEQ: "2"},
        ),
        EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_ENDED, result="COMPENSATED"),
    ]
    if erased:
        drafts.append(
            EntryDraft(
                saga_id=SAGA,
                event_type=EventType.ERASED,
                actor="dpo@example.org",
                attributes={
                    attr.REASON: "art. 17 request",
                    attr.ERASED_FIELDS: json.dumps({"2": ["payload"], "4": ["result"]}),
                    attr.ERASED_KEY: "0123456789abcdef",
                },
            )
        )
    for draft in drafts:
        draft = committing(draft) if form == 2 else draft
        if draft.event_type is EventType.ERASED and signed:
            append_signed(journal, draft, OPERATOR)  # as `sagacity erase` does
        else:
            journal.append(draft)
    return list(journal.entries(SAGA))


def test_erased_is_a_known_type_that_links_and_travels() -> None:
    assert event_type_of("ERASED") is EventType.ERASED
    for form in (1, 2):
        chain = _chain(erased=True, form=form)
        assert verify(chain).ok
        last = chain[-1]
        assert decode_entry(encode_entry(last)) == last


def test_every_fold_reads_an_erased_saga_as_it_read_the_ended_one() -> None:
    ended, erased = _chain(erased=False), _chain(erased=True)
    assert outcome_from_chain(erased) == outcome_from_chain(ended)
    assert pending_requests(erased) == pending_requests(ended) == []
    assert ownership(erased) == ownership(ended)
    assert not ownership(erased).live


def test_an_erased_saga_with_its_final_status_erased_is_not_handed_to_compensation() -> None:
    # After an erasure the SAGA_ENDED's result (a data field) is erased too: the request
    # would look unanswered; the ERASED event closes it.
    chain = _chain(erased=True, form=2)
    erased_end = JournalEntry.from_dict(
        {**chain[3].to_dict(), "result": None, "salts": {}}  # the opening cleared
    )
    assert verify([*chain[:3], erased_end, chain[4]]).ok
    assert pending_request([*chain[:3], erased_end], operator=PINNED) is not None
    assert pending_request([*chain[:3], erased_end, chain[4]], operator=PINNED) is None


def test_an_erased_no_operator_signed_closes_nothing() -> None:
    """Any writer can append ERASED: one without the operator's signature (or with no key
    pinned to check it) leaves the request pending for the compensation service."""
    chain = _chain(erased=True, form=2, signed=False)
    erased_end = JournalEntry.from_dict({**chain[3].to_dict(), "result": None, "salts": {}})
    forged = [*chain[:3], erased_end, chain[4]]
    assert verify(forged).ok
    assert pending_request(forged, operator=PINNED) == chain[2]
    signed = _chain(erased=True, form=2)
    signed_end = JournalEntry.from_dict({**signed[3].to_dict(), "result": None, "salts": {}})
    assert pending_request([*signed[:3], signed_end, signed[4]]) == signed[2]  # no key pinned
