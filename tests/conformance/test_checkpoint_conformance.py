"""The signed formats in one place: checkpoints (``SGCP1``), leaves (``SGCL1``), rounds
(``SGCR1``, ``SGCR2``), retention records (``SGRT1``) and anchors (``SGRA1``), with their Merkle
proofs, run over ``tests/vectors/checkpoints-v1.json`` by every implementation: the archive's
(``_checkpoints``, ``_merkle``, ``_retention``, ``_roundlog``, the audit's judgements) and the
standalone bundle verifier's, in-process and as ``python -I verify_bundle.py`` on bundles built
from the vectors.  Each negative vector must be refused by each, the bundle verifier naming the
reason the vector gives."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sagacity import JournalEntry
from sagacity.chain import _fastverify
from sagacity.consumers.archive import (
    _audit,
    _judging,
    _retentionaudit,
    _roundaudit,
    verify_bundle,
)
from sagacity.consumers.archive._checkpoints import (
    Checkpoint,
    bytes_signature_valid,
    checkpoint_message,
    leaf_hash,
    signature_valid,
)
from sagacity.consumers.archive._merkle import (
    RootBuilder,
    consistency_proof,
    inclusion_proof,
    merkle_root,
    root_from_proof,
    verify_consistency,
)
from sagacity.consumers.archive._retention import anchor_leaf, anchors_root
from sagacity.consumers.archive._roundlog import round_from_dict, round_to_dict
from sagacity.postgres.archive import RECORD_COLUMNS
from sagacity.signing._ed25519 import key_id_of

ROOT = Path(__file__).resolve().parents[2]
V = json.loads((ROOT / "tests/vectors/checkpoints-v1.json").read_text(encoding="utf-8"))
CHAIN = json.loads((ROOT / "tests/vectors/chain-v1.json").read_text(encoding="utf-8"))
EVENTS = CHAIN["chains"][0]["entries"]  # place-order-123, seq 1..7
SAGA = EVENTS[0]["saga_id"]
PUBLIC = bytes.fromhex(V["key"]["public_hex"])
KEYS = {V["key"]["key_id"]: PUBLIC}
LEAVES = [bytes.fromhex(h["leaf_hex"]) for h in V["heads"]]
NEGATIVE = {case["name"]: case for case in V["negative"]}
ROUND_KEYS = ("round_id", "format", "leaf_count", "root", "prev_root", "signed_at_us")
ROUND_KEYS += ("key_id", "signature", "tree_size")


def _round(d: dict[str, Any]) -> dict[str, Any]:
    """A round as bundles and ``round_from_dict`` take it (no vector-only fields)."""
    return {k: d[k] for k in ROUND_KEYS if k in d}


def test_the_key() -> None:
    assert key_id_of(PUBLIC) == V["key"]["key_id"] == verify_bundle.key_id(PUBLIC)


def test_leaves_and_the_head_checkpoint() -> None:
    for head in V["heads"]:
        fields = {"saga_id": head["saga_id"], "seq": head["seq"], "hash": head["hash"]}
        assert leaf_hash(**fields).hex() == head["leaf_hex"]
        if _roundaudit._native_leaf is not None:  # the audit's compiled leaf hash
            native = _roundaudit._native_leaf(head["saga_id"], head["seq"], head["hash"])
            assert native is not None
            assert native.hex() == head["leaf_hex"]
        assert (
            verify_bundle.leaf_hash(head["saga_id"], head["seq"], head["hash"]).hex()
            == (head["leaf_hex"])
        )
    cp = V["checkpoint"]
    fields = {k: cp[k] for k in ("saga_id", "seq", "hash", "signed_at_us", "key_id")}
    assert checkpoint_message(**fields).hex() == cp["message_hex"]
    assert verify_bundle.checkpoint_message(cp).hex() == cp["message_hex"]
    checkpoint = Checkpoint(**fields, signature=cp["signature"])
    assert signature_valid(PUBLIC, checkpoint)
    assert verify_bundle.ed25519_verify(
        PUBLIC, bytes.fromhex(cp["message_hex"]), bytes.fromhex(cp["signature"])
    )


@pytest.mark.parametrize("index", [0, 1])
def test_rounds(index: int) -> None:
    d = V["rounds"][index]
    signed = round_from_dict(_round(d))
    assert round_to_dict(signed) == _round(d)
    assert signed.message().hex() == d["message_hex"]
    assert verify_bundle.round_message(_round(d)).hex() == d["message_hex"]
    assert signature_valid(PUBLIC, signed)
    assert verify_bundle.ed25519_verify(
        PUBLIC, bytes.fromhex(d["message_hex"]), bytes.fromhex(d["signature"])
    )
    if d["format"] == "SGCR2":
        tree, first = LEAVES[: d["tree_size"]], d["tree_size"] - d["leaf_count"]
    else:
        tree, first = [LEAVES[cp["head"]] for cp in d["checkpoints"]], 0
    assert merkle_root(tree).hex() == d["root"]
    builder = RootBuilder()
    for leaf in tree:
        builder.add(leaf)
    assert builder.root() == bytes.fromhex(d["root"])
    assert (
        _roundaudit._judge_round(
            d["round_id"],
            signed,
            leaves=d["leaf_count"],
            root=bytes.fromhex(d["root"]),
            log_size=d.get("tree_size"),
            problem=None,
            keys=KEYS,
            previous=None if index == 0 else (1, V["rounds"][0]["root"]),
        )
        is None
    )
    for cp in d["checkpoints"]:
        proof = [bytes.fromhex(p) for p in cp["proof"]]
        assert [p.hex() for p in inclusion_proof(tree, first + cp["leaf_index"])] == cp["proof"]
        leaf = LEAVES[cp["head"]]
        at = first + cp["leaf_index"]
        assert root_from_proof(leaf, at, len(tree), proof) == bytes.fromhex(d["root"])
        assert verify_bundle.root_from_proof(leaf, at, len(tree), proof) == bytes.fromhex(d["root"])
        head = V["heads"][cp["head"]]
        verify_bundle.check_signed(head["saga_id"], _bundle_checkpoint(d, cp), KEYS)


def test_consistency_between_the_rounds() -> None:
    c = V["consistency"]
    proof = [bytes.fromhex(p) for p in c["proof"]]
    assert [p.hex() for p in consistency_proof(LEAVES, c["old_size"])] == c["proof"]
    old, new = bytes.fromhex(c["old_root"]), bytes.fromhex(c["new_root"])
    assert verify_consistency(c["old_size"], c["new_size"], old, new, proof)
    assert not verify_consistency(c["old_size"], c["new_size"], new, old, proof)


def test_the_retention_record_and_its_anchors() -> None:
    r = V["retention"]
    record = r["record"]
    row = tuple(record[name.strip()] for name in RECORD_COLUMNS.split(","))
    assert (
        _retentionaudit.judge_record(
            record["partition_name"],
            row,
            anchors=record["anchor_count"],
            root=record["anchors_root"],
            problem=None,
            keys=KEYS,
        )
        is None
    )
    assert verify_bundle.retention_record_message(record).hex() == record["message_hex"]
    assert bytes_signature_valid(PUBLIC, bytes.fromhex(record["message_hex"]), record["signature"])
    anchors = [(a["saga_id"], a["seq"], a["hash"]) for a in r["anchors"]]
    assert anchors_root(anchors) == (record["anchor_count"], record["anchors_root"])
    for a in r["anchors"]:
        assert (
            anchor_leaf(saga_id=a["saga_id"], seq=a["seq"], hash=a["hash"]).hex() == (a["leaf_hex"])
        )
        assert verify_bundle.anchor_leaf(a["saga_id"], a["seq"], a["hash"]).hex() == a["leaf_hex"]
        verify_bundle.check_anchor(a["saga_id"], _bundle_anchor(r, a), KEYS)


# --- bundles and negative vectors ----------------------------------------------------------------


def _bundle_checkpoint(d: dict[str, Any], cp: dict[str, Any]) -> dict[str, Any]:
    head = V["heads"][cp["head"]]
    return {
        "seq": head["seq"],
        "hash": head["hash"],
        "signed_at_us": d["signed_at_us"],
        "key_id": d["key_id"],
        "round": _round(d),
        "leaf_index": cp["leaf_index"],
        "proof": list(cp["proof"]),
    }


def _bundle_anchor(r: dict[str, Any], a: dict[str, Any]) -> dict[str, Any]:
    record = {k: v for k, v in r["record"].items() if k != "message_hex"}
    return {
        "seq": a["seq"],
        "hash": a["hash"],
        "record": record,
        "leaf_index": a["leaf_index"],
        "proof": list(a["proof"]),
    }


def _evidence(case: dict[str, Any] | None) -> dict[str, Any]:
    """The checkpoints of saga place-order-123 (seq 3 in round 1, seq 5 signed by itself, seq 7
    in round 2) and its retention anchor (seq 2), with ``case``'s change applied."""
    v = copy.deepcopy(V)
    target, change = (case["target"], case["set"]) if case else ("", {})
    kind, _, which = target.partition(":")
    if kind == "round":
        v["rounds"][int(which) - 1].update(change)
    elif kind == "record":
        v["retention"]["record"].update(change)
    elif kind == "anchor":
        v["retention"]["anchors"][int(which)].update(change)
    elif kind == "checkpoint":
        v["checkpoint"].update(change)
    checkpoints = []
    for d in v["rounds"]:
        for cp in d["checkpoints"]:
            if V["heads"][cp["head"]]["saga_id"] == SAGA:
                bundled = _bundle_checkpoint(d, cp)
                if target == f"proof:{cp['head']}":
                    bundled.update(change)
                checkpoints.append(bundled)
    head = {k: v["checkpoint"][k] for k in ("seq", "hash", "signed_at_us", "key_id")}
    checkpoints.append({**head, "signature": v["checkpoint"]["signature"]})
    anchor = _bundle_anchor(v["retention"], v["retention"]["anchors"][0])
    return {"checkpoints": sorted(checkpoints, key=lambda c: c["seq"]), "anchor": anchor, "v": v}


def _write_bundle(directory: Path, evidence: dict[str, Any], *, anchored: bool) -> Path:
    directory.mkdir(parents=True)
    events = [
        # A form-1 event is exported without the form-2 fields (form, commitments, salts).
        {k: e[k] for k in verify_bundle.EVENT_FIELDS if k in e}
        for e in EVENTS
        if not anchored or e["seq"] > evidence["anchor"]["seq"]
    ]
    data = "".join(json.dumps(e, sort_keys=True) + "\n" for e in events).encode("utf-8")
    (directory / "events.jsonl").write_bytes(data)
    manifest = {
        "format": "sagacity-audit-bundle/3",
        "saga_id": SAGA,
        "events": len(events),
        "events_sha256": hashlib.sha256(data).hexdigest(),
        "head_seq": events[-1]["seq"],
        "head_hash": events[-1]["hash"],
        "anchor": evidence["anchor"] if anchored else None,
        "canonical_form": "SGC1",
        "checkpoint_form": "SGCR2",
        "checkpoints": evidence["checkpoints"],
        "unsigned": ["exported_at", "public_keys", "archive_verdict"],
    }
    (directory / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    shutil.copy(verify_bundle.__file__, directory / "verify_bundle.py")
    return directory


def _run(directory: Path) -> tuple[int, str | None, str]:
    proc = subprocess.run(
        [sys.executable, "-I", "verify_bundle.py", str(directory), "--public-key", PUBLIC.hex()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=directory,
    )
    found = re.match(r"FAILED: ([a-z_]+) at seq ", proc.stdout)
    return proc.returncode, found.group(1) if found else None, proc.stdout + proc.stderr


def test_bundles_of_the_vectors_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every signed check passes.  The vectors' chain (chain-v1.json, place-order-123) is a
    chain, not a saga: its FAILED refers to a request, not an INTENT, so the story checks that
    follow the signed ones fail it (the saga grammar has its own vectors)."""
    for anchored in (False, True):
        directory = _write_bundle(tmp_path / f"ok-{anchored}", _evidence(None), anchored=anchored)
        code, _, out = _run(directory)
        assert code == 1, out
        assert out.startswith("FAILED: grammar:executed_without_intent at seq 6: "), out
        with monkeypatch.context() as patched:
            patched.setattr(verify_bundle, "check_story", lambda *a, **k: [])
            shown = verify_bundle.verify_bundle(directory, PUBLIC)
        assert "3 signed checkpoint(s) verified" in shown


def _anchored(case: dict[str, Any]) -> bool:
    return case["target"].split(":")[0] in ("record", "anchor")


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_every_negative_vector_is_refused_by_the_bundle_verifier(name: str, tmp_path: Path) -> None:
    case = NEGATIVE[name]
    evidence = _evidence(case)
    directory = _write_bundle(tmp_path / name, evidence, anchored=_anchored(case))
    code, reason, out = _run(directory)
    assert (code, reason) == (1, case["reason"]), out
    # In-process, the same finding.
    with pytest.raises(verify_bundle.VerificationError) as caught:
        _check_in_process(evidence, anchored=_anchored(case))
    assert caught.value.reason == case["reason"]


def _check_in_process(evidence: dict[str, Any], *, anchored: bool) -> None:
    if anchored:
        verify_bundle.check_anchor(SAGA, evidence["anchor"], KEYS)
    for cp in evidence["checkpoints"]:
        verify_bundle.check_checkpoint_fields(cp)
        verify_bundle.check_signed(SAGA, cp, KEYS)


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_every_negative_vector_is_refused_by_the_archive(name: str) -> None:
    case = NEGATIVE[name]
    v = _evidence(case)["v"]
    kind, _, which = case["target"].partition(":")
    if kind == "round":
        d = v["rounds"][int(which) - 1]
        original = V["rounds"][int(which) - 1]
        if d.get("format") != original["format"] and "tree_size" in d:
            del d["tree_size"]  # a first-format round has no tree size
        finding = _roundaudit._judge_round(
            d["round_id"],
            round_from_dict(_round(d)),
            leaves=original["leaf_count"],
            root=bytes.fromhex(original["root"]),
            log_size=original.get("tree_size"),
            problem=None,
            keys=KEYS,
            previous=None if which == "1" else (1, V["rounds"][0]["root"]),
        )
        assert finding is not None
        assert finding[0].value == case["reason"]
    elif kind == "checkpoint":
        cp = v["checkpoint"]
        fields = ("saga_id", "seq", "hash", "signed_at_us", "key_id", "signature")
        audit = _judging.judge(
            SAGA,
            [JournalEntry.from_dict(e) for e in EVENTS],
            checkpoints=[Checkpoint(**{k: cp[k] for k in fields})],
            recorded_head=(EVENTS[-1]["seq"], EVENTS[-1]["hash"]),
            keys=KEYS,
        )
        assert audit.reason is not None
        assert audit.reason.value == case["reason"]
    elif kind == "proof":
        # The archive rebuilds roots from its own leaves: a changed leaf changes the root.
        head = V["heads"][int(which)]
        cp = next(c for d in v["rounds"] for c in d["checkpoints"] if c["head"] == int(which))
        d = V["rounds"][1]
        leaf = leaf_hash(
            saga_id=head["saga_id"], seq=head["seq"], hash=case["set"].get("hash", head["hash"])
        )
        index = d["tree_size"] - d["leaf_count"] + case["set"].get("leaf_index", cp["leaf_index"])
        proof = [_node(p) for p in case["set"].get("proof", cp["proof"])]
        assert root_from_proof(leaf, index, d["tree_size"], proof) != bytes.fromhex(d["root"])
    else:
        record = v["retention"]["record"]
        row = tuple(record[n.strip()] for n in RECORD_COLUMNS.split(","))
        count, root = anchors_root(
            (a["saga_id"], a["seq"], a["hash"]) for a in v["retention"]["anchors"]
        )
        anchor = v["retention"]["anchors"][0]
        finding = _retentionaudit.judge_record(
            record["partition_name"], row, anchors=count, root=root, problem=None, keys=KEYS
        )
        leaf = anchor_leaf(saga_id=anchor["saga_id"], seq=anchor["seq"], hash=anchor["hash"])
        proof = [_node(p) for p in anchor["proof"]]
        reached = root_from_proof(leaf, anchor["leaf_index"], record["anchor_count"], proof)
        # Refused: the record fails, or the anchor is not under the root it signed.
        assert finding is not None or reached is None or reached.hex() != record["anchors_root"]


def _node(text: str) -> bytes:
    """A proof node of a vector as bytes: its hex, or (not hex) its text's own bytes, which
    no 32-byte node is."""
    try:
        return bytes.fromhex(text)
    except ValueError:
        return text.encode()


def test_the_negative_vectors_cover_every_target_and_reason() -> None:
    kinds = {case["target"].split(":")[0] for case in V["negative"]}
    assert kinds == {"round", "proof", "checkpoint", "record", "anchor"}
    assert {case["reason"] for case in V["negative"]} == {
        "bad_signature",
        "unknown_key",
        "forged_anchor",
    }


# --- the audit's compiled merge of a chain with its checkpoints and head ---------------------


def _binary_rows(events: list[dict[str, Any]]) -> bytes:
    """The events as the archive's binary ``COPY`` of ``ROW_COLUMNS`` sends them."""
    out = [b"PGCOPY\n\xff\r\n\x00", struct.pack(">ii", 0, 0)]
    for e in events:
        values = [e[k] for k in ("saga_id", "seq", "event_type", "tool", "payload", "result")]
        values += [e["error"], e["actor"], json.dumps(e["attributes"] or {})]
        values += [e["recorded_at_us"], e["prev_hash"], e["hash"]]
        out.append(struct.pack(">h", len(values)))
        for column, value in enumerate(values):
            if value is None:
                out.append(struct.pack(">i", -1))
            elif column in (1, 9):
                out.append(struct.pack(">iq", 8, value))
            else:
                data = value.encode("utf-8")
                out.append(struct.pack(">i", len(data)) + data)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


def _round_checkpoints() -> list[tuple[Any, ...]]:
    """The vectors' round checkpoints of the chain's saga, as the audit selects them."""
    out = []
    for d in V["rounds"]:
        for c in d["checkpoints"]:
            head = V["heads"][c["head"]]
            if head["saga_id"] == SAGA:
                row = (SAGA, head["seq"], head["hash"], d["signed_at_us"], d["key_id"], "")
                out.append((*row, d["round_id"], c["leaf_index"]))
    return out


def _merge(checkpoints: list[tuple[Any, ...]], failed_rounds: set[int]) -> tuple[Any, ...]:
    """The compiled merge's one output for the chain, its checkpoints and its recorded head."""
    assert _fastverify.NATIVE_AUDITOR is not None
    auditor = _fastverify.NATIVE_AUDITOR(anchors={}, failed_rounds=failed_rounds, refer=set())
    auditor.feed(_binary_rows(EVENTS))
    auditor.finish()
    auditor.add_checkpoints(sorted(checkpoints, key=lambda c: c[0].encode()))
    auditor.add_checkpoints([])
    auditor.add_heads([(SAGA, EVENTS[-1]["seq"], EVENTS[-1]["hash"])])
    auditor.add_heads([])
    out, need_checkpoints, need_heads = auditor.take()
    assert (need_checkpoints, need_heads) == (False, False)
    assert len(out) == 1
    return tuple(out[0])


def _judged_by_python(checkpoints: list[tuple[Any, ...]], failed_rounds: set[int]) -> Any:
    return _judging.judge(
        SAGA,
        [JournalEntry.from_dict(e) for e in EVENTS],
        checkpoints=[
            Checkpoint(
                saga_id=c[0],
                seq=c[1],
                hash=c[2],
                signed_at_us=c[3],
                key_id=c[4],
                signature=c[5],
                round_id=c[6],
                leaf_index=c[7],
            )
            for c in checkpoints
        ],
        recorded_head=(EVENTS[-1]["seq"], EVENTS[-1]["hash"]),
        keys=KEYS,
        rounds=_roundaudit.RoundAudit(
            failed=dict.fromkeys(failed_rounds, (_audit.AuditReason.BAD_SIGNATURE, "failed"))
        ),
    )


@pytest.mark.skipif(
    _fastverify.NATIVE_AUDITOR is None,
    reason="the compiled module is off (SAGACITY_NATIVE=0) or not installed",
)
def test_the_compiled_merge_judges_the_vectors_checkpoints_as_the_audit() -> None:
    checkpoints = _round_checkpoints()
    assert len(checkpoints) >= 2
    # Every checkpoint of verified rounds names the chain: the merge passes it, as the audit.
    out = _merge(checkpoints, set())
    expected = _judged_by_python(checkpoints, set())
    assert expected.ok
    assert out == (
        SAGA,
        True,
        expected.events,
        expected.head_seq,
        expected.head_hash,
        expected.checkpoints,
        expected.signed_seq,
        expected.unsigned,
    )
    # A failed round, a checkpoint whose seq was altered (the negative vector's change) and
    # one signed on its own: each goes back to the Python path, which explains the finding.
    altered = next(n for n in V["negative"] if n["name"] == "head_checkpoint_seq_altered")
    own = V["checkpoint"]
    own_row = (SAGA, own["seq"], own["hash"], own["signed_at_us"], own["key_id"])
    cases = [
        (checkpoints, {checkpoints[0][6]}, _audit.AuditReason.BAD_SIGNATURE),
        ([(*checkpoints[0][:1], altered["set"]["seq"], *checkpoints[0][2:])], set(), None),
        ([(*own_row, own["signature"], None, None)], set(), None),
    ]
    for cps, failed, reason in cases:
        out = _merge(cps, failed)
        assert out[:2] == (SAGA, False)
        assert out[3] == sorted(cps, key=lambda c: c[0].encode())
        python = _judged_by_python(cps, failed)
        if reason is not None:
            assert python.reason is reason
    assert _judged_by_python(cases[1][0], set()).reason is _audit.AuditReason.CHECKPOINT_MISMATCH
    assert _judged_by_python(cases[2][0], set()).ok  # a valid signature of its own


@pytest.mark.skipif(
    _roundaudit._native_leaf is None,
    reason="the compiled module is off (SAGACITY_NATIVE=0) or not installed",
)
def test_the_compiled_leaf_hash_leaves_what_it_cannot_hash_to_python() -> None:
    # What leaf_hash refuses (its message is the audit's finding) the compiled one hands back.
    native = _roundaudit._native_leaf
    assert native is not None
    head = V["heads"][0]
    for saga_id, seq, hash_ in [
        (head["saga_id"], head["seq"], "é" * 64),  # a hash that is not ASCII
        ("lone \ud800 surrogate", head["seq"], head["hash"]),
        (None, head["seq"], head["hash"]),
        (head["saga_id"], "3", head["hash"]),
        (head["saga_id"], 2**63, head["hash"]),
    ]:
        assert native(saga_id, seq, hash_) is None
        with pytest.raises(Exception):  # noqa: B017  # each its own type and message
            leaf_hash(saga_id=saga_id, seq=seq, hash=hash_)  # type: ignore[arg-type]
