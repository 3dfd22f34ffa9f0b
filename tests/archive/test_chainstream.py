"""Streaming the archived rows a verifier needs by binary COPY, on the real PostgreSQL: the same
rows as a SELECT, in chain order, for some sagas or all, in constant memory; the bulk verifier
reads the stream and catches tampering where the reference does."""

from __future__ import annotations

import tracemalloc

import psycopg
import pytest
from archive_helpers import as_raw, make_chain

from sagacity.chain import BreakReason, link, verify
from sagacity.chain._fastverify import NATIVE, chain_verifier
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType
from sagacity.postgres.archive import (
    CHAIN_ORDER,
    ROW_COLUMNS,
    chain_rows,
    copy_messages,
    decoded_rows,
    entry_of_row,
)

pytestmark = pytest.mark.postgres

SAGAS = ("saga-b", "saga-a", "saga-é", "saga-Z", "saga-a2")
NATIVES = [False, True] if NATIVE else [False]


@pytest.fixture
def archived(archiver, archive_dsn):
    """Five sagas of 7 events, archived interleaved over three batches."""
    chains = {s: make_chain(s, 7) for s in SAGAS}
    events = [c[i] for i in range(7) for c in chains.values()]
    for start in range(0, len(events), 12):
        archiver.archive(as_raw(events[start : start + 12], first_offset=start))
    return chains


def _selected(dsn: str, where: str = "", params: tuple[object, ...] = ()) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT {ROW_COLUMNS} FROM side_effect_journal {where} ORDER BY {CHAIN_ORDER}",
            params,
        ).fetchall()


def test_the_stream_holds_the_rows_a_select_returns_in_chain_order(archived, archive_dsn):
    with psycopg.connect(archive_dsn) as conn:
        streamed = list(decoded_rows(chain_rows(conn)))
    assert streamed == _selected(archive_dsn)
    assert [r[0] for r in streamed[::7]] == sorted(SAGAS, key=str.encode)
    assert all(r[1] == i % 7 + 1 for i, r in enumerate(streamed))
    # Those rows are the entries archived, as the reference path reads them.
    assert [entry_of_row(r) for r in streamed if r[0] == "saga-é"] == archived["saga-é"]


def test_the_stream_of_some_sagas(archived, archive_dsn):
    with psycopg.connect(archive_dsn) as conn:
        streamed = list(decoded_rows(chain_rows(conn, saga_ids=["saga-é", "saga-a", "none"])))
        empty = list(decoded_rows(chain_rows(conn, saga_ids=[])))
    assert streamed == _selected(archive_dsn, "WHERE saga_id IN ('saga-a', 'saga-é')")
    assert empty == []


@pytest.mark.parametrize("native", NATIVES)
def test_the_bulk_verifier_passes_the_archive(archived, archive_dsn, native):
    with psycopg.connect(archive_dsn) as conn:
        verifier = chain_verifier(native=native)
        verdicts = []
        for block in chain_rows(conn):
            verdicts += verifier.feed(block)
        verdicts += verifier.finish()
        heads = dict(conn.execute("SELECT saga_id, head_hash FROM archive_saga_head").fetchall())
    assert [v.saga_id for v in verdicts] == sorted(SAGAS, key=str.encode)
    assert all(v.ok and v.events == v.length == v.head_seq == 7 for v in verdicts)
    assert {v.saga_id: v.head_hash for v in verdicts} == heads


@pytest.mark.parametrize("native", NATIVES)
def test_the_bulk_verifier_catches_what_the_reference_catches(archived, archive_dsn, native):
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("SET session_replication_role = replica")  # as a superuser could
        conn.execute(
            "UPDATE side_effect_journal SET payload = payload || ' ' WHERE saga_id = %s"
            " AND seq = 4",
            ("saga-é",),
        )
        conn.execute("DELETE FROM side_effect_journal WHERE saga_id = 'saga-Z' AND seq = 6")
        conn.commit()
        verifier = chain_verifier(native=native)
        verdicts = {}
        for block in chain_rows(conn):
            verdicts.update((v.saga_id, v) for v in verifier.feed(block))
        verdicts.update((v.saga_id, v) for v in verifier.finish())
        rows = list(decoded_rows(chain_rows(conn)))
    assert {s for s, v in verdicts.items() if not v.ok} == {"saga-é", "saga-Z"}
    assert (verdicts["saga-é"].reason, verdicts["saga-é"].bad_seq) == (BreakReason.EDITED, 4)
    assert (verdicts["saga-Z"].reason, verdicts["saga-Z"].bad_seq) == (BreakReason.GAP, 6)
    for saga, verdict in verdicts.items():
        reference = verify([entry_of_row(r) for r in rows if r[0] == saga], saga_id=saga)
        assert (verdict.ok, verdict.reason, verdict.bad_seq, verdict.detail) == (
            reference.ok,
            reference.reason,
            reference.bad_seq,
            reference.detail,
        )


@pytest.mark.parametrize("native", NATIVES)
def test_streaming_holds_one_block_at_a_time(archive_dsn, native):
    """Some 9 MB of rows stream and verify with a Python heap that stays under 1 MB (all of
    the Python twin's memory; the compiled one holds the same state, outside this count)."""
    with psycopg.connect(archive_dsn) as conn:
        conn.execute("SELECT sgc_ensure_month(1773576000000000)")
        conn.execute(
            "INSERT INTO side_effect_journal (saga_id, seq, event_type, payload, recorded_at_us,"
            " hash, prev_hash, topic, kafka_partition, kafka_offset)"
            " SELECT 'saga-' || (n / 10), n % 10 + 1, 'INTENT', repeat('x', 700),"
            " 1773576000000000 + n, repeat('a', 64), repeat('b', 64), 't', 0, n"
            " FROM generate_series(0, 9999) AS n"
        )
        conn.commit()
        verifier = chain_verifier(native=native)
        sagas = blocks = 0
        tracemalloc.start()
        try:
            for block in chain_rows(conn):
                blocks += 1
                sagas += len(verifier.feed(block))
            sagas += len(verifier.finish())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert sagas == 1_000
    assert blocks > 50  # about 64 KB each
    assert peak < 1_000_000, peak


@pytest.mark.parametrize("native", NATIVES)
def test_jsonb_text_of_any_attributes_rebuilds_the_hashed_bytes(archiver, archive_dsn, native):
    """PostgreSQL's own text of jsonb (its key order, its escapes) is parsed back to the
    attributes that were hashed."""
    nasty = {
        "ctl\x01\x1f": 'quote " backslash \\ slash / tab \t newline \n',
        "𝄞": "\u2028\u2029\ufeff é",
        "a": "",
        "long-key-" * 8: "𝄞" * 50,
        "ref_seq": "1",
    }
    prev, chain = GENESIS_HASH, []
    for seq in range(1, 4):
        draft = EntryDraft(
            saga_id="saga-attrs",
            event_type=EventType.INTENT,
            payload="{}",
            attributes={**nasty, "n": str(seq)},
            recorded_at_us=1_773_576_000_000_000 + seq,
        )
        entry = link(draft, seq=seq, prev_hash=prev)
        prev = entry.hash
        chain.append(entry)
    report = archiver.archive(as_raw(chain))
    assert report.archived == 3
    with psycopg.connect(archive_dsn) as conn:
        verifier = chain_verifier(native=native)
        verdicts = []
        for block in chain_rows(conn, saga_ids=["saga-attrs"]):
            verdicts += verifier.feed(block)
        verdicts += verifier.finish()
    assert [(v.ok, v.refer, v.head_seq, v.head_hash) for v in verdicts] == [(True, False, 3, prev)]


def test_blocks_join_rows_up_to_the_block_size(archived, archive_dsn):
    with psycopg.connect(archive_dsn) as conn:
        one_per_row = list(chain_rows(conn, block_size=1))
        joined = list(chain_rows(conn, block_size=1_000))
        whole = list(chain_rows(conn))
    assert len(one_per_row) == 35 + 1  # each row (the first with the header), the trailer
    assert b"".join(one_per_row) == b"".join(joined) == b"".join(whole)
    assert len(whole) == 1
    assert all(len(b) >= 1_000 for b in joined[:-1])
    assert max(map(len, joined)) < 1_000 + max(map(len, one_per_row))


def test_an_empty_stream_ends_and_leaves_the_connection_usable(archived, archive_dsn):
    # No rows: PostgreSQL sends the header and the trailer as one message.
    with psycopg.connect(archive_dsn) as conn:
        blocks = list(chain_rows(conn, saga_ids=["no-such-saga"]))
        assert list(decoded_rows(blocks)) == []
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert len(list(decoded_rows(chain_rows(conn)))) == 5 * 7
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_server_error_mid_stream_is_raised(archive_dsn):
    # Rows first, then an error: raised as the server's, and the connection is usable after
    # its transaction is rolled back.
    with psycopg.connect(archive_dsn) as conn:
        query = "COPY (SELECT 1 / (g - 3) FROM generate_series(1, 5) g) TO STDOUT (FORMAT BINARY)"
        with (
            pytest.raises(psycopg.errors.DivisionByZero),
            conn.cursor().copy(query) as copy,
        ):
            for _message in copy_messages(conn, copy):
                pass
        conn.rollback()
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_messages_read_directly_are_those_psycopg_reads(archived, archive_dsn):
    query = (
        f"COPY (SELECT {ROW_COLUMNS} FROM side_effect_journal ORDER BY {CHAIN_ORDER})"
        " TO STDOUT (FORMAT BINARY)"
    )
    with psycopg.connect(archive_dsn) as conn:
        with conn.cursor().copy(query) as copy:
            direct = [bytes(m) for m in copy_messages(conn, copy)]
        with conn.cursor().copy(query) as copy:
            iterated = [bytes(m) for m in copy]
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert direct == iterated
    assert direct[-1] == b"\xff\xff"
