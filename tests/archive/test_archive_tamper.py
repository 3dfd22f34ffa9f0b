"""Tampering with the archive as someone with write access to the database would, and being
caught: each case reports the right seq and reason."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest
from archive_helpers import as_raw, make_chain

from sagacity.chain import link
from sagacity.consumers.archive import (
    AuditReason,
    BatchArchiver,
    IngestLedger,
    Signer,
    audit,
    generate_key,
    iter_audits,
    sign_pending,
)
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    check_schema,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres


@pytest.fixture
def signer(tmp_path) -> Signer:
    return generate_key(tmp_path / "archive.key")


@pytest.fixture
def archived(archiver, archive_dsn, signer):
    """Three sagas of 6 events; heads signed at seq 5, then seq 6 archived unsigned."""
    chains = {s: make_chain(s, 6) for s in ("saga-1", "saga-2", "saga-3")}
    archiver.archive(as_raw([e for c in chains.values() for e in c[:5]]))
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 3
    archiver.archive(as_raw([c[5] for c in chains.values()], first_offset=15))
    return chains


def tamper(dsn: str, *statements: tuple[str, tuple[object, ...]]) -> None:
    """Run statements with triggers disabled (as a superuser can)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET session_replication_role = replica")
        for sql, params in statements:
            conn.execute(sql, params)


def both_paths_agree(dsn: str, signer: Signer) -> None:
    """The audit straight from the columns equals the reference path's, saga by saga."""
    with psycopg.connect(dsn) as conn:
        fast = list(iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw]))
        # One row a fetch: the merge of chains, checkpoints and heads waits on every source.
        fetched_one_by_one = list(
            iter_audits(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], fetch=1)
        )
        reference = list(
            iter_audits(
                PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], reference=True
            )
        )
    assert fast == reference
    assert fetched_one_by_one == reference
    assert len(fast) == 3


def only_failure(dsn: str, signer: Signer, **kwargs):
    both_paths_agree(dsn, signer)
    with psycopg.connect(dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw], **kwargs)
    assert summary.sagas == 3
    assert summary.ok == 2, summary.failures
    (failure,) = summary.failures
    assert failure.saga_id == "saga-2"
    return failure


def test_untouched_archive_verifies(archived, archive_dsn, signer):
    both_paths_agree(archive_dsn, signer)
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.sagas, summary.ok, summary.events, summary.checkpoints) == (3, 3, 18, 3)


def test_flipped_payload_byte(archived, archive_dsn, signer):
    tamper(
        archive_dsn,
        (
            "UPDATE side_effect_journal SET payload = replace(payload, '3', '4')"
            " WHERE saga_id = 'saga-2' AND seq = 3",
            (),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (3, AuditReason.EDITED)


def test_changed_hash(archived, archive_dsn, signer):
    tamper(
        archive_dsn,
        (
            "UPDATE side_effect_journal SET hash = repeat('a', 64)"
            " WHERE saga_id = 'saga-2' AND seq = 4",
            (),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (4, AuditReason.EDITED)


def test_deleted_row(archived, archive_dsn, signer):
    tamper(
        archive_dsn, ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-2' AND seq = 2", ())
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (2, AuditReason.GAP)


def test_reordered_rows(archived, archive_dsn, signer):
    tamper(
        archive_dsn,
        (
            "UPDATE side_effect_journal SET seq = CASE seq WHEN 3 THEN 4 ELSE 3 END"
            " WHERE saga_id = 'saga-2' AND seq IN (3, 4)",
            (),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (3, AuditReason.REORDERED)


def test_truncated_tail_below_a_signed_checkpoint(archived, archive_dsn, signer):
    chain = archived["saga-2"]
    tamper(
        archive_dsn,
        ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-2' AND seq >= 4", ()),
        # A careful attacker also winds the head table back.
        (
            "UPDATE archive_saga_head SET head_seq = 3, head_hash = %s WHERE saga_id = 'saga-2'",
            (chain[2].hash,),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (4, AuditReason.TRUNCATED)


def test_truncated_tail_after_the_last_checkpoint_is_caught_by_the_head_table(
    archived, archive_dsn, signer
):
    tamper(
        archive_dsn, ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-2' AND seq = 6", ())
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (6, AuditReason.TRUNCATED)


def _rewrite(chain):
    """The chain with seq 2's payload changed and every later link recomputed."""
    out, prev = [], None
    for e in chain:
        draft = (
            dataclasses.replace(e, payload='{"order":2,"note":"refund 1000"}') if e.seq == 2 else e
        )
        entry = link(draft, seq=e.seq, prev_hash=prev or e.prev_hash)
        out.append(entry)
        prev = entry.hash
    return out


def _rewrite_statements(chain):
    return [
        (
            "UPDATE side_effect_journal SET payload = %s, hash = %s, prev_hash = %s"
            " WHERE saga_id = %s AND seq = %s",
            (e.payload, e.hash, e.prev_hash, e.saga_id, e.seq),
        )
        for e in chain
    ] + [
        (
            "UPDATE archive_saga_head SET head_hash = %s WHERE saga_id = %s",
            (chain[-1].hash, chain[-1].saga_id),
        )
    ]


def test_whole_chain_rewritten_consistently_without_the_key(archived, archive_dsn, signer):
    forged = _rewrite(archived["saga-2"])
    tamper(archive_dsn, *_rewrite_statements(forged))
    failure = only_failure(archive_dsn, signer)
    # The chain itself verifies; the signed head at seq 5 no longer matches.
    assert (failure.bad_seq, failure.reason) == (5, AuditReason.CHECKPOINT_MISMATCH)


def all_fail_at(dsn: str, signer: Signer, seq: int, reason: AuditReason) -> list:
    """Every saga fails at ``seq`` for ``reason`` (the three share one signing round)."""
    both_paths_agree(dsn, signer)
    with psycopg.connect(dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.sagas, summary.ok) == (3, 0), summary.failures
    assert {(f.bad_seq, f.reason) for f in summary.failures} == {(seq, reason)}
    assert not summary.all_ok
    return summary.failures


def test_rewritten_chain_with_edited_checkpoint_fails_its_round(archived, archive_dsn, signer):
    """The edited checkpoint no longer hashes to the round's signed root: every checkpoint of
    that round loses its signature (which one was edited cannot be told from the root)."""
    forged = _rewrite(archived["saga-2"])
    tamper(
        archive_dsn,
        *_rewrite_statements(forged),
        (
            "UPDATE archive_checkpoint SET hash = %s WHERE saga_id = 'saga-2' AND seq = 5",
            (forged[4].hash,),
        ),
    )
    failures = all_fail_at(archive_dsn, signer, 5, AuditReason.BAD_SIGNATURE)
    assert "do not hash to the signed root" in failures[0].detail


def test_a_removed_checkpoint_fails_its_round(archived, archive_dsn, signer):
    """Deleting a saga's checkpoint (to cut its tail unseen) breaks the round it was signed in,
    and the finding names the missing leaf's place."""
    chain = archived["saga-2"]
    tamper(
        archive_dsn,
        ("DELETE FROM archive_checkpoint WHERE saga_id = 'saga-2'", ()),
        ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-2' AND seq >= 4", ()),
        (
            "UPDATE archive_saga_head SET head_seq = 3, head_hash = %s WHERE saga_id = 'saga-2'",
            (chain[2].hash,),
        ),
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    failures = {f.saga_id: (f.bad_seq, f.reason, f.detail) for f in summary.failures}
    assert set(failures) == {"saga-1", "saga-3"}
    assert {f[:2] for f in failures.values()} == {(5, AuditReason.BAD_SIGNATURE)}
    assert "leaf 1 is missing (after saga 'saga-1')" in failures["saga-1"][2]
    assert not summary.all_ok


def test_a_round_whose_checkpoints_were_all_removed_fails_the_audit(archived, archive_dsn, signer):
    tamper(archive_dsn, ("DELETE FROM archive_checkpoint", ()))
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    # No saga has a checkpoint left to fail, but the signed round counts three heads.
    assert (summary.sagas, summary.ok) == (3, 3)
    ((reason, detail),) = summary.rounds.failed.values()
    assert reason is AuditReason.BAD_SIGNATURE
    assert "signed 3 heads; the archive holds 0" in detail
    assert not summary.all_ok


def test_a_checkpoint_whose_round_was_removed_fails(archived, archive_dsn, signer):
    tamper(archive_dsn, ("DELETE FROM archive_checkpoint_round", ()))
    failures = all_fail_at(archive_dsn, signer, 5, AuditReason.BAD_SIGNATURE)
    assert "which the archive does not hold" in failures[0].detail


def _last_root(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT root FROM archive_checkpoint_round ORDER BY round_id DESC LIMIT 1"
        ).fetchone()
    assert row is not None
    return str(row[0])


def _forge_round(
    attacker: Signer, saga_id: str, seq: int, hash: str, round_id: int, prev_root: str
):
    """A signing round by ``attacker`` over one head, chained after ``prev_root``."""
    from sagacity.consumers.archive._checkpoints import leaf_hash, merkle_root

    root = merkle_root([leaf_hash(saga_id=saga_id, seq=seq, hash=hash)]).hex()
    signed = attacker.sign_round(
        round_id=round_id, leaf_count=1, root=root, prev_root=prev_root, signed_at_us=1
    )
    return [
        (
            "INSERT INTO archive_checkpoint_round VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (round_id, 1, root, signed.prev_root, 1, attacker.key_id, signed.signature),
        ),
        (
            "INSERT INTO archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id,"
            " round_id, leaf_index) VALUES (%s, %s, %s, 1, %s, %s, 0)",
            (saga_id, seq, hash, attacker.key_id, round_id),
        ),
        (
            "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)",
            (attacker.key_id, attacker.public_hex),
        ),
    ]


@pytest.mark.parametrize("form", ["round", "per-head"])
def test_rewritten_chain_resigned_with_another_key_is_caught_by_the_pinned_key(
    archived, archive_dsn, signer, tmp_path, form
):
    forged = _rewrite(archived["saga-2"])
    attacker = generate_key(tmp_path / "attacker.key")
    if form == "round":
        # A careful forger chains the round after the archive's last one.
        resign = _forge_round(
            attacker, "saga-2", 6, forged[5].hash, round_id=999, prev_root=_last_root(archive_dsn)
        )
    else:
        fake = attacker.sign(saga_id="saga-2", seq=6, hash=forged[5].hash, signed_at_us=1)
        resign = [
            (
                "INSERT INTO archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id,"
                " signature) VALUES (%s, %s, %s, %s, %s, %s)",
                (fake.saga_id, fake.seq, fake.hash, fake.signed_at_us, fake.key_id, fake.signature),
            ),
            (
                "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)",
                (attacker.key_id, attacker.public_hex),
            ),
        ]
    tamper(
        archive_dsn,
        *_rewrite_statements(forged),
        ("DELETE FROM archive_checkpoint WHERE saga_id = 'saga-2'", ()),
        *resign,
    )
    both_paths_agree(archive_dsn, signer)
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
        trusting_the_database = audit(PostgresArchiveAudits(conn))
    failures = {f.saga_id: (f.bad_seq, f.reason) for f in summary.failures}
    # The forged checkpoint is signed by a key the auditor does not trust, and removing the
    # genuine one broke the round the other two sagas were signed in.
    assert failures == {
        "saga-1": (5, AuditReason.BAD_SIGNATURE),
        "saga-2": (6, AuditReason.UNKNOWN_KEY),
        "saga-3": (5, AuditReason.BAD_SIGNATURE),
    }
    # Without the pinned key the forged signature itself verifies; the broken round does not.
    assert {f.saga_id for f in trusting_the_database.failures} == {"saga-1", "saga-3"}


def test_per_head_checkpoints_of_earlier_releases_still_verify(archiver, archive_dsn, signer):
    """Archives signed before rounds hold one signature per head (SGCP1): still checked, beside
    the rounds signed after the upgrade."""
    chains = {s: make_chain(s, 4) for s in ("old-1", "old-2")}
    archiver.archive(as_raw([e for c in chains.values() for e in c[:2]]))
    rows = []
    for saga, chain in chains.items():
        cp = signer.sign(saga_id=saga, seq=2, hash=chain[1].hash, signed_at_us=7)
        rows.append((cp.saga_id, cp.seq, cp.hash, cp.signed_at_us, cp.key_id, cp.signature))
    with psycopg.connect(archive_dsn) as conn:
        for row in rows:
            conn.execute(
                "INSERT INTO archive_checkpoint (saga_id, seq, hash, signed_at_us, key_id,"
                " signature) VALUES (%s, %s, %s, %s, %s, %s)",
                row,
            )
        conn.execute("UPDATE archive_saga_head SET checkpointed_seq = 2")
        conn.commit()
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
        assert (summary.ok, summary.checkpoints, summary.rounds.rounds) == (2, 2, 0)
    archiver.archive(as_raw([e for c in chains.values() for e in c[2:]], first_offset=4))
    with psycopg.connect(archive_dsn) as conn:
        assert (
            sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 2
        )  # the new heads only, in one round
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.sagas, summary.ok, summary.checkpoints, summary.rounds.rounds) == (2, 2, 4, 1)
    tamper(
        archive_dsn,
        (
            "UPDATE archive_checkpoint SET signature = %s WHERE saga_id = 'old-2' AND seq = 2",
            ("00" * 64,),
        ),
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert [(f.saga_id, f.bad_seq, f.reason) for f in summary.failures] == [
        ("old-2", 2, AuditReason.BAD_SIGNATURE)
    ]
    assert summary.all_ok is False
    assert not summary.rounds.failed


def _round_of(dsn: str, saga_id: str, seq: int) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT round_id FROM archive_checkpoint WHERE saga_id = %s AND seq = %s",
            (saga_id, seq),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_tampered_rounds_among_many_sagas_are_found_where_they_are(archiver, archive_dsn, signer):
    """400 sagas signed twice in rounds of 100 heads: auditing each saga alone fails exactly the
    sagas of the tampered rounds (each saga's rounds are proven from the log's frontier before
    them); the whole-archive audit also fails the round after the edited leaf, whose log root
    covers that leaf (docs/adr/0015-round-log.md), and names those rounds."""
    sagas = [f"w-{n:03d}" for n in range(400)]
    chains = {s: make_chain(s, 4) for s in sagas}
    archiver.archive(as_raw([e for c in chains.values() for e in c[:2]]))
    with psycopg.connect(archive_dsn) as conn:
        assert (
            sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger, chunk=100) == 400
        )
    archiver.archive(as_raw([e for c in chains.values() for e in c[2:]], first_offset=800))
    with psycopg.connect(archive_dsn) as conn:
        assert (
            sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger, chunk=100) == 400
        )
        assert conn.execute("SELECT count(*) FROM archive_checkpoint_round").fetchone() == (8,)
    forged_signature = _round_of(archive_dsn, "w-000", 2)
    edited_leaf = _round_of(archive_dsn, "w-255", 4)
    foreign_key = _round_of(archive_dsn, "w-150", 2)
    tamper(
        archive_dsn,
        (
            "UPDATE archive_checkpoint_round SET signature = %s WHERE round_id = %s",
            ("00" * 64, forged_signature),
        ),
        (
            "UPDATE archive_checkpoint SET hash = %s WHERE saga_id = 'w-255' AND seq = 4",
            (chains["w-255"][2].hash,),
        ),
        (
            "UPDATE archive_checkpoint_round SET key_id = 'feedfeedfeedfeed' WHERE round_id = %s",
            (foreign_key,),
        ),
    )
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        together = list(iter_audits(PostgresArchiveAudits(conn), pinned_keys=keys))
        alone = [
            next(iter_audits(PostgresArchiveAudits(conn), saga_id=s, pinned_keys=keys))
            for s in sagas
        ]
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
    expected = {
        **{f"w-{n:03d}": (2, AuditReason.BAD_SIGNATURE) for n in range(0, 100)},
        **{f"w-{n:03d}": (2, AuditReason.UNKNOWN_KEY) for n in range(100, 200)},
        **{f"w-{n:03d}": (4, AuditReason.BAD_SIGNATURE) for n in range(200, 300)},
    }
    assert {a.saga_id: (a.bad_seq, a.reason) for a in alone if not a.ok} == expected
    later = {f"w-{n:03d}": (4, AuditReason.BAD_SIGNATURE) for n in range(300, 400)}
    assert {a.saga_id: (a.bad_seq, a.reason) for a in together if not a.ok} == {
        **expected,
        **later,
    }
    assert [a for a in together if a.saga_id not in later] == [
        a for a in alone if a.saga_id not in later
    ]
    assert summary.rounds.rounds == 8
    assert set(summary.rounds.failed) == {forged_signature, edited_leaf, foreign_key, 8}
    assert "an earlier one was changed" in summary.rounds.failed[8][1]


def test_an_archive_not_yet_migrated_to_rounds_is_still_verified(archiver, archive_dsn, signer):
    """An auditor's verify reads an archive at schema version 3 (per-head checkpoints, no
    round table) without migrating it."""
    chain = make_chain("v3-1", 3)
    archiver.archive(as_raw(chain))
    cp = signer.sign(saga_id="v3-1", seq=3, hash=chain[2].hash, signed_at_us=7)
    tamper(
        archive_dsn,
        ("DROP TABLE archive_checkpoint_round", ()),
        ("ALTER TABLE archive_checkpoint DROP COLUMN round_id, DROP COLUMN leaf_index", ()),
        ("DELETE FROM archive_schema_version WHERE version >= 4", ()),
        (
            "INSERT INTO archive_checkpoint VALUES (%s, %s, %s, %s, %s, %s)",
            (cp.saga_id, cp.seq, cp.hash, cp.signed_at_us, cp.key_id, cp.signature),
        ),
    )
    with psycopg.connect(archive_dsn) as conn:
        assert check_schema(conn) == 3
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.sagas, summary.ok, summary.checkpoints, summary.all_ok) == (1, 1, 1, True)


def test_a_signing_round_removed_whole_breaks_the_chain_of_rounds(archiver, archive_dsn, signer):
    """Three rounds; the middle one removed with every checkpoint of it: the next round's
    previous root no longer matches, so the whole-archive audit fails (per saga too)."""
    chains = {s: make_chain(s, 3) for s in ("r-1", "r-2")}
    for seq in range(3):
        archiver.archive(as_raw([c[seq] for c in chains.values()], first_offset=2 * seq))
        with psycopg.connect(archive_dsn) as conn:
            assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 2
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
        rounds = [r[0] for r in conn.execute("SELECT round_id FROM archive_checkpoint_round")]
    assert (summary.ok, summary.rounds.rounds, summary.all_ok) == (2, 3, True)
    first, middle, last = sorted(rounds)
    tamper(
        archive_dsn,
        ("DELETE FROM archive_checkpoint WHERE round_id = %s", (middle,)),
        ("DELETE FROM archive_checkpoint_round WHERE round_id = %s", (middle,)),
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert list(summary.rounds.failed) == [last]
    reason, detail = summary.rounds.failed[last]
    assert reason is AuditReason.BAD_SIGNATURE
    assert f"round {last} does not follow round {first}" in detail
    assert {(f.saga_id, f.bad_seq) for f in summary.failures} == {("r-1", 3), ("r-2", 3)}
    with psycopg.connect(archive_dsn) as conn:
        keys = [signer.public_raw]
        together = list(iter_audits(PostgresArchiveAudits(conn), pinned_keys=keys))
        alone = [
            next(iter_audits(PostgresArchiveAudits(conn), saga_id=s, pinned_keys=keys))
            for s in chains
        ]
    assert together == alone  # one saga's verify (and its export) checks its rounds' links too
    tamper(
        archive_dsn,
        ("DELETE FROM archive_checkpoint WHERE round_id = %s", (first,)),
        ("DELETE FROM archive_checkpoint_round WHERE round_id = %s", (first,)),
    )
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert "earlier signing rounds were removed" in summary.rounds.failed[last][1]


def test_concurrent_signers_make_one_chain_of_rounds(archiver, archive_dsn, signer):
    """Signers take turns on the archive's signing lock (a second one waits while it is held),
    so two archivers signing at once make one chain: every round follows the one before."""
    import threading

    from sagacity.postgres.archive._signing import _SIGNING_LOCK

    archiver.archive(as_raw(make_chain("held", 1)))
    done = threading.Event()
    with psycopg.connect(archive_dsn) as holder:
        holder.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_SIGNING_LOCK,)
        )

        def waiting_signer() -> None:
            with psycopg.connect(archive_dsn) as conn:
                sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
            done.set()

        thread = threading.Thread(target=waiting_signer)
        thread.start()
        assert not done.wait(0.5)  # blocked while another signer holds the lock
    assert done.wait(10)  # and signs once it is released
    thread.join()

    # Two archivers, each signing what it ingested itself, at once.
    sagas = [f"c-{n:03d}" for n in range(120)]
    other = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    archiver.archive(as_raw([e for s in sagas[:60] for e in make_chain(s, 2)]))
    other.archive(as_raw([e for s in sagas[60:] for e in make_chain(s, 2)], partition=1))
    other.close()
    signed: list[int] = []

    def sign(ledger: IngestLedger) -> None:
        with psycopg.connect(archive_dsn) as conn:
            signed.append(sign_pending(PostgresCheckpointSigning(conn), signer, ledger, chunk=7))

    threads = [threading.Thread(target=sign, args=(a.ledger,)) for a in (archiver, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(signed) == 120
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.ok, summary.checkpoints, summary.rounds.rounds) == (121, 121, 19)
    assert summary.all_ok, summary.rounds.failed


def test_rounds_removed_at_the_end_are_caught_by_a_recorded_round(archiver, archive_dsn, signer):
    """Removing the last rounds leaves no later round to break; the latest round an auditor
    recorded earlier (RoundAudit.latest) catches it, and a replaced round too."""
    chains = {s: make_chain(s, 2) for s in ("e-1", "e-2")}
    for seq in range(2):
        archiver.archive(as_raw([c[seq] for c in chains.values()], first_offset=2 * seq))
        with psycopg.connect(archive_dsn) as conn:
            assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 2
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        published = audit(PostgresArchiveAudits(conn), pinned_keys=keys).rounds.latest
        assert published is not None
        assert audit(
            PostgresArchiveAudits(conn), pinned_keys=keys, known_rounds=dict([published])
        ).all_ok
        with pytest.raises(ValueError, match="every saga"):
            list(
                iter_audits(
                    PostgresArchiveAudits(conn), saga_id="e-1", known_rounds=dict([published])
                )
            )
    last, root = published
    tamper(
        archive_dsn,
        ("DELETE FROM archive_checkpoint WHERE round_id = %s", (last,)),
        ("DELETE FROM archive_checkpoint_round WHERE round_id = %s", (last,)),
        # Wind the heads back so that nothing else shows.
        ("UPDATE archive_saga_head SET checkpointed_seq = 1", ()),
    )
    with psycopg.connect(archive_dsn) as conn:
        unaware = audit(PostgresArchiveAudits(conn), pinned_keys=keys)
        aware = audit(PostgresArchiveAudits(conn), pinned_keys=keys, known_rounds={last: root})
        replaced = audit(
            PostgresArchiveAudits(conn), pinned_keys=keys, known_rounds={last - 1: "ab" * 32}
        )
    assert unaware.all_ok  # the end of the round chain is gone without a trace ...
    assert aware.rounds.failed == {
        last: (
            AuditReason.TRUNCATED,
            f"round {last} (root {root[:16]}…), recorded earlier, is not in the archive:"
            " signing rounds were removed",
        )
    }  # ... unless the auditor kept the latest round
    assert not aware.all_ok
    ((reason, detail),) = replaced.rounds.failed.values()
    assert reason is AuditReason.BAD_SIGNATURE
    assert "the round was replaced" in detail


@pytest.mark.parametrize(
    "change",
    [
        "attributes = '[1, 2]'::jsonb",  # not a map: no entry can be made of the row
        "attributes = '{\"ref_seq\": 3}'::jsonb",  # a value that is no text
        "prev_hash = 'not hex'",
    ],
)
def test_a_row_that_is_no_entry_is_reported_edited_at_its_seq(
    archived, archive_dsn, signer, change
):
    """A row that cannot be read back as an entry is reported where it is, after the rows
    before it, on both paths."""
    tamper(
        archive_dsn,
        (f"UPDATE side_effect_journal SET {change} WHERE saga_id = 'saga-2' AND seq = 4", ()),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason, failure.head_seq) == (4, AuditReason.EDITED, 3)
    assert failure.head_hash == archived["saga-2"][2].hash


def test_a_fault_before_a_row_that_is_no_entry_is_reported_first(archived, archive_dsn, signer):
    tamper(
        archive_dsn,
        (
            "UPDATE side_effect_journal SET payload = replace(payload, '2', '9')"
            " WHERE saga_id = 'saga-2' AND seq = 2",
            (),
        ),
        (
            "UPDATE side_effect_journal SET attributes = '[1, 2]'::jsonb"
            " WHERE saga_id = 'saga-2' AND seq = 4",
            (),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason, failure.events) == (2, AuditReason.EDITED, 6)
