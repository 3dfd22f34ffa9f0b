"""The archived rows a verifier needs, streamed in chain order by a binary ``COPY``.

``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` is the fastest way PostgreSQL hands rows to a
client: no per-row round trip, no text formatting of the integers, and psycopg passes each
row's message through as bytes, without decoding its values.  The blocks go, as they are,
to :func:`sagacity.chain._fastverify.chain_verifier`; :func:`decoded_rows` turns
them into tuples for readers that want the values.  Memory stays flat: psycopg holds one block
at a time, whatever the number of rows or sagas.
"""

from __future__ import annotations

import select
import struct
from collections.abc import Collection, Generator, Iterable, Iterator
from typing import Any

import psycopg
from psycopg import pq

from sagacity.chain._fastverify import SIGNATURE
from sagacity.postgres._rows import ROW_COLUMNS
from sagacity.postgres.archive._db import mapped_errors

CHAIN_ORDER = 'saga_id COLLATE "C", archive_id'
"""Chain order: sagas by the bytes of their id, each saga's rows in the order archived."""

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_INT_COLUMNS = frozenset({1, 9})  # seq, recorded_at_us
_TRAILER = b"\xff\xff"
_EMPTY_STREAM = 19 + 2  # the header (no extension) and the trailer in one message


def chain_rows(
    conn: psycopg.Connection[Any],
    *,
    saga_ids: Collection[str] | None = None,
    block_size: int = 65_536,
    forms_only_first: bool = False,
) -> Generator[bytes]:
    """The blocks of a binary ``COPY`` of :data:`~sagacity.postgres._rows.ROW_COLUMNS`
    for ``saga_ids`` (every saga when ``None``), in :data:`CHAIN_ORDER`.

    The server sends one message per row; they are joined into blocks of about
    ``block_size`` bytes (:func:`copy_blocks`; a row larger than that is a block of its own),
    so that a consumer such as the compiled verifier is called once per block, not per row.

    With ``forms_only_first`` (an archive at schema 6 on, which holds chain forms), a form-2
    row's ``prev_hash`` is streamed as NULL: the bulk verifier, which hashes form 1, then
    refers its saga to the reference path (docs/adr/0019-erasure.md) instead of judging it.

    Runs in the connection's current transaction (a caller wanting one snapshot with other
    reads opens a REPEATABLE READ transaction first).  Stop iterating early and the rest of the
    stream is read and dropped when the generator closes.

    Raises:
        PersistenceError: the database failed.
    """
    where = "WHERE saga_id = ANY(%(ids)s)" if saga_ids is not None else ""
    columns = ROW_COLUMNS
    if forms_only_first:
        columns = columns.replace(" prev_hash,", " CASE WHEN form = 1 THEN prev_hash END,")
    query = (
        f"COPY (SELECT {columns} FROM side_effect_journal {where}"  # noqa: S608
        f" ORDER BY {CHAIN_ORDER}) TO STDOUT (FORMAT BINARY)"
    )
    params = {"ids": list(saga_ids)} if saga_ids is not None else None
    with mapped_errors("stream archived rows"), conn.cursor().copy(query, params) as copy:
        yield from copy_blocks(conn, copy, block_size)


def copy_messages(conn: psycopg.Connection[Any], copy: psycopg.Copy) -> Iterator[bytes]:
    """The messages of a binary ``COPY ... TO STDOUT`` that ``copy`` has started, one by one,
    read as :func:`copy_blocks` reads them.

    Raises:
        psycopg.Error: the server reported an error, or the connection was lost.
    """
    return copy_blocks(conn, copy, 0)


def copy_blocks(
    conn: psycopg.Connection[Any], copy: psycopg.Copy, block_size: int
) -> Generator[bytes]:
    """The messages of a binary ``COPY ... TO STDOUT`` that ``copy`` has started, joined into
    blocks of about ``block_size`` bytes (0: each message alone), read from libpq directly:
    about a third of the cost of iterating ``copy`` (psycopg's generator and wait machinery
    run once per message, and the server sends one message per row), and one loop a message
    here, not a generator per message joined by another.

    The stream ends at its trailer (PostgreSQL sends it as a message of its own, after the
    header when there are no rows); before its block is yielded, ``copy`` reads the server's
    completion, leaving the connection as iterating ``copy`` would.

    Raises:
        psycopg.Error: the server reported an error, or the connection was lost.
    """
    pgconn = conn.pgconn
    get = pgconn.get_copy_data
    pending: list[Any] = []
    add = pending.append
    size = 0
    while True:
        length, data = get(1)
        if length > 0:
            add(data)
            # A row's message is longer (its 12 field lengths alone are 48 bytes).
            if length <= _EMPTY_STREAM and _is_trailer(bytes(data)):
                # The server's completion is read before the trailer is handed on, so that a
                # reader stopping at the trailer leaves no COPY in progress.
                if copy.read():
                    raise psycopg.OperationalError("the COPY stream went on after its trailer")
                yield b"".join(pending)
                return
            size += length
            if size >= block_size:
                yield b"".join(pending)
                pending.clear()
                size = 0
        elif length == 0:  # nothing buffered: wait for the server (without holding the GIL)
            select.select([pgconn.socket], [], [])
            pgconn.consume_input()
        else:  # the stream stopped before its trailer: the error is in libpq's results
            results = []
            while (result := pgconn.get_result()) is not None:
                results.append(result)
            for result in results:
                if result.status != pq.ExecStatus.COMMAND_OK:
                    raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
            raise psycopg.OperationalError("the COPY stream ended before its trailer")


def _is_trailer(message: bytes) -> bool:
    return message == _TRAILER or (
        len(message) == _EMPTY_STREAM
        and message.startswith(SIGNATURE)
        and message.endswith(_TRAILER)
    )


def decoded_rows(blocks: Iterable[bytes]) -> Iterator[tuple[Any, ...]]:
    """The rows of :func:`chain_rows`'s blocks as tuples (the values a ``SELECT`` of
    ``ROW_COLUMNS`` returns: text as ``str``, the two bigints as ``int``, NULL as ``None``).

    Raises:
        ValueError: the blocks are not a binary ``COPY`` of ``ROW_COLUMNS``.
    """
    buf = b""
    started = False
    for block in blocks:
        data = buf + block
        at = 0
        if not started:
            if len(data) < 19:
                buf = data
                continue
            if data[:11] != SIGNATURE:
                raise ValueError("not a binary COPY stream: the signature is missing")
            at = 19 + _I32(data, 15)[0]
            started = True
        while len(data) >= at + 2:
            (count,) = _I16(data, at)
            if count == -1:
                return
            p = at + 2
            row: list[Any] = []
            for column in range(count):
                if len(data) < p + 4:
                    break
                (length,) = _I32(data, p)
                p += 4
                if length == -1:
                    row.append(None)
                    continue
                if len(data) < p + length:
                    break
                value = data[p : p + length]
                p += length
                row.append(_I64(value)[0] if column in _INT_COLUMNS else value.decode("utf-8"))
            if len(row) < count:
                break
            at = p
            yield tuple(row)
        buf = data[at:]
    raise ValueError("not a binary COPY stream: it ends before its trailer")
