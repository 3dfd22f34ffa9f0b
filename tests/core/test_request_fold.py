"""The core's fold of approval requests: what a projection keeps folds as the whole chain does,
approvals count as the resume counts them, and a damaged reference refers to nothing."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from sagacity import DecisionSigner, EntryDraft, EventType, InMemoryJournal
from sagacity.chain import payload_sha256
from sagacity.entries._events import JournalEntry
from sagacity.gate._requests import (
    RequestStatus,
    affects_requests,
    request_input,
    request_states,
    verified_by,
)
from sagacity.signing._decision_signature import DecisionVerifier

JOURNAL = "fold-journal"
E = EventType
PAYLOAD = '{"amount":"100","to":"alice"}'
SHA = payload_sha256(PAYLOAD)


def _chain(seed: int, signer: DecisionSigner) -> list[JournalEntry]:
    """A random saga: requests, signed and forged approvals, closings, ends, other events."""
    rng = random.Random(seed)
    journal = InMemoryJournal()
    saga = f"fold-{seed}"
    requests: list[int] = []
    for _ in range(rng.randint(3, 25)):
        roll = rng.random()
        ref = str(rng.choice(requests) if requests and rng.random() < 0.9 else rng.randint(1, 30))
        if roll < 0.2 or not requests:
            attributes = {"payload_sha256": SHA, "signatures_required": str(rng.randint(1, 2))}
            draft = EntryDraft(
                saga_id=saga,
                event_type=E.AWAITING_APPROVAL,
                tool="wire",
                payload=PAYLOAD,
                attributes=attributes,
            )
        elif roll < 0.55:
            draft = EntryDraft(
                saga_id=saga,
                event_type=E.APPROVED,
                actor=rng.choice(("nadia", "omar", "pia", "")),
                attributes={"ref_seq": ref, "payload_sha256": SHA},
            )
            if rng.random() < 0.6:
                hashes = {e.seq: e.hash for e in journal.entries(saga)}
                bound = {"journal": JOURNAL, "request_hash": hashes.get(int(ref), "0" * 64)}
                draft = signer.sign(replace(draft, attributes={**draft.attributes, **bound}))
        elif roll < 0.75:
            kind = rng.choice((E.REJECTED, E.EXPIRED, E.RESUME_REFUSED, E.INTENT, E.EXECUTED))
            draft = EntryDraft(saga_id=saga, event_type=kind, attributes={"ref_seq": ref})
        elif roll < 0.85:
            kind = rng.choice((E.COMPENSATION_REQUESTED, E.SAGA_ENDED))
            result = rng.choice(("AWAITING_APPROVAL", "COMPENSATED"))
            draft = EntryDraft(saga_id=saga, event_type=kind, result=result)
        else:
            draft = EntryDraft(saga_id=saga, event_type=E.INTENT, tool="hold")
        entry = journal.append(draft)
        if entry.event_type is E.AWAITING_APPROVAL:
            requests.append(entry.seq)
    return list(journal.entries(saga))


@pytest.mark.parametrize("seed", range(60))
def test_the_kept_entries_fold_as_the_whole_chain(seed: int) -> None:
    signer = DecisionSigner.ephemeral()
    counts = verified_by(DecisionVerifier([signer.public_raw]), journal=JOURNAL)
    chain = _chain(seed, signer)
    kept: list[JournalEntry] = []
    for entry in chain:
        if request_input(kept, entry):
            kept.append(entry)
    assert all(affects_requests(e) for e in kept)
    for rule in (None, counts):
        assert request_states(kept, counts=rule) == request_states(chain, counts=rule)


def test_only_approvals_the_service_signed_for_the_payload_count() -> None:
    service, other = DecisionSigner.ephemeral(), DecisionSigner.ephemeral()
    journal = InMemoryJournal()
    request = journal.append(
        EntryDraft(
            saga_id="s",
            event_type=E.AWAITING_APPROVAL,
            tool="wire",
            payload=PAYLOAD,
            attributes={"payload_sha256": SHA, "signatures_required": "2"},
        )
    )

    def approval(actor: str, signer: DecisionSigner | None, sha: str = SHA) -> None:
        draft = EntryDraft(
            saga_id="s",
            event_type=E.APPROVED,
            actor=actor,
            attributes={
                "ref_seq": str(request.seq),
                "payload_sha256": sha,
                "request_hash": request.hash,
                "journal": JOURNAL,
            },
        )
        journal.append(signer.sign(draft) if signer is not None else draft)

    approval("mallory", None)
    approval("eve", other)
    approval("trent", service, sha="0" * 64)
    approval("nadia", service)
    chain = journal.entries("s")
    [trusting] = request_states(chain)
    counts = verified_by(DecisionVerifier([service.public_raw]), journal=JOURNAL)
    [verified] = request_states(chain, counts=counts)
    assert trusting.request.signed_by == ("mallory", "eve", "trent", "nadia")
    assert [a.actor for a in trusting.approvals] == ["mallory", "eve"]
    assert trusting.approved_by is not None
    assert verified.request.signed_by == ("nadia",)
    assert [a.actor for a in verified.approvals] == ["nadia"]
    assert verified.approved_by is None
    assert verified.status is RequestStatus.PENDING
    assert verified_by(None, journal=JOURNAL) is None
    # The same signed approvals on another journal count for nothing there.
    elsewhere = verified_by(DecisionVerifier([service.public_raw]), journal="another-journal")
    [moved] = request_states(chain, counts=elsewhere)
    assert moved.approvals == ()


def test_a_damaged_reference_refers_to_nothing() -> None:
    journal = InMemoryJournal()
    request = journal.append(
        EntryDraft(saga_id="s", event_type=E.AWAITING_APPROVAL, tool="wire", payload=PAYLOAD)
    )
    journal.append(EntryDraft(saga_id="s", event_type=E.REJECTED, attributes={"ref_seq": "one"}))
    journal.append(
        EntryDraft(saga_id="s", event_type=E.APPROVED, actor="a", attributes={"ref_seq": "1.0"})
    )
    [state] = request_states(journal.entries("s"))
    assert (state.request.seq, state.status, state.approvals) == (
        request.seq,
        RequestStatus.PENDING,
        (),
    )
