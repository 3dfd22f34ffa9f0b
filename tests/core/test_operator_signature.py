"""Operator signatures (docs/adr/0027-operator-signatures.md): what they bind, and what breaks
them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sagacity import EntryDraft, EventType, InMemoryJournal, JournalEntry
from sagacity.chain import link
from sagacity.errors import ConfigurationError, SigningKeyError
from sagacity.signing._operator_signature import (
    OperatorSigner,
    OperatorVerifier,
    Reason,
    append_signed,
    erasure_counts,
    generate_key,
    operator_reason,
    verifier_from_env,
)

E = EventType


@pytest.fixture
def signer(tmp_path: Path) -> OperatorSigner:
    return generate_key(tmp_path / "operator.pem")


def _ended(journal: InMemoryJournal, saga: str) -> None:
    journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED))
    journal.append(EntryDraft(saga_id=saga, event_type=E.SAGA_ENDED, result="COMPLETED"))


def _request(saga: str, reason: str = "refund") -> EntryDraft:
    return EntryDraft(
        saga_id=saga,
        event_type=E.COMPENSATION_REQUESTED,
        actor="operator:ana@ops",
        attributes={"reason": reason},
    )


def test_a_signed_event_verifies_at_its_place_in_its_chain(signer: OperatorSigner) -> None:
    journal = InMemoryJournal()
    _ended(journal, "s")
    entry = append_signed(journal, _request("s"), signer)
    verifier = OperatorVerifier([signer.public_raw])
    assert entry.attributes["operator_signature"].startswith(f"SGCO1:{signer.key_id}:")
    assert verifier.check(entry) is None
    assert operator_reason(entry, verifier) is None
    assert operator_reason(entry, None) == Reason.NOT_PINNED


def _relinked(entry: JournalEntry, **changes: Any) -> JournalEntry:
    """``entry`` made again with ``changes`` (and linked where they say), signature kept."""
    fields: dict[str, Any] = {
        "saga_id": entry.saga_id,
        "actor": entry.actor,
        "recorded_at_us": entry.recorded_at_us,
        "attributes": dict(entry.attributes),
        "seq": entry.seq,
        "prev_hash": entry.prev_hash,
        **changes,
    }
    seq, prev_hash = fields.pop("seq"), fields.pop("prev_hash")
    return link(EntryDraft(event_type=entry.event_type, **fields), seq=seq, prev_hash=prev_hash)


def test_the_signature_binds_saga_place_actor_time_and_reason(signer: OperatorSigner) -> None:
    journal = InMemoryJournal()
    _ended(journal, "s")
    entry = append_signed(journal, _request("s"), signer)
    verifier = OperatorVerifier([signer.public_raw])
    assert verifier.check(_relinked(entry)) is None  # the same event, linked again
    for changes in (
        {"saga_id": "another-saga"},
        {"seq": entry.seq + 1},
        {"prev_hash": "0" * 64},
        {"actor": "operator:eve@ops"},
        {"recorded_at_us": entry.recorded_at_us + 1},
        {"attributes": {**entry.attributes, "reason": "something else"}},
    ):
        assert verifier.check(_relinked(entry, **changes)) == Reason.BAD_SIGNATURE, changes


def test_what_does_not_verify_is_named(signer: OperatorSigner, tmp_path: Path) -> None:
    journal = InMemoryJournal()
    _ended(journal, "s")
    unsigned = journal.append(_request("s"))
    verifier = OperatorVerifier([signer.public_raw])
    assert verifier.check(unsigned) == Reason.UNSIGNED
    other = generate_key(tmp_path / "other.pem")
    by_other = append_signed(journal, _request("s"), other)
    assert verifier.check(by_other) == Reason.UNKNOWN_KEY
    garbled = _relinked(by_other, attributes={**by_other.attributes, "operator_signature": "x"})
    assert verifier.check(garbled) == Reason.MALFORMED
    # A signature moved onto another event type does not hold.
    moved = journal.append(
        EntryDraft(
            saga_id="s",
            event_type=E.SAGA_ENDED,
            result="COMPENSATED",
            attributes={"operator_signature": by_other.attributes["operator_signature"]},
        )
    )
    assert OperatorVerifier([other.public_raw]).check(moved) == Reason.BAD_SIGNATURE


def test_only_a_signed_erased_counts(signer: OperatorSigner) -> None:
    journal = InMemoryJournal()
    _ended(journal, "s")
    erased = EntryDraft(saga_id="s", event_type=E.ERASED, actor="dpo", attributes={"reason": "r"})
    forged = journal.append(erased)
    real = append_signed(journal, dataclasses.replace(erased, recorded_at_us=1), signer)
    verifier = OperatorVerifier([signer.public_raw])
    assert not erasure_counts(forged, verifier)
    assert erasure_counts(real, verifier)
    assert not erasure_counts(real, None)
    request = append_signed(journal, _request("s"), signer)
    assert not erasure_counts(request, verifier)  # signed, but no erasure


def test_only_operator_events_are_signed(signer: OperatorSigner) -> None:
    with pytest.raises(SigningKeyError, match="not an operator event"):
        signer.sign(EntryDraft(saga_id="s", event_type=E.APPROVED), seq=2, prev_hash="0" * 64)


def test_the_pinned_keys_are_read_from_the_environment(
    signer: OperatorSigner, tmp_path: Path
) -> None:
    assert verifier_from_env({}) is None
    public = tmp_path / "operator.pub"
    public.write_text(signer.public_hex)
    other = generate_key(tmp_path / "other.pem")
    pinned = verifier_from_env({"SAGACITY_OPERATOR_PUBLIC_KEY": f"{public}, {other.public_hex}"})
    assert pinned is not None
    assert set(pinned.key_ids) == {signer.key_id, other.key_id}
    with pytest.raises(ConfigurationError, match="SAGACITY_OPERATOR_PUBLIC_KEY"):
        verifier_from_env({"SAGACITY_OPERATOR_PUBLIC_KEY": "abc"})


def test_a_signed_event_names_its_journal_and_counts_on_no_other(
    signer: OperatorSigner,
) -> None:
    journal = InMemoryJournal(identity="kafka:cluster-a/sagacity.journal")
    _ended(journal, "s")
    entry = append_signed(journal, _request("s"), signer)
    verifier = OperatorVerifier([signer.public_raw])
    assert entry.attributes["journal"] == journal.identity
    assert operator_reason(entry, verifier, journal=journal.identity) is None
    # The same bytes copied into another journal (its prefix copied too) count for nothing.
    elsewhere = "kafka:cluster-b/sagacity.journal"
    assert operator_reason(entry, verifier, journal=elsewhere) == Reason.OTHER_JOURNAL
    # The journal is signed: naming another one breaks the signature.
    moved = _relinked(entry, attributes={**entry.attributes, "journal": elsewhere})
    assert verifier.check(moved, journal=elsewhere) == Reason.BAD_SIGNATURE
