"""Field-level redaction at write time (docs/adr/0019-erasure.md §5).

A tool may name payload fields never journaled in clear: ``redact=["card_number",
"$.customer.iban"]`` (a top-level argument by name, or a ``$.a.b`` path into nested objects).
Before the payload is committed, sealed or hashed, each value is replaced by::

    {"$redacted": hex(K_r)}
    K_r = SHA-256("SGR1" || F(tool) || F(path) || F(salt_r) || F(canonical JSON of the value))

``F`` is the chain's length-prefixed framing (a big-endian 32-bit length, then the bytes),
``path`` the ``$.`` spelling (``card_number`` is ``$.card_number``), ``salt_r`` 32 random bytes
drawn per redacted path, and the canonical JSON of a value is compact, keys sorted, non-ASCII
kept as UTF-8 (``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``).  The salts travel as the data attribute ``redaction`` (compact JSON,
path → salt hex), committed to in chain form 2 and sealed under the saga's key; the value
itself is never journaled.  ``payload_sha256`` is over the redacted text, so an approval binds
``K_r``: a resumer redacts the live payload with the stored salts and compares.

The value must not come back through another text either: a gateway that echoes the card
number in its answer or in its exception would put it in ``EXECUTED``'s result, ``FAILED``'s
error and the saga's end.  :func:`redact` also gives the texts a redacted value can appear as
(:func:`value_texts`), and :func:`mask_draft` — applied by the one path that journals a call's
outcome and a run's end (``sagacity.entries._oversize.append_bounded``) — replaces each
occurrence of them in the draft's free text (result, error, and the text attributes of
:data:`TEXT_ATTRIBUTES`) with :data:`MASK`.  Texts shorter than :data:`MIN_MASKED_CHARS` are
not masked (they would match everywhere); the payload is never rewritten (it is the redacted
form already, bound by its SHA-256).

It needs nothing beyond the standard library, the chain's framing and the attribute names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sagacity.chain import framed as _framed
from sagacity.entries import _attributes as attr
from sagacity.entries._events import EntryDraft
from sagacity.errors import DeclarationError, SerializationError

REDACTION_MAGIC = b"SGR1"
"""Leading bytes of every redaction key's preimage."""
REDACTED = "$redacted"
"""The key of the object that stands for a redacted value in a journaled payload."""
REDACTION_ATTRIBUTE = "redaction"
"""The data attribute holding the salts of the redacted paths (compact JSON, path → hex)."""
SALT_BYTES = 32
MASK = "•••• (redacted)"
"""How people are shown a redacted value (the approval console), and what stands for one in
the text of an outcome (:func:`mask_draft`)."""
MIN_MASKED_CHARS = 4
"""The shortest text of a redacted value masked in other text.  A shorter one (a 3-digit
code) would match inside unrelated words and numbers of every error, so it is not masked: a
tool must not echo such a value in its errors or results."""
TEXT_ATTRIBUTES = frozenset({attr.DIRTY, attr.NOTE, attr.REASON, attr.UNDO_ARGUMENTS})
"""The attributes whose values are free text a call's result or error can reach (the others
are names, numbers, hashes and signatures, never rewritten).  An attribute written from a
call's text must be listed here."""
_JSON_ATTRIBUTES = frozenset({attr.UNDO_ARGUMENTS})


def _dumps(value: object, *, sort_keys: bool) -> str:
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=sort_keys
    )


def canonical_json(value: object) -> str:
    """The canonical JSON of a redacted value: compact, keys sorted, UTF-8 kept as is.

    Raises:
        SerializationError: ``value`` is not JSON data.
    """
    try:
        return _dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"a redacted value is not JSON: {exc}") from exc


def redaction_key(tool: str, path: str, salt: bytes, value: object) -> bytes:
    """``K_r`` for ``value`` at ``path`` of a call of ``tool``: 32 raw bytes.

    Raises:
        SerializationError: ``salt`` is not 32 bytes, or ``value`` is not JSON data.
    """
    if len(salt) != SALT_BYTES:
        raise SerializationError(f"the redaction salt of {path} must be {SALT_BYTES} bytes")
    return hashlib.sha256(
        b"".join(
            (
                REDACTION_MAGIC,
                _framed(tool.encode("utf-8")),
                _framed(path.encode("utf-8")),
                _framed(salt),
                _framed(canonical_json(value).encode("utf-8")),
            )
        )
    ).digest()


def _segments(path: str) -> tuple[str, ...]:
    """The keys a path walks (``"$.a.b"`` → ``("a", "b")``; ``"name"`` → ``("name",)``)."""
    if path.startswith("$."):
        parts = tuple(path[2:].split("."))
    elif path.startswith("$"):
        raise ValueError(f"{path!r} is neither a top-level name nor a $.a.b path")
    else:
        parts = (path,)
    if not all(parts):
        raise ValueError(f"{path!r} has an empty key")
    if not path.startswith("$.") and "." in path:
        raise ValueError(f"{path!r}: a top-level name has no dot (a nested field is $.a.b)")
    return parts


def redact_paths(paths: object, *, tool: str | None = None) -> tuple[str, ...]:
    """The redacted paths a declaration gives, in their ``$.`` spelling, in the order given.

    Raises:
        DeclarationError: ``paths`` is not a list of names and ``$.a.b`` paths, or two of
            them name the same field or one lies inside another.
    """
    where = f"tool {tool!r}: " if tool else ""
    if isinstance(paths, str) or not isinstance(paths, Iterable):
        raise DeclarationError(
            f'{where}redact must be a list of fields (["card_number", "$.customer.iban"]), '
            f"got {paths!r}"
        )
    spelled: list[str] = []
    walks: list[tuple[str, ...]] = []
    for path in paths:
        if not isinstance(path, str):
            raise DeclarationError(f"{where}a redacted field is a str, got {path!r}")
        try:
            walk = _segments(path)
        except ValueError as exc:
            raise DeclarationError(f"{where}redact: {exc}") from None
        for other in walks:
            shorter, longer = sorted((walk, other), key=len)
            if longer[: len(shorter)] == shorter:
                raise DeclarationError(
                    f"{where}redact names {'$.' + '.'.join(walk)!r} twice or inside "
                    f"{'$.' + '.'.join(shorter)!r}; name each field once"
                )
        walks.append(walk)
        spelled.append("$." + ".".join(walk))
    return tuple(spelled)


@dataclass(frozen=True, kw_only=True)
class Redacted:
    """A payload with its redacted fields replaced.

    Attributes:
        payload: the text journaled and hashed (the input itself when nothing was redacted).
        salts: path → salt (hex) of each field redacted (empty: nothing was).
    """

    payload: str
    salts: Mapping[str, str]
    values: frozenset[str] = field(default_factory=frozenset)
    """The texts the redacted values can appear as elsewhere (:func:`value_texts`): what
    :func:`mask_draft` masks in the call's outcome and the run's end."""

    @property
    def attribute(self) -> str | None:
        """The ``redaction`` attribute's value (``None``: nothing was redacted)."""
        return _dumps(dict(self.salts), sort_keys=True) if self.salts else None


def redact(
    tool: str,
    payload: str,
    paths: Sequence[str],
    salts: Mapping[str, str] | None = None,
) -> Redacted:
    """``payload`` (compact JSON of a call's arguments) with each field at ``paths`` replaced
    by ``{"$redacted": hex(K_r)}``.

    A path whose field is absent (or under a ``null``) redacts nothing.  ``salts`` (path →
    hex) are used for their paths, so a live payload redacted with a request's salts
    reproduces the request's text when its values are the same; other paths draw fresh ones.

    Raises:
        SerializationError: ``payload`` is not a JSON object, or a path runs into a value
            that is neither an object nor null (``$.customer.iban`` with ``customer`` a str).
    """
    if not paths:
        return Redacted(payload=payload, salts={})
    try:
        document = json.loads(payload)
    except ValueError as exc:
        raise SerializationError(f"the payload of tool {tool!r} is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise SerializationError(f"the payload of tool {tool!r} is not a JSON object")
    given = salts or {}
    used: dict[str, str] = {}
    texts: set[str] = set()
    for path in paths:
        walk = _segments(path)
        holder: Any = document
        for depth, key in enumerate(walk[:-1]):
            holder = holder.get(key)
            if holder is None:
                break
            if not isinstance(holder, dict):
                inside = "$." + ".".join(walk[: depth + 1])
                raise SerializationError(
                    f"tool {tool!r} redacts {path}, but {inside} is a "
                    f"{type(holder).__name__}, not an object: the call is refused (nothing "
                    "was journaled, the tool was not called)"
                )
        if holder is None or walk[-1] not in holder:
            continue
        salt_hex = given.get(path)
        salt = bytes.fromhex(salt_hex) if salt_hex is not None else secrets.token_bytes(SALT_BYTES)
        texts |= value_texts(holder[walk[-1]])
        holder[walk[-1]] = {REDACTED: redaction_key(tool, path, salt, holder[walk[-1]]).hex()}
        used[path] = salt.hex()
    if not used:
        return Redacted(payload=payload, salts={})
    return Redacted(payload=_dumps(document, sort_keys=False), salts=used, values=frozenset(texts))


def value_texts(value: object) -> frozenset[str]:
    """The texts a redacted ``value`` (JSON data) can appear as inside other text.

    Each string in it as itself, JSON-escaped (UTF-8 kept, and ASCII-only) and as Python's
    ``repr`` writes it; each number in its JSON and ``str`` forms; nothing of booleans, null
    and object keys.  Texts shorter than :data:`MIN_MASKED_CHARS` are left out.
    """
    found: set[str] = set()
    if isinstance(value, str):
        found |= {
            value,
            json.dumps(value, ensure_ascii=False)[1:-1],
            json.dumps(value)[1:-1],
            repr(value)[1:-1],
        }
    elif isinstance(value, int | float) and not isinstance(value, bool):
        found |= {str(value), json.dumps(value)}
    elif isinstance(value, dict):
        for item in value.values():
            found |= value_texts(item)
    elif isinstance(value, list):
        for item in value:
            found |= value_texts(item)
    return frozenset(t for t in found if len(t) >= MIN_MASKED_CHARS)


def _mask_text(text: str, texts: Sequence[str]) -> str:
    for secret in texts:  # longest first: a value inside another is masked with it
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _mask_json(value: object, texts: Sequence[str]) -> object:
    if isinstance(value, str):
        return _mask_text(value, texts)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return MASK if {str(value), json.dumps(value)} & set(texts) else value
    if isinstance(value, dict):
        return {_mask_text(k, texts): _mask_json(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v, texts) for v in value]
    return value


def _mask_field(text: str, texts: Sequence[str], *, as_json: bool) -> str:
    """``text`` with every occurrence of ``texts`` masked; JSON text stays JSON (a masked
    number becomes the :data:`MASK` string) and keeps its form where nothing was masked."""
    if not any(t in text for t in texts):
        return text
    if as_json:
        try:
            document = json.loads(text)
        except ValueError:
            pass
        else:
            return _dumps(_mask_json(document, texts), sort_keys=False)
    return _mask_text(text, texts)


def mask_draft(draft: EntryDraft, values: Collection[str]) -> EntryDraft:
    """``draft`` with each occurrence of ``values`` (texts of redacted values, from
    :attr:`Redacted.values`) in its result, error and :data:`TEXT_ATTRIBUTES` replaced by
    :data:`MASK`; the draft itself when none occurs.

    The one masking rule: the core applies it to every outcome it journals for a call and to
    its run's end (``sagacity.entries._oversize.append_bounded``), before the event is linked.
    A JSON result (``result_encoding=json``) and the undo's arguments stay JSON.
    """
    texts = sorted((t for t in values if len(t) >= MIN_MASKED_CHARS), key=len, reverse=True)
    if not texts:
        return draft
    json_result = draft.attributes.get(attr.RESULT_ENCODING) == "json"
    result = None if draft.result is None else _mask_field(draft.result, texts, as_json=json_result)
    error = None if draft.error is None else _mask_field(draft.error, texts, as_json=False)
    attributes = {
        k: (_mask_field(v, texts, as_json=k in _JSON_ATTRIBUTES) if k in TEXT_ATTRIBUTES else v)
        for k, v in draft.attributes.items()
    }
    if (result, error, attributes) == (draft.result, draft.error, dict(draft.attributes)):
        return draft
    return dataclasses.replace(draft, result=result, error=error, attributes=attributes)


def stored_salts(attribute: str | None) -> dict[str, str]:
    """The salts a ``redaction`` attribute holds (path → hex; empty for ``None``).

    Raises:
        SerializationError: the attribute is not a JSON object of 32-byte hex salts.
    """
    if attribute is None:
        return {}
    try:
        salts = json.loads(attribute)
    except ValueError as exc:
        raise SerializationError(f"the redaction attribute is not JSON: {exc}") from exc
    if not isinstance(salts, dict):
        raise SerializationError("the redaction attribute is not a JSON object")
    for path, salt in salts.items():
        try:
            _segments(path)
            ok = isinstance(salt, str) and len(bytes.fromhex(salt)) == SALT_BYTES
        except ValueError:
            ok = False
        if not ok or not path.startswith("$."):
            raise SerializationError(f"the redaction attribute's entry {path!r} is malformed")
    return salts


def is_canonical_payload(payload: str) -> bool:
    """``payload`` is JSON in the journal's compact form (what a call of the tool journals):
    a live payload re-encoded differently is not the approved one, even with equal values."""
    try:
        return _dumps(json.loads(payload), sort_keys=False) == payload
    except ValueError:
        return False


def _is_marker(value: object) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(REDACTED), str)


def redacted_fields(value: object, path: str = "$") -> list[str]:
    """The ``$.`` paths of the redacted values in ``value`` (a decoded payload), in order."""
    if _is_marker(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in redacted_fields(v, f"{path}.{k}")]
    return []


def masked(value: object) -> object:
    """``value`` (a decoded payload) with every redacted field shown as :data:`MASK`."""
    if _is_marker(value):
        return MASK
    if isinstance(value, dict):
        return {k: masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def refuse_in_form_1(draft: EntryDraft) -> None:
    """Refuse to write a redacted entry in chain form 1: its salts would be journaled in clear
    (only form 2 commits to and seals the ``redaction`` attribute).

    A writer calls it for each draft it writes in form 1 (a saga opened without a key service,
    or by an older writer).

    Raises:
        SerializationError: ``draft`` carries redaction salts.
    """
    if draft.form == 1 and REDACTION_ATTRIBUTE in draft.attributes:
        raise SerializationError(
            f"saga {draft.saga_id!r} is written in chain form 1 (opened without a key service, "
            f"or by an older writer): its {draft.event_type.value} of tool {draft.tool!r} has "
            "redacted fields, whose salts only form 2 seals; nothing was written (for an "
            "INTENT, the tool was not called)",
            saga_id=draft.saga_id,
        )
