"""docs/adapters.md runs as written: its python blocks, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_the_adapters_page_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = _BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 9
    namespace: dict[str, object] = {"__name__": "docs_example_adapters"}
    for index, block in enumerate(blocks):
        exec(compile(block, f"docs/adapters.md[python block {index}]", "exec"), namespace)
    assert capsys.readouterr().out.splitlines() == [
        "AWAITING_APPROVAL",
        "AWAITING_APPROVAL",
        "AWAITING_APPROVAL",
        "chat-42 False",
        "COMPLETED",
        "AWAITING_APPROVAL",
        "COMPLETED",
        "AWAITING_APPROVAL",
        "AWAITING_APPROVAL [AWAITING_APPROVAL] Tool 'send_confirmation' requires human approval",
    ]
    # Six sagas reserved two widgets each; none was compensated.
    assert namespace["stock"] == {"widget": 8}
