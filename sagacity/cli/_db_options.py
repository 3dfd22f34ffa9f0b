"""Options shared by the commands that talk to the archive database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from sagacity.cli._exit import FAILED, USAGE, CommandError
from sagacity.cli._options import database_url_option
from sagacity.errors import SagacityError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED = FAILED
"""Exit status when the evidence does not verify."""
EXIT_ERROR = USAGE
"""Exit status when the command was used wrongly (bad input, no archive)."""


def database_options(func: F) -> F:
    """Add ``--database-url`` and ``--schema`` (environment: ``SAGACITY_ARCHIVE_DATABASE_URL``
    or ``SAGACITY_DATABASE_URL``, ``SAGACITY_ARCHIVE_SCHEMA``)."""
    func = click.option(
        "--schema",
        envvar="SAGACITY_ARCHIVE_SCHEMA",
        default=None,
        help="Schema holding the archive (default: the connection's search_path).",
    )(func)
    return database_url_option("ARCHIVE", help="libpq URL or conninfo of the archive database.")(
        func
    )


def conninfo(database_url: str, schema: str | None) -> str:
    """The connection string, with the schema put first on the search_path if given."""
    if schema is None:
        return database_url
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(database_url)
    quoted = '"' + schema.replace('"', '""') + '"'
    params["options"] = f"{params.get('options') or ''} -c search_path={quoted}".strip()
    return make_conninfo(**params)  # type: ignore[arg-type]


def fail(problem: str | SagacityError, code: int = EXIT_ERROR) -> NoReturn:
    """Print ``problem`` on stderr and exit: with ``code`` for a message, with the status of
    its kind for an error (an unreachable database is 3, see :mod:`sagacity.cli._exit`)."""
    if isinstance(problem, SagacityError):
        raise CommandError.of(problem)
    raise CommandError(problem, code)
