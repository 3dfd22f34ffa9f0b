"""The ``sagacity`` command line.

Each command group lives in a module of its own under ``sagacity.cli`` and is registered in
``_GROUPS``; heavy imports stay inside the commands so ``sagacity --help`` is fast.
"""

from __future__ import annotations

import importlib

import click

# (module, attribute) of each command or group, registered in this order.
_GROUPS: tuple[tuple[str, str], ...] = (
    ("sagacity.cli.dev", "dev"),
    ("sagacity.cli.demo", "demo"),
    ("sagacity.cli.topic", "topic"),
    ("sagacity.cli.saga", "saga"),
    ("sagacity.cli.serve", "serve"),
    ("sagacity.cli.archive", "archive"),
    ("sagacity.cli.approvals", "approvals"),
    ("sagacity.cli.compensation", "compensation"),
    ("sagacity.cli.mcp", "mcp"),
    ("sagacity.cli.audit", "verify"),
    ("sagacity.cli.audit", "replay"),
    ("sagacity.cli.audit", "export"),
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sagacity")
def main() -> None:
    """Sagacity: compensation, approval gates and verifiable evidence for agents' tools."""


for _module, _attr in _GROUPS:
    main.add_command(getattr(importlib.import_module(_module), _attr))
