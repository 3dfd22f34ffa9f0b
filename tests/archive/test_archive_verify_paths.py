"""The audit straight from the archive's columns agrees with the reference path (every row
rebuilt as a JournalEntry and verified by sagacity.chain.verify), on intact sagas with every
field kind and on each way a row can be tampered with, including rows that are not entries."""

from __future__ import annotations

import dataclasses
import json

import psycopg
import pytest
from archive_helpers import BASE_US, as_raw, make_chain

from sagacity._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry, UnknownEventType
from sagacity.chain import link
from sagacity.consumers.archive import (
    AuditReason,
    SagaAudit,
    Signer,
    generate_key,
    iter_audits,
    sign_pending,
)
from sagacity.consumers.archive._audit import _verified_head
from sagacity.consumers.archive._rows import ROW_COLUMNS

pytestmark = pytest.mark.postgres

RICH = "saga-rïch-𝄞"


def rich_chain() -> list[JournalEntry]:
    """Nulls and empty strings, non-ASCII and 4-byte text, an unknown event type, and
    attribute keys whose byte order differs from jsonb's (shortest first) order."""
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
        EntryDraft(saga_id=RICH, event_type=EventType.FAILED, tool="t", error="boom\nline 2"),
        EntryDraft(
            saga_id=RICH,
            event_type=EventType.EXECUTED,
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
        assert sign_pending(conn, signer) == 2
    return chain


def tamper(dsn: str, *statements: tuple[str, tuple[object, ...]]) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        for sql, params in statements:
            conn.execute(sql, params)


def audits(dsn: str, signer: Signer) -> list[SagaAudit]:
    """Both paths' audits, asserted equal; returned once."""
    with psycopg.connect(dsn) as conn:
        fast = list(iter_audits(conn, pinned_keys=[signer.public_raw]))
        reference = list(iter_audits(conn, pinned_keys=[signer.public_raw], reference=True))
        one = list(iter_audits(conn, saga_id=RICH, pinned_keys=[signer.public_raw]))
    assert fast == reference
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
        (AuditReason.EDITED, None),
    ),
    "attributes_not_an_object": (
        [_set("attributes", '["ref_seq"]', 3)],
        (AuditReason.EDITED, None),
    ),
    "empty_event_type": ([_set("event_type", "", 2)], (AuditReason.EDITED, None)),
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
    return (
        "INSERT INTO archive_retention_anchor (saga_id, seq, hash, partition_name)"
        " VALUES (%s, %s, %s, 'gone')",
        (RICH, seq, hash),
    )


def _drop_below(seq: int) -> tuple[str, tuple[object, ...]]:
    return ("DELETE FROM side_effect_journal WHERE saga_id = %s AND seq <= %s", (RICH, seq))


def test_chain_continuing_from_a_retention_anchor(archived, archive_dsn, signer):
    tamper(archive_dsn, _drop_below(2), _anchor(2, archived[1].hash))
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
    assert _verified_head(rows, after_seq=0, after_hash=GENESIS_HASH) == (6, archived[-1].hash)
    assert _verified_head(rows[2:], after_seq=2, after_hash=archived[1].hash) == (
        6,
        archived[-1].hash,
    )
    edited = [*rows[:4], (*rows[4][:6], "boom\nline 3", *rows[4][7:]), rows[5]]
    assert _verified_head(edited, after_seq=0, after_hash=GENESIS_HASH) is None
    assert _verified_head(rows[1:], after_seq=0, after_hash=GENESIS_HASH) is None
    assert _verified_head(rows, after_seq=0, after_hash="ab" * 32) is None


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
    assert _verified_head(rows[1:], after_seq=1, after_hash=entries[0].hash) == (3, prev)
    assert _verified_head(rows, after_seq=0, after_hash=start) is None
