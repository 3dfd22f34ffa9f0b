"""Connections and transactions: the one way Sagacity's Postgres adapters reach a database."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import RowFactory

from sagacity.postgres._errors import mapped_errors


def with_search_path(conninfo: str, schema: str | None) -> str:
    """``conninfo`` with its ``search_path`` set to ``schema`` (unchanged when ``None``)."""
    if schema is None:
        return conninfo
    params = conninfo_to_dict(conninfo)
    quoted = '"' + schema.replace('"', '""') + '"'
    params["options"] = f"{params.get('options') or ''} -c search_path={quoted}".strip()
    return make_conninfo(**params)  # type: ignore[arg-type]


def connect(
    conninfo: str,
    *,
    autocommit: bool = False,
    timeout: float = 10.0,
    row_factory: RowFactory[Any] | None = None,
    action: str = "connect to the database",
) -> psycopg.Connection[Any]:
    """Open a connection; the caller closes it.

    Raises:
        PersistenceUnavailableError: the database could not be reached.
        PersistenceError: it refused the connection (authentication, no such database …).
    """
    with mapped_errors(action):
        if row_factory is None:
            return psycopg.connect(
                conninfo, autocommit=autocommit, connect_timeout=max(1, int(timeout))
            )
        return psycopg.connect(
            conninfo,
            autocommit=autocommit,
            connect_timeout=max(1, int(timeout)),
            row_factory=row_factory,
        )


@contextlib.contextmanager
def transaction(
    conninfo: str,
    *,
    timeout: float = 10.0,
    row_factory: RowFactory[Any] | None = None,
    action: str = "run a transaction",
    connect_action: str | None = None,
) -> Iterator[psycopg.Connection[Any]]:
    """A fresh connection inside one transaction: committed when the block returns, rolled back
    when it raises, closed either way; psycopg errors are mapped (:mod:`._errors`), a failed
    connection's under ``connect_action`` when given (else ``action``).

    Errors the block raises that are not psycopg's pass through unchanged (and roll back).
    """
    conn = connect(
        conninfo, timeout=timeout, row_factory=row_factory, action=connect_action or action
    )
    try:
        with mapped_errors(action), conn.transaction():
            yield conn
    finally:
        conn.close()


def table_transaction(
    conninfo: str, *, timeout: float, row_factory: RowFactory[Any] | None = None
) -> AbstractContextManager[psycopg.Connection[Any]]:
    """:func:`transaction` in the words of a service's own small tables (console sessions,
    notice claims, Slack's): ``cannot connect to PostgreSQL`` when the database is away,
    ``PostgreSQL refused the operation`` when it refuses."""
    return transaction(
        conninfo,
        timeout=timeout,
        row_factory=row_factory,
        action="PostgreSQL refused the operation",
        connect_action="cannot connect to PostgreSQL",
    )


def ping(conninfo: str, *, timeout: float = 3.0) -> bool:
    """The database answers ``SELECT 1`` on a short-lived connection of its own."""
    try:
        with connect(conninfo, autocommit=True, timeout=timeout) as conn:
            conn.execute("SELECT 1")
    except Exception:
        return False
    return True
