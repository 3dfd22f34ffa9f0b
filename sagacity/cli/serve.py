"""``sagacity serve``: run one of the long-running services.

Each service's command lives in a module of its own and is registered by one line in
``_SERVICES``; modules import their heavy dependencies inside the command.
"""

from __future__ import annotations

import importlib

import click

# (module, attribute) of each service command, registered in this order.
_SERVICES: tuple[tuple[str, str], ...] = (
    ("sagacity.cli.serve_archive", "archive"),
    ("sagacity.cli.serve_compensation", "compensation"),
    ("sagacity.cli.serve_approvals", "approvals"),
    ("sagacity.cli.serve_mcp", "mcp"),
)


@click.group()
def serve() -> None:
    """Run a Sagacity service in the foreground."""


for _module, _attr in _SERVICES:
    serve.add_command(getattr(importlib.import_module(_module), _attr))
