"""The documentation runs: every shell and Python block of README.md and docs/ is run here
against the real Kafka broker and PostgreSQL, page by page (``tests/docs/_session.py``), or
carries a ``<!-- not-run: REASON -->`` marker whose reason is allowed and true of it
(``tests/docs/_reasons.py``); every ``sagacity`` command any page names, run or not, is a
command of the CLI with options it has (``tests/docs/_commands.py``). A command that drifts
from the code fails here.

Each page runs in a directory of its own, holding the reader's own tools the pages name
(``myapp.tools:Bank``: tests/docs/myapp), with the session's variables and a few of its own:
a fresh journal topic (``SAGACITY_TOPIC``), a schema of its own (``SAGACITY_DATABASE_URL``),
consumer groups of its own, ``SAGACITY_DEV_HOME`` in that directory (a page's ``sagacity dev
up`` never reaches the checkout's stack) and this environment's ``bin`` first on ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from sagacity.cli import main
from tests.docs._blocks import ROOT, blocks, every_block, pages
from tests.docs._commands import in_block, in_prose, problem
from tests.docs._reasons import why_not
from tests.docs._session import PageRun

WALKTHROUGH = "docs/production.md"
BROKERS_VAR = "SAGACITY_DOCS_BROKERS"
"""``1``: the walkthrough's cluster is one broker (the same commands, about 25 s faster: for a
quick run by hand). Unset, the page runs as written, three brokers (CI)."""


def _substitutions(page: str) -> dict[str, str]:
    if page == WALKTHROUGH and os.environ.get(BROKERS_VAR) == "1":
        return {"--brokers 3": "--brokers 1"}
    return {}


RUNNABLE = [page for page in pages() if any(block.runs for block in blocks(page))]


def test_every_block_runs_or_says_why_not() -> None:
    problems = []
    for block in every_block():
        if block.marker == "not-run":
            if not (block.shell or block.python):
                problems.append(f"{block.where}: a {block.lang or 'plain'} block is never run")
            elif (why := why_not(block)) is not None:
                problems.append(f"{block.where}: not-run: {block.value}: {why}")
        elif block.marker == "file" and (
            not block.value or block.value.startswith("/") or ".." in Path(block.value).parts
        ):
            problems.append(f"{block.where}: file: {block.value!r} is not a relative path")
    assert problems == []


def test_the_pages_that_run_are_the_pages_with_blocks_to_run() -> None:
    """Nothing to run is not a page to run; the walkthrough and the quickstart are."""
    assert WALKTHROUGH in RUNNABLE
    assert "docs/quickstart.md" in RUNNABLE
    assert all(any(b.runs for b in blocks(page)) for page in RUNNABLE)


def test_every_sagacity_command_in_the_docs_is_one_of_the_cli() -> None:
    commands = [c for b in every_block() if b.shell for c in in_block(b)]
    commands += [c for page in pages() for c in in_prose(page)]
    assert len(commands) > 100  # the parser finds them
    found = [f"{c}: {why}" for c in commands if (why := problem(c, main)) is not None]
    assert found == []


@pytest.fixture
def page_env(
    kafka_bootstrap: str, pg_dsn: str, tmp_path: Path
) -> tuple[dict[str, str], Callable[[], None]]:
    """The variables of a page's run, and its clean-up (its topics, its local stack)."""
    topic = f"docs.{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SAGACITY_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "SAGACITY_DATABASE_URL": pg_dsn,
        "SAGACITY_TOPIC": topic,
        "SAGACITY_APPROVALS_GROUP": f"{topic}.approvals",
        "SAGACITY_COMPENSATION_GROUP": f"{topic}.compensation",
        "SAGACITY_ARCHIVE_GROUP": f"{topic}.archive",
        "SAGACITY_DEV_HOME": str(tmp_path / "page" / ".sagacity-stack"),
        "PYTHONUNBUFFERED": "1",
    }
    for variable in ("SAGACITY_ARCHIVE_DATABASE_URL", "SAGACITY_ARCHIVE_SCHEMA"):
        env.pop(variable, None)

    def clean_up() -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        existing = set(admin.list_topics(timeout=15).topics)
        doomed = [t for t in (topic, f"{topic}.dlq") if t in existing]
        if doomed:
            for future in admin.delete_topics(doomed, operation_timeout=30).values():
                with contextlib.suppress(Exception):
                    future.result(timeout=30)
        # A page that failed before its own `sagacity dev down --purge` leaves its stack.
        for state in list((tmp_path / "page").glob("*/postgres/state.json")):
            stack = state.parent.parent
            subprocess.run(
                [str(Path(sys.executable).parent / "sagacity"), "dev", "down", "--purge"],
                env={**env, "SAGACITY_DEV_HOME": str(stack)},
                capture_output=True,
                timeout=120,
                check=False,
            )
            shutil.rmtree(stack, ignore_errors=True)

    return env, clean_up


@pytest.mark.kafka
@pytest.mark.postgres
@pytest.mark.parametrize("page", RUNNABLE)
def test_the_page_runs(
    page: str,
    page_env: tuple[dict[str, str], Callable[[], None]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env, clean_up = page_env
    if any(b.runs and "sagacity dev up" in b.text for b in blocks(page)):
        # A stack of its own, with its topic and the ACLs of the default names.
        for variable in ("SAGACITY_TOPIC", *(v for v in env if v.endswith("_GROUP"))):
            env.pop(variable, None)
    shutil.copytree(Path(__file__).parent / "myapp", tmp_path / "page" / "myapp")
    run = PageRun(page, tmp_path / "page", env, substitutions=_substitutions(page))
    began = time.monotonic()
    try:
        run.run()
    finally:
        clean_up()
    took = time.monotonic() - began
    with capsys.disabled():  # what the docs' run costs CI, page by page
        sys.stdout.write(f"\n[docs] {page}: {took:.1f} s\n")
    assert run.timings  # it ran something


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
