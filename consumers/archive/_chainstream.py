"""The archived rows a verifier needs, streamed in chain order by a binary ``COPY``.

``COPY (SELECT ...) TO STDOUT (FORMAT BINARY)`` is the fastest way PostgreSQL hands rows to a
client: no per-row round trip, no text formatting of the integers, and psycopg passes each
row's message through as bytes, without decoding its values.  The blocks go, as they are,
to :func:`sagacity.consumers.archive._fastverify.chain_verifier`; :func:`decoded_rows` turns
them into tuples for readers that want the values.  Memory stays flat: psycopg holds one block
at a time, whatever the number of rows or sagas.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Iterable, Iterator
from typing import Any

import psycopg

from sagacity.consumers.archive._db import mapped_errors
from sagacity.consumers.archive._fastverify import SIGNATURE
from sagacity.consumers.archive._rows import ROW_COLUMNS

CHAIN_ORDER = 'saga_id COLLATE "C", archive_id'
"""Chain order: sagas by the bytes of their id, each saga's rows in the order archived."""

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_INT_COLUMNS = frozenset({1, 9})  # seq, recorded_at_us


def chain_rows(
    conn: psycopg.Connection[Any],
    *,
    saga_ids: Collection[str] | None = None,
    block_size: int = 65_536,
) -> Iterator[bytes]:
    """The blocks of a binary ``COPY`` of :data:`~sagacity.consumers.archive._rows.ROW_COLUMNS`
    for ``saga_ids`` (every saga when ``None``), in :data:`CHAIN_ORDER`.

    The server sends one message per row; they are joined into blocks of about
    ``block_size`` bytes (a row larger than that is a block of its own), so that a consumer
    such as the compiled verifier is called once per block, not once per row.

    Runs in the connection's current transaction (a caller wanting one snapshot with other
    reads opens a REPEATABLE READ transaction first).  Stop iterating early and the rest of the
    stream is read and dropped when the generator closes.

    Raises:
        PersistenceError: the database failed.
    """
    where = "WHERE saga_id = ANY(%(ids)s)" if saga_ids is not None else ""
    query = (
        f"COPY (SELECT {ROW_COLUMNS} FROM side_effect_journal {where}"  # noqa: S608
        f" ORDER BY {CHAIN_ORDER}) TO STDOUT (FORMAT BINARY)"
    )
    params = {"ids": list(saga_ids)} if saga_ids is not None else None
    with mapped_errors("stream archived rows"), conn.cursor().copy(query, params) as copy:
        pending: list[Any] = []
        size = 0
        for message in copy:
            pending.append(message)
            size += len(message)
            if size >= block_size:
                yield b"".join(pending)
                pending.clear()
                size = 0
        if pending:
            yield b"".join(pending)


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
