"""The error table on a real server: a lost connection is retryable, a refused statement not."""

from __future__ import annotations

import psycopg
import pytest

from sagacity.errors import PersistenceError, PersistenceUnavailableError
from sagacity.postgres import connect, mapped_errors, ping, retryable, transaction

pytestmark = [pytest.mark.postgres]


def test_a_terminated_connection_is_retryable(pg_dsn: str) -> None:
    conn = connect(pg_dsn, autocommit=True)
    try:
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (None,)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(PersistenceUnavailableError) as caught, mapped_errors("read"):
            conn.execute("SELECT 1")
        assert retryable(caught.value)
    finally:
        conn.close()


def test_an_unreachable_server_is_retryable() -> None:
    with pytest.raises(PersistenceUnavailableError, match="unavailable"):
        connect("host=127.0.0.1 port=1 connect_timeout=1", timeout=1)
    assert ping("host=127.0.0.1 port=1 connect_timeout=1", timeout=1) is False


def test_a_refused_statement_is_not_retryable_and_rolls_back(pg_dsn: str) -> None:
    with transaction(pg_dsn) as conn:
        conn.execute("CREATE TABLE t (id integer PRIMARY KEY)")

    def insert_twice() -> None:
        with transaction(pg_dsn) as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            conn.execute("INSERT INTO t VALUES (1)")

    with pytest.raises(PersistenceError) as caught:
        insert_twice()
    assert type(caught.value) is PersistenceError
    assert not retryable(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.errors.UniqueViolation)
    with connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
    assert ping(pg_dsn) is True


def test_a_serialization_failure_is_retryable(pg_dsn: str) -> None:
    with transaction(pg_dsn) as conn:
        conn.execute("CREATE TABLE c (id integer PRIMARY KEY, n integer NOT NULL)")
        conn.execute("INSERT INTO c VALUES (1, 0)")
    first = connect(pg_dsn)
    second = connect(pg_dsn)
    try:
        for conn in (first, second):
            conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            conn.execute("SELECT n FROM c WHERE id = 1").fetchone()
        first.execute("UPDATE c SET n = n + 1 WHERE id = 1")
        first.commit()
        with pytest.raises(PersistenceUnavailableError) as caught, mapped_errors("count"):
            second.execute("UPDATE c SET n = n + 1 WHERE id = 1")
        assert isinstance(caught.value.__cause__, psycopg.errors.SerializationFailure)
    finally:
        first.close()
        second.close()
