"""Effect keys: the fields of a call that name its effect within a saga.

A tool with side effects may declare which of its arguments name the effect it has
(``@compensable(effect_key=["order_id"])``, a policy's ``key = ["order_id"]``): two calls of
it in one saga whose key fields are equal have one effect, whatever their call ids, the
framework's retries or a re-planning model make of them.  ``IRREVERSIBLE`` and ``PRIVILEGED``
tools default to the whole payload (:data:`WHOLE_PAYLOAD`); a tool that really does the same
thing twice on purpose declares ``effect_key=None``.  ``READ`` tools have no effect to key.

What this module computes stays in the process: a key's *value* is never journaled (the
journal carries only the key's fields, :attr:`EffectKey.label`), so a redacted field in a key
is never written down in any form but its salted redaction key
(docs/adr/0026-effects-and-refusals.md, docs/adr/0019-erasure.md §5).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sagacity.errors import DeclarationError, SerializationError
from sagacity.privacy._redaction import REDACTED, canonical_json, redact_paths
from sagacity.tools._reversibility import Reversibility


class _Default:
    """The effect key a declaration gets when it names none: by its reversibility."""

    def __repr__(self) -> str:
        return "DEFAULT_KEY"


DEFAULT_KEY: Final = _Default()
"""``effect_key`` left out: the whole payload for gated tools, none for the others."""
WHOLE_PAYLOAD = "*"
"""The label of a key made of the whole payload."""
_MAGIC = b"SGE1"


@dataclass(frozen=True, slots=True)
class EffectKey:
    """The fields that name a tool's effect: ``$.`` paths, or none for the whole payload."""

    paths: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """What is journaled (``effect_key``): ``*`` or the JSON list of the paths."""
        if not self.paths:
            return WHOLE_PAYLOAD
        return json.dumps(list(self.paths), separators=(",", ":"), ensure_ascii=False)

    def describe(self) -> str:
        """The key's fields for a person or a model (never its values)."""
        if not self.paths:
            return "arguments"
        return ", ".join(p.removeprefix("$.") for p in self.paths)

    def material(self, document: Mapping[str, Any]) -> str:
        """The canonical JSON of the key's values in ``document`` (a call's arguments, in clear
        or as journaled: a redacted value is its marker).

        Raises:
            SerializationError: a value is not JSON data.
        """
        if not self.paths:
            return canonical_json(dict(document))
        return canonical_json([_walk(document, path) for path in self.paths])

    def digest(self, tool: str, document: Mapping[str, Any]) -> str:
        """A digest of the key's values for ``tool``: compared in this process, never journaled.

        Raises:
            SerializationError: a value is not JSON data.
        """
        return _digest(tool, self.material(document))


def arguments_digest(tool: str, document: Mapping[str, Any]) -> str:
    """A digest of a call's whole arguments (in clear): "the same arguments", in this process.

    Raises:
        SerializationError: a value is not JSON data.
    """
    return _digest(tool, canonical_json(dict(document)))


def _digest(tool: str, material: str) -> str:
    raw = tool.encode("utf-8")
    return hashlib.sha256(
        _MAGIC + len(raw).to_bytes(4, "big") + raw + material.encode("utf-8")
    ).hexdigest()


def _walk(document: Mapping[str, Any], path: str) -> Any:
    """The value at ``path`` (``None`` when absent); a redacted value stops the walk there."""
    value: Any = document
    for key in path[2:].split("."):
        if _is_marker(value):
            return value
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _is_marker(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == {REDACTED}


def effect_key_of(
    declared: object,
    *,
    reversibility: Reversibility,
    redact: Sequence[str] = (),
    tool: str | None = None,
) -> EffectKey | None:
    """The effect key a declaration gives (``declared``: its ``effect_key``).

    :data:`DEFAULT_KEY`: the whole payload for ``IRREVERSIBLE`` / ``PRIVILEGED`` tools, none
    for the others; ``None``: none; a list of fields (top-level names or ``$.a.b`` paths).

    Raises:
        DeclarationError: a malformed list, a key on a ``READ`` tool, or a key field inside a
            redacted field (the journal holds only the redacted field's key: key on it, or
            outside it).
    """
    where = f"tool {tool!r}: " if tool else ""
    if declared is DEFAULT_KEY:
        return EffectKey() if reversibility.gated else None
    if declared is None:
        return None
    if isinstance(declared, EffectKey):
        paths = declared.paths
    elif isinstance(declared, str) or not isinstance(declared, Iterable):
        raise DeclarationError(
            f'{where}effect_key is a list of fields (["order_id"]) or None, got {declared!r}'
        )
    else:
        try:
            paths = redact_paths(declared, tool=tool)
        except DeclarationError as exc:
            raise DeclarationError(exc.message.replace("redact", "effect_key")) from None
        if not paths:
            raise DeclarationError(
                f"{where}effect_key names no field; give the fields, or effect_key=None for "
                "a tool whose calls never share an effect"
            )
    if reversibility is Reversibility.READ:
        raise DeclarationError(f"{where}a READ tool has no effect to key: drop effect_key")
    for path in paths:
        for hidden in redact:
            if path.startswith(hidden + "."):
                raise DeclarationError(
                    f"{where}effect_key field {path} lies inside redacted field {hidden}: "
                    f"key on {hidden} itself, or on fields outside it"
                )
    return EffectKey(paths)


def journaled_document(payload: str | None) -> dict[str, Any] | None:
    """A journaled payload as the JSON object it is (``None`` when it is not one)."""
    if payload is None:
        return None
    try:
        document = json.loads(payload)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def same_material(key: EffectKey, first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether two documents (both as journaled) carry the same key values."""
    try:
        return key.material(first) == key.material(second)
    except SerializationError:
        return False
