"""``Sagacity.wrap(obj)`` is typed as ``obj``'s type, so a type checker checks tool calls."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

_SNIPPET = textwrap.dedent(
    """
    from sagacity import CompensationContext, InMemoryJournal, Sagacity, compensable, compensation


    class Shop:
        @compensable(by="release")
        def reserve(self, product_id: str, quantity: int) -> str:
            return product_id

        @compensation
        def release(self, context: CompensationContext) -> None:
            pass


    @compensable(by="undo_email")
    def send_email(to: str) -> str:
        return to


    @compensation
    def undo_email(context: CompensationContext) -> None:
        pass


    sagacity = Sagacity(journal=InMemoryJournal())
    tools = sagacity.wrap(Shop())
    email = sagacity.wrap(send_email)
    ok: str = tools.reserve("SKU-9", 2)
    tools.reserve(product_id="SKU-9", quantitty=2)
    tools.reserv("SKU-9", 2)
    email(too="alice")
    """
)


def test_mypy_strict_catches_misspelt_tool_arguments(tmp_path: Path) -> None:
    source = tmp_path / "agent_snippet.py"
    source.write_text(_SNIPPET, encoding="utf-8")
    stdout, stderr, status = api.run(["--strict", "--no-error-summary", str(source)])
    errors = [line.split(": error: ", 1)[1] for line in stdout.splitlines() if ": error: " in line]
    assert status == 1, stdout + stderr
    assert any('Unexpected keyword argument "quantitty"' in e for e in errors), errors
    assert any('"Shop" has no attribute "reserv"' in e for e in errors), errors
    assert any('Unexpected keyword argument "too"' in e for e in errors), errors
    assert len(errors) == 3, errors
