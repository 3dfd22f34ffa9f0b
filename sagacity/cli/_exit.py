"""Exit statuses, the same for the same failure in every ``sagacity`` command.

=====  ==========================================================================================
0      done
1      the check failed or the request was refused (a chain that does not verify, a decision the
       service refused, a topic setting that would lose evidence, a service of the stack down)
2      the command could not run: a wrong option, a missing setting, key or extra, bad input,
       what it works on is not there (an archive, the journal topic), a principal Kafka refused
3      a dependency is unreachable or failing: the Kafka broker, PostgreSQL, the approvals service
=====  ==========================================================================================

README.md, "Exit status, output and logs", shows this table; tests/cli/test_exit_statuses.py
holds the two equal and runs a command of each row.
"""

from __future__ import annotations

from typing import IO

import click

from sagacity.errors import JournalUnavailableError, PersistenceUnavailableError, SagacityError

OK = 0
FAILED = 1
USAGE = 2
UNAVAILABLE = 3


def code_for(exc: SagacityError) -> int:
    """The exit status of a command that stopped on ``exc``."""
    if isinstance(exc, JournalUnavailableError | PersistenceUnavailableError):
        return UNAVAILABLE
    return USAGE


class CommandError(click.ClickException):
    """One line on stderr (``error: …``) and an exit status."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        setattr(self, "exit_code", code)  # noqa: B010 - a class variable in click, set per error

    @classmethod
    def of(cls, exc: SagacityError) -> CommandError:
        """The error a command reports for ``exc``."""
        return cls(str(exc), code_for(exc))

    def show(self, file: IO[str] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)
