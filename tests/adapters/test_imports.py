"""The frameworks are optional: importing Sagacity must not import any of them."""

from __future__ import annotations

import json
import subprocess
import sys

FRAMEWORKS = ("agents", "langchain", "langchain_core", "langgraph", "pydantic_ai")

# One fresh interpreter: what each import adds to the frameworks already loaded.
PROBE = f"""
import json, sys
def loaded():
    return {{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})
steps = []
for module in sys.argv[1:]:
    before = loaded()
    __import__(module)
    steps.append(sorted(loaded() - before))
print(json.dumps(steps))
"""


def test_sagacity_imports_no_framework_and_each_adapter_only_its_own() -> None:
    modules = [
        "sagacity",
        "sagacity.adapters",
        "sagacity.adapters.pydantic_ai",
        "sagacity.adapters.langchain",
        "sagacity.adapters.openai_agents",
    ]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], check=True, capture_output=True, text=True
    ).stdout
    # LangChain's agent middleware lives in ``langchain`` and runs on LangGraph.
    assert json.loads(out) == [
        [],
        [],
        ["pydantic_ai"],
        ["langchain", "langchain_core", "langgraph"],
        ["agents"],
    ]
