"""Erasing a saga in the archive (docs/adr/0019-erasure.md §4) on real PostgreSQL: only through
``sgc_erase_saga``, only the openings of that saga, never a hash or a commitment; the erased
saga still verifies and ``sagacity verify`` reports the erasure."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from archive_helpers import BASE_US, as_raw, make_chain, rows, with_option
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg import sql

from sagacity.chain import committing, link
from sagacity.cli import main
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.errors import ErasureRefusedError
from sagacity.postgres.archive import PostgresArchiveIngest, erase_in_archive, erasure_records
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE
from sagacity.signing._operator_signature import OperatorSigner

pytestmark = pytest.mark.postgres

MARKER = "marker-7f3a-erasure@example.org"


def form_two_chain(saga_id: str, *, start_us: int = BASE_US) -> list[JournalEntry]:
    """A form-2 chain whose data (payload, result, error, a note) holds :data:`MARKER`."""
    drafts = [
        EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED, actor="writer-1"),
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.INTENT,
            tool="mail",
            payload=json.dumps({"to": MARKER}),
            attributes={"payload_sha256": "0" * 64, "note": f"for {MARKER}"},
        ),
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.EXECUTED,
            tool="mail",
            result=MARKER,
            attributes={"ref_seq": "2"},
        ),
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.COMPENSATION_REQUESTED,
            error=MARKER,
            attributes={"reason": "FAILED"},
        ),
        EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_ENDED, result="COMPENSATION_FAILED"),
    ]
    out: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq, draft in enumerate(drafts, start=1):
        timed = dataclasses.replace(draft, recorded_at_us=start_us + seq * 1_000)
        entry = link(committing(timed), seq=seq, prev_hash=prev)
        out.append(entry)
        prev = entry.hash
    return out


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout + result.stderr


def journal_rows(dsn: str, saga_id: str) -> list[tuple[object, ...]]:
    return rows(
        dsn,
        "SELECT seq, payload, result, error, attributes::text, salts::text, commitments::text,"
        " hash, prev_hash FROM side_effect_journal WHERE saga_id = %s ORDER BY seq",
        (saga_id,),
    )


@pytest.fixture
def archived(archive_dsn: str) -> str:
    """Two form-2 sagas and a form-1 one archived (with their values: the archiver got them
    in clear), and a quarantined message of the first."""
    archiver = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        events = as_raw(form_two_chain("gone") + form_two_chain("kept") + make_chain("old", 3))
        bad = RawEvent(topic="t", partition=0, offset=len(events), key=b"gone", value=b"junk")
        archiver.archive([*events, bad])
    finally:
        archiver.close()
    assert rows(archive_dsn, "SELECT count(*) FROM archive_quarantine") == [(1,)]
    return archive_dsn


def test_an_ordinary_update_or_delete_is_still_refused(archived: str) -> None:
    with psycopg.connect(archived, autocommit=True) as conn:
        conn.execute("INSERT INTO archive_erasure (saga_id, actor, reason) VALUES ('x', 'a', 'r')")
        for statement in (
            "UPDATE side_effect_journal SET payload = NULL, salts = '{}' WHERE saga_id = 'gone'",
            "DELETE FROM side_effect_journal WHERE saga_id = 'gone'",
            "UPDATE archive_quarantine SET raw_value = NULL",
            "UPDATE archive_erasure SET actor = 'x'",
            "DELETE FROM archive_erasure",
            "TRUNCATE archive_erasure",
        ):
            with pytest.raises(psycopg.Error, match="append-only"):
                conn.execute(statement)


def test_the_function_erases_that_saga_only_and_keeps_every_hash(archived: str) -> None:
    before_gone = journal_rows(archived, "gone")
    before_kept = journal_rows(archived, "kept")
    with psycopg.connect(archived) as conn:
        done = erase_in_archive(conn, "gone", actor="dpo@example.org", reason="art. 17 request")
    assert (done.logged, done.rows, done.quarantined) == (True, 5, 1)
    # Every data field is erased, the final status (SAGA_ENDED's result) included.
    assert done.erased == {2: ("note", "payload"), 3: ("result",), 4: ("error",), 5: ("result",)}
    after = journal_rows(archived, "gone")
    for old, new in zip(before_gone, after, strict=True):
        assert new[6:] == old[6:]  # commitments, hash, prev_hash
        assert new[1:4] == (None, None, None)
        assert new[5] == "{}"
        assert "note" not in json.loads(str(new[4]))
    assert json.loads(str(after[1][4])) == {"payload_sha256": "0" * 64}
    assert journal_rows(archived, "kept") == before_kept
    dump = str(rows(archived, "SELECT * FROM side_effect_journal WHERE saga_id = 'gone'"))
    assert MARKER not in dump
    assert rows(archived, "SELECT raw_value FROM archive_quarantine") == [(None,)]
    with psycopg.connect(archived, autocommit=True) as conn:
        (record,) = erasure_records(conn, "gone")
    assert (record.actor, record.reason, record.quarantined) == (
        "dpo@example.org",
        "art. 17 request",
        1,
    )
    assert record.erased == done.erased


def test_a_second_erasure_erases_nothing_and_logs_nothing(archived: str) -> None:
    with psycopg.connect(archived) as conn:
        erase_in_archive(conn, "gone", actor="a", reason="r")
        again = erase_in_archive(conn, "gone", actor="a", reason="r")
    assert (again.erased, again.quarantined, again.logged) == ({}, 0, False)
    assert rows(archived, "SELECT count(*) FROM archive_erasure") == [(1,)]


def test_concurrent_erasures_of_a_saga_log_once(archived: str) -> None:
    results: list[bool] = []

    def erase() -> None:
        with psycopg.connect(archived) as conn:
            results.append(erase_in_archive(conn, "gone", actor="a", reason="r").logged)

    threads = [threading.Thread(target=erase) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]
    assert rows(archived, "SELECT count(*) FROM archive_erasure") == [(1,)]


def test_inside_an_erasure_a_hash_or_commitment_still_cannot_change(archived: str) -> None:
    with psycopg.connect(archived, autocommit=True) as conn:
        for change in (
            "hash = md5(hash) || md5(hash)",
            "commitments = '{}'",
            "payload = 'other'",
            "actor = 'someone else'",
            "payload = NULL",  # the salts kept: not an erasure of the opening
        ):
            with conn.transaction():
                conn.execute("SELECT set_config('sagacity.erasing', 'gone', true)")
                with pytest.raises(psycopg.Error, match="append-only"), conn.transaction():
                    conn.execute(f"UPDATE side_effect_journal SET {change} WHERE saga_id = 'gone'")
        with conn.transaction():
            conn.execute("SELECT set_config('sagacity.erasing', 'gone', true)")
            with pytest.raises(psycopg.Error, match="append-only"):
                conn.execute(
                    "UPDATE side_effect_journal SET payload = NULL, salts = '{}'"
                    " WHERE saga_id = 'kept'"
                )


def test_a_form_one_saga_is_refused_whole(archived: str) -> None:
    before = journal_rows(archived, "old")
    with (
        psycopg.connect(archived) as conn,
        pytest.raises(ErasureRefusedError, match="chain form 1"),
    ):
        erase_in_archive(conn, "old", actor="a", reason="r")
    assert journal_rows(archived, "old") == before
    assert rows(archived, "SELECT count(*) FROM archive_erasure") == [(0,)]


OPERATOR = OperatorSigner(Ed25519PrivateKey.generate())
"""The operator key this module's erasures are signed with (docs/adr/0027)."""


def _record_erasure(dsn: str, saga_id: str, *, sign: OperatorSigner | None = OPERATOR) -> None:
    """Archive the ``ERASED`` event ``sagacity erase`` appends to the saga's chain, signed with
    ``sign`` (``None``: unsigned, as any writer of the topic may append one)."""
    (head,) = rows(
        dsn,
        "SELECT seq, hash, recorded_at_us FROM side_effect_journal WHERE saga_id = %s"
        " ORDER BY seq DESC LIMIT 1",
        (saga_id,),
    )
    seq, prev, at = int(str(head[0])), str(head[1]), int(str(head[2]))
    listing = '{"2":["note","payload"],"3":["result"],"4":["error"],"5":["result"]}'
    draft = committing(
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.ERASED,
            actor="a",
            attributes={"reason": "r", "erased": listing, "erased_key": "none"},
            recorded_at_us=at + 1_000,
        )
    )
    if sign is not None:
        draft = sign.sign(draft, seq=seq + 1, prev_hash=prev)
    erased = link(draft, seq=seq + 1, prev_hash=prev)
    archiver = BatchArchiver(
        PostgresArchiveIngest(dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        assert archiver.archive(as_raw([erased], first_offset=100)).archived == 1
    finally:
        archiver.close()


def test_an_erased_saga_still_verifies_and_verify_reports_the_erasure(archived: str) -> None:
    with psycopg.connect(archived) as conn:
        erase_in_archive(conn, "gone", actor="a", reason="r")
    # The archive's half alone (its log row written, no ERASED on the chain): the data is
    # withheld, and the log row counts nothing (docs/adr/0019-erasure.md).
    result = CliRunner().invoke(main, ["verify", "--database-url", archived, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert [(f["saga_id"], f["reason"], f["seq"]) for f in report["failures"]] == [
        ("gone", "withheld", 2)
    ]
    assert (report["erased_sagas"], report["erased_fields"]) == (0, 0)
    _record_erasure(archived, "gone")
    for args in (("--saga", "gone"), ("--all",)):
        code, out = run("verify", "--database-url", archived, *args)
        assert code == 0, out
        assert "sagas erased" in out
        line = next(x for x in out.splitlines() if x.strip().startswith("fields erased"))
        assert line.split()[-1] == "5"
    result = CliRunner().invoke(main, ["verify", "--database-url", archived, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["ok"], report["erased_sagas"], report["erased_fields"]) == (True, 1, 5)
    assert report["erasure_unrecorded"] == []
    # A row changed around the erasure path still fails the audit.
    with psycopg.connect(archived) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE side_effect_journal SET tool = 'x' WHERE saga_id = 'gone' AND seq = 2")
    code, out = run("verify", "--database-url", archived, "--saga", "gone")
    assert code == 1
    assert "edited" in out


def test_verify_says_so_when_its_role_may_not_read_the_key_table(archived: str) -> None:
    from sagacity.postgres import PostgresKeyStore

    store = PostgresKeyStore(archived)
    store.ensure_schema()
    store.destroy("kept", actor="a", reason="r")  # a key destroyed, no ERASED: unrecorded
    store.close()
    code, out = run("verify", "--database-url", archived)
    assert code == 1
    assert "FAILED: kept: erasure_unrecorded" in out
    name = f"sgc_auditor_{uuid.uuid4().hex[:12]}"
    role = sql.Identifier(name)
    with psycopg.connect(archived, autocommit=True) as conn:
        schema = sql.Identifier(str(rows(archived, "SELECT current_schema()")[0][0]))
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(role))
        try:
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, role))
            conn.execute(
                sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(schema, role)
            )
            conn.execute(sql.SQL("REVOKE SELECT ON sagacity_data_keys FROM {}").format(role))
            code, out = run("verify", "--database-url", with_option(archived, f"-c role={name}"))
            assert code == 0, out
            assert "may not read sagacity_data_keys" in out
        finally:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role))
            conn.execute(sql.SQL("DROP ROLE {}").format(role))


def test_audit_watch_alerts_on_a_key_destroyed_without_an_erased_event(
    archived: str, tmp_path: Path
) -> None:
    from sagacity.postgres import PostgresKeyStore

    store = PostgresKeyStore(archived)
    store.ensure_schema()
    store.destroy("kept", actor="dpo", reason="r")  # no ERASED on its chain
    store.close()
    state = str(tmp_path / "auditor.jsonl")
    watch = ("audit", "watch", "--database-url", archived, "--state", state, "--once")
    # Just destroyed: an erasure in progress appends its ERASED within seconds.
    code, out = run(*watch)
    assert code == 0, out
    assert "erasure_unrecorded" not in out
    code, out = run(*watch, "--erasure-grace", "0")
    assert code == 1, out
    assert "ALERT erasure_unrecorded: saga 'kept': its data key was destroyed at" in out
    assert "by dpo" in out
    assert "'gone'" not in out  # erased on the record
    code, out = run(*watch, "--erasure-grace", "-1")  # not checked
    assert code == 0, out
