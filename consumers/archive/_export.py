"""Audit bundles: one saga's archived chain, its signed checkpoints and a standalone verifier."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from sagacity.consumers.archive._audit import iter_audits, trusted_keys
from sagacity.consumers.archive._checkpoints import (
    LOG_ROUND_FORMAT,
    inclusion_proof,
    leaf_hash,
)
from sagacity.consumers.archive._retention import anchor_leaf, record_of_row
from sagacity.consumers.archive._roundlog import (
    inclusion_proof_in_log,
    round_by_id,
    round_to_dict,
)
from sagacity.consumers.archive._verdicts import SagaAudit
from sagacity.consumers.archive.verify_bundle import UNSIGNED_FIELDS
from sagacity.errors import RoundLogError, UnknownSagaError
from sagacity.ports import BundleSnapshot, SagaBundleReads
from sagacity.signing._operator_signature import OperatorVerifier

BUNDLE_FORMAT = "sagacity-audit-bundle/3"
"""Version 2: checkpoints of signing rounds carry their round and inclusion proof.  Version 3:
the manifest lists the fields no signature covers (``unsigned``); a round names its format, a
round of the log (``SGCR2``) carries its tree size and its checkpoints' proofs lead to the
log's root, and a retention anchor carries its signed record and inclusion proof
(docs/adr/0015-round-log.md)."""


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
chain ends at the manifest's head, a retention anchor the chain starts from is signed, every
signed checkpoint verifies under the key and matches the chain at its seq, the chain tells a
story the saga's state machine allows (no `EXECUTED` without its `INTENT`, no gated call run
without its approvals, ...), no data is missing without an operator's `ERASED` on the chain,
every `ERASED` is the operator's, and a checkpoint covers the head.  Otherwise the first
failure is printed with its seq and reason (`bundle_altered`, `foreign_saga`, `edited`,
`wrong_genesis`, `gap`, `reordered`, `broken_link`, `truncated`, `head_mismatch`,
`forged_anchor`, `bad_signature`, `unknown_key`, `checkpoint_mismatch`, `grammar:*`,
`withheld`, `forged_erasure`, `unsigned`).

Pass the operator's public key with `--operator-public-key <hex>` (from the operator, not from
this bundle): an `ERASED` then counts only when that key signed it.  Without it an `ERASED`
with an operator signature is counted unverified, and the output says so.

A bundle whose head no checkpoint covers (events archived after the last signing round) is
refused (`unsigned`); `--allow-unsigned` accepts it and names the events no signature covers.
A bundle exported from an archive that stores sealed events' commitments only (it runs without
the key-encryption key) holds no openings: `--allow-unopened` accepts that, and says so.
The manifest's `unsigned` list names the fields no signature covers ({unsigned}): they are
shown for information and prove nothing.  This README is not evidence either.

Obtain the public key from the archive's operator through a channel other than this bundle:
without `--public-key` the key in the manifest is used, which shows only that the bundle is
self-consistent.  The archive's key id(s): {key_ids}.

The canonical form and the checkpoint forms are specified in the project's
docs/adr/0002-hash-chain.md, docs/adr/0006-archive-and-checkpoints.md (per-head signatures) and
docs/adr/0012-checkpoint-rounds.md and docs/adr/0015-round-log.md (signing rounds: the
Merkle root of every head signed so far, signed once, each checkpoint with its inclusion proof;
a retention anchor with its signed record); the order of the checks, the reasons and the
manifest's fields in docs/adr/0017-audit-coverage.md.  The verifier is short enough to read in
full.
"""


def _checkpoint(snapshot: BundleSnapshot, row: Sequence[Any]) -> dict[str, Any]:
    """A checkpoint for the manifest: per-head (``SGCP1``) with its signature, or a leaf of a
    signing round with the round and the leaf's inclusion proof: to the round's own root
    (``SGCR1``), or to the log's root at that round (``SGCR2``: docs/adr/0015-round-log.md)."""
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
    signed = round_by_id(snapshot.round_log, round_id)
    proof: list[bytes] = []
    if signed is not None and signed.format == LOG_ROUND_FORMAT:
        # A tampered log may not give a proof; the bundle then fails its own verification.
        with contextlib.suppress(RoundLogError):
            proof = inclusion_proof_in_log(snapshot.round_log, signed, leaf_index)
    else:
        leaves = [
            leaf_hash(saga_id=s, seq=n, hash=h)
            for _i, s, n, h in snapshot.round_log.round_leaves(round_id)
        ]
        proof = inclusion_proof(leaves, leaf_index) if 0 <= leaf_index < len(leaves) else []
    out["round"] = round_to_dict(signed) if signed is not None else {"round_id": round_id}
    out["leaf_index"] = leaf_index
    out["proof"] = [p.hex() for p in proof]
    return out


def _anchor(snapshot: BundleSnapshot) -> dict[str, Any] | None:
    """The saga's retention anchor for the manifest, with its signed retention record and
    its inclusion proof to the record's anchors root (docs/adr/0015-round-log.md)."""
    found = snapshot.last_anchor()
    if found is None:
        return None
    seq, hash, name, leaf_index = found
    out: dict[str, Any] = {"seq": seq, "hash": hash}
    if name is None:
        return out  # an archive older than signed records
    held = snapshot.retention_record(name)
    record = record_of_row(held) if held is not None else None
    if record is None or leaf_index is None:
        return out  # unsigned: the bundle's verifier refuses it
    leaves = [anchor_leaf(saga_id=s, seq=n, hash=h) for s, n, h in snapshot.anchors_of(name)]
    out["record"] = dataclasses.asdict(record)
    out["leaf_index"] = leaf_index
    out["proof"] = (
        [p.hex() for p in inclusion_proof(leaves, leaf_index)]
        if 0 <= leaf_index < len(leaves)
        else []
    )
    return out


def export_bundle(
    store: SagaBundleReads,
    saga_id: str,
    out: Path,
    *,
    pinned_keys: tuple[bytes, ...] = (),
    allow_unopened: bool = False,
    operator: OperatorVerifier | None = None,
) -> SagaAudit:
    """Write the audit bundle of ``saga_id`` into directory ``out`` (created if missing).

    Returns the archive's own audit of the saga, so a caller can say whether the exported
    evidence verifies (``allow_unopened``, ``operator``: as
    :func:`~sagacity.consumers.archive.iter_audits`).

    Raises:
        UnknownSagaError: the archive holds nothing for ``saga_id``.
        ArchiveSchemaError / PersistenceError: the database is not an archive or failed.
    """
    rows, checkpoints, anchor = _read_saga(store, saga_id)
    if not rows and not checkpoints:
        raise UnknownSagaError(
            f"the archive holds no entries for saga {saga_id!r}", saga_id=saga_id
        )
    audits = list(
        iter_audits(
            store,
            saga_id=saga_id,
            pinned_keys=pinned_keys,
            allow_unopened=allow_unopened,
            operator=operator,
        )
    )
    verdict = audits[0]
    keys = trusted_keys(store)
    out.mkdir(parents=True, exist_ok=True)
    events, form_2 = _events_jsonl(rows)
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
        "anchor": anchor,
        "canonical_form": "SGC2" if form_2 else "SGC1",
        "checkpoint_form": "SGCR2",
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
    _write_readme_and_verifier(out, saga_id=saga_id, exported_at=exported_at, keys=keys)
    return verdict


def _read_saga(
    store: SagaBundleReads, saga_id: str
) -> tuple[list[Any], list[dict[str, Any]], dict[str, Any] | None]:
    """The saga's rows, checkpoints and retention anchor, read in one snapshot."""
    with store.bundle_snapshot(saga_id) as snapshot:
        rows = snapshot.rows()
        checkpoints = [_checkpoint(snapshot, row) for row in snapshot.checkpoints()]
        anchor = _anchor(snapshot)
    return rows, checkpoints, anchor


def _events_jsonl(rows: Sequence[Sequence[Any]]) -> tuple[bytes, bool]:
    """``events.jsonl``: one JSON object per row, in archived order; and whether any event
    is in chain form 2."""
    lines = []
    form_2 = False
    for r in rows:
        # A form-2 event shows its form, commitments and salts (docs/adr/0019-erasure.md);
        # a form-1 event shows none of them, as before.
        shown = (
            {"form": 2, "commitments": r[13], "salts": r[14]} if len(r) > 12 and r[12] != 1 else {}
        )
        form_2 = form_2 or bool(shown)
        lines.append(
            json.dumps(
                {
                    **shown,
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
    return (("\n".join(lines) + "\n").encode("utf-8") if lines else b""), form_2


def _write_readme_and_verifier(
    out: Path, *, saga_id: str, exported_at: str, keys: dict[str, bytes]
) -> None:
    """The bundle's README and its standalone verifier."""
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
