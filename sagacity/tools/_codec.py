"""Text forms journaled for a call: its payload (arguments), its result and its error."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from sagacity.entries._events import EntryDraft, EventType
from sagacity.errors import SerializationError
from sagacity.undo._undo import Undo

RESULT_TEXT = "text"
RESULT_JSON = "json"
RESULT_REPR = "repr"

JSON_PAYLOAD_EVENTS = frozenset({EventType.INTENT, EventType.AWAITING_APPROVAL})
"""The event types whose payload is a tool's input and must be JSON."""


def dumps(value: object) -> str:
    """Compact JSON, the team-wide form of payloads (declaration order, UTF-8 kept as is)."""
    return json.dumps(
        value,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_default,
    )


def _default(value: object) -> object:
    if isinstance(value, Undo):
        return value.to_dict()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _storable(text: str) -> bool:
    """``text`` meets the journal's text rules (no U+0000, no lone surrogates)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def call_arguments(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's arguments by parameter name, in declaration order, defaults applied.

    ``**kwargs`` parameters are flattened into the mapping so a resume can replay them.
    """
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(str(exc)) from None
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        parameter = signature.parameters[name]
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def encode_payload(tool: str, arguments: Mapping[str, Any]) -> str:
    """The payload journaled for a call: compact JSON of its arguments.

    Raises:
        SerializationError: an argument is not JSON-serialisable or not storable text.
    """
    try:
        payload = dumps(dict(arguments))
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"arguments of tool {tool!r} cannot be journaled as JSON: {exc}"
        ) from exc
    if not _storable(payload):
        raise SerializationError(
            f"arguments of tool {tool!r} contain text that cannot be stored (a lone surrogate)"
        )
    return payload


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
"""One decoder for every payload check (``json.loads`` would build one per call); it refuses
``NaN`` and ``Infinity``, which :func:`dumps` never writes."""
_SCAN: Callable[[str, int], tuple[Any, int]] = vars(_JSON)["scan_once"]
"""The scanner ``_JSON`` decodes with (its own, made from its settings): one JSON value from an
index, and where it ends."""


def check_json_payload(draft: EntryDraft) -> None:
    """Refuse a tool payload that is not JSON, before anything is journaled (or the tool runs).

    The one rule every journal applies in ``append``: the payload of an ``INTENT`` or
    ``AWAITING_APPROVAL`` (a tool's input) is JSON text; other events' payloads are not checked.

    Raises:
        SerializationError: the payload of an ``INTENT`` / ``AWAITING_APPROVAL`` is not JSON.
    """
    payload = draft.payload
    if draft.event_type not in JSON_PAYLOAD_EVENTS or payload is None:
        return
    # The decoder's own scanner first (what decode runs, without its two Python frames and
    # whitespace matches): a value that starts at 0 and ends at the end is JSON, as decode
    # would find.  Anything else (leading or trailing text, an error) goes to decode, the rule,
    # which accepts or says what is wrong.
    try:
        if _SCAN(payload, 0)[1] == len(payload):
            return
    except (StopIteration, ValueError):
        pass
    try:
        _JSON.decode(payload)
    except ValueError as exc:
        raise SerializationError(
            f"the {draft.event_type.value} payload of tool {draft.tool!r} is not JSON: {exc}",
            saga_id=draft.saga_id,
        ) from exc


def decode_payload(payload: str) -> dict[str, Any]:
    """The arguments of a journaled payload (a JSON object).

    Raises:
        SerializationError: the payload is not a JSON object.
    """
    try:
        value = json.loads(payload)
    except ValueError as exc:
        raise SerializationError(f"payload is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SerializationError("payload is not a JSON object of arguments")
    return value


def encode_result(value: object) -> tuple[str, str]:
    """The journaled text of a tool's result and its encoding (``text``/``json``/``repr``).

    A ``str`` is kept as is; anything else is compact JSON; what JSON cannot express falls
    back to ``repr``.  Never raises: the tool has already run and its result must be recorded.
    """
    if isinstance(value, str) and _storable(value):
        return value, RESULT_TEXT
    try:
        text = dumps(value)
        if not _storable(text):
            text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=_default)
        return text, RESULT_JSON
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
        return (text if _storable(text) else ascii(value)), RESULT_REPR


def decode_result(text: str | None, encoding: str | None) -> Any:
    """The value :func:`encode_result` recorded (``repr`` results come back as their text)."""
    if text is None:
        return None
    if encoding == RESULT_JSON:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def result_data(text: str | None, encoding: str | None) -> Any:
    """A journaled result as JSON data where it is JSON (a tool's JSON text included), else
    as :func:`decode_result` gives it: what an undo's ``$result`` references and a returned
    undo are read from."""
    if encoding == RESULT_TEXT and text is not None:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return decode_result(text, encoding)


def describe_error(exc: BaseException) -> str:
    """``"TypeName: message"``, made storable."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if _storable(text) else ascii(text)


def safe_text(text: str) -> str:
    """``text`` if storable in the journal, else its ASCII escape."""
    return text if _storable(text) else ascii(text)
