"""The auditor's tools and docs/adr/0017-audit-coverage.md say the same: the reasons each
may emit, and the bundle manifest's fields."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sagacity.consumers.archive import AuditReason
from sagacity.consumers.archive import verify_bundle as vb

ROOT = Path(__file__).parents[2]
ADR = (ROOT / "docs" / "adr" / "0017-audit-coverage.md").read_text(encoding="utf-8")


def _listed(after: str) -> set[str]:
    """The back-quoted names of the sentence starting with ``after``."""
    start = ADR.index(after)
    sentence = ADR[start : ADR.index(".", ADR.index(":", start))]
    return set(re.findall(r"`([a-z_:]+)`", sentence.split(":", 1)[1]))


def test_the_reasons_verify_may_emit_are_the_documented_ones():
    assert _listed("Every reason `verify` may emit") == {r.value for r in AuditReason}


def test_the_reasons_the_bundle_verifier_may_emit_are_the_documented_ones():
    tree = ast.parse(Path(vb.__file__).read_text(encoding="utf-8"))
    emitted: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "VerificationError"
        ):
            reason = node.args[1]
            if isinstance(reason, ast.Constant):
                emitted.add(reason.value)
            else:  # the saga grammar's first finding: one of its rules
                assert isinstance(reason, ast.Name)
                emitted |= set(vb.GRAMMAR_RULES)
    assert emitted == _listed("Every reason the verifier may emit")


def test_every_manifest_field_is_in_the_table_as_checked_or_unsigned():
    table = ADR[ADR.index("**The manifest's fields.**") : ADR.index("The bundle's `README.md`")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    documented: dict[str, str] = {}
    for row in rows:
        names, status = row.split("|")[1:3]
        for name in re.findall(r"`([a-z_0-9]+)", names):  # `checkpoints[].seq`: checkpoints
            documented.setdefault(name, status)
    top_level = {
        n: s for n, s in documented.items() if n in vb.CHECKED_FIELDS | set(vb.UNSIGNED_FIELDS)
    }
    assert set(top_level) == vb.CHECKED_FIELDS | set(vb.UNSIGNED_FIELDS)
    for name in vb.UNSIGNED_FIELDS:
        assert "**unsigned**" in documented[name], name
    for name in vb.CHECKED_FIELDS:
        assert "**unsigned**" not in documented[name], name
