"""The frameworks are optional: importing Sagacity must not import any of them."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("pydantic_ai", "langchain_core", "langgraph", "agents", "openai")


def test_importing_sagacity_and_the_adapters_package_imports_no_framework() -> None:
    code = (
        "import sys, sagacity, sagacity.adapters, sagacity.adapters._binding\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "[]"


def test_each_adapter_imports_only_its_framework() -> None:
    code = (
        "import sys, sagacity.adapters.pydantic_ai\n"
        "print('langchain_core' in sys.modules, 'agents' in sys.modules, "
        "'pydantic_ai' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["False", "False", "True"]
