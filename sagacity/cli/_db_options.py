"""Options shared by the commands that talk to the archive database."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sagacity.cli._options import database_url_option

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED = 1
"""Exit status when the evidence does not verify."""
EXIT_ERROR = 2
"""Exit status when the command could not run (bad input, no archive, no database)."""


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


def fail(message: str, code: int = EXIT_ERROR) -> None:
    """Print ``message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    raise click.exceptions.Exit(code)
