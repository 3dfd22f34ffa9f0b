"""An operator extends a request's deadline: ``DEADLINE_EXTENDED``, signed with the operator key.

What ``sagacity approvals extend`` journals (docs/operations/routing.md).  The event names the
request (``ref_seq``), the extension (``extend_by_us``) and a ``reason`` spelling both out; the
operator key signs it at its place in the chain of this journal (ADR 0027's ``SGCO1``).  The
approvals service adds it to the request's deadline only when its pinned operator key verifies
it (:func:`sagacity.gate._deadline_extension.extended_us`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sagacity.entries._events import JournalEntry, now_micros
from sagacity.errors import AlreadyDecidedError, ApprovalNotFound, UnknownSagaError
from sagacity.gate._deadline_extension import extension_draft
from sagacity.gate._requests import request_state
from sagacity.journal import ConditionalJournal
from sagacity.signing._operator_signature import OperatorSigner, append_signed


def extend_deadline(
    journal: ConditionalJournal,
    saga_id: str,
    seq: int,
    by_us: int,
    *,
    actor: str,
    signer: OperatorSigner,
) -> JournalEntry:
    """Journal the signed extension of the open request at ``saga_id``/``seq`` by ``by_us``.

    Raises:
        UnknownSagaError / ApprovalNotFound: no such saga / no request at ``seq``.
        AlreadyDecidedError: the request is closed (nothing is journaled).
        InvalidArgumentError: ``by_us`` is out of range.
        TailMovedError: the chain kept moving while being signed (run it again).
        JournalUnavailableError: the topic could not be read or written.
    """
    entries = journal.entries(saga_id)
    if not entries:
        raise UnknownSagaError(f"saga {saga_id!r} is unknown", saga_id=saga_id)
    first = request_state(entries, seq)
    if first is None:
        raise ApprovalNotFound(
            f"saga {saga_id!r} has no approval request at seq {seq}", saga_id=saga_id, seq=seq
        )
    draft = extension_draft(
        saga_id, seq, by_us, actor=actor, recorded_at_us=now_micros(), tool=first.request.tool
    )

    def check(chain: Sequence[JournalEntry]) -> None:
        state = request_state(chain, seq)
        if state is None or not state.pending:
            closure = state.describe_closure() if state is not None else "no request"
            raise AlreadyDecidedError(
                f"cannot extend: {closure}; nothing was journaled", saga_id=saga_id, seq=seq
            )

    return append_signed(journal, draft, signer, check=check)
