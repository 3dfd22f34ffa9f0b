"""Archiving batches into real Postgres: chain checks on ingest, quarantine, duplicates."""

from __future__ import annotations

import dataclasses

import pytest
from archive_helpers import as_raw, make_chain, rows

from sagacity.chain import link
from sagacity.consumers.archive import QuarantineReason, RawEvent
from sagacity.postgres.archive import PostgresArchiveAudits, PostgresArchiveIngest
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres


def test_batch_is_archived_with_offsets_and_heads(archiver, archive_dsn):
    a, b = make_chain("saga-a", 5), make_chain("saga-b", 3)
    events = as_raw(a[:3] + b + a[3:])
    report = archiver.archive(events)
    assert report.archived == 8
    assert report.duplicates == 0
    assert report.quarantined_total == 0
    got = rows(
        archive_dsn,
        "SELECT saga_id, seq, hash, prev_hash, payload, attributes, recorded_at_us,"
        " kafka_offset FROM side_effect_journal ORDER BY archive_id",
    )
    assert [(r[0], r[1]) for r in got] == [(e.saga_id, e.seq) for e in a[:3] + b + a[3:]]
    first = got[1]
    assert first[2] == a[1].hash
    assert first[3] == a[1].prev_hash
    assert first[4] == a[1].payload
    assert got[2][5] == {"ref_seq": "2"}
    assert rows(
        archive_dsn, "SELECT saga_id, head_seq, head_hash FROM archive_saga_head ORDER BY 1"
    ) == [("saga-a", 5, a[-1].hash), ("saga-b", 3, b[-1].hash)]
    assert archiver.stored_offsets("t") == {0: 8}
    ts = rows(
        archive_dsn,
        "SELECT recorded_at = sgc_us_to_timestamptz(recorded_at_us),"
        " extract(microseconds from recorded_at)::bigint %% 1000000"
        " FROM side_effect_journal LIMIT 1",
    )
    assert ts[0][0] is True
    assert ts[0][1] == a[0].recorded_at_us % 1_000_000


def test_redelivered_events_are_ignored_and_counted(archiver, archive_dsn):
    chain = make_chain("saga-d", 4)
    archiver.archive(as_raw(chain[:3]))
    # Kafka redelivers 2..3 (at new offsets, as a producer retry would) and then 4.
    report = archiver.archive(as_raw(chain[1:], first_offset=3))
    assert report.duplicates == 2
    assert report.archived == 1
    assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(4,)]
    # The same batch twice, within one batch.
    report = archiver.archive(as_raw([chain[3], chain[3]], first_offset=6))
    assert report.duplicates == 2
    assert report.archived == 0
    assert archiver.stored_offsets("t") == {0: 8}


def test_fork_gap_link_and_edit_go_to_quarantine(archiver, archive_dsn):
    chain = make_chain("saga-q", 4)
    archiver.archive(as_raw(chain[:2]))
    fork = link(dataclasses.replace(chain[1], result="other"), seq=2, prev_hash=chain[0].hash)
    bad_link = link(chain[2], seq=3, prev_hash="ab" * 32)
    edited = dataclasses.replace(chain[2], payload='{"order":999}')
    other = make_chain("saga-r", 3)
    wrong_genesis = link(dataclasses.replace(other[0]), seq=1, prev_hash="cd" * 32)
    report = archiver.archive(
        as_raw([fork, chain[3], bad_link, edited, other[1], wrong_genesis], first_offset=2)
    )
    assert report.archived == 0
    assert report.quarantined == {
        QuarantineReason.FORK: 1,
        QuarantineReason.GAP: 2,
        QuarantineReason.BROKEN_LINK: 1,
        QuarantineReason.EDITED: 1,
        QuarantineReason.WRONG_GENESIS: 1,
    }
    q = rows(
        archive_dsn,
        "SELECT reason, saga_id, seq, kafka_offset, raw_value FROM archive_quarantine ORDER BY id",
    )
    assert [r[0] for r in q] == ["fork", "gap", "broken_link", "edited", "gap", "wrong_genesis"]
    assert q[0][1:4] == ("saga-q", 2, 2)
    assert rows(archive_dsn, "SELECT count(*) FROM side_effect_journal") == [(2,)]
    # The good continuation is still accepted afterwards.
    assert archiver.archive(as_raw(chain[2:], first_offset=8)).archived == 2


def test_undecodable_bytes_are_quarantined_verbatim(archiver, archive_dsn):
    good = make_chain("saga-u", 1)
    junk = b"\x00\xffnot an event\x01"
    events = [
        RawEvent(topic="t", partition=1, offset=7, key=b"k", value=junk),
        RawEvent(topic="t", partition=1, offset=8, key=b"k", value=None),
        *as_raw(good, partition=1, first_offset=9),
    ]
    report = archiver.archive(events)
    assert report.quarantined == {QuarantineReason.UNDECODABLE: 2}
    assert report.archived == 1
    q = rows(
        archive_dsn,
        "SELECT reason, detail, raw_key, raw_value, kafka_partition, kafka_offset"
        " FROM archive_quarantine ORDER BY id",
    )
    assert q[0][0] == "undecodable"
    assert q[0][2] == b"k"
    assert q[0][3] == junk
    assert q[0][4:] == (1, 7)
    assert "tombstone" in q[1][1]
    assert archiver.stored_offsets("t") == {1: 10}


def test_month_partitions_are_created_on_demand(archiver, archive_dsn):
    jan = make_chain("saga-m", 2, start_us=1_767_225_600_000_000)  # 2026-01-01
    later = make_chain("saga-n", 1, start_us=1_772_323_200_000_000 - 10_000)  # end of Feb 2026
    archiver.archive(as_raw(jan + later))
    names = rows(
        archive_dsn,
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'side_effect_journal'::regclass ORDER BY 1",
    )
    assert names == [("side_effect_journal_p202601",), ("side_effect_journal_p202602",)]


def test_saga_ids_with_unusual_characters(archiver, archive_dsn):
    odd = ["saga\x1fwith-separator", "saga,comma", "saga 'quoted' \"twice\"", "σάγκα-✓"]
    chains = [make_chain(s, 3) for s in odd]
    assert archiver.archive(as_raw([e for c in chains for e in c[:2]])).archived == 8
    report = archiver.archive(as_raw([e for c in chains for e in c[1:]], first_offset=8))
    assert (report.archived, report.duplicates) == (4, 4)
    assert sorted(rows(archive_dsn, "SELECT saga_id, head_seq FROM archive_saga_head")) == sorted(
        (s, 3) for s in odd
    )


def test_an_event_keyed_as_another_saga_is_quarantined_as_foreign(archiver, archive_dsn):
    chain = make_chain("saga-a", 2)
    raw = as_raw(chain)
    raw[1] = dataclasses.replace(raw[1], key=b"saga-b")  # body of saga-a under saga-b's key
    report = archiver.archive([*raw, dataclasses.replace(raw[1], offset=2, key=None)])
    assert report.archived == 1
    assert report.quarantined == {QuarantineReason.FOREIGN: 2}
    assert rows(
        archive_dsn,
        "SELECT reason, saga_id, seq, raw_key FROM archive_quarantine ORDER BY kafka_offset",
    ) == [("foreign", "saga-a", 2, b"saga-b"), ("foreign", "saga-a", 2, None)]
    assert rows(archive_dsn, "SELECT head_seq FROM archive_saga_head") == [(1,)]
    assert rows(archive_dsn, "SELECT keys_checked_from FROM archive_consumer_offset") == [(0,)]


def test_a_form_2_chain_is_archived_with_its_commitments_and_salts(archiver, archive_dsn):
    """docs/adr/0019-erasure.md: the archive keeps what recomputes a form-2 hash once the
    values and salts are erased; form-1 rows show form 1 and empty maps."""
    from sagacity import JournalEntry, verify
    from sagacity.chain import committing

    v1 = make_chain("saga-v1", 2)
    v2 = []
    prev = v1[0].prev_hash
    for entry in make_chain("saga-v2", 4):
        draft = committing(dataclasses.replace(entry, saga_id="saga-v2"))
        v2.append(link(draft, seq=entry.seq, prev_hash=prev))
        prev = v2[-1].hash
    report = archiver.archive(as_raw(v1 + v2))
    assert (report.archived, report.quarantined_total) == (6, 0)
    got = rows(
        archive_dsn,
        "SELECT saga_id, seq, form, commitments, salts, payload, result, attributes,"
        " event_type, tool, error, actor, recorded_at_us, prev_hash, hash"
        " FROM side_effect_journal ORDER BY archive_id",
    )
    assert [(r[0], r[2], r[3], r[4]) for r in got[:2]] == [
        ("saga-v1", 1, {}, {}),
        ("saga-v1", 1, {}, {}),
    ]
    assert [(r[2], r[3], r[4]) for r in got[2:]] == [
        (2, dict(e.commitments), dict(e.salts)) for e in v2
    ]
    assert any(r[5] is not None for r in got[2:])

    def entry(r, *, erased):  # the row as an entry, its values and salts erased or not
        return JournalEntry(
            saga_id=r[0],
            seq=r[1],
            event_type=r[8],
            tool=r[9],
            payload=None if erased else r[5],
            result=None if erased else r[6],
            error=None if erased else r[10],
            actor=r[11],
            attributes=r[7],
            recorded_at_us=r[12],
            prev_hash=r[13],
            hash=r[14],
            form=r[2],
            commitments=r[3],
            salts={} if erased else r[4],
        )

    assert verify([entry(r, erased=False) for r in got[2:]]).ok
    assert verify([entry(r, erased=True) for r in got[2:]]).ok


def test_sealed_events_are_archived_opened_with_the_keys_and_quarantined_when_altered(
    archive_dsn,
):
    """docs/adr/0019-erasure.md: with the key service the value columns are filled beside the
    commitments; without it only the commitments are stored (which verify); a sealed field
    that does not authenticate is quarantined as "authentication failed"."""
    import os

    from sagacity.chain import committing
    from sagacity.consumers.archive import BatchArchiver
    from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
    from sagacity.privacy._keys import KeyService
    from sagacity.schemas import decode_record
    from sagacity.schemas._sealed import encode_sealed
    from sagacity.testing import InMemoryKeyStore

    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    chain = []
    prev = "0" * 64
    for entry in make_chain("sealed-1", 4):
        chain.append(link(committing(dataclasses.replace(entry)), seq=entry.seq, prev_hash=prev))
        prev = chain[-1].hash
    values = [encode_sealed(e, keys) for e in chain]
    assert not any(b"\xc3\xa9 \xe2\x9c\x93" in v for v in values)  # the payloads' "é ✓"
    raw = [
        RawEvent(topic="t", partition=0, offset=i, key=b"sealed-1", value=v)
        for i, v in enumerate(values)
    ]
    # An altered sealed payload at the next offset: quarantined, nothing else changes.
    box = decode_record(values[3])["sealed"]["payload"]
    altered = bytearray(values[3])
    altered[values[3].index(box) + 3] ^= 1
    raw.append(RawEvent(topic="t", partition=0, offset=4, key=b"sealed-1", value=bytes(altered)))
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        keys=keys,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        report = archiver.archive(raw)
    finally:
        archiver.close()
    assert report.archived == 4
    assert report.quarantined == {QuarantineReason.AUTHENTICATION_FAILED: 1}
    got = rows(
        archive_dsn,
        "SELECT payload, result, commitments, salts FROM side_effect_journal ORDER BY seq",
    )
    assert [r[0] for r in got] == [e.payload for e in chain]
    assert [r[1] for r in got] == [e.result for e in chain]
    assert [r[2] for r in got] == [dict(e.commitments) for e in chain]
    assert [r[3] for r in got] == [dict(e.salts) for e in chain]
    assert rows(archive_dsn, "SELECT reason FROM archive_quarantine") == [
        ("authentication failed",)
    ]
    with pytest.raises(ValueError, match="give keys or decode"):
        BatchArchiver(
            PostgresArchiveIngest(archive_dsn),
            consumer_group="g",
            keys=keys,
            decode=lambda v: chain[0],
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )


def test_sealed_events_archived_without_the_keys_keep_their_commitments(archiver, archive_dsn):
    import os

    from sagacity import verify
    from sagacity.chain import committing
    from sagacity.consumers.archive import iter_audits
    from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
    from sagacity.privacy._keys import KeyService
    from sagacity.schemas._sealed import encode_sealed
    from sagacity.testing import InMemoryKeyStore

    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    chain = []
    prev = "0" * 64
    for entry in make_chain("sealed-2", 3):
        chain.append(link(committing(dataclasses.replace(entry)), seq=entry.seq, prev_hash=prev))
        prev = chain[-1].hash
    raw = [
        RawEvent(topic="t", partition=0, offset=i, key=b"sealed-2", value=encode_sealed(e, keys))
        for i, e in enumerate(chain)
    ]
    assert archiver.archive(raw).archived == 3
    got = rows(archive_dsn, "SELECT payload, result, salts FROM side_effect_journal")
    assert all(r == (None, None, {}) for r in got)
    import psycopg

    with psycopg.connect(archive_dsn) as conn:
        # Commitments only and no ERASED: withheld, unless the auditor knows the archive
        # ingests without the key-encryption key.
        (withheld,) = list(iter_audits(PostgresArchiveAudits(conn), saga_id="sealed-2"))
        (audit,) = list(
            iter_audits(PostgresArchiveAudits(conn), saga_id="sealed-2", allow_unopened=True)
        )
    assert (withheld.ok, withheld.reason, withheld.bad_seq) == (False, "withheld", 2)
    assert audit.ok
    assert verify([dataclasses.replace(e, payload=None, result=None, salts={}) for e in chain]).ok
