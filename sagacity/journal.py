"""The journal port: the hash-chained event log the core appends to and reads (ADR 0002).

The core is written against it; :mod:`sagacity.ports` re-exports it beside the services'
stores.  Adapters: :class:`sagacity.InMemoryJournal`, ``sagacity.producer.KafkaJournal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from sagacity.entries._events import EntryDraft, JournalEntry

__all__ = ["ApprovalRequest", "ConditionalJournal", "Journal"]


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """A pending human decision, derived from an ``AWAITING_APPROVAL`` entry.

    Attributes:
        saga_id / seq: the ``AWAITING_APPROVAL`` entry's position (the request's id).
        tool: the gated tool.
        payload: the exact input that was proposed (compact JSON of the arguments).
        payload_sha256: SHA-256 of ``payload``'s UTF-8 bytes, hex; ``None`` only for a
            damaged request, which resume refuses.
        requested_at_us: when the request was journaled.
        signatures_required: 1 for ``IRREVERSIBLE``, 2 for ``PRIVILEGED``.
        signed_by: approvers who have signed so far, in order.
        policy_version: the approval policy in force when the request was made.
        expires_at_us: when the request lapses (``None``: no time limit).
        reversibility: the gated tool's declared reversibility, as the requester journaled it.
        entry_hash: the hash of the ``AWAITING_APPROVAL`` entry, which chains to the whole
            saga before it: what a person is shown and a decision is bound to (``None`` for a
            request not read from a chain).
    """

    saga_id: str
    seq: int
    tool: str
    payload: str
    payload_sha256: str | None
    requested_at_us: int
    signatures_required: int
    signed_by: tuple[str, ...] = ()
    policy_version: str = "1"
    expires_at_us: int | None = None
    reversibility: str = "IRREVERSIBLE"
    entry_hash: str | None = None

    @property
    def approved(self) -> bool:
        """Enough distinct signatures have been journaled."""
        return len(set(self.signed_by)) >= self.signatures_required


@runtime_checkable
class Journal(Protocol):
    """An append-only, per-saga hash-chained event log.

    The journal is the chain's single writer within a process: it assigns ``seq`` and the
    hashes.  ``append`` returns only once the entry is durable in the backing store, unless
    ``durable=False`` is passed, in which case durability is awaited by :meth:`flush`.
    """

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """Link ``draft`` to the tail of its saga's chain and record it.

        Raises:
            JournalUnavailableError: the store could not make the entry durable in time.
            WriterConflictError: another writer owns the saga.
            SerializationError: an ``INTENT`` / ``AWAITING_APPROVAL`` payload is not JSON
                (:func:`sagacity.tools._codec.check_json_payload`, the rule every journal applies).
        """
        ...

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        """:meth:`append` without blocking the event loop."""
        ...

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every entry appended so far is durable.

        Raises:
            JournalUnavailableError: not all entries were acknowledged within ``timeout``.
        """
        ...

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        """The saga's chain in seq order (empty when the saga is unknown)."""
        ...

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """Approval requests that are neither executed, rejected, expired nor refused."""
        ...

    def close(self) -> None:
        """Flush and release resources."""
        ...


@runtime_checkable
class ConditionalJournal(Journal, Protocol):
    """A journal that can append only onto the chain a caller read (compare-and-append).

    Gate decisions use it when the journal offers it, so two processes deciding on the same
    request (a double-clicked approve, approve racing reject, two resumes) cannot both succeed:
    the second finds the tail moved, re-reads and is refused by the chain's new state.
    """

    def append_after(
        self, draft: EntryDraft, *, after_seq: int, durable: bool = True
    ) -> JournalEntry:
        """:meth:`append` only if the saga's last seq is ``after_seq`` (0: an empty chain).

        Raises:
            TailMovedError: the chain has grown past ``after_seq``; nothing was appended.
            JournalUnavailableError / WriterConflictError: as :meth:`append`.
        """
        ...


SEALS_ATTR = "seals"
"""The optional capability a journal declares as ``seals = True``: it writes the sagas it opens
in chain form 2 and seals their data fields under a key service (docs/adr/0019-erasure.md)."""


def journal_seals(journal: object) -> bool:
    """Whether ``journal`` seals data fields on its store (a key service is configured): the
    condition for redacting fields at write time (docs/adr/0019-erasure.md §5)."""
    return getattr(journal, SEALS_ATTR, False) is True
