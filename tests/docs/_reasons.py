"""Why a block of the documentation may be left unrun, and the check each reason must pass.

A reason is a claim about the block; each is checked against the block's own text, so a
block cannot be excused by a reason that is not true of it. The commands of an unrun block
are still checked against the CLI (``tests/docs/_commands.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from tests.docs._blocks import ROOT, Block

_PLACEHOLDER = re.compile(
    r"<[A-Za-z][^<>\n]*>"  # <token>, <the approvals service's public key>
    r"|…"  # postgresql://…
    r"|\b(?:SAGA_ID|SEQ|TEXT|NEW|OLD)\b(?!=)"  # a synopsis's names
)
_ELSEWHERE = re.compile(
    # kafka:9092, broker-1:9092
    r"(?:https?://)?(?!127\.0\.0\.1|localhost)[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)*:\d{2,5}\b"
    # https://approvals.example.com
    r"|https?://(?!127\.0\.0\.1|localhost)[a-z0-9.-]+\.[a-z]{2,}"
    # /etc/sagacity/approvals.key
    r"|(?<![\w.$])/(?:etc|mnt|run|secure|opt|home|var)/"
)


def _ci_scripts(block: Block) -> str | None:
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for line in block.text.splitlines():
        command = line.split("#")[0].strip()
        if not command:
            continue
        path = ROOT / command.split()[0]
        if not (path.is_file() and os.access(path, os.X_OK)):
            return f"{command.split()[0]} is not an executable script of this repository"
        if command.split()[0] not in run:
            return f"{command.split()[0]} is not run by .ci/run"
    return None


def _needs(pattern: str, what: str) -> Callable[[Block], str | None]:
    def check(block: Block) -> str | None:
        return None if re.search(pattern, block.text) else f"the block {what}"

    return check


def _production(block: Block) -> str | None:
    if _PLACEHOLDER.search(block.text) or _ELSEWHERE.search(block.text):
        return None
    return "the block names no placeholder, other host or system path: run it"


def _foreground(block: Block) -> str | None:
    """A ``sagacity serve`` (or ``mcp proxy``) line without ``&``: it runs until stopped."""
    joined = block.text.replace("\\\n", " ")
    for line in joined.splitlines():
        command = line.split("#")[0].strip()
        if re.match(r"sagacity (serve \S+|mcp proxy)\b", command) and not command.endswith("&"):
            return None
    return "the block starts no service in the foreground"


def _checked_by(block: Block) -> str | None:
    test = block.value.removeprefix("checked by ").strip()
    path = ROOT / test
    if not test.startswith("tests/") or not path.is_file():
        return f"{test} is not a test file of this repository"
    if Path(block.page).name not in path.read_text(encoding="utf-8"):
        return f"{test} does not name {block.page}"
    return None


REASONS: dict[str, Callable[[Block], str | None]] = {
    "installs packages": _needs(r"\b(?:pip|apt-get) install\b", "installs nothing"),
    "starts a local stack of its own": _needs(r"\bsagacity dev up\b", "starts no stack"),
    "run by .ci/run": _ci_scripts,
    "placeholders, other hosts or system paths": _production,
    "an MCP server in another language": _needs(r"\bnode\b", "names no such server"),
    "starts a service in the foreground": _foreground,
    "checked by": _checked_by,
}
"""Each allowed reason (``checked by`` takes a test file: ``checked by tests/x/test_y.py``)
and its check, which returns why the reason does not hold, or ``None``."""


def why_not(block: Block) -> str | None:
    """Why ``block``'s ``not-run`` reason is not allowed or does not hold; ``None`` if it does."""
    reason = block.value
    key = "checked by" if reason.startswith("checked by ") else reason
    check = REASONS.get(key)
    if check is None:
        return f"{reason!r} is not one of the allowed reasons {sorted(REASONS)}"
    return check(block)
