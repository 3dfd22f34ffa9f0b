"""Standing grants: an approver's signed word that a tool may run in one saga without a new
request, for calls whose arguments satisfy the grant's rules, until its deadline.

A grant is a ``GRANTED`` entry on the saga's own chain, signed by the approvals service's key
(the decisions' key) in its own form, so it is never mistaken for a decision::

    "SGCG1" || F(key_id) || F(event_type) || F(journal) || F(saga_id) || F(tool)
            || F(grant_id) || F(rules) || F(int64_be(expires_at_us)) || F(agent)
            || F(principal) || F(int64_be(recorded_at_us)) || F(grant_seq)

with ``F`` the length-prefixed field of docs/adr/0002-hash-chain.md (``FF FF FF FF`` for an
absent value): ``GRANTED`` carries the rules, the deadline and the agent (the writer that opened
the saga) and no ``grant_seq``; ``GRANT_REVOKED`` (its revocation) names the grant's seq and
carries no rules, deadline or agent.  Every field is read from the entry itself, so the
signature binds the whole grant: its journal, its saga, its tool, its rules, its deadline, its
agent, who granted it and when.

A call of a gated tool inside a saga runs without a request when a grant covers it
(:func:`covering_grant`, the process's own judgement, by its own clock and its own declaration
of the tool, never by what a writer put on the topic beyond the signed grant):

* the grant verifies against the pinned approvals keys (:attr:`Sagacity.approval_trust`
  ``"signed"``; in ``"local"`` mode, an in-memory journal only this process writes, every
  journaled grant counts; with ``"unverifiable"`` none does), names this journal, this saga
  (the signature covers the saga id, so a copy into another saga fails) and, as its agent, the
  writer this process journals as;
* the tool is declared here ``IRREVERSIBLE`` (never ``PRIVILEGED``) and grantable;
* no ``GRANT_REVOKED`` naming it precedes the call on the chain (any one: a revocation only
  stops work, so one that does not verify still ends the grant, and is listed as unverified);
* the deadline has not passed, and every rule holds for the call's payload
  (:mod:`sagacity.gate._grant_rules`).

The call is then journaled as an ordinary ``INTENT`` carrying ``grant_id`` and ``grant_seq``.
Making and revoking grants is :mod:`sagacity.gate._grant_desk`'s.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sagacity.chain._form import framed_field as _field
from sagacity.chain._form import framed_int as _int
from sagacity.entries import _attributes as attr
from sagacity.entries._bounds import INT64_MAX, parse_int
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.gate._grant_rules import all_hold, decode_rules
from sagacity.signing._ed25519 import KeyHolder, key_id_of, signature_valid
from sagacity.tools._reversibility import Reversibility

if TYPE_CHECKING:
    from sagacity.signing._decision_signature import DecisionVerifier
    from sagacity.tools._decorators import ToolDefinition

GRANT_MAGIC = b"SGCG1"
"""Leading bytes of a grant's signed message (its own domain: never a decision's)."""
GRANT_EVENTS = frozenset({EventType.GRANTED, EventType.GRANT_REVOKED})


class GrantReason:
    """Why a grant does not count (also shown in grant listings)."""

    UNSIGNED = "unsigned_grant"
    MALFORMED = "malformed_grant_signature"
    UNKNOWN_KEY = "unknown_grant_key"
    BAD_SIGNATURE = "bad_grant_signature"
    OTHER_JOURNAL = "grant_for_another_journal"
    NO_KEY = "no_approvals_key_pinned"
    NOT_GRANTABLE = "tool_not_grantable"
    OTHER_AGENT = "grant_for_another_agent"
    UNREADABLE = "unreadable_grant"


def grant_message(entry: EntryDraft, key_id: str) -> bytes | None:
    """The bytes a grant's (or a revocation's) signature covers, read from ``entry``
    (``None``: an integer field is out of its domain)."""
    attributes = entry.attributes
    try:
        expires = _optional_int(attributes.get(attr.GRANT_EXPIRES_AT_US))
        grant_seq = _optional_int(attributes.get(attr.GRANT_SEQ))
        return b"".join(
            (
                GRANT_MAGIC,
                _field(key_id),
                _field(entry.event_type.value),
                _field(attributes.get(attr.JOURNAL)),
                _field(entry.saga_id),
                _field(entry.tool),
                _field(attributes.get(attr.GRANT_ID)),
                _field(attributes.get(attr.GRANT_RULES)),
                _int(expires),
                _field(attributes.get(attr.GRANT_AGENT)),
                _field(entry.actor),
                _int(entry.recorded_at_us),
                _int(grant_seq),
            )
        )
    except (ValueError, struct.error):
        return None


def _optional_int(raw: str | None) -> int | None:
    if raw is None:
        return None
    value = parse_int(raw, low=0, high=INT64_MAX)
    if value is None:
        raise ValueError(f"not an integer in its domain: {raw!r}")
    return value


def sign_grant(signer: KeyHolder, draft: EntryDraft) -> EntryDraft:
    """``draft`` (a ``GRANTED`` or ``GRANT_REVOKED``) with its ``grant_signature``."""
    from dataclasses import replace

    attributes = {k: v for k, v in draft.attributes.items() if k != attr.GRANT_SIGNATURE}
    unsigned = replace(draft, attributes=attributes)
    message = grant_message(unsigned, signer.key_id)
    if message is None:
        raise ValueError("a grant's integer fields must be in their domain")
    signature = signer.sign_bytes(message).hex()
    value = f"{GRANT_MAGIC.decode()}:{signer.key_id}:{signature}"
    return replace(unsigned, attributes={**attributes, attr.GRANT_SIGNATURE: value})


def grant_refusal(
    verifier: DecisionVerifier | None, entry: EntryDraft, *, journal: str, local: bool = False
) -> str | None:
    """Why ``entry`` (a ``GRANTED`` or ``GRANT_REVOKED``) does not count on ``journal``
    (``None``: it does).  ``local``: no key is pinned and only this process writes the journal
    (an in-memory one): a journaled grant counts unverified, as approvals do there."""
    if entry.attributes.get(attr.JOURNAL) != journal:
        return GrantReason.OTHER_JOURNAL
    if verifier is None:
        return None if local else GrantReason.NO_KEY
    return signature_refusal(verifier, entry)


def signature_refusal(verifier: DecisionVerifier, entry: EntryDraft) -> str | None:
    """Why ``entry``'s ``grant_signature`` does not verify against ``verifier``'s pinned keys
    (``None``: it does): what the archive checks on ingest, and every use before the rest."""
    raw = entry.attributes.get(attr.GRANT_SIGNATURE)
    if raw is None:
        return GrantReason.UNSIGNED
    parts = raw.split(":")
    if len(parts) != 3 or parts[0] != GRANT_MAGIC.decode() or len(parts[2]) != 128:
        return GrantReason.MALFORMED
    _form, key_id, signature_hex = parts
    public = {key_id_of(k): k for k in verifier.public_keys}.get(key_id)
    if public is None:
        return GrantReason.UNKNOWN_KEY
    message = grant_message(entry, key_id)
    try:
        signature = bytes.fromhex(signature_hex)
    except ValueError:
        return GrantReason.MALFORMED
    if message is None:
        return GrantReason.MALFORMED
    return None if signature_valid(public, signature, message) else GrantReason.BAD_SIGNATURE


def archive_refusal(verifier: DecisionVerifier, entry: EntryDraft) -> str | None:
    """Why the archive refuses ``entry`` (a grant event) under the pinned approvals keys: a
    ``GRANTED`` must verify (it lets calls run); a ``GRANT_REVOKED`` only when it is signed
    (an unsigned one only stops work, as an unsigned ``REJECTED`` does)."""
    if entry.event_type is EventType.GRANT_REVOKED and attr.GRANT_SIGNATURE not in entry.attributes:
        return None
    return signature_refusal(verifier, entry)


@dataclass(frozen=True, kw_only=True, slots=True)
class Grant:
    """One ``GRANTED`` entry as the chain holds it (nothing judged yet)."""

    entry: JournalEntry
    grant_id: str
    tool: str
    rules: str | None
    expires_at_us: int | None
    agent: str | None
    grantor: str | None

    @property
    def seq(self) -> int:
        return self.entry.seq

    @property
    def granted_at_us(self) -> int:
        return self.entry.recorded_at_us


@dataclass(frozen=True, kw_only=True, slots=True)
class Revocation:
    """The first ``GRANT_REVOKED`` naming a grant."""

    entry: JournalEntry

    @property
    def seq(self) -> int:
        return self.entry.seq


@dataclass(kw_only=True)
class GrantBook:
    """The grants of one saga's chain and their revocations (:meth:`of`).

    A grant id journaled twice is the first ``GRANTED`` with it (a later copy is ignored); a
    grant is revoked from the first ``GRANT_REVOKED`` naming its id.
    """

    grants: dict[str, Grant] = field(default_factory=dict)
    revoked: dict[str, Revocation] = field(default_factory=dict)

    @classmethod
    def of(cls, entries: Sequence[JournalEntry]) -> GrantBook:
        """The book of ``entries`` (a saga's accepted chain, in seq order)."""
        book = cls()
        for entry in entries:
            kind = entry.event_type
            grant_id = entry.attributes.get(attr.GRANT_ID)
            if kind is EventType.GRANTED and grant_id and grant_id not in book.grants:
                book.grants[grant_id] = Grant(
                    entry=entry,
                    grant_id=grant_id,
                    tool=entry.tool or "",
                    rules=entry.attributes.get(attr.GRANT_RULES),
                    expires_at_us=parse_int(
                        entry.attributes.get(attr.GRANT_EXPIRES_AT_US), low=0, high=INT64_MAX
                    ),
                    agent=entry.attributes.get(attr.GRANT_AGENT),
                    grantor=entry.actor,
                )
            elif kind is EventType.GRANT_REVOKED and grant_id and grant_id not in book.revoked:
                book.revoked[grant_id] = Revocation(entry=entry)
        return book


def grantable_refusal(definition: ToolDefinition | None, tool: str) -> str | None:
    """Why ``tool`` (declared ``definition`` here) can never be granted (``None``: it can)."""
    if definition is None:
        return f"tool {tool!r} is not registered here"
    rev = definition.reversibility
    if rev is Reversibility.PRIVILEGED:
        return f"tool {tool!r} is PRIVILEGED: its calls always need their own approvals"
    if not rev.gated:
        return f"tool {tool!r} is {rev.value}: it runs without approval, so needs no grant"
    if not definition.grantable:
        return f"tool {tool!r} is declared grantable = false"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class GrantUse:
    """The grant covering a call: its id and the seq of its ``GRANTED``."""

    grant_id: str
    grant_seq: int

    def attributes(self) -> dict[str, str]:
        """The attributes the covered call's ``INTENT`` carries."""
        return {attr.GRANT_ID: self.grant_id, attr.GRANT_SEQ: str(self.grant_seq)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Judge:
    """What a process judges grants by: its trust, its journal, its identity, its clock."""

    verifier: DecisionVerifier | None
    local: bool
    journal: str
    agent: str | None
    """The writer this process journals as (``None``: any agent, for listings)."""
    now_us: int

    def refusal(self, grant: Grant, book: GrantBook) -> str | None:
        """Why ``grant`` covers nothing now, whatever the call (``None``: it may cover)."""
        reason = grant_refusal(self.verifier, grant.entry, journal=self.journal, local=self.local)
        if reason is not None:
            return reason
        if grant.grant_id in book.revoked:
            return "revoked"
        if self.agent is not None and grant.agent != self.agent:
            return GrantReason.OTHER_AGENT
        if grant.expires_at_us is None:
            return GrantReason.UNREADABLE
        if self.now_us >= grant.expires_at_us:
            return "expired"
        return None


def covering_grant(
    judge: Judge,
    entries: Sequence[JournalEntry],
    definition: ToolDefinition,
    payload: str,
) -> GrantUse | None:
    """The first grant of ``entries`` (one saga's chain) that covers a call of ``definition``
    with the clear JSON ``payload``, by ``judge``'s trust and clock; ``None``: none does (the
    call goes to an approval request)."""
    if grantable_refusal(definition, definition.name) is not None:
        return None
    book = GrantBook.of(entries)
    for grant in book.grants.values():
        if grant.tool != definition.name or judge.refusal(grant, book) is not None:
            continue
        rules = decode_rules(grant.rules)
        if rules is not None and all_hold(rules, payload):
            return GrantUse(grant_id=grant.grant_id, grant_seq=grant.seq)
    return None
