"""The code blocks of the documentation: README.md and every page under docs/.

A block is a fenced code block. Its *marker* is an HTML comment on the line just above its
fence (blank lines allowed between):

- ``<!-- not-run: REASON -->``: the block is not run; REASON is one of
  :data:`tests.docs._reasons.REASONS`, and its check must hold for the block;
- ``<!-- file: PATH -->``: the block is the content of the file PATH (relative to the page's
  working directory), written there before the page's next block runs.

Every other shell (``sh``, ``bash``, ``shell``) and Python (``python``) block is run, in the
page's order, by ``tests/docs/test_docs_run.py``.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL = frozenset({"sh", "bash", "shell"})
PYTHON = frozenset({"python", "py"})

_FENCE = re.compile(r"^( *)```([\w+-]*)[^\n]*\n(.*?)^\1```[ \t]*$", re.DOTALL | re.MULTILINE)
_MARKER = re.compile(r"^\s*<!--\s*(not-run|file)\s*:\s*(.*?)\s*-->\s*$")


def pages() -> list[str]:
    """README.md and every Markdown page under docs/, relative to the checkout."""
    found = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *found]


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    line: int
    """The line of its opening fence (1-based)."""
    lang: str
    text: str
    """Its content, dedented by the fence's indentation."""
    marker: str | None = None
    """``not-run`` or ``file``, when a marker precedes it."""
    value: str = ""
    """The marker's reason or path."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.lang in SHELL

    @property
    def python(self) -> bool:
        return self.lang in PYTHON

    @property
    def runs(self) -> bool:
        """Whether the page's run executes it (a shell or Python block without a marker)."""
        return self.marker is None and (self.shell or self.python)


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        indent, lang, body = match.group(1), match.group(2).lower(), match.group(3)
        line = text.count("\n", 0, match.start()) + 1
        marker = value = None
        for previous in reversed(text[: match.start()].splitlines()):
            if not previous.strip():
                continue
            if found_marker := _MARKER.match(previous):
                marker, value = found_marker.group(1), found_marker.group(2)
            break
        found.append(
            Block(
                page=page,
                line=line,
                lang=lang,
                text=textwrap.dedent(body) if indent else body,
                marker=marker,
                value=value or "",
            )
        )
    return found


def every_block() -> list[Block]:
    """Every block of every page."""
    return [block for page in pages() for block in blocks(page)]
