"""The SQL of one archived batch: the heads it reads and moves, the hashes it compares, its
quarantine rows and its stored offsets (the archive service's ingest decides; this writes)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import psycopg

from sagacity.ports import HeadConflictError, QuarantinedMessage, ReadMessage
from sagacity.postgres import retryable

_COPY_QUARANTINE = (
    "COPY archive_quarantine (reason, detail, saga_id, seq, topic, kafka_partition,"
    " kafka_offset, raw_key, raw_value) FROM STDIN"
)


SEP = "\x1f"


def texts(values: Sequence[str]) -> tuple[str, object]:
    """A text[] parameter as (SQL, value).  One joined string when no value holds the
    separator: psycopg dumps a Python list element by element, which costs more than the
    statement itself for a batch's thousand saga ids."""
    if all(SEP not in v for v in values):
        return "string_to_array(%s, chr(31))", SEP.join(values)
    return "%s::text[]", list(values)


def ints(values: Sequence[int], cast: str = "bigint") -> tuple[str, object]:
    """An integer array parameter as (SQL, value), as :func:`texts`."""
    return f"string_to_array(%s, ',')::{cast}[]", ",".join(map(str, values))


def read_heads(cur: psycopg.Cursor, saga_ids: Sequence[str]) -> dict[str, tuple[int, str]]:
    """The table's head of each of ``saga_ids`` that has one."""
    heads: dict[str, tuple[int, str]] = {}
    if saga_ids:
        ids_sql, ids = texts(saga_ids)
        for saga_id, seq, head_hash in cur.execute(
            "SELECT saga_id, head_seq, head_hash FROM archive_saga_head"  # noqa: S608
            f" WHERE saga_id = ANY({ids_sql})",
            (ids,),
        ):
            heads[saga_id] = (int(seq), head_hash)
    return heads


def archived_hashes(
    cur: psycopg.Cursor, pairs: Collection[tuple[str, int]]
) -> dict[tuple[str, int], str]:
    """The archived hash at each (saga, seq) of ``pairs``, in one query when there are many
    (messages read again after a restart are all below their saga's head)."""
    if len(pairs) < 8:
        return {}
    ids_sql, ids = texts([b[0] for b in pairs])
    seqs_sql, seqs = ints([b[1] for b in pairs])
    rows = cur.execute(
        "SELECT j.saga_id, j.seq, j.hash FROM side_effect_journal j"  # noqa: S608
        f" JOIN unnest({ids_sql}, {seqs_sql}) AS w(saga_id, seq)"
        " ON j.saga_id = w.saga_id AND j.seq = w.seq",
        (ids, seqs),
    ).fetchall()
    return {(saga_id, int(seq)): hash for saga_id, seq, hash in rows}


def copy_quarantine(cur: psycopg.Cursor, refusals: Sequence[QuarantinedMessage]) -> dict[str, int]:
    """COPY ``refusals`` into the quarantine; their count by reason."""
    counts: dict[str, int] = {}
    with cur.copy(_COPY_QUARANTINE) as copy:
        for r in refusals:
            copy.write_row(
                (
                    str(r.reason),
                    r.detail,
                    r.saga_id,
                    r.seq,
                    r.event.topic,
                    r.event.partition,
                    r.event.offset,
                    r.event.key,
                    r.event.value,
                )
            )
            counts[str(r.reason)] = counts.get(str(r.reason), 0) + 1
    return counts


def move_heads(
    cur: psycopg.Cursor,
    before: Mapping[str, tuple[int, str]],
    after: Mapping[str, tuple[int, str]],
) -> None:
    """Move the heads from ``before`` to ``after`` (compare-and-set on each old seq).

    Raises:
        HeadConflictError: another archiver moved one first.
    """
    moved = [(s, before[s][0], *after[s]) for s in after if s in before and after[s] != before[s]]
    new = [(s, *after[s]) for s in after if s not in before]
    # Only constant SQL fragments are interpolated below; values are bound parameters.
    if moved:
        cols = [
            texts([m[0] for m in moved]),
            ints([m[1] for m in moved]),
            ints([m[2] for m in moved]),
            texts([m[3] for m in moved]),
        ]
        cur.execute(
            "UPDATE archive_saga_head h SET head_seq = u.seq, head_hash = u.hash,"  # noqa: S608
            f" updated_at = now() FROM unnest({', '.join(c[0] for c in cols)})"
            "   AS u(saga_id, old_seq, seq, hash)"
            " WHERE h.saga_id = u.saga_id AND h.head_seq = u.old_seq",
            [c[1] for c in cols],
        )
        if cur.rowcount != len(moved):
            raise HeadConflictError
    if new:
        cols = [
            texts([n[0] for n in new]),
            ints([n[1] for n in new]),
            texts([n[2] for n in new]),
        ]
        cur.execute(
            "INSERT INTO archive_saga_head (saga_id, head_seq, head_hash)"  # noqa: S608
            f" SELECT * FROM unnest({', '.join(c[0] for c in cols)})"
            " ON CONFLICT (saga_id) DO NOTHING",
            [c[1] for c in cols],
        )
        if cur.rowcount != len(new):
            raise HeadConflictError


def store_offsets(cur: psycopg.Cursor, group: str, batch: Sequence[ReadMessage]) -> None:
    """Store the next offset of each partition of ``batch`` (in the batch's transaction)."""
    top: dict[tuple[str, int], int] = {}
    first: dict[tuple[str, int], int] = {}
    for ev in batch:
        key = (ev.topic, ev.partition)
        top[key] = max(top.get(key, -1), ev.offset)
        first[key] = min(first.get(key, ev.offset), ev.offset)
    if not top:
        return
    # keys_checked_from: from where on this partition's rows were archived by a release
    # that refuses foreign keys; signed_offset: below which all it ingested is signed (both
    # set when the partition is first archived; signing moves the second).
    cur.execute(
        "INSERT INTO archive_consumer_offset (consumer_group, topic, kafka_partition,"
        " next_offset, keys_checked_from, signed_offset)"
        " SELECT %s, t, p, n, f, f FROM unnest(%s::text[], %s::int[], %s::bigint[],"
        " %s::bigint[]) AS u(t, p, n, f)"
        " ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE"
        " SET next_offset = GREATEST(archive_consumer_offset.next_offset,"
        " excluded.next_offset), updated_at = now()",
        (
            group,
            [k[0] for k in top],
            [k[1] for k in top],
            [o + 1 for o in top.values()],
            [first[k] for k in top],
        ),
    )


def make_months(
    conn: psycopg.Connection, cur: psycopg.Cursor, months: Mapping[int, int], made: set[int]
) -> dict[int, str]:
    """Make the month partitions ``months`` names (month -> a time in it) that ``made`` lacks,
    each in a savepoint; those the database refused (not a lost connection), with why."""
    unmade: dict[int, str] = {}
    for month, at_us in sorted(months.items()):
        if month in made:
            continue
        try:
            with conn.transaction():
                cur.execute("SELECT sgc_ensure_month(%s)", (at_us,))
        except psycopg.Error as exc:
            if retryable(exc):
                raise
            unmade[month] = (
                f"no partition could be made for its month ({month}): "
                f"{exc.diag.message_primary or type(exc).__name__}"
            )
            continue
        # Trusted only once committed: on any failure the connection and the cache are dropped.
        made.add(month)
    return unmade
