"""Tool policy: which reversibility and which undo each tool an agent can reach has.

A :class:`Policy` maps tool names (exact, or ``fnmatch`` globs such as ``"search_*"``) to a
:class:`Rule`; the agent-level hooks (and anything else that meets tools it did not declare,
such as an MCP proxy) ask it about each tool by name.  Written in Python::

    Policy(
        {
            "refund_invoice": "IRREVERSIBLE",
            "search_*": "READ",
            "update_ticket_status": {"undo": "returned", "undo_tools": ["update_ticket_status"]},
            "reserve": {"by": "myapp.undo:release"},
        },
        default=None,
    )

or as TOML (:meth:`Policy.from_toml`)::

    # default = "COMPENSATABLE"   # optional: what a tool nothing covers gets
    [tools]
    refund_invoice = "IRREVERSIBLE"
    "search_*" = "READ"
    update_ticket_status = { undo = "returned", undo_tools = ["update_ticket_status"] }
    reserve = { by = "myapp.undo:release" }
    pay = { reversibility = "IRREVERSIBLE", redact = ["card_number", "$.customer.iban"] }

How a tool is resolved (:meth:`Policy.resolve`): its exact name, else the first glob that
matches it (in the order written), else its MCP annotations (``readOnlyHint`` → ``READ``;
a tool that is not read-only and not marked ``destructiveHint: false`` → ``IRREVERSIBLE``,
since the policy gives it no undo), else the policy's default, else nothing: the caller
refuses the tool by name.

``{ undo = "returned", undo_tools = [...] }`` is the convention of tools that return their own
undo::

    {"status": "closed", "undo": {"tool": "update_ticket_status",
                                  "arguments": {"ticket_id": "T-1", "status": "pending"}}}

(``"undo": null`` says no undo exists).  ``undo_tools`` names the tools such a result may name
(``undo = "returned"`` may be left out when it is given): compensation never calls a tool the
rule does not list, and never a gated one.  :func:`returned_undo` reads it, from a mapping or
from the JSON text an MCP tool returns.  ``{ by = "module:function" }`` names a compensation
taking one :class:`~sagacity.CompensationContext`; it is imported when the policy is made, so
a target that does not import fails at start-up, naming it.  ``redact`` names payload fields
never journaled in clear (docs/adr/0019-erasure.md §5; see :class:`Rule`).
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import re
import tomllib
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sagacity.effects._effect_keys import DEFAULT_KEY, effect_key_of
from sagacity.effects._refusals import Refusals, check_refuses
from sagacity.errors import DeclarationError, PolicyError, SerializationError
from sagacity.privacy._redaction import redact_paths
from sagacity.tools._decorators import Constraint, check_undo_tools
from sagacity.tools._reversibility import Reversibility
from sagacity.undo._undo import Undo, UndoCall, extract_undo

__all__ = [
    "Policy",
    "PolicyWarning",
    "Resolution",
    "Rule",
    "ToolAnnotations",
    "returned_undo",
]

_RULE_KEYS = frozenset(
    {"reversibility", "undo", "by", "redact", "undo_tools", "key", "refuses", "grantable"}
)
_TOP_KEYS = frozenset({"default", "tools"})


class PolicyWarning(UserWarning):
    """A policy names tools the agent does not have, or a glob matches none of its tools."""


@dataclass(frozen=True, kw_only=True)
class Rule:
    """What a policy says about one tool (or one glob of tools).

    Attributes:
        reversibility: see :class:`~sagacity.Reversibility`.  ``REVERSIBLE`` by default when
            ``undo="returned"``, ``COMPENSATABLE`` when ``by`` is given.
        undo: ``"returned"``: the tool's result carries its own undo (see
            :func:`returned_undo`), naming one of ``undo_tools``; or an
            :class:`~sagacity.UndoCall`: another tool, with arguments taken from the call
            (``"$arguments.x"``) and its result (``"$result.y"``).
        undo_tools: for ``undo="returned"`` (required there): the tools the result may name
            as its undo; compensation calls no other, and never a gated one.
        by: the compensation, a function taking one ``CompensationContext`` (given as the
            function or as ``"module:function"``, imported when the rule is made).
        by_name: ``by`` as written (``"module:function"``), for messages.
        constraint: a policy predicate over the call's arguments (Python policies only).
        redact: payload fields never journaled in clear: top-level names (``"card_number"``)
            or ``"$.a.b"`` paths into nested objects, kept in their ``$.`` spelling; each
            value is replaced by its salted redaction key before the payload is committed,
            sealed or hashed (docs/adr/0019-erasure.md §5).  A tool with fields to redact is
            refused at start-up by a journal that does not seal
            (``SAGACITY_KEY_ENCRYPTION_KEY_FILE`` unset).
        effect_key: the fields naming a call's effect in its saga (``key = ["order_id"]``;
            ``key = false``: none), as ``@compensable(effect_key=...)``: a second call with
            the same values does not run (docs/adr/0026-effects-and-refusals.md).  Left out:
            the whole payload for ``IRREVERSIBLE`` / ``PRIVILEGED`` tools, none for others.
        refuses: exception classes with which the tool refuses a call before acting
            (``refuses = ["myapp.errors:OutOfStock"]``, imported when the rule is made):
            journaled as a refusal, no failed step.
        grantable: ``false``: no approver may grant the tool for a saga (a standing grant,
            docs/operations/grants.md); ``PRIVILEGED`` tools never can.
    """

    reversibility: Reversibility
    undo: Literal["returned"] | UndoCall | None = None
    by: Callable[..., Any] | None = None
    by_name: str | None = None
    constraint: Constraint | None = None
    redact: tuple[str, ...] = ()
    undo_tools: tuple[str, ...] = ()
    effect_key: object = DEFAULT_KEY
    refuses: Refusals = ()
    grantable: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "redact", redact_paths(self.redact))
        if not isinstance(self.grantable, bool):
            raise DeclarationError(f"grantable must be true or false, got {self.grantable!r}")
        object.__setattr__(self, "refuses", check_refuses(self.refuses))
        effect_key_of(self.effect_key, reversibility=self.reversibility, redact=self.redact)
        if not isinstance(self.reversibility, Reversibility):
            raise DeclarationError(
                f"reversibility must be a Reversibility member, got {self.reversibility!r}"
            )
        if self.undo not in (None, "returned") and not isinstance(self.undo, UndoCall):
            raise DeclarationError(
                f'undo must be "returned" or an undo call (tool and arguments), got {self.undo!r}'
            )
        if self.by is not None and not callable(self.by):
            raise DeclarationError(f"by must be a function, got {self.by!r}")
        if self.by is not None and self.undo is not None:
            raise DeclarationError('give by= or an undo ("returned", or a call), not both')
        if (self.by is not None or self.undo is not None) and not self.reversibility.undoable:
            raise DeclarationError(
                f"a {self.reversibility.value} tool has no undo: by= and undo= are only for "
                "REVERSIBLE and COMPENSATABLE tools"
            )
        if self.constraint is not None and not callable(self.constraint):
            raise DeclarationError(f"constraint must be callable, got {self.constraint!r}")
        names = check_undo_tools(self.undo_tools, by=self.by, reversibility=self.reversibility)
        if names and self.undo != "returned":
            raise DeclarationError(
                'undo_tools are the tools a returned undo may name: give undo = "returned" '
                "(or leave undo out), not an undo call"
            )
        if self.undo == "returned" and not names:
            raise DeclarationError(
                'undo = "returned" needs undo_tools = ["..."]: the tools the result may '
                "name as its undo (compensation calls no other)"
            )
        object.__setattr__(self, "undo_tools", names)


@dataclass(frozen=True, kw_only=True)
class ToolAnnotations:
    """An MCP tool's behaviour hints (``readOnlyHint``, ``destructiveHint``, ...).

    ``None`` means the hint is absent.
    """

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    @classmethod
    def from_mcp(cls, annotations: object) -> ToolAnnotations | None:
        """From an MCP ``ToolAnnotations`` object or its wire dict (camelCase keys)."""
        if annotations is None:
            return None
        dump = getattr(annotations, "model_dump", None)
        if callable(dump):  # the MCP SDK's model: its wire (camelCase) form
            annotations = dump(by_alias=True)

        def hint(name: str) -> bool | None:
            value = (
                annotations.get(name)
                if isinstance(annotations, Mapping)
                else getattr(annotations, name, None)
            )
            return value if isinstance(value, bool) else None

        return cls(
            read_only=hint("readOnlyHint"),
            destructive=hint("destructiveHint"),
            idempotent=hint("idempotentHint"),
            open_world=hint("openWorldHint"),
        )

    def rule(self) -> Rule | None:
        """The default these hints give: ``READ`` for a read-only tool, ``IRREVERSIBLE`` for
        one that may be destructive (MCP's default for a tool that is not read-only), none
        when the tool says it is not destructive."""
        if self.read_only:
            return Rule(reversibility=Reversibility.READ)
        if self.destructive is False:
            return None
        return Rule(reversibility=Reversibility.IRREVERSIBLE)


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """How a policy covers one tool.

    Attributes:
        tool: the tool's name.
        rule: the rule that applies.
        source: ``"policy"`` (a name or glob), ``"annotations"`` (MCP hints) or ``"default"``.
        pattern: the name or glob that matched, for ``"policy"``.
    """

    tool: str
    rule: Rule
    source: Literal["policy", "annotations", "default"]
    pattern: str | None = None


def returned_undo(result: object) -> Undo | None:
    """The undo a tool's result carries, by the returned-undo convention.

    ``result`` is a mapping with an ``"undo"`` key (``{"tool": ..., "arguments": {...}}`` or
    ``None``), an :class:`~sagacity.Undo`, or the JSON text of such a mapping (what an MCP
    tool returns).  ``None`` when it carries none or says none exists.
    """
    if isinstance(result, str | bytes):
        try:
            result = json.loads(result)
        except ValueError:
            return None
    undo = extract_undo(result)
    return undo if isinstance(undo, Undo) else None


def _import_target(target: str) -> Callable[..., Any]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f'{target!r} is not "module:function"')
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"module {module_name!r} does not import ({exc})") from exc
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"module {module_name!r} has no {attribute!r}")
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"{target!r} is not callable")
    return value  # type: ignore[no-any-return]


def _reversibility(value: object) -> Reversibility:
    if isinstance(value, Reversibility):
        return value
    if isinstance(value, str):
        try:
            return Reversibility(value.upper())
        except ValueError:
            pass
    names = ", ".join(r.value for r in Reversibility)
    raise ValueError(f"reversibility must be one of {names}, got {value!r}")


def _rule(value: object) -> Rule:
    """A rule from its Python or TOML spelling (raises ``ValueError`` with the reason)."""
    if isinstance(value, Rule):
        return value
    if isinstance(value, Reversibility | str):
        return Rule(reversibility=_reversibility(value))
    if not isinstance(value, Mapping):
        raise ValueError(
            f"a rule is a reversibility name or a table with reversibility/undo/by, got {value!r}"
        )
    unknown = sorted(set(value) - _RULE_KEYS - {"constraint"})
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} (a rule takes reversibility, undo, "
            "undo_tools, by, redact, key, refuses, grantable)"
        )
    by = value.get("by")
    by_name: str | None = None
    if isinstance(by, str):
        by_name = by
        by = _import_target(by)
    elif by is not None and not callable(by):
        raise ValueError(f'by must be "module:function" or a function, got {by!r}')
    undo = value.get("undo")
    undo_tools = value.get("undo_tools", ())
    if isinstance(undo_tools, str) or not isinstance(undo_tools, list | tuple):
        raise ValueError(
            f'undo_tools must be a list of tool names (["release"]), got {undo_tools!r}'
        )
    if undo is None and undo_tools:
        undo = "returned"
    if isinstance(undo, Mapping):
        undo = _undo_call(undo)
    elif undo is not None and undo != "returned" and not isinstance(undo, UndoCall):
        raise ValueError(
            'undo must be "returned" (the tool returns its own undo) or a table '
            f"{{ tool = ..., arguments = {{ ... }} }} naming another tool, got {undo!r}"
        )
    if "reversibility" in value:
        reversibility = _reversibility(value["reversibility"])
    elif undo == "returned":
        reversibility = Reversibility.REVERSIBLE
    elif isinstance(undo, UndoCall) or by is not None:
        reversibility = Reversibility.COMPENSATABLE
    else:
        raise ValueError("a rule table needs reversibility, undo or by")
    if "redact" in value and (
        isinstance(value["redact"], str) or not isinstance(value["redact"], list | tuple)
    ):
        raise ValueError(
            'redact must be a list of fields (["card_number", "$.customer.iban"]), '
            f"got {value['redact']!r}"
        )
    try:
        return Rule(
            reversibility=reversibility,
            undo=undo,
            by=by,
            by_name=by_name,
            constraint=value.get("constraint"),
            redact=value.get("redact", ()),
            undo_tools=tuple(undo_tools),
            effect_key=_effect_key(value),
            refuses=_refuses(value.get("refuses", ())),
            grantable=value.get("grantable", True),
        )
    except DeclarationError as exc:
        raise ValueError(exc.message) from exc


def _effect_key(value: Mapping[str, Any]) -> object:
    """A rule's ``key``: a list of fields, ``false`` (none) or left out (the default)."""
    if "key" not in value:
        return DEFAULT_KEY
    key = value["key"]
    if key is False or key is None:
        return None
    if isinstance(key, str) or not isinstance(key, list | tuple):
        raise ValueError(f'key must be a list of fields (["order_id"]) or false, got {key!r}')
    return tuple(key)


def _refuses(value: object) -> Refusals:
    """A rule's ``refuses``: exception classes, or ``"module:Class"`` names imported now."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError(
            f'refuses must be a list of exception classes (["myapp.errors:OutOfStock"]), '
            f"got {value!r}"
        )
    return tuple(_import_target(v) if isinstance(v, str) else v for v in value)  # type: ignore[misc]


def _undo_call(table: Mapping[str, Any]) -> UndoCall:
    """An undo call from its table: ``{ tool = "release", arguments = { id = "$result.id" } }``."""
    unknown = sorted(set(table) - {"tool", "arguments"})
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} in undo (it takes tool, arguments)")
    try:
        return UndoCall(tool=table.get("tool"), arguments=table.get("arguments") or {})  # type: ignore[arg-type]
    except SerializationError as exc:
        raise ValueError(exc.message) from exc


def _line_of(text: str | None, key: str) -> int | None:
    if text is None:
        return None
    pattern = re.compile(rf"""^\s*(?:"{re.escape(key)}"|'{re.escape(key)}'|{re.escape(key)})\s*=""")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


class Policy:
    """Tool names (and globs) → :class:`Rule`, with an optional default.

    Args:
        rules: name or glob → a :class:`Rule`, a reversibility (``"READ"`` or a
            :class:`~sagacity.Reversibility`), or a mapping with ``reversibility``, ``undo``
            (``"returned"``, with ``undo_tools``), ``by`` (``"module:function"`` or a
            function) and ``constraint``.
        default: the rule of a tool nothing else covers; without one such a tool is refused.

    Raises:
        PolicyError: a malformed rule, or a ``by`` target that does not import (named).
    """

    def __init__(
        self,
        rules: Mapping[str, object] | None = None,
        *,
        default: object = None,
        source: str | None = None,
        _text: str | None = None,
    ) -> None:
        self._source = source
        if rules is not None and not isinstance(rules, Mapping):
            raise PolicyError(
                f"rules must be a mapping of tool names, got {rules!r}", source=source
            )
        exact: dict[str, Rule] = {}
        globs: list[tuple[str, Rule]] = []
        for pattern, value in (rules or {}).items():
            if not isinstance(pattern, str) or not pattern.strip():
                raise PolicyError(
                    f"a tool name must be a non-empty str, got {pattern!r}", source=source
                )
            try:
                rule = _rule(value)
            except ValueError as exc:
                raise PolicyError(
                    f"tool {pattern!r}: {exc}", source=source, line=_line_of(_text, pattern)
                ) from None
            if any(c in pattern for c in "*?["):
                globs.append((pattern, rule))
            else:
                exact[pattern] = rule
        try:
            self._default = None if default is None else _rule(default)
        except ValueError as exc:
            raise PolicyError(
                f"default: {exc}", source=source, line=_line_of(_text, "default")
            ) from None
        self._exact = exact
        self._globs = tuple(globs)

    # -- loading --------------------------------------------------------------------------
    @classmethod
    def from_toml(cls, path: str | Path) -> Policy:
        """The policy in the TOML file at ``path``.

        Raises:
            PolicyError: the file cannot be read, is not TOML (the line and the reason), or
                holds a malformed rule (the line, the tool and the reason).
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PolicyError(f"cannot read the policy: {exc}", source=str(path)) from exc
        return cls.loads(text, source=str(path))

    @classmethod
    def loads(cls, text: str, *, source: str = "<policy>") -> Policy:
        """The policy in TOML ``text`` (see the module documentation for the format).

        Raises:
            PolicyError: as :meth:`from_toml`.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            # Python 3.11's error carries its position only in its text.
            where = re.search(r"\(at line (\d+), column \d+\)", str(exc))
            line = int(where.group(1)) if where else None
            reason = str(exc).replace(where.group(0), "").strip() if where else str(exc)
            raise PolicyError(f"not valid TOML: {reason}", source=source, line=line) from None
        unknown = sorted(set(data) - _TOP_KEYS)
        if unknown:
            raise PolicyError(
                f"unknown top-level key {unknown[0]!r}: tool rules go in the [tools] table, "
                "next to an optional default = ...",
                source=source,
                line=_line_of(text, unknown[0]),
            )
        tools = data.get("tools", {})
        if not isinstance(tools, dict):
            raise PolicyError("tools must be a table", source=source, line=_line_of(text, "tools"))
        return cls(tools, default=data.get("default"), source=source, _text=text)

    # -- questions ------------------------------------------------------------------------
    @property
    def source(self) -> str | None:
        """Where the policy was loaded from, if from a file."""
        return self._source

    @property
    def default(self) -> Rule | None:
        """The rule of a tool nothing else covers (``None``: such a tool is refused)."""
        return self._default

    @property
    def patterns(self) -> tuple[str, ...]:
        """The names and globs the policy covers, names first."""
        return (*self._exact, *(pattern for pattern, _ in self._globs))

    def resolve(self, tool: str, annotations: ToolAnnotations | None = None) -> Resolution | None:
        """How ``tool`` is covered: its name, a glob, its MCP annotations, the default, or
        ``None`` when nothing covers it."""
        rule = self._exact.get(tool)
        if rule is not None:
            return Resolution(tool=tool, rule=rule, source="policy", pattern=tool)
        for pattern, glob_rule in self._globs:
            if fnmatch.fnmatchcase(tool, pattern):
                return Resolution(tool=tool, rule=glob_rule, source="policy", pattern=pattern)
        annotated = annotations.rule() if annotations is not None else None
        if annotated is not None:
            return Resolution(tool=tool, rule=annotated, source="annotations")
        if self._default is not None:
            return Resolution(tool=tool, rule=self._default, source="default")
        return None

    def names_exactly(self, tool: str) -> bool:
        """The policy has a rule for ``tool`` by its exact name (not through a glob)."""
        return tool in self._exact

    def unmatched(self, tools: Iterable[str]) -> tuple[str, ...]:
        """The names ``tools`` lacks and the globs that match none of ``tools``."""
        names = set(tools)
        missing = [name for name in self._exact if name not in names]
        empty = [
            pattern
            for pattern, _ in self._globs
            if not any(fnmatch.fnmatchcase(name, pattern) for name in names)
        ]
        return (*missing, *empty)

    def warn_unmatched(self, tools: Iterable[str], *, where: str, stacklevel: int = 3) -> None:
        """Warn (:class:`PolicyWarning`) listing what :meth:`unmatched` finds, if anything."""
        unmatched = self.unmatched(tools)
        if unmatched:
            warnings.warn(
                f"the tool policy names tools {where} does not have: "
                f"{', '.join(repr(u) for u in unmatched)}",
                PolicyWarning,
                stacklevel=stacklevel,
            )

    def __repr__(self) -> str:
        return f"Policy({list(self.patterns)!r}, default={self._default!r})"
