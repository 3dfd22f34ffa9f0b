"""An operator's extension of a request's deadline: counted only when an operator signed it.

``sagacity approvals extend --saga ID --seq N --by 2h`` appends ``DEADLINE_EXTENDED`` to the
saga: ``ref_seq`` the request, ``extend_by_us`` the extension, and the ``reason`` attribute
spelling both out (``extend the deadline of request N by M us``), signed with the operator key
(``SGCO1``, docs/adr/0027-operator-signatures.md), whose message covers the reason, the event's
place in the chain and the journal.  A decider adds an extension to the request's deadline only
when its signature verifies against a pinned operator key, on its own journal, and its reason
is exactly the one its attributes make: an unsigned, wrongly signed or copied extension, or one
whose attributes say more than was signed, extends nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from sagacity.entries import _attributes as attr
from sagacity.entries._bounds import INT64_MAX, parse_int, saturating_add
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import InvalidArgumentError
from sagacity.gate._requests import Extends
from sagacity.journal import ApprovalRequest
from sagacity.signing._operator_signature import OperatorVerifier, operator_reason

MAX_EXTENSION_US = 366 * 86_400 * 1_000_000
"""The longest one extension may be (a year and a day)."""


def extension_reason(ref_seq: int, by_us: int) -> str:
    """The signed ``reason`` of an extension of the request at ``ref_seq`` by ``by_us``."""
    return f"extend the deadline of request {ref_seq} by {by_us} us"


def extension_draft(
    saga_id: str, ref_seq: int, by_us: int, *, actor: str, recorded_at_us: int, tool: str | None
) -> EntryDraft:
    """The unsigned ``DEADLINE_EXTENDED`` (sign it with
    :func:`~sagacity.signing._operator_signature.append_signed`).

    Raises:
        InvalidArgumentError: ``by_us`` is not within (0, a year and a day].
    """
    if not 0 < by_us <= MAX_EXTENSION_US:
        raise InvalidArgumentError(
            f"an extension is more than nothing and at most {MAX_EXTENSION_US // 86_400_000_000}"
            f" days: {by_us} us"
        )
    return EntryDraft(
        saga_id=saga_id,
        event_type=EventType.DEADLINE_EXTENDED,
        tool=tool,
        actor=actor,
        recorded_at_us=recorded_at_us,
        attributes={
            attr.REF_SEQ: str(ref_seq),
            attr.EXTEND_BY_US: str(by_us),
            attr.REASON: extension_reason(ref_seq, by_us),
        },
    )


def extension_refusal(
    entry: JournalEntry, verifier: OperatorVerifier | None, *, journal: str | None
) -> str | None:
    """``None`` when ``entry`` is a ``DEADLINE_EXTENDED`` that counts, else why not."""
    if entry.event_type is not EventType.DEADLINE_EXTENDED:
        return "not_an_extension"
    ref = parse_int(entry.attributes.get(attr.REF_SEQ), low=1, high=INT64_MAX)
    by = parse_int(entry.attributes.get(attr.EXTEND_BY_US), low=1, high=MAX_EXTENSION_US)
    if ref is None or by is None:
        return "malformed_extension"
    if entry.attributes.get(attr.REASON) != extension_reason(ref, by):
        return "extension_not_as_signed"
    return operator_reason(entry, verifier, journal=journal)


def counted_extensions(verifier: OperatorVerifier | None, *, journal: str | None) -> Extends:
    """A request fold's :data:`~sagacity.gate._requests.Extends`: the extensions
    :func:`extension_refusal` lets count (none without a pinned operator key)."""

    def extends(entry: JournalEntry) -> bool:
        return extension_refusal(entry, verifier, journal=journal) is None

    return extends


def extended_us(
    entries: Sequence[JournalEntry],
    request: ApprovalRequest,
    verifier: OperatorVerifier | None,
    *,
    journal: str | None,
) -> int:
    """The sum of the verified extensions of ``request`` on ``entries`` (saturating)."""
    total = 0
    ref = str(request.seq)
    for entry in entries:
        if (
            entry.seq > request.seq
            and entry.event_type is EventType.DEADLINE_EXTENDED
            and entry.attributes.get(attr.REF_SEQ) == ref
            and extension_refusal(entry, verifier, journal=journal) is None
        ):
            total = saturating_add(total, int(entry.attributes[attr.EXTEND_BY_US]))
    return total
