"""Sagas' chains built event by event for the request stores' contracts."""

from __future__ import annotations

import dataclasses
import uuid

from sagacity import InMemoryJournal
from sagacity.chain import payload_sha256
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.gate._deadline_extension import extension_draft
from sagacity.signing._decision_signature import DecisionSigner
from sagacity.signing._operator_signature import OperatorSigner
from sagacity.testing.contracts._claims import JOURNAL

E = EventType
PAYLOAD = '{"amount":"100","to":"alice"}'
PAYLOAD_SHA = payload_sha256(PAYLOAD)


def _saga() -> str:
    return f"contract-{uuid.uuid4().hex}"


class _Chain:
    """One saga's chain, built event by event with explicit times."""

    def __init__(self, saga_id: str | None = None, *, start_us: int = 1_700_000_000_000_000):
        self.saga_id = saga_id or _saga()
        self._journal = InMemoryJournal()
        self.now_us = start_us
        self.entries: list[JournalEntry] = []

    def add(
        self,
        kind: EventType,
        *,
        actor: str | None = None,
        ref: int | None = None,
        result: str | None = None,
        after_us: int = 1_000_000,
        signer: DecisionSigner | None = None,
        **attributes: str,
    ) -> JournalEntry:
        self.now_us += after_us
        if ref is not None:
            attributes["ref_seq"] = str(ref)
            if signer is not None:
                # A decision binds the entry it decides on and the journal (ADR 0025).
                attributes.setdefault("request_hash", self.entries[ref - 1].hash)
                attributes.setdefault("journal", JOURNAL)
        draft = EntryDraft(
            saga_id=self.saga_id,
            event_type=kind,
            tool="wire",
            payload=PAYLOAD if kind is E.AWAITING_APPROVAL else None,
            actor=actor,
            result=result,
            attributes=attributes,
            recorded_at_us=self.now_us,
        )
        entry = self._journal.append(signer.sign(draft) if signer is not None else draft)
        self.entries.append(entry)
        return entry

    def extend(self, ref: int, by_us: int, signer: OperatorSigner) -> JournalEntry:
        """A ``DEADLINE_EXTENDED`` of the request at ``ref``, signed by ``signer`` for the
        journal named :data:`JOURNAL` at the chain's next place."""
        self.now_us += 1_000_000
        draft = extension_draft(
            self.saga_id, ref, by_us, actor="operator", recorded_at_us=self.now_us, tool="wire"
        )
        draft = dataclasses.replace(draft, attributes={**draft.attributes, "journal": JOURNAL})
        tail = self.entries[-1]
        entry = self._journal.append(signer.sign(draft, seq=tail.seq + 1, prev_hash=tail.hash))
        self.entries.append(entry)
        return entry

    def request(
        self, *, signatures: int = 1, tool: str = "wire", expires_at_us: int | None = None
    ) -> int:
        attributes = {
            "payload_sha256": payload_sha256(PAYLOAD),
            "signatures_required": str(signatures),
            "policy_version": "7",
            "reversibility": "IRREVERSIBLE",
        }
        if expires_at_us is not None:
            attributes["expires_at_us"] = str(expires_at_us)
        self.now_us += 1_000_000
        entry = self._journal.append(
            EntryDraft(
                saga_id=self.saga_id,
                event_type=E.AWAITING_APPROVAL,
                tool=tool,
                payload=PAYLOAD,
                attributes=attributes,
                recorded_at_us=self.now_us,
            )
        )
        self.entries.append(entry)
        return entry.seq
