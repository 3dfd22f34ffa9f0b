"""Every psycopg error is mapped to Sagacity's, by one retry rule (as httpx tests its transport
exceptions): walking psycopg's classes finds every one, so a new psycopg release is checked too.
"""

from __future__ import annotations

import psycopg
import psycopg.errors as pg
import pytest

from sagacity.errors import PersistenceError, PersistenceUnavailableError
from sagacity.postgres import error_class, map_error, mapped_errors, retryable

RETRYABLE = {
    # A connection the client could not make or lost.
    psycopg.OperationalError,
    pg.ConnectionTimeout,
    pg.ConnectionException,
    pg.SqlclientUnableToEstablishSqlconnection,
    pg.ConnectionDoesNotExist,
    pg.SqlserverRejectedEstablishmentOfSqlconnection,
    pg.ConnectionFailure,
    pg.TransactionResolutionUnknown,
    pg.ProtocolViolation,
    # A server going away or not accepting connections yet.
    pg.AdminShutdown,
    pg.CrashShutdown,
    pg.CannotConnectNow,
    pg.IdleSessionTimeout,
    pg.TooManyConnections,
    # A transaction a concurrent one beat.
    pg.SerializationFailure,
    pg.DeadlockDetected,
}
"""The retry rule, written out class by class: nothing else may be retried."""


def _every_psycopg_error() -> list[type[psycopg.Error]]:
    found: dict[str, type[psycopg.Error]] = {}
    todo: list[type[psycopg.Error]] = [psycopg.Error]
    while todo:
        cls = todo.pop()
        found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo.extend(cls.__subclasses__())
    return [found[name] for name in sorted(found)]


ERRORS = _every_psycopg_error()


def test_the_walk_finds_psycopg_s_classes() -> None:
    assert len(ERRORS) > 200  # every SQLSTATE psycopg knows, and its own
    assert set(ERRORS) >= RETRYABLE
    assert pg.UniqueViolation in ERRORS
    assert pg.LockNotAvailable in ERRORS


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__qualname__)
def test_each_psycopg_error_is_mapped_by_the_retry_rule(cls: type[psycopg.Error]) -> None:
    exc = cls("the server said no")
    expected = PersistenceUnavailableError if cls in RETRYABLE else PersistenceError
    mapped = map_error(exc, "store a claim")
    assert type(mapped) is expected
    assert error_class(cls) is expected
    assert retryable(exc) is (cls in RETRYABLE)
    assert retryable(mapped) is (cls in RETRYABLE)
    assert mapped.__cause__ is exc
    assert mapped.message.startswith("store a claim: ")
    assert "the server said no" in mapped.message


def test_an_error_s_own_sqlstate_decides() -> None:
    # psycopg raises a class per SQLSTATE; one it does not know arrives as its family's class.
    class Unknown(psycopg.OperationalError):
        sqlstate = "08XYZ"

    assert error_class(Unknown) is PersistenceUnavailableError
    assert error_class(pg.InsufficientResources) is PersistenceError
    assert error_class(pg.InsufficientResources, "53300") is PersistenceUnavailableError


def test_what_is_not_a_psycopg_error_is_refused() -> None:
    with pytest.raises(TypeError, match="not a psycopg error"):
        error_class(ValueError)  # type: ignore[arg-type]
    assert retryable(ValueError("x")) is False


def test_mapped_errors_raises_from_the_psycopg_error() -> None:
    with pytest.raises(PersistenceError) as caught, mapped_errors("read requests"):
        raise pg.UndefinedTable("relation does not exist")
    assert type(caught.value) is PersistenceError
    assert isinstance(caught.value.__cause__, pg.UndefinedTable)
    with pytest.raises(ValueError, match="untouched"), mapped_errors("read requests"):
        raise ValueError("untouched")
