"""The gate's and the suspect desk's decisions as :class:`~sagacity.Sagacity` offers them.

Each method says what it promises and delegates: decisions to the approval desk
(:mod:`sagacity.gate._approval`), the resume to :mod:`sagacity.gate._resume`, settlements to
:mod:`sagacity.gate._settlement`.  ``Sagacity`` inherits them; its state is ``Sagacity``'s own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sagacity.entries._events import JournalEntry
from sagacity.journal import ApprovalRequest, Journal
from sagacity.saga._result import SagaResult

if TYPE_CHECKING:
    from sagacity.gate._approval import ApprovalDesk
    from sagacity.gate._resume import Resumer
    from sagacity.gate._settlement import SuspectDesk


class GateDecisions:
    """Approving, rejecting, resuming, expiring and settling; a part of
    :class:`~sagacity.Sagacity`."""

    _journal: Journal
    _desk: ApprovalDesk
    _resumer: Resumer
    _suspects: SuspectDesk

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        """Open approval requests (of one saga, or of all)."""
        return self._journal.pending_approvals(saga_id)

    def approve(
        self, saga_id: str, seq: int, approver: str, *, request_hash: str | None = None
    ) -> ApprovalRequest:
        """Journal ``APPROVED`` by ``approver`` for the request at ``seq``; nothing runs yet.

        Returns the request with its signatures so far (``request.approved`` says whether
        enough distinct approvers have signed: one for IRREVERSIBLE, two for PRIVILEGED).
        The approval names the request entry's hash and the journal (signed, where this
        Sagacity signs decisions).

        Args:
            request_hash: the hash of the request the approver was shown
                (:attr:`ApprovalRequest.entry_hash`); when it is not the chain's request at
                ``seq``, the approval is refused and ``APPROVAL_REFUSED`` journaled.

        Raises:
            RequestChangedError: ``request_hash`` is not the chain's request (journaled).
            UnderDeclaredRequestError: the request claims fewer signatures than this
                Sagacity's declaration of its tool requires (journaled).
            InvalidArgumentError: an empty approver, a bad seq.
            UnknownSagaError / ApprovalNotFound: no such saga / no request at ``seq``.
            AlreadyDecidedError: the request is closed, fully signed, or ``approver`` signed
                it already (``"<approver> already signed this request"``).
            ApprovalExpiredError: the request's time to live has passed (journaled ``EXPIRED``
                and the saga compensated; the result is on the error).
            ChainIntegrityError: the saga's chain does not verify.
        """
        return self._desk.approve(saga_id, seq, approver, request_hash=request_hash)

    def counted_signers(
        self, entries: Sequence[JournalEntry], request: ApprovalRequest
    ) -> set[str]:
        """The approvers of ``request`` (on the chain ``entries``) whose ``APPROVED`` counts
        under :attr:`approval_trust`: verified ones with a pinned key, every one in local
        mode, none when approvals cannot be verified."""
        return self._desk.signers(entries, request)

    def reject(
        self, saga_id: str, seq: int, approver: str, *, reason: str | None = None
    ) -> SagaResult:
        """Journal ``REJECTED`` by ``approver``, close the request and undo the executed steps.

        Raises: as :meth:`approve` (a closed request raises ``AlreadyDecidedError``).
        """
        return self._desk.reject(saga_id, seq, approver, reason=reason)

    def resume_saga(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """Run the approved call at ``seq`` with ``payload``, if and only if it was approved.

        Fails closed: the request must be pending, approved in the journal by enough distinct
        people, unexpired, allowed by its policy constraint, and ``payload`` must be
        byte-identical to the approved one (SHA-256).  Then ``INTENT`` and ``EXECUTED`` (or
        ``FAILED``, which compensates) are journaled.  The saga completes unless another
        request is still open.  ``requested_by`` (who asked for the resume, e.g. the
        authenticated principal) is journaled on the ``INTENT`` or on the refusal.

        A resume of the request that stopped after the call's ``INTENT`` and before the saga's
        end (its process died) is finished instead, and the tool is never called again: with
        the call's ``EXECUTED`` (or ``FAILED``) on the chain the saga is ended as that resume
        would have ended it; without an outcome the step is journaled ``SUSPECT``, the saga
        compensated (or handed to compensation) and
        :class:`~sagacity.errors.StepInDoubtError` raised.

        Raises:
            InvalidArgumentError: ``payload`` is not a str, or a bad seq.
            UnknownSagaError: no such saga.
            ApprovalNotFound: no pending request at ``seq``.
            ApprovalMissingError: ``"no human approval recorded"`` (or too few signatures).
            PayloadMismatchError: ``"payload changed since approval"``: journaled
                ``RESUME_REFUSED``, prior steps compensated, the tool never called.
            UnverifiableApprovalError: the request records no usable payload hash (same).
            ConstraintViolation: the policy refuses the call (journaled, compensated).
            ApprovalExpiredError: the request lapsed (journaled ``EXPIRED``, compensated).
            ChainIntegrityError: the saga's chain does not verify.
            StepInDoubtError: an interrupted resume left the call without an outcome.
        """
        return self._resumer.resume(saga_id, seq, payload, requested_by=requested_by)

    async def resume_saga_async(
        self, saga_id: str, seq: int, payload: str, *, requested_by: str | None = None
    ) -> SagaResult:
        """:meth:`resume_saga` for asyncio (async tools and compensations are awaited)."""
        return await self._resumer.resume_async(saga_id, seq, payload, requested_by=requested_by)

    def expire(self, saga_id: str, seq: int, *, seen_at_us: int | None = None) -> SagaResult:
        """Journal ``EXPIRED`` for the request at ``seq`` if it is past its time to live.

        The request lapses at its own ``expires_at_us`` or, when this Sagacity has an
        ``approval_ttl``, that long after the earlier of its recorded time and when it was
        first seen (``seen_at_us``, a request store's record; else when this process first
        read it), whichever is earlier (:func:`sagacity.gate._requests.deadline_us`).  The saga is
        then compensated (or ``COMPENSATION_REQUESTED`` journaled, when delegated) and ended.

        Raises:
            UnknownSagaError / ApprovalNotFound: no such saga / no request at ``seq``.
            AlreadyDecidedError: the request is already closed.
            InvalidArgumentError: the request has not lapsed yet.
            ChainIntegrityError: the saga's chain does not verify.
        """
        return self._desk.expire(saga_id, seq, seen_at_us=seen_at_us)

    def approval_deadline_us(
        self,
        request: ApprovalRequest,
        *,
        seen_at_us: int | None = None,
        entries: Sequence[JournalEntry] | None = None,
    ) -> int | None:
        """When ``request`` lapses for this Sagacity (``None``: never); see :meth:`expire`.
        Given the saga's ``entries``, with the extensions a pinned operator key signed."""
        return self._desk.deadline_us(request, seen_at_us=seen_at_us, entries=entries)

    def expire_overdue(self) -> list[SagaResult]:
        """Expire every pending request past its time to live; returns each saga's result."""
        return self._desk.expire_overdue()

    # -- suspect steps --------------------------------------------------------------------
    def settle(self, saga_id: str, seq: int, outcome: str, person: str, *, note: str) -> SagaResult:
        """Journal a person's word on the suspect step at ``seq`` and finish the saga again.

        ``outcome`` says whether the call in doubt took effect: ``executed`` (a call's effect
        is then undone, exactly once; an undo in doubt counts as done), ``not-executed``
        (nothing to undo; an undo in doubt is called again) or ``fixed-by-hand`` (recorded).
        ``SUSPECT_SETTLED`` (actor = ``person``, with ``note``) is appended, then the saga is
        compensated from its chain (delegated: ``COMPENSATION_REQUESTED``) and ended, so it
        ends ``COMPENSATED`` once nothing is dirty.  See ``sagacity.gate._settlement``.

        Raises:
            InvalidArgumentError: an unknown outcome, an empty person or note, a bad seq.
            UnknownSagaError / ApprovalNotFound: no such saga / no suspect step at ``seq``.
            AlreadyDecidedError: the step is settled already (the message says by whom).
            DecisionInProgressError: the saga is being compensated right now.
            ChainIntegrityError: the saga's chain does not verify.
        """
        return self._suspects.settle(saga_id, seq, outcome, person, note=note)

    def settlement_counts(self, entry: JournalEntry) -> bool:
        """Whether the ``SUSPECT_SETTLED`` ``entry`` may be acted on under this Sagacity's
        trust (:attr:`approval_trust`): verified against a pinned approvals key, every one in
        local mode, none when decisions cannot be verified (docs/adr/0014)."""
        return self._desk.settlement_counts(entry)
