"""Making, revoking and listing standing grants, as :class:`~sagacity.Sagacity` offers them.

What a grant is, how it is signed and when it covers a call is :mod:`sagacity.gate._grants`'s; this
module journals them.  A grant is refused when it is made — never journaled — for a tool this
Sagacity does not declare grantable (``PRIVILEGED``, ungated, ``grantable = false``), rules that
do not parse, a deadline not in the future or more than :data:`MAX_GRANT_S` away, or a saga that
has ended.  Grants are signed with the decision key (:attr:`Sagacity.decision_signer`); a
Sagacity without one journals grants only on an in-memory journal (``"local"`` trust).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, cast

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalNotFound,
    ConfigurationError,
    GrantRefusedError,
    InvalidArgumentError,
)
from sagacity.gate._approval import load_chain, retrying
from sagacity.gate._grant_rules import encode_rules, parse_rules
from sagacity.gate._grants import (
    Grant,
    GrantBook,
    GrantUse,
    Judge,
    covering_grant,
    grantable_refusal,
    sign_grant,
)
from sagacity.journal import ConditionalJournal, Journal
from sagacity.saga._result import SagaStatus
from sagacity.signing._writer_roles import SagaWriters

if TYPE_CHECKING:
    from sagacity.saga._saga import Sagacity
    from sagacity.signing._decision_signature import DecisionSigner
    from sagacity.tools._decorators import ToolDefinition
    from sagacity.tools._registry import ToolRegistry

MAX_GRANT_S = 30 * 24 * 3600
"""The longest a grant may stand (30 days)."""
_FINAL_ENDS = frozenset(
    {
        SagaStatus.COMPLETED,
        SagaStatus.COMPENSATED,
        SagaStatus.REJECTED,
        SagaStatus.EXPIRED,
        SagaStatus.COMPENSATION_FAILED,
    }
)

GrantStatus = Literal["active", "revoked", "expired", "not counted"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GrantView:
    """A grant as listed: the grant, whether it stands now, and why not.

    Attributes:
        status: ``active`` (it covers calls its rules describe), ``revoked``, ``expired``, or
            ``not counted`` (``reason`` says why: unsigned, another key, another journal …).
        revoked_by / revoked_at_us / revoked_seq: the first revocation, when there is one.
    """

    grant: Grant
    status: GrantStatus
    reason: str | None = None
    revoked_by: str | None = None
    revoked_at_us: int | None = None
    revoked_seq: int | None = None

    def to_dict(self) -> dict[str, object]:
        """The view as JSON-ready data (the API's and the CLI's shape)."""
        g = self.grant
        return {
            "grant_id": g.grant_id,
            "saga_id": g.entry.saga_id,
            "seq": g.seq,
            "tool": g.tool,
            "rules": g.rules,
            "expires_at_us": g.expires_at_us,
            "agent": g.agent,
            "granted_by": g.grantor,
            "granted_at_us": g.granted_at_us,
            "status": self.status,
            "reason": self.reason,
            "revoked_by": self.revoked_by,
            "revoked_at_us": self.revoked_at_us,
            "revoked_seq": self.revoked_seq,
        }


def _ended(entries: Sequence[JournalEntry]) -> str | None:
    """The final status the saga ended with (``None``: it is live or suspended)."""
    result: str | None = None
    for entry in entries:
        if entry.event_type is EventType.SAGA_OPENED:
            result = None
        elif entry.event_type is EventType.SAGA_ENDED:
            result = entry.result if entry.result in _FINAL_ENDS else None
    return result


class GrantDecisions:
    """Standing grants: a part of :class:`~sagacity.Sagacity`."""

    _journal: Journal
    _registry: ToolRegistry

    @property
    def _sagacity(self) -> Sagacity:
        return cast("Sagacity", self)

    # -- at use ---------------------------------------------------------------------------
    def _grant_judge(self) -> Judge:
        """How this process judges grants now: its pinned keys, journal, identity, clock."""
        s = self._sagacity
        agent = getattr(self._journal, "writer_id", None)
        return Judge(
            verifier=s.decision_verifier,
            local=s.approval_trust == "local",
            journal=s.journal_identity,
            agent=agent if isinstance(agent, str) and agent else s.writer_id,
            now_us=s.now_us(),
        )

    def covering_grant(
        self, definition: ToolDefinition, saga_id: str, payload: str
    ) -> GrantUse | None:
        """The grant of ``saga_id`` covering a call of ``definition`` with ``payload`` (clear
        JSON), or ``None``: the call goes to an approval request (:mod:`sagacity.gate._grants`)."""
        if (
            self._sagacity.approval_trust == "unverifiable"
            or grantable_refusal(definition, "") is not None
        ):
            return None
        entries = self._journal.entries(saga_id)
        return covering_grant(self._grant_judge(), entries, definition, payload)

    # -- making and revoking --------------------------------------------------------------
    def grant(
        self,
        saga_id: str,
        tool: str,
        rules: Sequence[str],
        *,
        expires_at_us: int,
        grantor: str,
    ) -> GrantView:
        """Journal a signed ``GRANTED``: ``tool`` may run in ``saga_id`` without a new request
        for calls whose arguments satisfy every one of ``rules``, until ``expires_at_us``.

        Raises:
            GrantRefusedError: the tool can never be granted here (PRIVILEGED, ungated,
                ``grantable = false``, not registered), a rule does not parse, the deadline is
                not in the future or too far, or the saga has ended.
            InvalidArgumentError: an empty grantor.
            ConfigurationError: this Sagacity cannot sign grants on a shared journal.
            UnknownSagaError / ChainIntegrityError: as for a decision.
        """
        signer = self._grant_signer()
        if not isinstance(grantor, str) or not grantor.strip():
            raise InvalidArgumentError(f"grantor must be a non-empty str, got {grantor!r}")
        tool_def = self._registry.get(tool) if isinstance(tool, str) else None
        refusal = grantable_refusal(tool_def.definition if tool_def else None, str(tool))
        if refusal is not None:
            raise GrantRefusedError(f"cannot grant: {refusal}", saga_id=saga_id)
        try:
            parsed = parse_rules(rules)
        except InvalidArgumentError as exc:
            raise GrantRefusedError(exc.message, saga_id=saga_id) from exc
        s = self._sagacity
        now = s.now_us()
        if (
            not isinstance(expires_at_us, int)
            or isinstance(expires_at_us, bool)
            or not now < expires_at_us <= now + MAX_GRANT_S * 1_000_000
        ):
            raise GrantRefusedError(
                f"a grant's deadline must be in the future and at most {MAX_GRANT_S // 86400} "
                f"days away, got {expires_at_us!r}",
                saga_id=saga_id,
            )

        def attempt() -> GrantView:
            entries = load_chain(self._journal, saga_id)
            ended = _ended(entries)
            if ended is not None:
                raise GrantRefusedError(
                    f"cannot grant: saga {saga_id!r} ended {ended}", saga_id=saga_id
                )
            agent = SagaWriters.of(entries).opener
            if agent is None:
                raise GrantRefusedError(
                    f"cannot grant: saga {saga_id!r} has no opener", saga_id=saga_id
                )
            draft = EntryDraft(
                saga_id=saga_id,
                event_type=EventType.GRANTED,
                tool=tool,
                actor=grantor,
                attributes={
                    attr.GRANT_ID: uuid.uuid4().hex,
                    attr.GRANT_RULES: encode_rules(parsed),
                    attr.GRANT_EXPIRES_AT_US: str(expires_at_us),
                    attr.GRANT_AGENT: agent,
                    attr.JOURNAL: s.journal_identity,
                    attr.POLICY_VERSION: s.policy_version,
                },
                recorded_at_us=s.now_us(),
            )
            entry = self._append(sign_grant(signer, draft) if signer else draft, entries)
            return self._view(GrantBook.of([*entries, entry]), entry.attributes[attr.GRANT_ID])

        return retrying(attempt)

    def revoke_grant(self, saga_id: str, grant_id: str, principal: str) -> GrantView:
        """Journal a signed ``GRANT_REVOKED`` for the grant ``grant_id`` of ``saga_id``: from
        it on, the grant covers no call.

        Raises:
            ApprovalNotFound: the saga has no grant ``grant_id``.
            AlreadyDecidedError: it is revoked already (the message says by whom).
            InvalidArgumentError: an empty principal.
            ConfigurationError / UnknownSagaError / ChainIntegrityError: as :meth:`grant`.
        """
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidArgumentError(f"principal must be a non-empty str, got {principal!r}")
        signer = self._grant_signer()
        s = self._sagacity

        def attempt() -> GrantView:
            entries = load_chain(self._journal, saga_id)
            book = GrantBook.of(entries)
            found = book.grants.get(grant_id)
            if found is None:
                raise ApprovalNotFound(
                    f"saga {saga_id!r} has no grant {grant_id!r}", saga_id=saga_id
                )
            earlier = book.revoked.get(grant_id)
            if earlier is not None:
                raise AlreadyDecidedError(
                    f"grant {grant_id} was revoked by {earlier.entry.actor} at seq {earlier.seq}",
                    saga_id=saga_id,
                    seq=earlier.seq,
                )
            draft = EntryDraft(
                saga_id=saga_id,
                event_type=EventType.GRANT_REVOKED,
                tool=found.tool,
                actor=principal,
                attributes={
                    attr.GRANT_ID: grant_id,
                    attr.GRANT_SEQ: str(found.seq),
                    attr.JOURNAL: s.journal_identity,
                    attr.POLICY_VERSION: s.policy_version,
                },
                recorded_at_us=s.now_us(),
            )
            entry = self._append(sign_grant(signer, draft) if signer else draft, entries)
            return self._view(GrantBook.of([*entries, entry]), grant_id)

        return retrying(attempt)

    def grants(self, saga_id: str) -> list[GrantView]:
        """Every grant journaled in ``saga_id``, in seq order, with its standing now.

        Raises:
            UnknownSagaError / ChainIntegrityError: as :meth:`grant`.
        """
        book = GrantBook.of(load_chain(self._journal, saga_id))
        return [self._view(book, grant_id) for grant_id in book.grants]

    # -- helpers --------------------------------------------------------------------------
    def _grant_signer(self) -> DecisionSigner | None:
        signer = self._sagacity.decision_signer
        if signer is None and self._sagacity.approval_trust != "local":
            raise ConfigurationError(
                "grants are signed with the approvals key: this Sagacity has no "
                "decision_signer, and its journal is shared (an unsigned grant counts nowhere)"
            )
        return signer

    def _append(self, draft: EntryDraft, entries: Sequence[JournalEntry]) -> JournalEntry:
        journal = self._journal
        if isinstance(journal, ConditionalJournal):
            return journal.append_after(draft, after_seq=entries[-1].seq, durable=True)
        return journal.append(draft, durable=True)

    def _view(self, book: GrantBook, grant_id: str) -> GrantView:
        grant = book.grants[grant_id]
        revocation = book.revoked.get(grant_id)
        judge = replace(self._grant_judge(), agent=None)  # listed for every agent's saga
        why = judge.refusal(grant, book)
        status: GrantStatus = "active"
        if why == "revoked":
            status = "revoked"
        elif why == "expired":
            status = "expired"
        elif why is not None:
            status = "not counted"
        return GrantView(
            grant=grant,
            status=status,
            reason=why if status == "not counted" else None,
            revoked_by=revocation.entry.actor if revocation else None,
            revoked_at_us=revocation.entry.recorded_at_us if revocation else None,
            revoked_seq=revocation.seq if revocation else None,
        )
