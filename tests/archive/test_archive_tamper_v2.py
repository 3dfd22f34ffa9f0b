"""The tamper classes of test_archive_tamper on chains in form 2 (salted commitments to the
data, docs/adr/0019-erasure.md §1): each is still caught, at the right seq and for the right
reason, by both audit paths; a value changed beside its commitment is an edit."""

from __future__ import annotations

import dataclasses
import json

import psycopg
import pytest
from archive_helpers import as_raw, make_chain
from test_archive_tamper import both_paths_agree, only_failure, tamper

from sagacity.chain import committing, link
from sagacity.consumers.archive import AuditReason, Signer, audit, generate_key, sign_pending
from sagacity.postgres.archive import PostgresArchiveAudits, PostgresCheckpointSigning

pytestmark = pytest.mark.postgres


@pytest.fixture
def signer(tmp_path) -> Signer:
    return generate_key(tmp_path / "archive.key")


@pytest.fixture
def archived(archiver, archive_dsn, signer):
    """Three form-2 sagas of 6 events; heads signed at seq 5, then seq 6 archived unsigned."""
    chains = {s: make_chain(s, 6, form=2) for s in ("saga-1", "saga-2", "saga-3")}
    assert all(e.form == 2 and e.salts for c in chains.values() for e in c[1:])
    archiver.archive(as_raw([e for c in chains.values() for e in c[:5]]))
    with psycopg.connect(archive_dsn) as conn:
        assert sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger) == 3
    archiver.archive(as_raw([c[5] for c in chains.values()], first_offset=15))
    return chains


def _at(statement: str) -> tuple[str, tuple[object, ...]]:
    return (f"{statement} WHERE saga_id = 'saga-2' AND seq = 3", ())


def test_untouched_form_2_archive_verifies(archived, archive_dsn, signer):
    both_paths_agree(archive_dsn, signer)
    with psycopg.connect(archive_dsn) as conn:
        summary = audit(PostgresArchiveAudits(conn), pinned_keys=[signer.public_raw])
    assert (summary.sagas, summary.ok, summary.events, summary.checkpoints) == (3, 3, 18, 3)


@pytest.mark.parametrize(
    "statement",
    [
        # The value no longer opens its commitment.
        "UPDATE side_effect_journal SET payload = replace(payload, '3', '4')",
        # The commitment no longer matches the hash (nor the opening).
        "UPDATE side_effect_journal SET commitments = jsonb_set(commitments, '{payload}',"
        f" to_jsonb('{'0' * 64}'::text))",
        # Another salt: the opening makes another commitment.
        "UPDATE side_effect_journal SET salts = jsonb_set(salts, '{payload}',"
        f" to_jsonb('{'1' * 64}'::text))",
        "UPDATE side_effect_journal SET hash = repeat('a', 64)",
    ],
    ids=["value", "commitment", "salt", "hash"],
)
def test_an_edited_form_2_row_is_caught(archived, archive_dsn, signer, statement):
    tamper(archive_dsn, _at(statement))
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (3, AuditReason.EDITED)


def test_a_form_2_row_passed_off_as_form_1_is_no_entry(archived, archive_dsn, signer):
    # A form-1 row cannot carry commitments: like any row that is no entry at all (a
    # non-text attribute, an empty event type: test_archive_verify_paths), the saga is
    # edited at that row's seq.
    tamper(archive_dsn, _at("UPDATE side_effect_journal SET form = 1"))
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (3, AuditReason.EDITED)
    assert "form" in failure.detail


def test_deleted_and_reordered_form_2_rows_are_caught(archived, archive_dsn, signer):
    tamper(
        archive_dsn, ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-2' AND seq = 2", ())
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (2, AuditReason.GAP)


def test_reordered_form_2_rows(archived, archive_dsn, signer):
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


def test_a_form_2_tail_truncated_after_the_last_checkpoint(archived, archive_dsn, signer):
    tamper(
        archive_dsn, ("DELETE FROM side_effect_journal WHERE saga_id = 'saga-2' AND seq = 6", ())
    )
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (6, AuditReason.TRUNCATED)


def test_a_form_2_chain_rewritten_consistently_fails_its_signed_head(archived, archive_dsn, signer):
    """seq 2's payload changed with fresh salts and commitments and every later link made
    again: the chain verifies alone, the signed head at seq 5 does not."""
    forged, prev = [], None
    for e in archived["saga-2"]:
        if e.seq == 2:
            plain = dataclasses.replace(
                e, form=1, salts={}, commitments={}, payload='{"order":2,"note":"refund 1000"}'
            )
            draft = committing(plain)
        else:
            draft = e
        entry = link(draft, seq=e.seq, prev_hash=prev or e.prev_hash)
        forged.append(entry)
        prev = entry.hash
    statements = [
        (
            "UPDATE side_effect_journal SET payload = %s, salts = %s::jsonb,"
            " commitments = %s::jsonb, hash = %s, prev_hash = %s WHERE saga_id = %s AND seq = %s",
            (
                e.payload,
                json.dumps(dict(e.salts)),
                json.dumps(dict(e.commitments)),
                e.hash,
                e.prev_hash,
                e.saga_id,
                e.seq,
            ),
        )
        for e in forged
    ]
    statements.append(
        (
            "UPDATE archive_saga_head SET head_hash = %s WHERE saga_id = %s",
            (forged[-1].hash, "saga-2"),
        )
    )
    tamper(archive_dsn, *statements)
    failure = only_failure(archive_dsn, signer)
    assert (failure.bad_seq, failure.reason) == (5, AuditReason.CHECKPOINT_MISMATCH)
