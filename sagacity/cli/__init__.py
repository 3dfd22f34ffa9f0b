"""The ``sagacity`` command line.

Each command group lives in a module of its own under ``sagacity.cli`` and is registered in
``_GROUPS``; heavy imports stay inside the commands so ``sagacity --help`` is fast.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from sagacity.cli._exit import USAGE, CommandError
from sagacity.cli._extras import extra_for, missing_extra_message

# (module, attribute) of each command or group, registered in this order.
_GROUPS: tuple[tuple[str, str], ...] = (
    ("sagacity.cli.dev", "dev"),
    ("sagacity.cli.demo", "demo"),
    ("sagacity.cli.topic", "topic"),
    ("sagacity.cli.saga", "saga"),
    ("sagacity.cli.serve", "serve"),
    ("sagacity.cli.archive", "archive"),
    ("sagacity.cli.approvals", "approvals"),
    ("sagacity.cli.keys", "keys"),
    ("sagacity.cli.compensation", "compensation"),
    ("sagacity.cli.mcp", "mcp"),
    ("sagacity.cli.audit", "verify"),
    ("sagacity.cli.audit", "replay"),
    ("sagacity.cli.audit", "export"),
    ("sagacity.cli.audit", "audit"),
    ("sagacity.cli.erase", "erase"),
)


class _Main(click.Group):
    """The root group: a Sagacity error or a missing extra ends any command with one line and
    the exit status of its kind (:mod:`sagacity.cli._exit`), never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from sagacity.errors import SagacityError

        argv = [*getattr(ctx, "_protected_args", []), *ctx.args]
        try:
            return super().invoke(ctx)
        except SagacityError as exc:
            raise CommandError.of(exc) from exc
        except ModuleNotFoundError as exc:
            extra = extra_for(exc.name)
            if extra is None or exc.name is None:
                raise
            command = " ".join(["sagacity", *_invoked(self, argv)])
            raise CommandError(missing_extra_message(command, exc.name, extra), USAGE) from exc


def _invoked(root: click.Group, argv: list[str]) -> list[str]:
    """The command path in ``argv`` (``serve approvals``), for messages."""
    names: list[str] = []
    group: click.Command = root
    for arg in argv:
        if not isinstance(group, click.Group) or arg not in group.commands:
            break
        names.append(arg)
        group = group.commands[arg]
    return names


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sagacity")
def main() -> None:
    """Sagacity: compensation, approval gates and verifiable evidence for agents' tools."""


for _module, _attr in _GROUPS:
    main.add_command(getattr(importlib.import_module(_module), _attr))


def _show_variables(command: click.Command) -> None:
    """Every option read from a variable names it in its help (``[env var: …]``)."""
    for param in command.params:
        if isinstance(param, click.Option) and param.envvar:
            param.show_envvar = True
    for sub in getattr(command, "commands", {}).values():
        _show_variables(sub)


_show_variables(main)
