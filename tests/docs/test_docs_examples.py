"""The Python examples in the docs run as written: each page's ``python`` blocks, in order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/quickstart.md"]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks(page: str) -> list[str]:
    return _BLOCK.findall((ROOT / page).read_text(encoding="utf-8"))


def test_quickstart_has_examples() -> None:
    assert len(_blocks("docs/quickstart.md")) >= 2


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_example_{Path(page).stem}"}
    for index, block in enumerate(_blocks(page)):
        code = compile(block, f"{page}[python block {index}]", "exec")
        exec(code, namespace)  # the documentation's own examples
    if _blocks(page):
        assert capsys.readouterr().out  # the examples print what they show


@pytest.mark.parametrize(
    "page",
    [
        "README.md",
        "docs/quickstart.md",
        "docs/operations/approvals.md",
        "docs/operations/compensation.md",
        "docs/operations/archive.md",
    ],
)
def test_each_page_names_the_install_of_each_role(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    assert "pip install '.[services]'" in text
    if page in ("README.md", "docs/quickstart.md"):
        assert "pip install ." in text  # the agent's: no extra
