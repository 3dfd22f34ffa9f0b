"""The one place psycopg errors become Sagacity's, with the one retry rule.

Retryable (:class:`~sagacity.errors.PersistenceUnavailableError`): the connection could not be
made or was lost (SQLSTATE class ``08``, a server shutting down or not accepting connections
yet, too many connections, a client-side connection failure or timeout), and a transaction a
concurrent one beat (serialization failure ``40001``, deadlock ``40P01``): running the
transaction again may succeed.  Everything else is
:class:`~sagacity.errors.PersistenceError`: retrying cannot fix it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import psycopg.errors as pg

from sagacity.errors import PersistenceError, PersistenceUnavailableError

RETRYABLE_SQLSTATES: tuple[str, ...] = (
    "08",  # connection exception: failure, does not exist, rejected …
    "57P01",  # admin shutdown
    "57P02",  # crash shutdown
    "57P03",  # cannot connect now: starting up, in recovery
    "57P05",  # idle session timeout: the server closed the session
    "53300",  # too many connections
    "40001",  # serialization failure
    "40P01",  # deadlock detected
)
"""SQLSTATEs (or their classes' prefixes) after which the transaction may be run again."""

CLIENT_RETRYABLE: tuple[type[psycopg.Error], ...] = (pg.ConnectionTimeout,)
"""Errors psycopg raises itself, without a SQLSTATE, that are connection failures; a bare
:class:`psycopg.OperationalError` (``connection refused``, ``server closed the connection
unexpectedly``) is one too."""

FAMILIES: tuple[type[psycopg.Error], ...] = (
    psycopg.InterfaceError,  # psycopg misused
    psycopg.DataError,  # 22: a value out of range, malformed
    psycopg.IntegrityError,  # 23: a constraint refused the row
    psycopg.InternalError,  # XX, 25, 2D …: the server's or the transaction's state
    psycopg.ProgrammingError,  # 42, 3F …: SQL, privileges, schema
    psycopg.NotSupportedError,  # 0A
    psycopg.OperationalError,  # resources, limits, cancelled statements, connections …
    psycopg.DatabaseError,  # any other error the server reports
    psycopg.Error,
)
"""The families every psycopg error belongs to; a member is retryable only as said above."""


def error_class(
    exc_type: type[psycopg.Error], sqlstate: str | None = None
) -> type[PersistenceError]:
    """The Sagacity error a psycopg error of ``exc_type`` (with ``sqlstate``, default the
    class's) is raised as.

    Raises:
        TypeError: ``exc_type`` is not a psycopg error.
    """
    if not issubclass(exc_type, FAMILIES):
        raise TypeError(f"{exc_type!r} is not a psycopg error")
    state = sqlstate or exc_type.sqlstate
    if state is not None:
        retry = state.startswith(RETRYABLE_SQLSTATES)
    else:
        retry = exc_type is psycopg.OperationalError or issubclass(exc_type, CLIENT_RETRYABLE)
    return PersistenceUnavailableError if retry else PersistenceError


def retryable(exc: BaseException) -> bool:
    """Running the failed transaction again may succeed (a Sagacity or a psycopg error)."""
    if isinstance(exc, psycopg.Error):
        return error_class(type(exc), exc.sqlstate) is PersistenceUnavailableError
    return isinstance(exc, PersistenceUnavailableError)


def map_error(exc: psycopg.Error, action: str) -> PersistenceError:
    """``exc`` as a Sagacity error saying what failed (``action``), ``exc`` its cause."""
    cls = error_class(type(exc), exc.sqlstate)
    detail = str(exc).strip() or type(exc).__name__
    if cls is PersistenceUnavailableError:
        message = f"{action}: database unavailable: {detail}"
    else:
        message = f"{action}: {detail}"
    error = cls(message)
    error.__cause__ = exc
    return error


@contextlib.contextmanager
def mapped_errors(action: str) -> Iterator[None]:
    """Raise every psycopg error raised inside the block as :func:`map_error` gives it."""
    try:
        yield
    except psycopg.Error as exc:
        raise map_error(exc, action) from exc


ROW_REFUSED_SQLSTATES: tuple[str, ...] = (
    "22",  # data exception: a value out of range, malformed, too long for its column
    "23",  # integrity constraint violation: a check, a not-null, a unique key
    "54",  # program limit exceeded: an index row too large, too many columns
)
"""SQLSTATE classes by which the database refuses the values of one row: writing the same
row again fails the same way, and another row may succeed.  A service makes such a refusal
the fate of the message whose values it wrote (docs/reliability.md), never its own."""


def refuses_the_row(exc: BaseException) -> bool:
    """Whether ``exc`` (a psycopg error, or a Sagacity one it caused) is the database refusing
    the values of the row being written (:data:`ROW_REFUSED_SQLSTATES`)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, psycopg.Error):
        cause = cause.__cause__
    state = cause.sqlstate if isinstance(cause, psycopg.Error) else None
    return state is not None and state.startswith(ROW_REFUSED_SQLSTATES)
