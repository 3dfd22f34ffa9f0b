"""The journal's event vocabulary and the entry value object.

The vocabulary is part of the evidence format: names are hashed into the chain, so an event
type is never renamed or reused for another meaning (docs/adr/0002-hash-chain.md).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sagacity._native import native
from sagacity.entries._bounds import INT64_MAX, SAGA_ID_MAX_BYTES, in_int64, parse_int
from sagacity.errors import SerializationError


class EventType(enum.StrEnum):
    """What a journal entry records.

    Tool calls: ``INTENT`` (journaled and acknowledged before the tool runs), then ``EXECUTED``
    (result) or ``FAILED`` (error).  Gates: ``AWAITING_APPROVAL`` (the exact payload and its
    SHA-256), ``APPROVED`` / ``REJECTED`` / ``EXPIRED`` (decisions), ``RESUME_REFUSED`` (a
    resume that failed a check), ``CONSTRAINT_VIOLATED`` (a policy refusal no approval
    overrides), ``APPROVAL_REFUSED`` (an approval the approvals service refused: the approver
    was shown another request than the chain's, or the request claims fewer signatures than
    its tool is declared with; the request stays pending), ``APPROVAL_ESCALATED`` (the
    approvals service's record that a routed request reached its next tier: information,
    never acted on), ``DEADLINE_EXTENDED`` (an operator's signed extension of a request's
    deadline; docs/operations/routing.md).  Compensation:
    ``COMPENSATION_REQUESTED`` (hand-off to the compensation service), ``COMPENSATION_INTENT``
    (before an undo is called), ``COMPENSATED`` / ``COMPENSATION_FAILED`` (its outcome),
    ``SUSPECT`` (an ``INTENT`` with no outcome, for a person), ``SUSPECT_SETTLED`` (a
    person's word on a suspect step).  Effects: ``REPLAYED`` (a call whose effect key an
    earlier call of the saga already has: not run, its recorded result returned;
    docs/adr/0026-effects-and-refusals.md).  Lifecycle: ``SAGA_OPENED`` (a writer took the saga)
    and ``SAGA_ENDED`` (final
    status in ``result``).  Administration: ``ERASED`` (the saga's data was erased: its key
    destroyed and its openings cleared; written after its end, docs/adr/0019-erasure.md §4).
    Standing grants (docs/operations/grants.md): ``GRANTED`` (an approver's signed grant of
    a tool for the saga, under argument rules and a deadline) and ``GRANT_REVOKED`` (its
    signed revocation); a call a grant covers is an ``INTENT`` naming the grant.
    """

    SAGA_OPENED = "SAGA_OPENED"
    INTENT = "INTENT"
    EXECUTED = "EXECUTED"
    FAILED = "FAILED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    RESUME_REFUSED = "RESUME_REFUSED"
    CONSTRAINT_VIOLATED = "CONSTRAINT_VIOLATED"
    COMPENSATION_REQUESTED = "COMPENSATION_REQUESTED"
    COMPENSATION_INTENT = "COMPENSATION_INTENT"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    SUSPECT = "SUSPECT"
    SUSPECT_SETTLED = "SUSPECT_SETTLED"
    SAGA_ENDED = "SAGA_ENDED"
    ERASED = "ERASED"
    APPROVAL_REFUSED = "APPROVAL_REFUSED"
    REPLAYED = "REPLAYED"
    APPROVAL_ESCALATED = "APPROVAL_ESCALATED"
    DEADLINE_EXTENDED = "DEADLINE_EXTENDED"
    GRANTED = "GRANTED"
    GRANT_REVOKED = "GRANT_REVOKED"


class UnknownEventType(str):
    """An event type this release does not know, carried by its exact name.

    A newer writer may journal event types an older reader has never heard of.  Such an event
    still hashes (the canonical form hashes the type's name) and still links the chain, so
    readers decode it as an entry whose ``event_type`` is an ``UnknownEventType`` and accept it
    into the chain like any other; the core's state derivations treat it as neutral or refuse
    conservatively (docs/adr/0003-wire-format.md, "Unknown event types").

    Raises:
        ValueError: the name is empty or names a known :class:`EventType`.
    """

    __slots__ = ()

    def __new__(cls, name: str) -> UnknownEventType:
        if not isinstance(name, str) or not name:
            raise ValueError("an event type name is a non-empty str")
        if name in EventType.__members__.values():
            raise ValueError(f"{name!r} is a known event type; use EventType.{name}")
        return super().__new__(cls, name)

    @property
    def value(self) -> str:
        """The type's name as written (like ``EventType.value``)."""
        return str(self)

    def __repr__(self) -> str:
        return f"UnknownEventType({str(self)!r})"


AnyEventType = EventType | UnknownEventType
"""The type of :attr:`EntryDraft.event_type`: a known type, or an unknown one's exact name."""


def event_type_of(name: str) -> AnyEventType:
    """The :class:`EventType` named ``name``, or an :class:`UnknownEventType` carrying it.

    Raises:
        SerializationError: ``name`` is not a non-empty str.
    """
    try:
        return EventType(name)
    except ValueError:
        pass
    try:
        return UnknownEventType(name)
    except ValueError as exc:
        raise SerializationError(f"invalid event type {name!r}: {exc}") from exc


GENESIS_HASH = "0" * 64
"""The previous hash of every saga's first entry (32 zero bytes, hex)."""


def now_micros() -> int:
    """Wall-clock time in integer microseconds since the Unix epoch (UTC)."""
    return time.time_ns() // 1_000


def _check_text(name: str, value: str | None, key: object = None) -> None:
    """``value`` is valid text (or ``None``); the error names ``name`` (and ``key``, an
    attribute's, formatted only for the message: this runs for every field of every event)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise SerializationError(f"{_named(name, key)} must be a str, got {type(value).__name__}")
    if "\x00" in value:
        raise SerializationError(f"{_named(name, key)} must not contain U+0000")
    if value.isascii():  # O(1) for CPython strings; ASCII always encodes
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SerializationError(
            f"{_named(name, key)} is not valid Unicode text: {exc.reason}"
        ) from exc


def _named(name: str, key: object) -> str:
    return name if key is None else f"{name} {key!r}"


_valid_texts: Callable[..., bool] | None = native("valid_texts")
"""The compiled twin of :func:`_check_text`'s acceptance (``native/src/draft.rs``), over any
number of values: ``True`` when each is ``None`` or valid text.  Asked first, once per draft;
when it declines, :func:`_check_text` runs and says what is wrong.  It accepts exactly what
``_check_text`` accepts (tests/core/test_draft_texts.py); ``None`` without the compiled module."""


_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})


def _freeze(attributes: Mapping[str, str] | None) -> Mapping[str, str]:
    if not attributes:
        return _NO_ATTRIBUTES
    if type(attributes) is not dict and not isinstance(attributes, Mapping):
        # dict() would read a list of pairs as a map: the form's attributes are a map only.
        raise SerializationError(f"attributes must be a mapping, got {type(attributes).__name__}")
    items = dict(attributes)
    valid = _valid_texts
    if valid is None or not valid(*items, *items.values()):
        for key, value in items.items():
            _check_text("attribute key", key)
            _check_text("attribute", value, key)
    if len(items) == 1:
        return MappingProxyType(items)
    # Code-point order is UTF-8 byte order (valid text has no surrogates): keys sort as bytes.
    return MappingProxyType(dict(sorted(items.items())))


_NO_COMMITMENTS: Mapping[str, str] = MappingProxyType({})

DATA_FIELDS = ("payload", "result", "error")
"""The entry's fields a form-2 chain commits to instead of hashing them in clear."""
DATA_ATTRIBUTES = frozenset({"undo_arguments", "note", "redaction"})
"""The attributes that hold data (docs/adr/0019-erasure.md §1): committed to in form 2."""


def _check_form(draft: EntryDraft) -> None:
    """The rules of ``form``, ``commitments`` and ``salts`` (their agreement with the values
    is the chain's to check: :func:`sagacity.chain.canonical_bytes`)."""
    if type(draft.form) is not int or draft.form not in (1, 2):
        raise SerializationError(f"unknown chain form {draft.form!r}")
    for name in ("commitments", "salts"):
        mapping = getattr(draft, name)
        if not isinstance(mapping, Mapping):
            raise SerializationError(f"{name} must be a mapping")
        if mapping and draft.form == 1:
            raise SerializationError(f"a form-1 entry has no {name}")
        for key, value in mapping.items():
            if key not in DATA_FIELDS and key not in DATA_ATTRIBUTES:
                raise SerializationError(f"{name} names {key!r}, which is not a data field")
            if not isinstance(value, str) or len(value) != 64:
                raise SerializationError(f"{name}[{key!r}] must be 64 hex digits")
            try:
                bytes.fromhex(value)
            except ValueError as exc:
                raise SerializationError(f"{name}[{key!r}] must be 64 hex digits") from exc
        object.__setattr__(draft, name, MappingProxyType(dict(sorted(mapping.items()))))


def _check_texts(draft: EntryDraft) -> None:
    """The text rule (:func:`_check_text`) on ``draft``'s saga id and text fields, in order."""
    _check_text("saga_id", draft.saga_id)
    # An absent field needs no check (nor a call).
    if draft.tool is not None:
        _check_text("tool", draft.tool)
    if draft.payload is not None:
        _check_text("payload", draft.payload)
    if draft.result is not None:
        _check_text("result", draft.result)
    if draft.error is not None:
        _check_text("error", draft.error)
    if draft.actor is not None:
        _check_text("actor", draft.actor)


_NOW: Any = object()
"""``EntryDraft``'s default ``recorded_at_us``: the time the draft is made (only omitted means
now; an explicit ``None`` is refused as before)."""

_draft_fields: Callable[..., tuple[Mapping[str, str], int] | None] | None = native("draft_fields")
"""The compiled checks of the common draft (``native/src/draft.rs``): given the constructor's
arguments, the attributes and the time the draft keeps when :meth:`EntryDraft.__post_init__`
would accept them as given, or ``None`` (it declines anything but the common case, and
``__post_init__`` judges it); ``None`` without the compiled module.
tests/core/test_draft_checked.py holds the two paths to equal drafts and equal refusals."""


@dataclass(frozen=True, kw_only=True, slots=True, init=False)
class EntryDraft:
    """An event before the journal places it in a chain (no seq, no hashes yet).

    Args:
        saga_id: the saga the event belongs to.
        event_type: what happened; an :class:`UnknownEventType` only for an event a newer
            release wrote (decoded, or relayed as is) — a plain string must name a known type.
        tool: the tool concerned (``None`` for lifecycle and gate-only events).
        payload: the tool's input, exactly as given (for tools: compact JSON of the arguments).
        result: the tool's result as text, or a decision's detail.
        error: the error text for ``FAILED`` / ``COMPENSATION_FAILED`` / refusals.
        actor: who acted: the approver principal, or the writer's id.
        attributes: small string facts (``payload_sha256``, ``ref_seq``, ``policy_version`` …).
        recorded_at_us: event time in microseconds since the epoch; defaults to now.
        form: the chain form the entry is hashed in: 1 (``SGC1``, the data in clear) or 2
            (``SGC2``, salted commitments to the data; docs/adr/0019-erasure.md §1).
        commitments: form 2: a data field's commitment (64 hex), by field name (``payload``,
            ``result``, ``error``, a data attribute's key); required once the field's value is
            erased, optional beside it (it must then match).
        salts: form 2: the salt (64 hex) of each data field whose value is present: with the
            value it is the field's opening.
    """

    saga_id: str
    event_type: AnyEventType
    tool: str | None = None
    payload: str | None = None
    result: str | None = None
    error: str | None = None
    actor: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    recorded_at_us: int = field(default_factory=now_micros)
    form: int = 1
    commitments: Mapping[str, str] = field(default_factory=lambda: _NO_COMMITMENTS)
    salts: Mapping[str, str] = field(default_factory=lambda: _NO_COMMITMENTS)

    def __init__(
        self,
        *,
        saga_id: str,
        event_type: AnyEventType,
        tool: str | None = None,
        payload: str | None = None,
        result: str | None = None,
        error: str | None = None,
        actor: str | None = None,
        attributes: Mapping[str, str] = _NO_ATTRIBUTES,
        recorded_at_us: int = _NOW,
        form: int = 1,
        commitments: Mapping[str, str] = _NO_COMMITMENTS,
        salts: Mapping[str, str] = _NO_COMMITMENTS,
    ) -> None:
        # The common draft (form 1, a known type, text fields, a dict of texts or no
        # attributes) is checked by the compiled module in one call, which gives the two fields
        # kept otherwise than given (the attributes frozen, the time); it declines anything
        # else, and __post_init__ judges it.  A subclass's draft always runs its
        # __post_init__ (it may check more).
        checked = _draft_fields
        kept = (
            None
            if checked is None or type(self) is not EntryDraft
            else checked(
                saga_id,
                event_type,
                tool,
                payload,
                result,
                error,
                actor,
                attributes,
                recorded_at_us,
                form,
                commitments,
                salts,
            )
        )
        if kept is not None:
            attributes, recorded_at_us = kept
        elif recorded_at_us is _NOW:
            recorded_at_us = now_micros()
        # Written out, not generated: a frozen dataclass's __init__ sets each field through
        # object.__setattr__, the slot descriptors here set them directly (about a third of a
        # draft's cost, once per event on the journal's hot path).  The defaults are the
        # fields' (a test pins them).
        _SET_SAGA_ID(self, saga_id)
        _SET_EVENT_TYPE(self, event_type)
        _SET_TOOL(self, tool)
        _SET_PAYLOAD(self, payload)
        _SET_RESULT(self, result)
        _SET_ERROR(self, error)
        _SET_ACTOR(self, actor)
        _SET_ATTRIBUTES(self, attributes)
        _SET_RECORDED_AT_US(self, recorded_at_us)
        _SET_FORM(self, form)
        _SET_COMMITMENTS(self, commitments)
        _SET_SALTS(self, salts)
        if kept is None:
            self.__post_init__()

    def __post_init__(self) -> None:
        if self.form != 1 or self.commitments or self.salts:
            _check_form(self)
        if not isinstance(self.saga_id, str) or not self.saga_id:
            raise SerializationError("saga_id must be a non-empty str")
        valid = _valid_texts
        if valid is None or not valid(
            self.saga_id, self.tool, self.payload, self.result, self.error, self.actor
        ):
            _check_texts(self)
        # Four bytes at most per character: only a long id needs encoding to be measured.
        if len(self.saga_id) * 4 > SAGA_ID_MAX_BYTES and (
            len(self.saga_id.encode("utf-8")) > SAGA_ID_MAX_BYTES
        ):
            raise SerializationError(
                f"saga_id is longer than {SAGA_ID_MAX_BYTES} bytes of UTF-8 "
                f"({len(self.saga_id.encode('utf-8'))})"
            )
        if type(self.event_type) is EventType:
            pass
        elif isinstance(self.event_type, UnknownEventType):
            _check_text("event_type", self.event_type)
        else:
            try:
                object.__setattr__(self, "event_type", EventType(self.event_type))
            except ValueError as exc:
                raise SerializationError(f"unknown event type {self.event_type!r}") from exc
        if not in_int64(self.recorded_at_us):
            raise SerializationError("recorded_at_us must be an int (microseconds) of 64 bits")
        attributes = self.attributes
        if attributes is not _NO_ATTRIBUTES:  # the default is frozen already
            _SET_ATTRIBUTES(self, _freeze(attributes))


@dataclass(frozen=True, kw_only=True, slots=True)
class JournalEntry(EntryDraft):
    """One link of a saga's hash chain.

    ``hash = SHA-256(bytes.fromhex(prev_hash) || canonical(entry))``; see
    :func:`sagacity.chain.canonical_bytes` and docs/adr/0002-hash-chain.md.
    """

    seq: int
    prev_hash: str
    hash: str

    def __post_init__(self) -> None:
        EntryDraft.__post_init__(self)
        if not in_int64(self.seq) or self.seq < 1:
            raise SerializationError("seq must be an int >= 1 and < 2^63")

    @classmethod
    def placed(
        cls,
        draft: EntryDraft,
        seq: int,
        prev_hash: str,
        hash: str,
        attributes: Mapping[str, str] | None = None,
        commitments: Mapping[str, str] | None = None,
        salts: Mapping[str, str] | None = None,
    ) -> JournalEntry:
        """``draft`` placed in its saga's chain at ``seq`` after ``prev_hash``, hashing to
        ``hash``: the constructor of a link step that computed the link itself.

        The fast way to make an entry, for the writers of the chain (:func:`sagacity.chain.link`
        and the journal's hot path, in Python and compiled: ``native/src/entry.rs`` calls it,
        by position).  It trusts its caller: ``draft``'s fields are taken as they are, not
        validated again (a draft is validated when it is made, and frozen), and nothing here
        checks that ``hash`` is the entry's hash.  Anything else makes an entry with
        ``JournalEntry(...)`` (or :meth:`from_dict`), which validates every field; a chain is
        checked with :func:`sagacity.chain.verify`.

        Args:
            attributes: in place of the draft's: its attributes with the writer's added
                (:func:`with_attribute_items`, sorted by key), as they were hashed.
            commitments / salts: a sealed writer's, which linked the form-1 ``draft`` in form 2
                (both, or neither).
        """
        entry: JournalEntry = _copy_draft(draft, cls)
        _SET_SEQ(entry, seq)
        _SET_PREV_HASH(entry, prev_hash)
        _SET_HASH(entry, hash)
        if attributes is not None:
            _SET_ATTRIBUTES(entry, MappingProxyType(attributes))
        if salts is not None and commitments is not None:
            _SET_FORM(entry, 2)
            _SET_COMMITMENTS(entry, MappingProxyType(commitments))
            _SET_SALTS(entry, MappingProxyType(salts))
        return entry

    @property
    def ref_seq(self) -> int | None:
        """The seq this entry refers to (a decision's request, an outcome's intent), if any:
        ``None`` also when the attribute is damaged (not an integer, or not a seq from 1 to
        2^63 - 1), so such an entry refers to nothing."""
        ref = parse_int(self.attributes.get("ref_seq"), low=0, high=INT64_MAX + 1)
        return ref if ref is not None and 1 <= ref <= INT64_MAX else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (the export and API representation); a form-2
        entry adds ``form``, ``commitments`` and ``salts``."""
        out: dict[str, Any] = {
            "saga_id": self.saga_id,
            "seq": self.seq,
            "event_type": self.event_type.value,
            "tool": self.tool,
            "payload": self.payload,
            "result": self.result,
            "error": self.error,
            "actor": self.actor,
            "attributes": dict(self.attributes),
            "recorded_at_us": self.recorded_at_us,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }
        if self.form != 1:
            out.update(form=self.form, commitments=dict(self.commitments), salts=dict(self.salts))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JournalEntry:
        """The inverse of :meth:`to_dict`; raises :class:`SerializationError` on bad input."""
        try:
            return cls(
                saga_id=data["saga_id"],
                seq=data["seq"],
                event_type=event_type_of(data["event_type"]),
                tool=data.get("tool"),
                payload=data.get("payload"),
                result=data.get("result"),
                error=data.get("error"),
                actor=data.get("actor"),
                attributes=data.get("attributes") or {},
                recorded_at_us=data["recorded_at_us"],
                prev_hash=data["prev_hash"],
                hash=data["hash"],
                form=data.get("form", 1),
                commitments=data.get("commitments") or _NO_COMMITMENTS,
                salts=data.get("salts") or _NO_COMMITMENTS,
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise SerializationError(f"not a journal entry: {exc}") from exc


def with_attribute_items(attributes: Mapping[str, str], key: str, value: str) -> dict[str, str]:
    """``attributes`` (sorted by key, as a draft's are) with one more, sorted likewise
    (replacing one of the same key): what :func:`with_attribute` gives a draft, for a link
    step that hashes it without copying the draft first.

    Raises:
        SerializationError: ``key`` or ``value`` is not valid text.
    """
    _check_text("attribute key", key)
    _check_text(f"attribute {key!r}", value)
    if not attributes or key > max(attributes):
        # The common case on the hot path (``writer`` sorts after most keys): no re-sort.
        return {**attributes, key: value}
    merged = dict(attributes)
    merged[key] = value
    return dict(sorted(merged.items()))


def with_attribute(draft: EntryDraft, key: str, value: str) -> EntryDraft:
    """``draft`` with one more attribute (replacing one of the same key), without validating
    its other fields again (it is frozen and was validated when made).

    Raises:
        SerializationError: ``key`` or ``value`` is not valid text.
    """
    items = with_attribute_items(draft.attributes, key, value)
    copy: EntryDraft = _copy_draft(draft, EntryDraft)
    _SET_ATTRIBUTES(copy, MappingProxyType(items))
    return copy


# Slot descriptors: copying a draft's fields slot by slot bypasses the frozen __setattr__ (and
# the validation the draft already passed).
_SLOT = {f.name: vars(EntryDraft)[f.name].__set__ for f in dataclasses.fields(EntryDraft)}
_SET_SAGA_ID = _SLOT["saga_id"]
_SET_EVENT_TYPE = _SLOT["event_type"]
_SET_TOOL = _SLOT["tool"]
_SET_PAYLOAD = _SLOT["payload"]
_SET_RESULT = _SLOT["result"]
_SET_ERROR = _SLOT["error"]
_SET_ACTOR = _SLOT["actor"]
_SET_ATTRIBUTES = _SLOT["attributes"]
_SET_RECORDED_AT_US = _SLOT["recorded_at_us"]
_SET_FORM = _SLOT["form"]
_SET_COMMITMENTS = _SLOT["commitments"]
_SET_SALTS = _SLOT["salts"]
_SET_SEQ = vars(JournalEntry)["seq"].__set__
_SET_PREV_HASH = vars(JournalEntry)["prev_hash"].__set__
_SET_HASH = vars(JournalEntry)["hash"].__set__
_NEW = object.__new__

_draft_shapes = native("draft_shapes")
if _draft_shapes is not None:
    # What the compiled checks compare with and give (the draft's defaults and types).
    _draft_shapes(EventType, _NO_ATTRIBUTES, _NO_COMMITMENTS, _NOW, SAGA_ID_MAX_BYTES)


def _copy_draft(draft: EntryDraft, cls: type[Any]) -> Any:
    """A new ``cls`` (:class:`EntryDraft` or :class:`JournalEntry`) holding ``draft``'s fields.

    Written out field by field: about half the cost of a loop over the slots (each event is
    copied once on the journal's hot path).  :data:`_COPIED` pins the list to the fields.
    """
    copy = _NEW(cls)
    _SET_SAGA_ID(copy, draft.saga_id)
    _SET_EVENT_TYPE(copy, draft.event_type)
    _SET_TOOL(copy, draft.tool)
    _SET_PAYLOAD(copy, draft.payload)
    _SET_RESULT(copy, draft.result)
    _SET_ERROR(copy, draft.error)
    _SET_ACTOR(copy, draft.actor)
    _SET_ATTRIBUTES(copy, draft.attributes)
    _SET_RECORDED_AT_US(copy, draft.recorded_at_us)
    _SET_FORM(copy, draft.form)
    _SET_COMMITMENTS(copy, draft.commitments)
    _SET_SALTS(copy, draft.salts)
    return copy


_COPIED = (
    "saga_id",
    "event_type",
    "tool",
    "payload",
    "result",
    "error",
    "actor",
    "attributes",
    "recorded_at_us",
    "form",
    "commitments",
    "salts",
)
"""The fields :func:`_copy_draft` copies: every field of a draft (a test pins it)."""
