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
    Signer,
    audit,
    generate_key,
    iter_audits,
    sign_pending,
)

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
        assert sign_pending(conn, signer) == 3
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
        fast = list(iter_audits(conn, pinned_keys=[signer.public_raw]))
        reference = list(iter_audits(conn, pinned_keys=[signer.public_raw], reference=True))
    assert fast == reference
    assert len(fast) == 3


def only_failure(dsn: str, signer: Signer, **kwargs):
    both_paths_agree(dsn, signer)
    with psycopg.connect(dsn) as conn:
        summary = audit(conn, pinned_keys=[signer.public_raw], **kwargs)
    assert summary.sagas == 3
    assert summary.ok == 2, summary.failures
    (failure,) = summary.failures
    assert failure.saga_id == "saga-2"
    return failure


def test_untouched_archive_verifies(archived, archive_dsn, signer):
    both_paths_agree(archive_dsn, signer)
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(conn, pinned_keys=[signer.public_raw])
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


def test_rewritten_chain_with_edited_checkpoint_fails_its_signature(archived, archive_dsn, signer):
    forged = _rewrite(archived["saga-2"])
    tamper(
        archive_dsn,
        *_rewrite_statements(forged),
        (
            "UPDATE archive_checkpoint SET hash = %s WHERE saga_id = 'saga-2' AND seq = 5",
            (forged[4].hash,),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (5, AuditReason.BAD_SIGNATURE)


def test_rewritten_chain_resigned_with_another_key_is_caught_by_the_pinned_key(
    archived, archive_dsn, signer, tmp_path
):
    forged = _rewrite(archived["saga-2"])
    attacker = generate_key(tmp_path / "attacker.key")
    fake = attacker.sign(saga_id="saga-2", seq=6, hash=forged[5].hash, signed_at_us=1)
    tamper(
        archive_dsn,
        *_rewrite_statements(forged),
        ("DELETE FROM archive_checkpoint WHERE saga_id = 'saga-2'", ()),
        (
            "INSERT INTO archive_checkpoint VALUES (%s, %s, %s, %s, %s, %s)",
            (fake.saga_id, fake.seq, fake.hash, fake.signed_at_us, fake.key_id, fake.signature),
        ),
        (
            "INSERT INTO archive_signing_key (key_id, public_key) VALUES (%s, %s)",
            (attacker.key_id, attacker.public_hex),
        ),
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (6, AuditReason.UNKNOWN_KEY)


def test_tampered_checkpoints_among_many_sagas_are_found_where_they_are(
    archiver, archive_dsn, signer
):
    """300 sagas, two checkpoints each: the whole-archive audit finds exactly the tampered
    checkpoints (first saga, middle, last), as auditing each saga alone does."""
    sagas = [f"w-{n:03d}" for n in range(300)]
    chains = {s: make_chain(s, 4) for s in sagas}
    archiver.archive(as_raw([e for c in chains.values() for e in c[:2]]))
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(conn, signer) == 300
    archiver.archive(as_raw([e for c in chains.values() for e in c[2:]], first_offset=600))
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(conn, signer) == 300
    forged = "00" * 64
    tamper(
        archive_dsn,
        (
            "UPDATE archive_checkpoint SET signature = %s WHERE saga_id = 'w-000' AND seq = 2",
            (forged,),
        ),
        (
            "UPDATE archive_checkpoint SET signature = %s WHERE saga_id = 'w-256' AND seq = 4",
            (forged,),
        ),
        (
            "UPDATE archive_checkpoint SET hash = %s WHERE saga_id = 'w-255' AND seq = 4",
            (chains["w-255"][2].hash,),
        ),
        (
            "UPDATE archive_checkpoint SET key_id = 'feedfeedfeedfeed' WHERE saga_id = 'w-299'"
            " AND seq = 2",
            (),
        ),
    )
    keys = [signer.public_raw]
    with psycopg.connect(archive_dsn) as conn:
        together = list(iter_audits(conn, pinned_keys=keys))
        alone = [next(iter_audits(conn, saga_id=s, pinned_keys=keys)) for s in sagas]
    assert together == alone
    failures = {a.saga_id: (a.bad_seq, a.reason) for a in together if not a.ok}
    assert failures == {
        "w-000": (2, AuditReason.BAD_SIGNATURE),
        "w-255": (4, AuditReason.BAD_SIGNATURE),
        "w-256": (4, AuditReason.BAD_SIGNATURE),
        "w-299": (2, AuditReason.UNKNOWN_KEY),
    }
    assert sum(a.checkpoints for a in together if a.ok) == 2 * 296
