"""Audit bundles: one saga's archived chain, its signed checkpoints and a standalone verifier."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg

from sagacity.consumers.archive._audit import SagaAudit, iter_audits, trusted_keys
from sagacity.consumers.archive._checkpoints import inclusion_proof, leaf_hash
from sagacity.consumers.archive._db import check_schema, mapped_errors
from sagacity.consumers.archive._schema import checkpoint_round_columns
from sagacity.consumers.archive.verify_bundle import UNSIGNED_FIELDS
from sagacity.errors import UnknownSagaError

BUNDLE_FORMAT = "sagacity-audit-bundle/3"
"""Version 2: checkpoints of signing rounds carry their round and inclusion proof.  Version 3:
the manifest lists the fields no signature covers (``unsigned``)."""


_README = """\
# Audit bundle for saga {saga_id}

Exported from a Sagacity archive on {exported_at}.

| file | content |
| --- | --- |
| `events.jsonl` | the saga's journal entries, one JSON object per line, in archived order |
| `manifest.json` | head seq and hash, signed checkpoints, public key(s), SHA-256 of events |
| `verify_bundle.py` | a verifier using only the Python standard library (3.11 or later) |

## Verify

    python3 -I verify_bundle.py . --public-key <the archive's published public key, hex>

Exit status 0 means: the files are the ones the manifest describes, every entry hashes to its
recorded hash (canonical form `SGC1`), each links to the one before from the genesis hash, the
chain ends at the manifest's head, every signed checkpoint verifies under the key and matches
the chain at its seq, and a checkpoint covers the head.  Otherwise the first failure is printed
with its seq and reason (`bundle_altered`, `foreign_saga`, `edited`, `wrong_genesis`, `gap`,
`reordered`, `broken_link`, `truncated`, `head_mismatch`, `bad_signature`, `unknown_key`,
`checkpoint_mismatch`, `unsigned`).

A bundle whose head no checkpoint covers (events archived after the last signing round) is
refused (`unsigned`); `--allow-unsigned` accepts it and names the events no signature covers.
The manifest's `unsigned` list names the fields no signature covers ({unsigned}): they are
shown for information and prove nothing.  This README is not evidence either.

Obtain the public key from the archive's operator through a channel other than this bundle:
without `--public-key` the key in the manifest is used, which shows only that the bundle is
self-consistent.  The archive's key id(s): {key_ids}.

The canonical form and the checkpoint forms are specified in the project's
docs/adr/0002-hash-chain.md, docs/adr/0006-archive-and-checkpoints.md (per-head signatures) and
docs/adr/0012-checkpoint-rounds.md (signing rounds: a Merkle root signed once, each checkpoint
with its inclusion proof); the order of the checks, the reasons and the manifest's fields in
docs/adr/0017-audit-coverage.md.  The verifier is short enough to read in full.
"""


def _checkpoint(conn: psycopg.Connection, row: Sequence[Any]) -> dict[str, Any]:
    """A checkpoint for the manifest: per-head (``SGCP1``) with its signature, or a leaf of a
    signing round (``SGCR1``) with the round and the leaf's inclusion proof."""
    seq, hash, signed_at_us, key_id, signature, round_id, leaf_index = row
    out: dict[str, Any] = {
        "seq": seq,
        "hash": hash,
        "signed_at_us": signed_at_us,
        "key_id": key_id,
    }
    if round_id is None:
        out["signature"] = signature
        return out
    signed = conn.execute(
        "SELECT leaf_count, root, prev_root, signed_at_us, key_id, signature"
        " FROM archive_checkpoint_round WHERE round_id = %s",
        (round_id,),
    ).fetchone()
    leaves = [
        leaf_hash(saga_id=s, seq=int(n), hash=h)
        for s, n, h in conn.execute(
            "SELECT saga_id, seq, hash FROM archive_checkpoint WHERE round_id = %s"
            " ORDER BY leaf_index",
            (round_id,),
        )
    ]
    # A tampered round may not give a proof; the bundle then fails its own verification.
    proof = inclusion_proof(leaves, leaf_index) if 0 <= leaf_index < len(leaves) else []
    out["round"] = (
        {
            "round_id": round_id,
            "leaf_count": signed[0],
            "root": signed[1],
            "prev_root": signed[2],
            "signed_at_us": signed[3],
            "key_id": signed[4],
            "signature": signed[5],
        }
        if signed is not None
        else {"round_id": round_id}
    )
    out["leaf_index"] = leaf_index
    out["proof"] = [p.hex() for p in proof]
    return out


def export_bundle(
    conn: psycopg.Connection, saga_id: str, out: Path, *, pinned_keys: tuple[bytes, ...] = ()
) -> SagaAudit:
    """Write the audit bundle of ``saga_id`` into directory ``out`` (created if missing).

    Returns the archive's own audit of the saga, so a caller can say whether the exported
    evidence verifies.

    Raises:
        UnknownSagaError: the archive holds nothing for ``saga_id``.
        ArchiveSchemaError / PersistenceError: the database is not an archive or failed.
    """
    version = check_schema(conn)
    round_columns = checkpoint_round_columns(version)
    if not conn.autocommit:
        conn.rollback()  # the snapshot transaction below must be the first statement's
    with mapped_errors("export a saga"), conn.transaction():
        # One snapshot: rows, checkpoints, rounds and anchor of the same moment (a round signed
        # between two reads would show a checkpoint past the exported head).
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        rows = conn.execute(
            "SELECT saga_id, seq, event_type, tool, payload, result, error, actor, attributes,"
            " recorded_at_us, prev_hash, hash FROM side_effect_journal WHERE saga_id = %s"
            " ORDER BY archive_id",
            (saga_id,),
        ).fetchall()
        checkpoints = [
            _checkpoint(conn, row)
            for row in conn.execute(
                f"SELECT seq, hash, signed_at_us, key_id, signature, {round_columns}"  # noqa: S608
                " FROM archive_checkpoint WHERE saga_id = %s ORDER BY seq, signed_at_us",
                (saga_id,),
            ).fetchall()
        ]
        anchor = conn.execute(
            "SELECT seq, hash FROM archive_retention_anchor WHERE saga_id = %s"
            " ORDER BY seq DESC LIMIT 1",
            (saga_id,),
        ).fetchone()
    if not rows and not checkpoints:
        raise UnknownSagaError(
            f"the archive holds no entries for saga {saga_id!r}", saga_id=saga_id
        )
    audits = list(iter_audits(conn, saga_id=saga_id, pinned_keys=pinned_keys))
    verdict = audits[0]
    keys = trusted_keys(conn)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for r in rows:
        lines.append(
            json.dumps(
                {
                    "saga_id": r[0],
                    "seq": r[1],
                    "event_type": r[2],
                    "tool": r[3],
                    "payload": r[4],
                    "result": r[5],
                    "error": r[6],
                    "actor": r[7],
                    "attributes": r[8],
                    "recorded_at_us": r[9],
                    "prev_hash": r[10],
                    "hash": r[11],
                },
                ensure_ascii=False,
                sort_keys=True,
            )
        )
    events = ("\n".join(lines) + "\n").encode("utf-8") if lines else b""
    (out / "events.jsonl").write_bytes(events)
    head_seq, head_hash = (rows[-1][1], rows[-1][11]) if rows else (0, "0" * 64)
    exported_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    manifest = {
        "format": BUNDLE_FORMAT,
        "saga_id": saga_id,
        "exported_at": exported_at,
        "events": len(rows),
        "events_sha256": hashlib.sha256(events).hexdigest(),
        "head_seq": head_seq,
        "head_hash": head_hash,
        "anchor": {"seq": anchor[0], "hash": anchor[1]} if anchor else None,
        "canonical_form": "SGC1",
        "checkpoint_form": "SGCR1",
        "checkpoints": checkpoints,
        "unsigned": list(UNSIGNED_FIELDS),
        "public_keys": {k: v.hex() for k, v in sorted(keys.items())},
        "archive_verdict": {
            "ok": verdict.ok,
            "bad_seq": verdict.bad_seq,
            "reason": verdict.reason.value if verdict.reason else None,
            "detail": verdict.detail,
        },
    }
    (out / "manifest.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "README.md").write_text(
        _README.format(
            saga_id=saga_id,
            exported_at=exported_at,
            key_ids=", ".join(sorted(keys)) or "none (no checkpoints signed yet)",
            unsigned=", ".join(f"`{f}`" for f in UNSIGNED_FIELDS),
        ),
        encoding="utf-8",
    )
    verifier = resources.files("sagacity.consumers.archive").joinpath("verify_bundle.py")
    (out / "verify_bundle.py").write_bytes(verifier.read_bytes())
    return verdict
