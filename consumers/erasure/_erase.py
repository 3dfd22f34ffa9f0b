"""Erasing one saga's data everywhere Sagacity keeps it (docs/adr/0019-erasure.md §4).

:func:`plan_erasure` reads the saga's chain from the topic and refuses an unknown saga, a saga
still live (no final ``SAGA_ENDED``, a pending approval, a compensation pending or in flight, a
writer holding it) and a saga in chain form 1; :func:`apply_erasure` then, under the saga's
erasure lock, destroys its data key, clears its openings in the archive (``sgc_erase_saga``)
and its copies in the services' tables, and appends ``ERASED`` to its chain.  Every step is
idempotent, so running it again after a crash completes what is missing; two erasures at once
serialise on the lock and erase once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sagacity.chain import committing
from sagacity.consumers.erasure._ended import after_end
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import ErasureRefusedError
from sagacity.gate._requests import pending_requests
from sagacity.ports import (
    ErasableArchive,
    KeyStore,
    ServiceCopies,
    ServiceTables,
    TopicJournal,
    ownership,
)
from sagacity.privacy._keys import KeyService
from sagacity.saga._result import SagaStatus
from sagacity.signing._decision_signature import DecisionVerifier
from sagacity.signing._operator_signature import (
    OperatorSigner,
    OperatorVerifier,
    append_signed,
    erasure_counts,
    verifier_with,
)
from sagacity.undo._standing import pending_request

_NOT_FINAL = frozenset({SagaStatus.AWAITING_APPROVAL.value, SagaStatus.COMPENSATION_PENDING.value})


@dataclass(frozen=True, kw_only=True)
class ErasurePlan:
    """What an erasure of the saga would erase, as read before doing it.

    Attributes:
        saga_id: the saga.
        events: events on its chain.
        fields: the data fields with a commitment, by seq: what is erased (the ``ERASED``
            event's ``erased`` attribute).
        key: ``live`` (a data key exists), ``destroyed`` (an erasure began already) or
            ``none`` (nothing of the saga was sealed).
        kek_id: the KEK the live data key is wrapped under.
        recorded: the chain holds an ``ERASED`` event that counts already (signed by a
            pinned operator key).
        archived: the saga's rows in the archive.
        ignored: ``ERASED`` events on the chain that do not count (unsigned, or not by a
            pinned operator key): ignored, the erasure goes on and records its own.
        after_end: events appended after the saga's end that no person's word reopened it
            for (``_ended.after_end``), as (seq, event type): ignored, they start no work.
    """

    saga_id: str
    events: int
    fields: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    key: str = "none"
    kek_id: str | None = None
    recorded: bool = False
    archived: int = 0
    ignored: tuple[int, ...] = ()
    after_end: tuple[tuple[int, str], ...] = ()

    @property
    def field_count(self) -> int:
        """How many data fields the erasure covers."""
        return sum(len(names) for names in self.fields.values())


@dataclass(frozen=True, kw_only=True)
class ErasureOutcome:
    """What :func:`apply_erasure` did (each count this run's; zero when an earlier run did it).

    Attributes:
        plan: the plan it carried out.
        key_destroyed: this run destroyed the data key.
        archive_fields: archived data fields whose openings this run cleared.
        quarantined: quarantined messages of the saga whose bytes it cleared.
        requests / events / claims / attention: rows of the services' tables it cleared.
        erased_event: the ``ERASED`` event this run appended (``None``: it was on the chain).
    """

    plan: ErasurePlan
    key_destroyed: bool = False
    archive_fields: int = 0
    quarantined: int = 0
    requests: int = 0
    events: int = 0
    claims: int = 0
    attention: int = 0
    erased_event: JournalEntry | None = None


def _fields(entries: Sequence[JournalEntry]) -> dict[int, tuple[str, ...]]:
    return {
        e.seq: tuple(sorted(e.commitments))
        for e in entries
        if e.commitments and e.event_type is not EventType.ERASED
    }


def _refusal(entries: Sequence[JournalEntry], *, key_destroyed: bool) -> str | None:
    """Why the saga, as judged (``_ended.after_end``: what follows its end unsanctioned left
    out), may not be erased, or ``None``."""
    if entries[0].form == 1:
        return (
            "it is in chain form 1 (written without keys, or before chain form 2): its events "
            "hash their data in clear, so erasing it would break its chain"
        )
    owner = ownership(list(entries))
    if owner.live:
        return (
            f"it is live: writer {owner.writer!r} holds it (SAGA_OPENED at seq "
            f"{owner.opened_seq}); erase it once it has ended"
        )
    ends = [e for e in entries if e.event_type is EventType.SAGA_ENDED]
    if not ends:
        return "it has not ended (no SAGA_ENDED on its chain)"
    last = ends[-1]
    later = [e for e in entries if e.seq > last.seq and e.event_type is not EventType.ERASED]
    if later:
        return (
            f"it is live: seq {later[0].seq} ({later[0].event_type.value}) follows its last "
            f"SAGA_ENDED (seq {last.seq})"
        )
    if last.result is None and "result" in last.commitments and not key_destroyed:
        return (
            "its final status is sealed and was not opened: set "
            "SAGACITY_KEY_ENCRYPTION_KEY_FILE so the erasure can check the saga has ended"
        )
    if last.result in _NOT_FINAL:
        return f"it has not ended: its last SAGA_ENDED (seq {last.seq}) says {last.result}"
    if pending_requests(entries):
        return "an approval request of it is pending"
    if pending_request(entries) is not None:
        return "a compensation of it is pending"
    return None


def plan_erasure(
    journal: TopicJournal,
    saga_id: str,
    *,
    key_store: KeyStore,
    services: ServiceTables,
    archive: ErasableArchive,
    operator: OperatorVerifier | None = None,
    approvals: DecisionVerifier | None = None,
) -> ErasurePlan:
    """Read the saga and say what erasing it would erase; nothing is changed.

    Events appended after the saga's end that no person's word reopened it for (an unsigned
    request, a forged call: ``_ended.after_end``) are left out of the judgement and named in
    the plan: a forged event must not keep a real erasure refused.

    Args:
        journal / key_store / services / archive: the ports it reads (composed by
            ``sagacity erase``): the saga's chain on the topic, its data key, the services'
            copies of it and the archive's rows.
        operator: the operator keys an ``ERASED`` on the chain, or a request reopening the
            ended saga, must be signed with to count (``None``: none counts).
        approvals: the pinned approvals keys a settlement reopening the ended saga must be
            signed with (``None``: every settlement is taken to reopen it).

    Raises:
        ErasureRefusedError: the saga is unknown, still live, or in chain form 1.
        JournalUnavailableError / PersistenceError: the topic or a database could not be read.
        ArchiveSchemaError: ``archive`` is no archive.
    """
    entries, archived = _read(journal, saga_id, archive=archive)
    # A dry run creates nothing: without the key table, nothing of the saga has a key here.
    row = key_store.load(saga_id) if key_store.exists() else None
    key = "none" if row is None else "destroyed" if row.erased else "live"
    identity = getattr(journal, "identity", None)
    judged = after_end(
        entries,
        operator=operator,
        journal=identity,
        settlement_counts=_settlement_counts(approvals, identity),
        status_erased=key == "destroyed",
    )
    why = _refusal(judged.kept, key_destroyed=key == "destroyed")
    if why is not None:
        raise ErasureRefusedError(
            f"saga {saga_id!r} is not erased: {why}; nothing was changed", saga_id=saga_id
        )
    # A request the approvals service folded from an ignored event starts no work either.
    _refuse_work_in_flight(saga_id, services.copies(saga_id), {e.seq for e in judged.ignored})
    fields = _fields(entries)
    erasures = [e for e in entries if e.event_type is EventType.ERASED]
    recorded = any(erasure_counts(e, operator, journal=identity) for e in erasures)
    ignored = tuple(e.seq for e in erasures if not erasure_counts(e, operator, journal=identity))
    if not recorded:
        # Checked before anything is destroyed: a key destroyed whose ERASED cannot be
        # appended would leave the erasure unrecorded.
        _refuse_an_oversized_listing(journal, saga_id, fields)
    return ErasurePlan(
        saga_id=saga_id,
        events=len(entries),
        fields=fields,
        key=key,
        kek_id=None if row is None else row.kek_id,
        recorded=recorded,
        archived=archived,
        ignored=ignored,
        after_end=tuple((e.seq, e.event_type.value) for e in judged.ignored),
    )


def _read(
    journal: TopicJournal, saga_id: str, *, archive: ErasableArchive
) -> tuple[list[JournalEntry], int]:
    """The saga's entries on the topic and how many events of it the archive holds.

    Raises:
        ErasureRefusedError: the topic holds nothing of the saga.
    """
    entries = journal.read(saga_id).entries
    archived = archive.archived(saga_id)
    if entries:
        return list(entries), archived
    if archived:
        raise ErasureRefusedError(
            f"saga {saga_id!r} is archived ({archived} events) but no longer on the "
            "topic (its retention passed): ERASED cannot be appended to its chain, so it "
            "is not erased",
            saga_id=saga_id,
        )
    raise ErasureRefusedError(
        f"saga {saga_id!r} is unknown: it is neither on the topic nor in the archive",
        saga_id=saga_id,
    )


def _refuse_work_in_flight(saga_id: str, copies: ServiceCopies, disregarded: set[int]) -> None:
    """Refuse while the services hold a pending request (one folded from an event in
    ``disregarded`` starts no work) or a claimed compensation step of the saga."""
    pending = [seq for seq in copies.pending_seqs if seq not in disregarded]
    if pending:
        raise ErasureRefusedError(
            f"saga {saga_id!r} is not erased: the approvals service holds "
            f"{len(pending)} pending request(s) of it; nothing was changed",
            saga_id=saga_id,
        )
    if copies.claims_in_flight:
        raise ErasureRefusedError(
            f"saga {saga_id!r} is not erased: a compensation of it may be in flight "
            f"({copies.claims_in_flight} claimed step(s)); nothing was changed",
            saga_id=saga_id,
        )


def _refuse_an_oversized_listing(
    journal: TopicJournal, saga_id: str, fields: Mapping[int, Sequence[str]]
) -> None:
    """Refuse when the ``ERASED`` listing ``fields`` would not fit the topic's events."""
    listing = len(_listing(fields).encode("utf-8"))
    if listing + _ERASED_MARGIN > journal.max_event_bytes:
        raise ErasureRefusedError(
            f"saga {saga_id!r} is not erased: its ERASED event would list "
            f"{sum(len(f) for f in fields.values())} fields of {len(fields)} events in "
            f"{listing} bytes, more than topic {journal.topic!r} accepts "
            f"({journal.max_event_bytes} bytes with room for the rest of the event); "
            "raise the topic's max.message.bytes; nothing was changed",
            saga_id=saga_id,
        )


def _settlement_counts(
    approvals: DecisionVerifier | None, journal: str | None
) -> Callable[[JournalEntry], bool]:
    """Whether a settlement is a person's word: verified under the pinned approvals keys,
    or, with none pinned, every one (the erasure then errs on refusing)."""
    if approvals is None:
        return lambda entry: True
    return lambda entry: approvals.bound(entry, journal=journal or "") is None


_ERASED_MARGIN = 4096
"""Bytes kept for the rest of an ``ERASED`` event besides its listing (actor, reason, key id,
hashes, headers)."""


def _listing(fields: Mapping[int, Sequence[str]]) -> str:
    """The ``ERASED`` event's ``erased`` attribute: the fields by seq, compact JSON."""
    return json.dumps(
        {str(seq): list(names) for seq, names in sorted(fields.items())}, separators=(",", ":")
    )


def apply_erasure(
    journal: TopicJournal,
    saga_id: str,
    *,
    actor: str,
    reason: str,
    keys: KeyService | None,
    key_store: KeyStore,
    services: ServiceTables,
    archive: ErasableArchive,
    signer: OperatorSigner,
    operator: OperatorVerifier | None = None,
    approvals: DecisionVerifier | None = None,
) -> ErasureOutcome:
    """Erase the saga: destroy its data key, clear the archive's and the services' copies,
    append ``ERASED`` signed with the operator key; under the saga's erasure lock, each step
    skipped when done already.

    Args:
        keys: the key service (its cache forgets the key at once); without it the key store
            marks the saga erased directly.
        signer: the operator key the ``ERASED`` is signed with
            (docs/adr/0027-operator-signatures.md).
        operator: further pinned operator keys an ``ERASED`` already on the chain may be
            signed with to count (``signer``'s own always counts); one that does not count
            is ignored and this erasure records its own.
        approvals: as :func:`plan_erasure`.

    Raises:
        ErasureRefusedError: as :func:`plan_erasure` (nothing is changed).
        JournalUnavailableError / PersistenceError: a step could not be done; run it again.
    """
    _check_words(saga_id, actor=actor, reason=reason)
    with services.erasure_lock(saga_id):
        plan = plan_erasure(
            journal,
            saga_id,
            key_store=key_store,
            services=services,
            archive=archive,
            operator=verifier_with(signer, operator),
            approvals=approvals,
        )
        if keys is not None:
            destroyed = keys.destroy(saga_id, actor=actor, reason=reason).destroyed
        else:
            key_store.ensure_schema()  # the saga is marked erased even if it had no key
            destroyed = key_store.destroy(saga_id, actor=actor, reason=reason)[1]
        key_id = plan.kek_id or _recorded_key_id(archive, saga_id, plan)
        archived = archive.erase(saga_id, actor=actor, reason=reason, key_id=key_id)
        copies = services.clear(saga_id)  # and re-samples the columns' statistics
        event = None
        if not plan.recorded:
            event = _append_erased(
                journal, plan, actor=actor, reason=reason, key_id=key_id, signer=signer
            )
    return ErasureOutcome(
        plan=plan,
        key_destroyed=destroyed,
        archive_fields=sum(len(f) for f in archived.erased.values()),
        quarantined=archived.quarantined,
        requests=copies.requests,
        events=copies.events,
        claims=copies.claims,
        attention=copies.attention,
        erased_event=event,
    )


def _check_words(saga_id: str, *, actor: str, reason: str) -> None:
    """Refuse an erasure naming no actor or reason, or too long a one for ``ERASED``."""
    if not actor.strip() or not reason.strip():
        raise ErasureRefusedError("an erasure needs an actor and a reason", saga_id=saga_id)
    if len(actor.encode("utf-8")) + len(reason.encode("utf-8")) > _ERASED_MARGIN // 2:
        raise ErasureRefusedError(
            f"the actor and reason take more than {_ERASED_MARGIN // 2} bytes: the reason is "
            "journaled in clear on ERASED, keep it short (and free of personal data)",
            saga_id=saga_id,
        )


def _append_erased(
    journal: TopicJournal,
    plan: ErasurePlan,
    *,
    actor: str,
    reason: str,
    key_id: str,
    signer: OperatorSigner,
) -> JournalEntry:
    """Append the saga's ``ERASED`` (the fields it lists, the key's KEK id), signed."""
    draft = EntryDraft(
        saga_id=plan.saga_id,
        event_type=EventType.ERASED,
        actor=actor,
        attributes={
            attr.REASON: reason,
            attr.ERASED_FIELDS: _listing(plan.fields),
            attr.ERASED_KEY: key_id,
        },
    )
    if not journal.seals:  # the journal links it as drafted: in the saga's form
        draft = committing(draft)
    # Signed for the tail as read now: a forged ERASED (or anything) appended since is
    # extended, never taken for this one (docs/adr/0027-operator-signatures.md).
    return append_signed(journal, draft, signer)


def _recorded_key_id(archive: ErasableArchive, saga_id: str, plan: ErasurePlan) -> str:
    """The destroyed key's KEK id as an earlier run logged it (``none``: there was no key)."""
    if plan.key == "none":
        return "none"
    return archive.recorded_key_id(saga_id) or "unknown"
