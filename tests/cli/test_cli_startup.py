"""The ``sagacity`` command starts quickly: ``--help`` and ``approvals list`` load neither the
saga core nor a Kafka, PostgreSQL or HTTP library."""

from __future__ import annotations

import os
import subprocess
import sys

_HEAVY = {
    "sagacity.saga._saga",
    "asyncio",
    "pydantic",
    "confluent_kafka",
    "psycopg",
    "fastavro",
    "httpx",
    "fastapi",
    "cryptography",
}


def _loaded_after(*argv: str) -> list[str]:
    code = (
        "import sys\n"
        "from sagacity.cli import main\n"
        "try:\n"
        f"    main({list(argv)!r}, prog_name='sagacity')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted({_HEAVY!r} & set(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return eval(done.stderr.strip().splitlines()[-1])  # a printed list of str


def test_help_and_approvals_list_load_nothing_heavy() -> None:
    assert _loaded_after("--help") == []
    assert _loaded_after("approvals", "--url", "http://127.0.0.1:9", "list") == []
    assert _loaded_after("serve", "--help") == []


def _cpu_seconds(*argv: str) -> float:
    best = float("inf")
    for _ in range(2):
        before = os.times()
        subprocess.run([sys.executable, "-m", "sagacity.cli", *argv], capture_output=True)
        after = os.times()
        used = (after.children_user - before.children_user) + (
            after.children_system - before.children_system
        )
        best = min(best, used)
    return best


def test_help_and_approvals_list_take_well_under_a_second_of_cpu() -> None:
    # CPU time, not wall time: a loaded machine delays a process without making it slower.
    assert _cpu_seconds("--help") < 0.5
    assert _cpu_seconds("approvals", "--url", "http://127.0.0.1:9", "list") < 0.5


def test_every_option_read_from_a_variable_names_it_in_help() -> None:
    import click
    from click.testing import CliRunner

    from sagacity.cli import main

    def walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Option]]:
        found = [(path, p) for p in command.params if isinstance(p, click.Option) and p.envvar]
        for name, sub in getattr(command, "commands", {}).items():
            found += walk(sub, [*path, name])
        return found

    options = walk(main, [])
    assert len(options) > 20
    for path, option in options:
        shown = CliRunner().invoke(main, [*path, "--help"], terminal_width=400).output
        first = option.envvar[0] if isinstance(option.envvar, list | tuple) else option.envvar
        assert f"env var: {first}" in shown, (path, option.name)
