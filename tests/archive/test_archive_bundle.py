"""Audit bundles: exported from real Postgres, checked by the standalone verifier in a
subprocess (``python -I``, standard library only), untouched and tampered."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from archive_helpers import as_raw, make_chain

from sagacity.chain import link
from sagacity.consumers.archive import BatchArchiver, Signer, generate_key, sign_pending
from sagacity.consumers.archive._export import export_bundle
from sagacity.consumers.archive.verify_bundle import ed25519_verify
from sagacity.postgres.archive import (
    PostgresArchiveAudits,
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    PostgresSagaBundles,
)
from sagacity.producer import KAFKA_PARTITIONER
from sagacity.schemas import JOURNAL_WIRE

pytestmark = pytest.mark.postgres


@pytest.fixture
def archiver(archive_dsn: str) -> Iterator[BatchArchiver]:
    """One archiver: bundles are about export and the verifier; the ingest paths are compared
    elsewhere."""
    a = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    yield a
    a.close()


def check(bundle: Path, public_hex: str | None, *extra: str) -> tuple[int, str]:
    args = [sys.executable, "-I", str(bundle / "verify_bundle.py"), str(bundle), *extra]
    if public_hex:
        args += ["--public-key", public_hex]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=bundle)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("bundles")


@pytest.fixture
def exported(archiver, archive_dsn, tmp_path) -> tuple[Path, Signer, list]:
    """A bundle for a saga of 6 events with checkpoints at seq 3 and seq 6, each signed in a
    round with three other sagas' heads: leaf 1 of the log's 4, then leaf 5 of its 8 (proofs of
    two and three nodes to the log's root, docs/adr/0015-round-log.md)."""
    signer = generate_key(tmp_path / "k.pem")
    chains = [make_chain(s, 6) for s in ("saga-a", "saga-b", "saga-c", "saga-d")]
    chain = chains[1]
    archiver.archive(as_raw([e for c in chains for e in c[:3]]))
    with psycopg.connect(archive_dsn) as conn:
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
        archiver.archive(as_raw([e for c in chains for e in c[3:]], first_offset=12))
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
        verdict = export_bundle(PostgresSagaBundles(conn), "saga-b", tmp_path / "bundle")
    assert verdict.ok
    return tmp_path / "bundle", signer, chain


def _events(bundle: Path) -> list[dict]:
    return [json.loads(x) for x in (bundle / "events.jsonl").read_text().splitlines()]


def _write(bundle: Path, events: list[dict], *, manifest_edit=None) -> None:
    import hashlib

    data = (
        "\n".join(json.dumps(e, ensure_ascii=False, sort_keys=True) for e in events) + "\n"
    ).encode()
    (bundle / "events.jsonl").write_bytes(data)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["events_sha256"] = hashlib.sha256(data).hexdigest()
    manifest["events"] = len(events)
    if manifest_edit:
        manifest_edit(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_bundle_contents(exported):
    bundle, signer, chain = exported
    assert sorted(p.name for p in bundle.iterdir()) == [
        "README.md",
        "events.jsonl",
        "manifest.json",
        "verify_bundle.py",
    ]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert (manifest["head_seq"], manifest["head_hash"]) == (6, chain[-1].hash)
    assert [c["seq"] for c in manifest["checkpoints"]] == [3, 6]
    first, second = manifest["checkpoints"]
    for cp, tree_size, proof in ((first, 4, 2), (second, 8, 3)):
        assert (cp["leaf_index"], cp["round"]["leaf_count"], len(cp["proof"])) == (1, 4, proof)
        assert (cp["round"]["format"], cp["round"]["tree_size"]) == ("SGCR2", tree_size)
        assert cp["round"]["key_id"] == signer.key_id
    assert second["round"]["prev_root"] == first["round"]["root"]
    assert manifest["public_keys"] == {signer.key_id: signer.public_hex}
    assert _events(bundle)[2] == chain[2].to_dict()
    assert "--public-key" in (bundle / "README.md").read_text()


def test_untouched_bundle_verifies_with_the_pinned_key(exported):
    bundle, signer, _ = exported
    code, out = check(bundle, signer.public_hex)
    assert code == 0, out
    assert "6 events" in out
    assert "2 signed checkpoint(s)" in out


def test_untouched_bundle_verifies_self_consistently_without_a_key(exported):
    bundle, _, _ = exported
    code, out = check(bundle, None)
    assert code == 0, out
    assert "pin it" in out


def _tampered(case: str, bundle: Path, chain) -> None:
    events = _events(bundle)
    if case == "flip_payload_byte":
        events[3]["payload"] = events[3]["payload"].replace("4", "5")
        _write(bundle, events)
    elif case == "changed_hash":
        events[3]["hash"] = "f" * 64
        _write(bundle, events)
    elif case == "deleted_row":
        del events[1]
        _write(bundle, events)
    elif case == "reordered_rows":
        events[2], events[3] = events[3], events[2]
        _write(bundle, events)
    elif case == "truncated_tail":

        def head4(m):
            m["head_seq"], m["head_hash"] = 4, events[3]["hash"]

        _write(bundle, events[:4], manifest_edit=head4)
    elif case == "rewritten_chain":
        forged, prev = [], "0" * 64
        for e in chain:
            d = dataclasses.replace(e, payload='{"order":1,"note":"x"}') if e.seq == 2 else e
            f = link(d, seq=e.seq, prev_hash=prev)
            forged.append(f.to_dict())
            prev = f.hash

        def head(m):
            m["head_hash"] = prev

        _write(bundle, forged, manifest_edit=head)
    elif case == "forged_checkpoint":

        def forge(m):
            m["checkpoints"][0]["hash"] = "0" * 64

        _write(bundle, events, manifest_edit=forge)
    elif case in ("shown_time", "shown_key"):

        def show(m):
            cp = m["checkpoints"][0]
            if case == "shown_time":
                cp["signed_at_us"] += 1
            else:
                cp["key_id"] = "feedfeedfeedfeed"

        _write(bundle, events, manifest_edit=show)
    elif case in ("forged_proof", "moved_leaf", "forged_round_root", "round_missing"):

        def forge_round(m):
            cp = m["checkpoints"][0]
            if case == "forged_proof":
                cp["proof"][0] = "00" * 32
            elif case == "moved_leaf":
                cp["leaf_index"] = 2
            elif case == "forged_round_root":
                cp["round"]["root"] = "00" * 32
            else:
                cp["round"] = {"round_id": cp["round"]["round_id"]}

        _write(bundle, events, manifest_edit=forge_round)
    elif case == "checkpoints_removed":

        def strip(m):
            m["checkpoints"] = []

        _write(bundle, events, manifest_edit=strip)
    elif case == "trimmed_tail_and_its_checkpoint":

        def trim(m):
            m["head_seq"], m["head_hash"] = 4, events[3]["hash"]
            m["checkpoints"] = [c for c in m["checkpoints"] if c["seq"] <= 4]

        _write(bundle, events[:4], manifest_edit=trim)
    elif case == "invented_saga":
        invented = make_chain("saga-invented", 3)

        def invent(m):
            m["saga_id"] = "saga-invented"
            m["head_seq"], m["head_hash"] = 3, invented[-1].hash
            m["checkpoints"] = []

        _write(bundle, [e.to_dict() for e in invented], manifest_edit=invent)
    elif case == "head_hash_changed":

        def rehead(m):
            m["head_hash"] = "f" * 64

        _write(bundle, events, manifest_edit=rehead)
    elif case == "head_below_the_events":

        def lower(m):
            m["head_seq"], m["head_hash"] = 4, events[3]["hash"]

        _write(bundle, events, manifest_edit=lower)
    elif case == "checkpoint_time_not_its_rounds":

        def retime(m):
            m["checkpoints"][0]["signed_at_us"] += 1

        _write(bundle, events, manifest_edit=retime)
    elif case == "manifest_field_added":

        def add(m):
            m["approved_by_auditor"] = True

        _write(bundle, events, manifest_edit=add)
    elif case == "event_field_added":
        events[2]["approved"] = "yes"
        _write(bundle, events)
    elif case == "event_count_altered":

        def count(m):
            m["events"] = 7

        _write(bundle, events, manifest_edit=count)
    elif case == "events_file_altered":
        (bundle / "events.jsonl").write_text(
            (bundle / "events.jsonl").read_text().replace("ok", "OK")
        )


@pytest.mark.parametrize(
    ("case", "seq", "reason"),
    [
        ("flip_payload_byte", 4, "edited"),
        ("changed_hash", 4, "edited"),
        ("deleted_row", 2, "gap"),
        ("reordered_rows", 3, "reordered"),
        ("truncated_tail", 5, "truncated"),
        ("rewritten_chain", 3, "checkpoint_mismatch"),
        ("forged_checkpoint", 3, "bad_signature"),
        ("forged_proof", 3, "bad_signature"),
        ("moved_leaf", 3, "bad_signature"),
        ("forged_round_root", 3, "bad_signature"),
        ("round_missing", 3, "bad_signature"),
        ("shown_time", 3, "bundle_altered"),
        ("shown_key", 3, "bundle_altered"),
        ("events_file_altered", None, "bundle_altered"),
        ("checkpoints_removed", 1, "unsigned"),
        ("trimmed_tail_and_its_checkpoint", 4, "unsigned"),
        ("invented_saga", 1, "unsigned"),
        ("head_hash_changed", 6, "head_mismatch"),
        ("head_below_the_events", 5, "head_mismatch"),
        ("checkpoint_time_not_its_rounds", 3, "bundle_altered"),
        ("manifest_field_added", None, "bundle_altered"),
        ("event_field_added", 3, "bundle_altered"),
        ("event_count_altered", None, "bundle_altered"),
    ],
)
def test_tampered_bundle_fails_with_seq_and_reason(exported, case, seq, reason):
    bundle, signer, chain = exported
    _tampered(case, bundle, chain)
    code, out = check(bundle, signer.public_hex)
    assert code == 1, out
    assert f"FAILED: {reason} at seq {seq}:" in out


def test_a_bundle_without_checkpoints_is_accepted_only_when_the_auditor_allows_it(exported):
    bundle, signer, _ = exported
    _tampered("checkpoints_removed", bundle, None)
    code, out = check(bundle, signer.public_hex, "--allow-unsigned")
    assert code == 0, out
    assert "0 signed checkpoint(s) verified" in out
    assert (
        "UNSIGNED: no checkpoint covers any of seqs 1..6: accepted only because of "
        "--allow-unsigned" in out
    )


def test_a_field_marked_unsigned_is_shown_as_such(exported):
    bundle, signer, _ = exported

    def note(m):
        m["operator_note"] = "exported for the Q3 audit"
        m["unsigned"].append("operator_note")

    _write(bundle, _events(bundle), manifest_edit=note)
    code, out = check(bundle, signer.public_hex)
    assert code == 0, out
    assert (
        "unsigned, shown for information: archive_verdict, exported_at, operator_note,"
        " public_keys" in out
    )


def test_a_bundle_starting_at_an_unsigned_anchor_is_refused(exported):
    """An anchor lets the chain start mid-way; one no signed retention record covers (here
    invented, to hide the first events) is refused (docs/adr/0015-round-log.md).  A signed
    one verifies: tests/archive/test_archive_retention.py."""
    bundle, signer, chain = exported

    def anchor(m):
        m["anchor"] = {"seq": 2, "hash": chain[1].hash}

    _write(bundle, _events(bundle)[2:], manifest_edit=anchor)
    code, out = check(bundle, signer.public_hex)
    assert code == 1, out
    assert "FAILED: forged_anchor at seq 2: the retention anchor is not covered" in out


def test_a_version_2_bundle_still_verifies(exported):
    bundle, signer, _ = exported

    def downgrade(m):
        m["format"] = "sagacity-audit-bundle/2"
        del m["unsigned"]

    _write(bundle, _events(bundle), manifest_edit=downgrade)
    code, out = check(bundle, signer.public_hex)
    assert code == 0, out
    assert "2 signed checkpoint(s) verified" in out


def test_an_exported_unsigned_tail_is_refused_unless_allowed(archiver, archive_dsn, tmp_path):
    from click.testing import CliRunner

    from sagacity.cli import main

    signer = generate_key(tmp_path / "k.pem")
    chain = make_chain("saga-t", 5)
    archiver.archive(as_raw(chain[:3]))
    with psycopg.connect(archive_dsn) as conn:
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
    archiver.archive(as_raw(chain[3:], first_offset=3))
    bundle = tmp_path / "bundle"
    result = CliRunner().invoke(
        main, ["export", "--database-url", archive_dsn, "--saga", "saga-t", "--out", str(bundle)]
    )
    assert result.exit_code == 0, result.output
    assert "no checkpoint covers seqs 4..5" in result.stderr
    code, out = check(bundle, signer.public_hex)
    assert code == 1
    assert "FAILED: unsigned at seq 4: seqs 4..5 follow the last checkpoint (seq 3)" in out
    code, out = check(bundle, signer.public_hex, "--allow-unsigned")
    assert code == 0, out
    assert "UNSIGNED: seqs 4..5 follow the last checkpoint (seq 3)" in out


def test_bundle_resigned_by_another_key_fails_against_the_pinned_key(exported, tmp_path):
    bundle, signer, chain = exported
    attacker = generate_key(tmp_path / "attacker.pem")

    def resign(m):
        m["checkpoints"] = [
            dataclasses.asdict(
                attacker.sign(saga_id="saga-b", seq=6, hash=chain[-1].hash, signed_at_us=1)
            )
        ]
        for c in m["checkpoints"]:
            for name in ("saga_id", "round_id", "leaf_index"):
                del c[name]
        m["public_keys"] = {attacker.key_id: attacker.public_hex}

    _write(bundle, _events(bundle), manifest_edit=resign)
    assert check(bundle, None)[0] == 0  # self-consistent ...
    code, out = check(bundle, signer.public_hex)  # ... but not signed by the archive's key
    assert code == 1
    assert "unknown_key at seq 6" in out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"format": "sagacity-audit-bundle/99"}, "unknown bundle format"),
        ({"canonical_form": "SGC9"}, "unknown canonical form"),
    ],
)
def test_a_bundle_of_an_unknown_form_cannot_be_read(exported, edit, message):
    bundle, signer, _ = exported
    _write(bundle, _events(bundle), manifest_edit=lambda m: m.update(edit))
    code, out = check(bundle, signer.public_hex)
    assert code == 2
    assert message in out


def test_a_malformed_unsigned_list_is_refused(exported):
    bundle, signer, _ = exported
    _write(bundle, _events(bundle), manifest_edit=lambda m: m.update(unsigned="everything"))
    code, out = check(bundle, signer.public_hex)
    assert code == 1
    assert "FAILED: bundle_altered at seq None: the manifest's unsigned list is malformed" in out


def test_unreadable_bundle_exits_2(tmp_path, exported):
    bundle, _, _ = exported
    (bundle / "manifest.json").write_text("{not json")
    code, out = check(bundle, None)
    assert code == 2
    assert "cannot read the bundle" in out


def test_stdlib_ed25519_matches_rfc8032_and_cryptography(tmp_path):
    # RFC 8032 section 7.1, test 1 (empty message) and test 2 (one byte).
    pk1 = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    sig1 = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    pk2 = bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
    sig2 = bytes.fromhex(
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
    )
    assert ed25519_verify(pk1, b"", sig1)
    assert ed25519_verify(pk2, b"\x72", sig2)
    assert not ed25519_verify(pk2, b"\x73", sig2)
    assert not ed25519_verify(
        pk1,
        b"",
        sig1[:32]
        + (
            int.from_bytes(sig1[32:], "little") + 2**252 + 27742317777372353535851937790883648493
        ).to_bytes(33, "little")[:32],
    )
    signer = generate_key(tmp_path / "k.pem")
    for n in range(8):
        cp = signer.sign(saga_id=f"s{n}", seq=n + 1, hash="ab" * 32, signed_at_us=n)
        sig = bytes.fromhex(cp.signature)
        assert ed25519_verify(signer.public_raw, cp.message(), sig)
        bad = bytearray(sig)
        bad[n] ^= 0x40
        assert not ed25519_verify(signer.public_raw, cp.message(), bytes(bad))


def test_verifier_imports_only_the_standard_library():
    source = Path(__file__).parents[2] / "consumers" / "archive" / "verify_bundle.py"
    imported = {
        line.split()[1].split(".")[0]
        for line in source.read_text().splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imported <= {"__future__", "hashlib", "json", "struct", "sys", "pathlib", "typing"}


def _committed_chain(saga_id: str, n: int) -> list:
    """A valid form-2 chain (docs/adr/0019-erasure.md): every data field committed to."""
    from sagacity.chain import committing

    out = []
    prev = "0" * 64
    for entry in make_chain(saga_id, n):
        out.append(link(committing(dataclasses.replace(entry)), seq=entry.seq, prev_hash=prev))
        prev = out[-1].hash
    return out


def test_a_form_2_saga_is_audited_exported_and_verified(archiver, archive_dsn, tmp_path):
    """The archive's audit reads the commitments, the bundle carries them (canonical form
    SGC2), the auditor's verifier passes it, and fails it when an opening is altered."""
    from sagacity.consumers.archive import iter_audits

    signer = generate_key(tmp_path / "k.pem")
    chain = _committed_chain("saga-v2", 5)
    archiver.archive(as_raw(chain))
    with psycopg.connect(archive_dsn) as conn:
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
        (audit,) = list(iter_audits(PostgresArchiveAudits(conn), saga_id="saga-v2"))
        assert audit.ok, audit
        assert audit.head_seq == 5
        verdict = export_bundle(PostgresSagaBundles(conn), "saga-v2", tmp_path / "bundle")
    assert verdict.ok
    bundle = tmp_path / "bundle"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["canonical_form"] == "SGC2"
    events = _events(bundle)
    assert [e["form"] for e in events] == [2] * 5
    assert events[1]["commitments"] == dict(chain[1].commitments)
    code, out = check(bundle, signer.public_hex)
    assert code == 0, out
    altered = [dict(e) for e in events]
    altered[1]["payload"] = altered[1]["payload"].replace("order", "ORDER")
    _write(bundle, altered)
    code, out = check(bundle, signer.public_hex)
    assert code == 1
    assert "FAILED: edited at seq 2" in out
