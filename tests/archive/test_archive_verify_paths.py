"""The audit straight from the archive's columns agrees with the reference path (every row
rebuilt as a JournalEntry and verified by sagacity.chain.verify), on intact sagas with every
field kind and on each way a row can be tampered with, including rows that are not entries."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import psycopg
import pytest
from archive_helpers import BASE_US, as_raw, make_chain

from sagacity.chain import link
from sagacity.consumers.archive import (
    AuditReason,
    SagaAudit,
    Signer,
    _judging,
    generate_key,
    iter_audits,
    sign_pending,
)
from sagacity.consumers.archive._columncheck import verified_head
from sagacity.consumers.archive._retention import sign_records
from sagacity.entries._events import (
    GENESIS_HASH,
    EntryDraft,
    EventType,
    JournalEntry,
    UnknownEventType,
)
from sagacity.postgres.archive import (
    ROW_COLUMNS,
    PostgresArchiveAudits,
    PostgresCheckpointSigning,
    PostgresRetention,
    reader_of,
    shared_snapshot,
)

pytestmark = pytest.mark.postgres

RICH = "saga-rïch-𝄞"


def rich_chain() -> list[JournalEntry]:
    """Nulls and empty strings, non-ASCII and 4-byte text, an unknown event type, and
    attribute keys whose byte order differs from jsonb's (shortest first) order (a story the
    saga grammar accepts: an inline run undoing its step)."""
    drafts = [
        EntryDraft(saga_id=RICH, event_type=EventType.SAGA_OPENED, actor="writer-𝄞"),
        EntryDraft(
            saga_id=RICH,
            event_type=EventType.INTENT,
            tool="refund",
            payload="",
            attributes={"b": "1", "aa": "2", "é": "3", "zé": "✓", "ä": ""},
        ),
        EntryDraft(
            saga_id=RICH,
            event_type=EventType.EXECUTED,
            tool="refund",
            result="naïve 𝄞",
            attributes={"ref_seq": "2"},
        ),
        EntryDraft(
            saga_id=RICH,
            event_type=UnknownEventType("FUTURE_KIND"),
            tool="t",
            payload='{"a":1,"s":"\\u0000 escaped in JSON"}',
            result="",
            error="",
            actor="",
        ),
        EntryDraft(
            saga_id=RICH,
            event_type=EventType.COMPENSATION_FAILED,
            tool="t",
            error="boom\nline 2",
            attributes={"ref_seq": "3", "cause": "error"},
        ),
        EntryDraft(
            saga_id=RICH,
            event_type=EventType.SAGA_ENDED,
            tool="t",
            result="x" * 5_000,
            attributes={"ref_seq": "4", "note": 'a \\ backslash, a " quote'},
        ),
    ]
    out, prev = [], GENESIS_HASH
    for seq, draft in enumerate(drafts, start=1):
        draft = dataclasses.replace(draft, recorded_at_us=BASE_US + seq * 7_919)
        entry = link(draft, seq=seq, prev_hash=prev)
        out.append(entry)
        prev = entry.hash
    return out


@pytest.fixture
def signer(tmp_path) -> Signer:
    return generate_key(tmp_path / "archive.key")


@pytest.fixture
def archived(archiver, archive_dsn, signer) -> list[JournalEntry]:
    chain = rich_chain()
    events = chain + make_chain("saga-plain", 4)
    report = archiver.archive(as_raw(events))
    assert report.archived == len(events)
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 2
    return chain


def tamper(dsn: str, *statements: tuple[str, tuple[object, ...]]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        for sql, params in statements:
            conn.execute(sql, params)


def audits(dsn: str, signer: Signer) -> list[SagaAudit]:
    """Every path's audits, asserted equal; returned once.  The bulk verifier is the compiled
    one where it is installed, its Python twin under SAGACITY_NATIVE=0 (the suite runs both)."""
    with psycopg.connect(dsn) as conn:
        fast = list(iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw]))
        bulk = list(
            iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], bulk=True)
        )
        columns = list(
            iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], bulk=False)
        )
        reference = list(
            iter_audits(
                PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], reference=True
            )
        )
        one = list(
            iter_audits(PostgresArchiveAudits(conn), saga_id=RICH, pinned_keys=[signer.public_raw])
        )
    assert fast == reference
    assert bulk == reference
    assert columns == reference
    assert one == [a for a in fast if a.saga_id == RICH]
    assert [a.saga_id for a in fast] == sorted([RICH, "saga-plain"], key=str.encode)
    return fast


def rich(dsn: str, signer: Signer) -> SagaAudit:
    by_saga = {a.saga_id: a for a in audits(dsn, signer)}
    assert by_saga["saga-plain"].ok
    return by_saga[RICH]


def test_intact_archive_with_every_field_kind(archived, archive_dsn, signer):
    audit = rich(archive_dsn, signer)
    assert audit.ok, audit
    assert (audit.events, audit.head_seq, audit.head_hash, audit.checkpoints) == (
        6,
        6,
        archived[-1].hash,
        1,
    )


def _set(column: str, value: object, seq: int) -> tuple[str, tuple[object, ...]]:
    # Only constant column names are interpolated (from the cases below).
    return (
        f"UPDATE side_effect_journal SET {column} = %s WHERE saga_id = %s AND seq = %s",
        (value, RICH, seq),
    )


CASES = {
    # name: (statements, (reason, bad_seq) expected for the rich saga)
    "null_payload_made_empty": ([_set("payload", "", 1)], (AuditReason.EDITED, 1)),
    "empty_payload_made_null": ([_set("payload", None, 2)], (AuditReason.EDITED, 2)),
    "empty_actor_made_null": ([_set("actor", None, 4)], (AuditReason.EDITED, 4)),
    "attribute_value_changed": (
        [_set("attributes", '{"ref_seq": "3"}', 3)],
        (AuditReason.EDITED, 3),
    ),
    "attribute_value_not_text": (
        [_set("attributes", '{"ref_seq": 2}', 3)],
        (AuditReason.EDITED, 3),
    ),
    "attributes_not_an_object": (
        [_set("attributes", '["ref_seq"]', 3)],
        (AuditReason.EDITED, 3),
    ),
    "empty_event_type": ([_set("event_type", "", 2)], (AuditReason.EDITED, 2)),
    "event_type_renamed": ([_set("event_type", "FAILED", 3)], (AuditReason.EDITED, 3)),
    "time_moved": ([_set("recorded_at_us", BASE_US + 1, 5)], (AuditReason.EDITED, 5)),
    "hash_in_upper_case": (
        [
            (
                "UPDATE side_effect_journal SET hash = upper(hash) WHERE saga_id = %s AND seq = 6",
                (RICH,),
            )
        ],
        (AuditReason.EDITED, 6),
    ),
    "previous_hash_in_upper_case": (
        [
            (
                "UPDATE side_effect_journal SET prev_hash = upper(prev_hash)"
                " WHERE saga_id = %s AND seq = 3",
                (RICH,),
            )
        ],
        (AuditReason.BROKEN_LINK, 3),
    ),
    "first_previous_hash_not_genesis": (
        [_set("prev_hash", "1" * 64, 1)],
        (AuditReason.WRONG_GENESIS, 1),
    ),
    "previous_hash_not_hex": ([_set("prev_hash", "z" * 64, 4)], (AuditReason.EDITED, 4)),
    "duplicated_row": (
        [
            (
                "INSERT INTO side_effect_journal (saga_id, seq, event_type, tool, payload, result,"
                " error, actor, attributes, recorded_at_us, hash, prev_hash, topic,"
                " kafka_partition, kafka_offset) SELECT saga_id, seq, event_type, tool, payload,"
                " result, error, actor, attributes, recorded_at_us + 1, hash, prev_hash, topic,"
                " kafka_partition, kafka_offset FROM side_effect_journal"
                " WHERE saga_id = %s AND seq = 3",
                (RICH,),
            )
        ],
        (AuditReason.REORDERED, 7),
    ),
    "last_row_deleted": (
        [("DELETE FROM side_effect_journal WHERE saga_id = %s AND seq = 6", (RICH,))],
        (AuditReason.TRUNCATED, 6),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tampered_row_gives_the_same_audit_on_both_paths(archived, archive_dsn, signer, case):
    statements, (reason, bad_seq) = CASES[case]
    tamper(archive_dsn, *statements)
    audit = rich(archive_dsn, signer)
    assert not audit.ok
    assert (audit.reason, audit.bad_seq) == (reason, bad_seq), audit


def _anchor(seq: int, hash: str) -> tuple[str, tuple[object, ...]]:
    """An anchor of a month 'gone' (its retention record signed afterwards: :func:`_sign`)."""
    return (
        "WITH r AS (INSERT INTO archive_retention (partition_name, range_from_us, range_to_us,"
        " row_count, export_file, export_sha256) VALUES ('gone', 0, 1, 0, '-', repeat('0', 64)))"
        " INSERT INTO archive_retention_anchor (saga_id, seq, hash, partition_name)"
        " VALUES (%s, %s, %s, 'gone')",
        (RICH, seq, hash),
    )


def _sign(dsn: str, signer) -> None:
    """Sign the retention records (anchors count only as leaves of a signed record)."""
    with psycopg.connect(dsn) as conn:
        assert sign_records(PostgresRetention(conn), signer) == 1


def _drop_below(seq: int) -> tuple[str, tuple[object, ...]]:
    return ("DELETE FROM side_effect_journal WHERE saga_id = %s AND seq <= %s", (RICH, seq))


def test_chain_continuing_from_a_retention_anchor(archived, archive_dsn, signer):
    tamper(archive_dsn, _drop_below(2), _anchor(2, archived[1].hash))
    _sign(archive_dsn, signer)
    audit = rich(archive_dsn, signer)
    assert audit.ok, audit
    assert (audit.events, audit.head_seq) == (4, 6)


@pytest.mark.parametrize(
    ("anchor", "expected"),
    [
        ((2, "ab" * 32), (AuditReason.BROKEN_LINK, 3)),
        ((2, "not hex"), (AuditReason.BROKEN_LINK, 3)),
        ((2, "ab" * 16), (AuditReason.BROKEN_LINK, 3)),
        ((1, None), (AuditReason.GAP, 2)),
        ((3, None), (AuditReason.REORDERED, 4)),
    ],
)
def test_rows_not_continuing_their_anchor(archived, archive_dsn, signer, anchor, expected):
    seq, hash = anchor
    tamper(archive_dsn, _drop_below(2), _anchor(seq, hash or archived[seq - 1].hash))
    _sign(archive_dsn, signer)
    audit = rich(archive_dsn, signer)
    assert not audit.ok
    assert (audit.reason, audit.bad_seq) == expected, audit


@pytest.mark.parametrize(
    ("first_prev", "expected"),
    [(GENESIS_HASH, AuditReason.BROKEN_LINK), ("ab" * 32, AuditReason.WRONG_GENESIS)],
)
def test_an_anchor_at_seq_zero_is_no_genesis(archived, archive_dsn, signer, first_prev, expected):
    # Seq 1 continuing a seq-0 anchor that is not the genesis hash is a wrong genesis, however
    # well its previous hash matches that anchor.
    tamper(archive_dsn, _anchor(0, "ab" * 32), _set("prev_hash", first_prev, 1))
    _sign(archive_dsn, signer)
    audit = rich(archive_dsn, signer)
    assert (audit.ok, audit.reason, audit.bad_seq) == (False, expected, 1)


def test_intact_rows_pass_straight_from_their_columns(archived, archive_dsn):
    # Not only equal audits: the column path itself accepts an intact saga of every field kind
    # (so the comparisons above exercise it), and refuses one altered byte.
    with psycopg.connect(archive_dsn) as conn:
        rows = conn.execute(
            f"SELECT {ROW_COLUMNS} FROM side_effect_journal WHERE saga_id = %s ORDER BY archive_id",
            (RICH,),
        ).fetchall()
    assert verified_head(rows, after_seq=0, after_hash=GENESIS_HASH) == (6, archived[-1].hash)
    assert verified_head(rows[2:], after_seq=2, after_hash=archived[1].hash) == (
        6,
        archived[-1].hash,
    )
    edited = [*rows[:4], (*rows[4][:6], "boom\nline 3", *rows[4][7:]), rows[5]]
    assert verified_head(edited, after_seq=0, after_hash=GENESIS_HASH) is None
    assert verified_head(rows[1:], after_seq=0, after_hash=GENESIS_HASH) is None
    assert verified_head(rows, after_seq=0, after_hash="ab" * 32) is None


def test_a_chain_linked_from_a_seq_zero_anchor_is_left_to_the_reference_path():
    # Consistent rows continuing a seq-0 "anchor" that is not the genesis hash: the column
    # path must not pass them (the reference reports a wrong genesis).
    start = "ab" * 32
    entries, prev = [], start
    for e in make_chain("s", 3):
        entry = link(e, seq=e.seq, prev_hash=prev)
        entries.append(entry)
        prev = entry.hash
    rows = [
        (
            e.saga_id,
            e.seq,
            e.event_type.value,
            e.tool,
            e.payload,
            e.result,
            e.error,
            e.actor,
            json.dumps(dict(e.attributes)),
            e.recorded_at_us,
            e.prev_hash,
            e.hash,
        )
        for e in entries
    ]
    assert verified_head(rows[1:], after_seq=1, after_hash=entries[0].hash) == (3, prev)
    assert verified_head(rows, after_seq=0, after_hash=start) is None


def test_the_bulk_reader_sees_the_audits_snapshot(archived, archive_dsn):
    # The rows are streamed on a second connection: it must read the audit's snapshot and
    # schema, not rows committed after the snapshot was taken.
    with psycopg.connect(archive_dsn) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        before = conn.execute("SELECT count(*) FROM side_effect_journal").fetchone()
        reader = reader_of(*shared_snapshot(conn))
        assert reader is not None
        with reader:
            tamper(archive_dsn, ("DELETE FROM side_effect_journal WHERE saga_id = %s", (RICH,)))
            seen = reader.execute("SELECT count(*) FROM side_effect_journal").fetchone()
            after = conn.execute("SELECT count(*) FROM side_effect_journal").fetchone()
    assert before == seen == after == (6 + 4,)


def test_without_a_second_connection_the_columns_are_checked(
    archived, archive_dsn, signer, monkeypatch
):
    # A server or pooler that refuses the second connection: the same audits, read on one.
    def refused(*args: object, **kwargs: object) -> psycopg.Connection:
        raise psycopg.OperationalError("too many connections")

    tamper(archive_dsn, _set("payload", "", 1))
    expected = audits(archive_dsn, signer)
    monkeypatch.setattr(psycopg, "connect", refused)
    with psycopg.Connection.connect(archive_dsn) as conn:
        got = list(
            iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], bulk=True)
        )
    assert got == expected
    assert [a.reason for a in got if not a.ok] == [AuditReason.EDITED]


_AUDIT_IN_ANOTHER_PROCESS = """
import json, sys
import psycopg
from sagacity.consumers.archive import iter_audits
from sagacity.chain._fastverify import NATIVE
from sagacity.postgres.archive import PostgresArchiveAudits
with psycopg.connect(sys.argv[1]) as conn:
    store = PostgresArchiveAudits(conn)
    found = [repr(a) for a in iter_audits(store, pinned_keys=[bytes.fromhex(sys.argv[2])])]
print(json.dumps({"native": NATIVE, "audits": found}))
"""


@pytest.mark.parametrize("case", ["intact", "time_moved", "attribute_value_not_text"])
def test_audits_agree_with_and_without_the_compiled_module(archived, archive_dsn, signer, case):
    # The whole audit as `sagacity verify --all` runs it, in a process with the compiled
    # module (where it is built) and in one with SAGACITY_NATIVE=0: the same audits.
    if case != "intact":
        tamper(archive_dsn, *CASES[case][0])
    runs = {}
    for native in ("1", "0"):
        env = {**os.environ, "SAGACITY_NATIVE": native}
        out = subprocess.run(
            [sys.executable, "-c", _AUDIT_IN_ANOTHER_PROCESS, archive_dsn, signer.public_raw.hex()],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        runs[native] = json.loads(out.stdout)
    assert runs["0"]["native"] is False
    # Whatever this process runs with, the first process ran the compiled module if installed.
    installed = importlib.util.find_spec("sagacity._sagacity_native") is not None
    assert runs["1"]["native"] is installed
    assert runs["1"]["audits"] == runs["0"]["audits"]
    assert runs["0"]["audits"] == [repr(a) for a in audits(archive_dsn, signer)]


def test_the_bulk_verifier_judges_intact_sagas_alone(archived, archive_dsn, signer, monkeypatch):
    # With the bulk verifier, neither the column check nor the reference path sees an intact
    # saga (the comparisons above do exercise it).
    def unused(*args: object, **kwargs: object) -> None:
        raise AssertionError("an intact saga left the bulk verifier")

    expected = audits(archive_dsn, signer)
    monkeypatch.setattr(_judging, "verified_head", unused)
    monkeypatch.setattr(_judging, "judge", unused)
    with psycopg.connect(archive_dsn) as conn:
        got = list(
            iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], bulk=True)
        )
    assert got == expected
    assert all(a.ok for a in got)
