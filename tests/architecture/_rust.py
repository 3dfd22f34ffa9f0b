"""The sizes of Rust source: its line count and each ``fn`` item's lines, for the size budget.

A function's size runs from the line its ``fn`` keyword is on to the line of its closing brace.
The scan is small on purpose: comments and string, byte-string, raw-string and char literals are
blanked first (so a brace inside them is not counted), then braces are matched, each ``{`` that
opens an ``fn``, ``impl``, ``trait`` or ``mod`` item named after it.  A method is named after its
``impl`` header (``Type::method``, ``Trait for Type::method``), a nested function after the one
holding it (``outer::inner``).  It reads the crate's own style, not every program rustc accepts
(a brace in a const generic argument of a signature, for one, would confuse it).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

_RAW_STRING = re.compile(r'(?<![A-Za-z0-9_])b?r(#*)"')
_ITEM = re.compile(r"\b(fn|impl|trait|mod)\b(?:\s+(?:r#)?([A-Za-z_][A-Za-z0-9_]*))?")


def _blank(text: str, start: int, end: int, out: list[str]) -> None:
    out.extend("\n" if c == "\n" else " " for c in text[start:end])


def _literal_end(text: str, i: int) -> int | None:
    """Where the comment or literal starting at ``i`` ends, or ``None`` if none starts there."""
    c = text[i]
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if text.startswith("/*", i):  # block comments nest
        depth, j = 0, i
        while j < len(text):
            if text.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif text.startswith("*/", j):
                depth, j = depth - 1, j + 2
                if depth == 0:
                    return j
            else:
                j += 1
        return len(text)
    raw = _RAW_STRING.match(text, i)
    if raw:
        close = text.find('"' + raw.group(1), raw.end())
        return len(text) if close < 0 else close + 1 + len(raw.group(1))
    if c == '"':
        j = i + 1
        while j < len(text) and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return j + 1
    if c == "'":  # a char literal; a lifetime or a label ('a, 'outer) is code
        if text.startswith("\\", i + 1):
            close = text.find("'", i + 3)
            return None if close < 0 else close + 1
        if text.startswith("'", i + 2):
            return i + 3
    return None


def blank_literals(text: str) -> str:
    """``text`` with its comments and literals replaced by spaces (newlines kept)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        end = _literal_end(text, i)
        if end is None:
            out.append(text[i])
            i += 1
        else:
            _blank(text, i, end, out)
            i = end
    return "".join(out)


def functions(text: str) -> Iterator[tuple[str, int]]:
    """``(qualified name, lines)`` of every ``fn`` item with a body in the Rust ``text``."""
    code = blank_literals(text)
    line_starts = [0, *(m.end() for m in re.finditer("\n", code))]

    def line(at: int) -> int:
        return bisect.bisect_right(line_starts, at)

    # Each open brace: the qualified name of the item it opens (None for a plain block), the
    # item's kind and the line its keyword is on.
    stack: list[tuple[str | None, str, int]] = []
    pending: tuple[str, str, int] | None = None  # (kind, name, where) of an item not yet opened
    nesting = 0  # ( and [ depth since its keyword: `;` in `[u8; 32]` does not end a declaration
    i = 0
    while i < len(code):
        c = code[i]
        item = _ITEM.match(code, i) if pending is None and _starts_word(code, i) else None
        if item is not None:
            kind, name = item.group(1), item.group(2)
            if kind == "impl":
                pending = ("impl", "", i + len("impl"))
            elif name is not None:  # `fn(u8) -> u8` is a type, not an item
                pending = (kind, name, i)
            nesting = 0
            i += len(kind)
            continue
        if c in "([":
            nesting += 1
        elif c in ")]":
            nesting -= 1
        elif c == ";" and nesting <= 0:
            pending = None  # an item without a body: `fn f();` in a trait, `mod m;`
        elif c == "{":
            if pending is None:
                stack.append((None, "block", 0))
            else:
                kind, name, at = pending
                if kind == "impl":
                    name = _impl_name(code[at:i])
                outer = [n for n, _, _ in stack if n is not None]
                stack.append(("::".join([*outer[-1:], name]), kind, line(at)))
                pending = None
        elif c == "}":
            if not stack:
                raise ValueError(f"line {line(i)}: a closing brace without its opening one")
            name, kind, first = stack.pop()
            if kind == "fn" and name is not None:
                yield name, line(i) - first + 1
        i += 1
    if stack:
        raise ValueError(f"{len(stack)} braces left open at the end")


def _starts_word(code: str, i: int) -> bool:
    return i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")


def _impl_name(header: str) -> str:
    """``Type`` or ``Trait for Type`` of an ``impl`` header, generic parameters dropped."""
    header = re.split(r"\bwhere\b", header)[0]
    while True:  # innermost first: `Source<Vec<T>>` -> `Source<Vec>` -> `Source`
        dropped = re.sub(r"<[^<>]*>", "", header)
        if dropped == header:
            return " ".join(header.split())
        header = dropped
