"""The entries a tool call journals: its ``INTENT``, its outcome, a policy's refusal.

The hot path (:mod:`sagacity.tools._tool`) and the resume (:mod:`sagacity.gate._resume`) make a
call's entries with these, so a resumed call is journaled exactly as a live one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.errors import SerializationError
from sagacity.privacy._redaction import Redacted, redact
from sagacity.tools._codec import decode_payload, describe_error, dumps, encode_result, result_data
from sagacity.tools._decorators import ToolDefinition
from sagacity.undo._undo import Undo, extract_undo, undo_declared


class Host(Protocol):
    """What making a call's entries needs from its :class:`~sagacity.Sagacity`."""

    @property
    def writer_id(self) -> str: ...
    def now_us(self) -> int: ...


def constraint_message(tool: str, reason: str) -> str:
    """What a call refused by a policy constraint returns (and journals)."""
    return f"[constraint] {tool}: {reason}"


def check_constraint(definition: ToolDefinition, arguments: Mapping[str, Any]) -> str | None:
    """The constraint's refusal text for ``arguments``, or ``None`` when allowed.

    A constraint that raises refuses: the policy path fails closed.
    """
    if definition.constraint is None:
        return None
    try:
        reason = definition.constraint(dict(arguments))
    except Exception as exc:
        reason = f"the policy constraint could not be evaluated ({describe_error(exc)})"
    if reason is None:
        return None
    return constraint_message(definition.name, str(reason) or "refused by policy")


def executed_draft(
    host: Host,
    definition: ToolDefinition,
    intent: JournalEntry,
    value: object,
    *,
    recovers: tuple[int, ...] = (),
) -> EntryDraft:
    """The ``EXECUTED`` entry for ``value`` returned by the call journaled as ``intent``
    (``recovers``: the failed calls it recovers)."""
    text, encoding = encode_result(value)
    attributes = {
        attr.REF_SEQ: str(intent.seq),
        attr.REVERSIBILITY: definition.reversibility.value,
        attr.RESULT_ENCODING: encoding,
    }
    _carry_grant(intent, attributes)
    if recovers:
        attributes[attr.RECOVERS] = ",".join(str(seq) for seq in recovers)
    if definition.undo_call is not None:
        try:
            undo: Undo | object | None = definition.undo_call.render(
                arguments=decode_payload(intent.payload or "{}"),
                result=result_data(text, encoding),
            )
        except SerializationError:
            undo = None  # journaled undo=none: compensation reports the step dirty, by name
        _record_undo(attributes, undo)
    elif definition.by is None and definition.reversibility.undoable:
        _record_undo(attributes, extract_undo(value))
    return EntryDraft(
        saga_id=intent.saga_id,
        event_type=EventType.EXECUTED,
        tool=definition.name,
        result=text,
        actor=host.writer_id,
        attributes=attributes,
        recorded_at_us=host.now_us(),
    )


def _record_undo(attributes: dict[str, str], undo: object) -> None:
    """Record on ``EXECUTED`` the undo a result carries (or that none exists)."""
    if isinstance(undo, Undo):
        attributes[attr.UNDO] = "tool"
        attributes[attr.UNDO_TOOL] = undo.tool
        try:
            attributes[attr.UNDO_ARGUMENTS] = dumps(dict(undo.arguments))
        except (TypeError, ValueError):
            attributes[attr.UNDO] = "none"
            del attributes[attr.UNDO_TOOL]
    elif undo is None and undo_declared(undo):
        attributes[attr.UNDO] = "none"


def failed_draft(
    host: Host,
    definition: ToolDefinition,
    intent: JournalEntry,
    exc: BaseException,
    refused: str | None = None,
) -> EntryDraft:
    """The ``FAILED`` entry for the call journaled as ``intent`` (``refused``: the tool refused
    before acting, and how)."""
    attributes = {
        attr.REF_SEQ: str(intent.seq),
        attr.REVERSIBILITY: definition.reversibility.value,
    }
    _carry_grant(intent, attributes)
    if refused is not None:
        attributes[attr.REFUSED] = refused
    return EntryDraft(
        saga_id=intent.saga_id,
        event_type=EventType.FAILED,
        tool=definition.name,
        error=describe_error(exc),
        actor=host.writer_id,
        attributes=attributes,
        recorded_at_us=host.now_us(),
    )


def _carry_grant(intent: JournalEntry, attributes: dict[str, str]) -> None:
    """A call a standing grant covered names the grant on its outcome too."""
    grant_id = intent.attributes.get(attr.GRANT_ID)
    if grant_id is not None:
        attributes[attr.GRANT_ID] = grant_id


def intent_draft(
    host: Host,
    definition: ToolDefinition,
    saga_id: str,
    payload: str,
    ref_seq: int | None,
    *,
    caller: str | None = None,
    redaction: str | None = None,
) -> EntryDraft:
    """The ``INTENT`` entry journaled before a call (``ref_seq``: the approved request;
    ``caller``: the authenticated principal the call came from, when known; ``payload``
    already redacted, ``redaction`` its salts' attribute)."""
    attributes = {attr.REVERSIBILITY: definition.reversibility.value}
    if definition.key is not None:
        attributes[attr.EFFECT_KEY] = definition.key.label
    if ref_seq is not None:
        attributes[attr.REF_SEQ] = str(ref_seq)
    if caller is not None:
        attributes[attr.CALLER] = caller
    if redaction is not None:
        attributes[attr.REDACTION] = redaction
    return EntryDraft(
        saga_id=saga_id,
        event_type=EventType.INTENT,
        tool=definition.name,
        payload=payload,
        actor=host.writer_id,
        attributes=attributes,
        recorded_at_us=host.now_us(),
    )


def redacted_payload(
    definition: ToolDefinition, payload: str, salts: Mapping[str, str] | None = None
) -> Redacted:
    """``payload`` as journaled for ``definition``: its ``redact`` fields replaced by their
    redaction keys (``salts``: reused for their paths, e.g. a request's at resume).

    Raises:
        SerializationError: a redacted path runs into a value that is not an object.
    """
    return redact(definition.name, payload, definition.redact, salts)
