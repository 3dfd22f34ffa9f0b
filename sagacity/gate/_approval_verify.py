"""What an approval proves: whose signatures count, how many a request needs, and whether a live
payload is the one approved.

The gate decides (:mod:`sagacity.gate._approval`) and resumes (:mod:`sagacity.gate._resume`) on
these facts only, each from the deciding Sagacity's own declarations or a pinned key, never from
what a writer chose (docs/adr/0025-trust-model.md): the signatures needed come from its declaration
of the tool, an approval counts when it verifies against a pinned approvals key (or, on an
in-memory journal, as journaled), and the live payload is compared as the request redacted it
(docs/adr/0019-erasure.md §5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sagacity.chain import payload_sha256
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import (
    ApprovalMissingError,
    SerializationError,
    UnverifiableApprovalError,
)
from sagacity.gate._approver_groups import members, rule_for
from sagacity.gate._requests import approval_refusal, signed_requirement
from sagacity.journal import ApprovalRequest
from sagacity.privacy._redaction import (
    REDACTION_ATTRIBUTE,
    is_canonical_payload,
    redact,
    stored_salts,
)

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity

NO_APPROVAL = "no human approval recorded"
NO_PINNED_KEY = (
    "no approvals public key is pinned (SAGACITY_APPROVALS_PUBLIC_KEY) and the journal is "
    "shared: approvals on it cannot be verified"
)
PAYLOAD_CHANGED = "payload changed since approval"


@dataclass(frozen=True, kw_only=True)
class Bound:
    """A live payload as a resume compares and journals it (docs/adr/0019-erasure.md §5).

    Attributes:
        checked: the payload redacted with the salts the request holds (the live payload
            itself when the request redacted nothing): what is compared with the approved
            payload and, when it matches, journaled on the ``INTENT``; ``None`` when it cannot
            be redacted (not a JSON object).
        checked_redaction: the ``redaction`` attribute of ``checked``.
        text: what a refusal journals: ``checked`` with, besides, every field the tool
            redacts now (fresh salts), so a value the request did not have is not journaled
            in clear either; ``None``: nothing of the payload is journaled.
        redaction: the ``redaction`` attribute of ``text``.
        comparable: a redacted live payload is in the journal's compact JSON form, as a call
            journals it (the same values in other bytes are another payload).
    """

    checked: str | None
    checked_redaction: str | None = None
    text: str | None
    redaction: str | None = None
    comparable: bool = True

    @property
    def sha256(self) -> str | None:
        """SHA-256 of ``text`` (``None`` without one)."""
        return None if self.text is None else payload_sha256(self.text)

    def attributes(self) -> dict[str, str]:
        """The attributes a refusal journaling ``text`` carries beside it."""
        return {} if self.redaction is None else {attr.REDACTION: self.redaction}

    def matches(self, approved_sha256: str | None) -> bool:
        """The live payload is the approved one."""
        return (
            self.comparable
            and self.checked is not None
            and payload_sha256(self.checked) == approved_sha256
        )


def bind(
    s: Sagacity, entries: Sequence[JournalEntry], request: ApprovalRequest, payload: str
) -> Bound:
    """``payload`` (the live one) redacted as the request was, and as a refusal journals it
    (docs/adr/0019-erasure.md §5).

    A request journaled in chain form 1 redacted nothing, and its saga cannot hold
    redaction salts: a refusal of it journals no payload when the tool redacts fields now.

    Raises:
        UnverifiableApprovalError: the request's salts are sealed and this journal cannot
            open them, or unusable (nothing journaled; the request stays pending).
    """
    entry = next((e for e in entries if e.seq == request.seq), None)
    attribute = entry.attributes.get(REDACTION_ATTRIBUTE) if entry is not None else None
    if attribute is None and entry is not None and REDACTION_ATTRIBUTE in entry.commitments:
        raise UnverifiableApprovalError(
            "the approval request's redaction salts are sealed and cannot be opened here: "
            "the live payload cannot be checked (the key service, "
            "SAGACITY_KEY_ENCRYPTION_KEY_FILE, opens them); the request stays pending",
            saga_id=request.saga_id,
            seq=request.seq,
        )
    try:
        salts = stored_salts(attribute)
    except SerializationError as exc:
        raise UnverifiableApprovalError(
            f"the approval request's redaction attribute is unusable: {exc}",
            saga_id=request.saga_id,
            seq=request.seq,
        ) from exc
    tool = s.registry.get(request.tool)
    now = [p for p in tool.definition.redact if p not in salts] if tool is not None else []
    if not salts and not now:
        return Bound(checked=payload, text=payload)
    # Redacting re-encodes the payload: only then must its bytes be the compact form.
    comparable = is_canonical_payload(payload) if salts else True
    try:
        checked = redact(request.tool, payload, list(salts), salts)
        shown = redact(request.tool, payload, [*salts, *now], salts)
    except SerializationError:
        return Bound(checked=None, text=None, comparable=False)
    if shown.attribute is not None and (entry is None or entry.form == 1):
        # The saga is written in form 1, which cannot seal salts: journal no payload.
        return Bound(
            checked=checked.payload,
            checked_redaction=checked.attribute,
            text=None,
            comparable=comparable,
        )
    return Bound(
        checked=checked.payload,
        checked_redaction=checked.attribute,
        text=shown.payload,
        redaction=shown.attribute,
        comparable=comparable,
    )


def approvals_of(entries: Sequence[JournalEntry], request: ApprovalRequest) -> list[JournalEntry]:
    """The ``APPROVED`` entries of ``request`` (a pending one: none is past its closure)."""
    ref = str(request.seq)
    return [
        e
        for e in entries
        if e.seq > request.seq
        and e.event_type is EventType.APPROVED
        and e.attributes.get(attr.REF_SEQ) == ref
    ]


def settlement_counts(s: Sagacity, entry: JournalEntry) -> bool:
    """Whether a ``SUSPECT_SETTLED`` may be acted on under ``s``'s trust: verified with a
    pinned key, always in local mode, never when decisions cannot be verified."""
    trust = s.approval_trust
    if trust == "local":
        return True
    verifier = s.decision_verifier
    return verifier is not None and verifier.bound(entry, journal=s.journal_identity) is None


def counted_signers(
    s: Sagacity, entries: Sequence[JournalEntry], request: ApprovalRequest
) -> set[str]:
    """The approvers of ``request`` whose ``APPROVED`` counts under ``s``'s trust.

    With a pinned key only verified approvals count; in local mode every journaled one;
    with neither, none.
    """
    verifier = s.decision_verifier
    trust = s.approval_trust
    if trust == "unverifiable":
        return set()
    journal = s.journal_identity

    def counts(approval: JournalEntry) -> bool:
        return (
            verifier is None
            or approval_refusal(verifier, approval, request, journal=journal) is None
        )

    signers = {e.actor for e in approvals_of(entries, request) if e.actor and counts(e)}
    return members(s.approver_groups, request.tool, signers)


def requirement(s: Sagacity, request: ApprovalRequest) -> tuple[int, str | None]:
    """The signatures ``request`` needs by ``s``'s own declaration of its tool, and why it is
    refused when it claims fewer (``None``: it does not).

    What a requester journaled may raise the bar, never lower it: a request claiming fewer
    signatures than the tool's declared reversibility requires is refused.  A tool this
    Sagacity does not know is judged by the request's own claim (a resume refuses it anyway:
    it cannot call it).  A group rule of the tool (:mod:`sagacity.gate._approver_groups`, "two of
    finance") raises the need to its count.
    """
    claimed = request.signatures_required
    rule = rule_for(s.approver_groups, request.tool)
    floor = rule.count if rule is not None else 0
    tool = s.registry.get(request.tool)
    if tool is None:
        return max(claimed, floor), None
    declared = tool.definition.reversibility
    needed = declared.signatures_required
    if claimed < needed:
        return max(needed, floor), (
            f"the request claims {claimed} signature(s) but tool {request.tool!r} is "
            f"declared {declared.value} here, which needs {needed}"
        )
    return max(claimed, needed, floor), None


def signed_need(s: Sagacity, entries: Sequence[JournalEntry], request: ApprovalRequest) -> int:
    """The most signatures a verified approval of ``request`` says the deciding service
    required (0: none says, or no key is pinned): a resumer without the service's routes
    still waits for them (:func:`sagacity.gate._requests.signed_requirement`)."""
    verifier = s.decision_verifier
    if verifier is None:
        return 0
    journal = s.journal_identity
    return max(
        (
            signed_requirement(a)
            for a in approvals_of(entries, request)
            if approval_refusal(verifier, a, request, journal=journal) is None
        ),
        default=0,
    )


def authentic_signers(
    s: Sagacity, entries: Sequence[JournalEntry], request: ApprovalRequest
) -> tuple[set[str], str | None]:
    """The approvers whose approval counts at a resume, and why the first journaled one that
    does not verify is refused (``None``: every one verifies).

    Raises:
        ApprovalMissingError: no approval was journaled, or none can be verified (no key is
            pinned on a shared journal: a configuration gap, not an attack, so the request
            stays pending until a key is pinned).
    """
    saga_id, seq = request.saga_id, request.seq
    approvals = [e for e in approvals_of(entries, request) if e.actor]
    if not approvals:
        raise ApprovalMissingError(NO_APPROVAL, saga_id=saga_id, seq=seq)
    if s.approval_trust == "unverifiable":
        raise ApprovalMissingError(NO_APPROVAL, saga_id=saga_id, seq=seq, detail=NO_PINNED_KEY)
    verifier = s.decision_verifier
    if verifier is not None:
        for approval in approvals:
            reason = approval_refusal(verifier, approval, request, journal=s.journal_identity)
            if reason is not None:
                return set(), f"the APPROVED at seq {approval.seq} does not verify ({reason})"
    # Only the members of a group rule's groups count (the decider's membership, now).
    return members(s.approver_groups, request.tool, (e.actor for e in approvals if e.actor)), None
