"""What a call whose effect the saga already has does instead of running, and what it says.

The hot path (:mod:`sagacity.tools._tool`) asks the run's
:class:`~sagacity.effects._effects.EffectIndex` for the call's effect key before anything else is
journaled; when an earlier call of the saga has that key the call does not run
(docs/adr/0026-effects-and-refusals.md):

=================== ========================= =========================================
the earlier call    same arguments            other arguments
=================== ========================= =========================================
executed            ``REPLAYED``: its result  refused (``CONSTRAINT_VIOLATED``)
awaiting approval   ``REPLAYED``: the request refused (``CONSTRAINT_VIOLATED``)
still running       refused: in progress      refused: in progress
in doubt            ``SUSPECT``: a person     ``SUSPECT``: a person
=================== ========================= =========================================

Each case returns one line (:class:`Notice`) saying what happened; a replay returns the
recorded result to code that called the tool directly, and the line with the result to a
model (the framework adapters ask for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sagacity.effects._effects import EffectHit, EffectRecord, EffectState
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.journal import Journal
from sagacity.tools._codec import decode_result
from sagacity.tools._decorators import ToolDefinition

if TYPE_CHECKING:
    from sagacity.saga._scope import SagaScope

AWAITING_PREFIX = "[AWAITING_APPROVAL]"
"""How the text a gated call returns instead of running begins."""

LINES: Mapping[str, str] = {
    "replayed": (
        "[REPLAYED] Tool '{tool}' was not called again: the call at seq {seq} of saga "
        "{saga_id} already did this (same {key}); its recorded result follows."
    ),
    "conflict": (
        "[EFFECT_CONFLICT] Tool '{tool}' was not called: the call at seq {seq} of saga "
        "{saga_id} already did this (same {key}) with other arguments; use that call's "
        "result, or give {key} a new value for a new effect."
    ),
    "in_progress": (
        "[IN_PROGRESS] Tool '{tool}' was not called: the call at seq {seq} of saga {saga_id} "
        "with the same {key} has not finished."
    ),
    "in_doubt": (
        "[IN_DOUBT] Tool '{tool}' was not called: the call at seq {seq} of saga {saga_id} "
        "with the same {key} stopped without an outcome, so it may have taken effect; a "
        "person must settle it first. Do not report success."
    ),
    "refusal": (
        "[REFUSED] Tool '{tool}' refused the call before acting: nothing happened and "
        "nothing is undone; you may call it again with other arguments."
    ),
}
"""The line of each case, a ``str.format`` template over ``{tool}``, ``{saga_id}``,
``{seq}`` (the earlier call's) and ``{key}`` (the key's fields)."""


def awaiting_message(tool: str) -> str:
    """What a gated call returns to its caller instead of running."""
    return f"{AWAITING_PREFIX} Tool '{tool}' requires human approval"


class Notice(str):
    """A call that did not run (or ran once already): its line, what happened and the
    fields of the line, so an adapter can word it its own way."""

    kind: str
    fields: Mapping[str, str]
    value: Any
    result: str | None

    def __new__(
        cls,
        text: str,
        *,
        kind: str,
        fields: Mapping[str, str],
        value: Any = None,
        result: str | None = None,
    ) -> Notice:
        notice = super().__new__(cls, text)
        notice.kind, notice.fields, notice.value, notice.result = kind, fields, value, result
        return notice

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        # Copied or pickled (a framework keeping the tool's output), it is the text it says.
        return (str, (str(self),))

    def told(self, line: str | None = None) -> Notice:
        """What the model is told: ``line`` (this notice reworded; default its own line), with
        the recorded result after it for a replay."""
        text = str(self) if line is None else line
        if self.kind == "replayed":
            text += "\n" + (self.result if self.result is not None else "(no recorded result)")
        return Notice(
            text, kind=self.kind, fields=self.fields, value=self.value, result=self.result
        )


class _Host(Protocol):
    @property
    def writer_id(self) -> str: ...
    @property
    def policy_version(self) -> str: ...
    def now_us(self) -> int: ...


def notice(kind: str, definition: ToolDefinition, saga_id: str, seq: int, **more: Any) -> Notice:
    """The line of ``kind`` for a call of ``definition`` (``seq``: the earlier call)."""
    key = definition.key
    fields = {
        "tool": definition.name,
        "saga_id": saga_id,
        "seq": str(seq),
        "key": key.describe() if key is not None else "arguments",
    }
    return Notice(LINES[kind].format(**fields), kind=kind, fields=fields, **more)


@dataclass(frozen=True, kw_only=True)
class EffectStop:
    """A call that does not run: journal ``draft`` (if any), then return ``notice``."""

    draft: EntryDraft | None
    notice: Notice
    record: EffectRecord
    awaiting: int | None = None
    """The open request the call is (the run ends awaiting it)."""
    doubt: bool = False

    def after(self, scope: SagaScope, key: str | None) -> None:
        """What the run records once the stop is journaled."""
        if self.awaiting is not None:
            scope.mark_awaiting(tool=self.notice.fields["tool"], seq=self.awaiting)
        if self.doubt:
            if self.draft is not None:
                scope.effects.mark_suspected(self.record)
            scope.mark_failed(
                tool=self.record.tool,
                seq=self.record.seq,
                error=f"in doubt: the call at seq {self.record.seq} has no outcome",
                key=key,
            )


def effect_stop(
    host: _Host,
    definition: ToolDefinition,
    saga_id: str,
    hit: EffectHit,
    *,
    payload: str,
    attributes: Mapping[str, str],
    recorded: JournalEntry | None = None,
) -> EffectStop:
    """What a call whose key ``hit`` found does instead of running.

    ``payload``: the call's payload as journaled; ``attributes``: its ``caller`` and
    ``redaction``; ``recorded``: the earlier call's ``EXECUTED`` (for a replay).
    """
    record = hit.record
    key = definition.key
    label = key.label if key is not None else "*"
    common = {**attributes, attr.EFFECT_KEY: label}

    def draft(kind: EventType, **fields: Any) -> EntryDraft:
        return EntryDraft(
            saga_id=saga_id,
            event_type=kind,
            tool=definition.name,
            actor=host.writer_id,
            recorded_at_us=host.now_us(),
            **fields,
        )

    if record.state is EffectState.DOUBT:
        return _doubt(definition, saga_id, record, draft)
    if record.state is EffectState.RUNNING or not hit.same_arguments:
        kind = "in_progress" if record.state is EffectState.RUNNING else "conflict"
        said = notice(kind, definition, saga_id, record.seq)
        why = (
            f"the call at seq {record.seq} with the same {said.fields['key']} has not finished"
            if kind == "in_progress"
            else f"the call at seq {record.seq} already had this effect (same "
            f"{said.fields['key']}) with other arguments"
        )
        refused = draft(
            EventType.CONSTRAINT_VIOLATED,
            payload=payload,
            error=f"[effect] {definition.name}: {why}",
            attributes={
                **common,
                attr.POLICY_VERSION: host.policy_version,
                attr.EFFECT_OF: str(record.seq),
            },
        )
        return EffectStop(draft=refused, notice=said, record=record)
    replayed = draft(
        EventType.REPLAYED,
        payload=payload,
        attributes={
            **common,
            attr.REF_SEQ: str(record.seq),
            attr.REVERSIBILITY: definition.reversibility.value,
        },
    )
    if record.state is EffectState.REQUESTED:
        said = Notice(
            awaiting_message(definition.name),
            kind="gate",
            fields={"tool": definition.name, "saga_id": saga_id, "seq": str(record.seq)},
        )
        return EffectStop(draft=replayed, notice=said, record=record, awaiting=record.seq)
    result = recorded.result if recorded is not None else None
    encoding = recorded.attributes.get(attr.RESULT_ENCODING) if recorded is not None else None
    said = notice(
        "replayed",
        definition,
        saga_id,
        record.seq,
        value=decode_result(result, encoding),
        result=result,
    )
    return EffectStop(draft=replayed, notice=said, record=record)


def _doubt(
    definition: ToolDefinition,
    saga_id: str,
    record: EffectRecord,
    draft: Callable[..., EntryDraft],
) -> EffectStop:
    said = notice("in_doubt", definition, saga_id, record.seq)
    suspect = None
    if not record.suspected:
        intent = record.intent
        attributes = {attr.REF_SEQ: str(record.seq), attr.PHASE: "call"}
        if intent is not None and attr.REDACTION in intent.attributes:
            attributes[attr.REDACTION] = intent.attributes[attr.REDACTION]
        suspect = draft(
            EventType.SUSPECT,
            payload=intent.payload if intent is not None else None,
            error=(
                "INTENT without an outcome: an effect may exist; needs a person (a later call "
                "with the same effect key was not run)"
            ),
            attributes=attributes,
        )
    return EffectStop(draft=suspect, notice=said, record=record, doubt=True)


def recorded_outcome(journal: Journal, saga_id: str, seq: int | None) -> JournalEntry | None:
    """The ``EXECUTED`` at ``seq`` of the saga's chain, read back for a replay."""
    if seq is None:
        return None
    for entry in journal.entries(saga_id):
        if entry.seq == seq and entry.event_type is EventType.EXECUTED:
            return entry
    return None
