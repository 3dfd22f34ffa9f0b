"""The log of signing rounds (docs/adr/0015-round-log.md), pure parts: RFC 9162 consistency
proofs against the RFC's own definition for many sizes, proofs built from a frontier instead of
the older leaves, and the SGCR2 bytes the package and the standalone verifier sign and check."""

from __future__ import annotations

import hashlib
import random

import pytest

from sagacity.consumers.archive import verify_bundle
from sagacity.consumers.archive._checkpoints import (
    generate_key,
    leaf_hash,
    log_round_message,
    signature_valid,
)
from sagacity.consumers.archive._merkle import (
    RootBuilder,
    consistency_proof,
    consistency_ranges,
    decode_frontier,
    encode_frontier,
    inclusion_proof,
    inclusion_ranges,
    merkle_root,
    range_roots,
    verify_consistency,
)


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1: split at the largest power of two below n."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """RFC 9162 section 2.1.4.1, SUBPROOF as written there."""
    n = len(leaves)
    if m == n:
        return [] if whole else [_mth(leaves)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return [*_subproof(m, leaves[:k], whole), _mth(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), _mth(leaves[:k])]


def _leaves(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [
        leaf_hash(saga_id=f"s-{i}", seq=rng.randint(1, 99), hash=rng.randbytes(32).hex())
        for i in range(n)
    ]


_SIZES = [*range(1, 34), 63, 64, 65, 100, 127, 128, 129]


def test_consistency_proofs_are_rfc9162s_and_verify():
    for n in _SIZES:
        _check_consistency_proofs(n)


def _check_consistency_proofs(n: int) -> None:
    leaves = _leaves(n, seed=n)
    new_root = _mth(leaves)
    for m in range(1, n + 1):
        old_root = _mth(leaves[:m])
        proof = consistency_proof(leaves, m)
        assert proof == _subproof(m, leaves, True)
        assert verify_consistency(m, n, old_root, new_root, proof)
        # Built from the old tree's frontier and only the leaves after it, as the archive does.
        before = RootBuilder()
        for leaf in leaves[:m]:
            before.add(leaf)
        ranges = consistency_ranges(m, n)
        roots = range_roots(ranges, leaves[m:], base=m, frontier=before.frontier())
        assert [roots[r] for r in ranges] == proof


def test_a_consistency_proof_proves_nothing_else():
    for n in (2, 3, 5, 8, 13, 33):
        _check_proves_nothing_else(n)


def _check_proves_nothing_else(n: int) -> None:
    leaves = _leaves(n, seed=200 + n)
    forked = [*leaves[:-1], hashlib.sha256(b"other").digest()]
    for m in range(1, n):
        proof = consistency_proof(leaves, m)
        old_root, new_root = _mth(leaves[:m]), _mth(leaves)
        # A history that differs before m (a fork) has another old root: the proof fails.
        other_old = _mth([hashlib.sha256(b"x").digest(), *leaves[1:m]])
        assert not verify_consistency(m, n, other_old, new_root, proof)
        assert not verify_consistency(m, n, old_root, _mth(forked), proof)
        for position in range(len(proof)):
            bad = list(proof)
            bad[position] = bytes(32)
            assert not verify_consistency(m, n, old_root, new_root, bad)
        assert not verify_consistency(m, n, old_root, new_root, [*proof, bytes(32)])
        assert not verify_consistency(m, n, old_root, new_root, [])
    assert verify_consistency(n, n, _mth(leaves), _mth(leaves), [])
    assert not verify_consistency(n, n, _mth(leaves), _mth(forked), [])
    assert not verify_consistency(0, n, b"", _mth(leaves), [])


def test_inclusion_proofs_from_any_frontier_are_rfc6962s():
    """An inclusion proof in the log needs only the frontier before a leaf's round and that
    round's leaves (the bundle's proofs are built so)."""
    for n in (1, 2, 7, 16, 33):
        _check_inclusion_from_frontiers(n)


def _check_inclusion_from_frontiers(n: int) -> None:
    leaves = _leaves(n, seed=300 + n)
    root = merkle_root(leaves)
    for index in range(n):
        expected = inclusion_proof(leaves, index)
        ranges = inclusion_ranges(index, n)
        for base in range(index + 1):
            before = RootBuilder()
            for leaf in leaves[:base]:
                before.add(leaf)
            roots = range_roots(ranges, leaves[base:], base=base, frontier=before.frontier())
            proof = [roots[r] for r in ranges]
            assert proof == expected
            assert verify_bundle.root_from_proof(leaves[index], index, n, proof) == root


def test_the_frontier_round_trips_and_continues_the_log():
    leaves = _leaves(45, seed=9)
    builder = RootBuilder()
    for leaf in leaves[:29]:
        builder.add(leaf)
    text = encode_frontier(builder.frontier())
    assert len(decode_frontier(text)) == bin(29).count("1")
    resumed = RootBuilder.from_frontier(29, decode_frontier(text))
    for leaf in leaves[29:]:
        resumed.add(leaf)
    assert (resumed.count, resumed.root()) == (45, _mth(leaves))
    with pytest.raises(ValueError, match="frontier of 29 leaves"):
        RootBuilder.from_frontier(29, decode_frontier(text)[:-1])
    with pytest.raises(ValueError, match="32-byte"):
        decode_frontier("ab" * 33)
    with pytest.raises(ValueError, match="not a subtree"):
        range_roots(
            [(0, 3)], [], base=4, frontier=RootBuilder.from_frontier(4, [b"1" * 32]).frontier()
        )
    with pytest.raises(ValueError, match="only 5 were given"):
        range_roots([(0, 8)], leaves[:5])


def test_standalone_verifier_agrees_on_log_rounds(tmp_path):
    """SGCR2: magic, then round id, tree size, leaf count, root, previous root, time, key id;
    every field is covered (changing any one breaks the signature)."""
    signer = generate_key(tmp_path / "k.pem")
    hashes = [hashlib.sha256(bytes([i])).hexdigest() for i in range(11)]
    leaves = [leaf_hash(saga_id=f"s-{i}", seq=i + 1, hash=h) for i, h in enumerate(hashes)]
    root = merkle_root(leaves).hex()
    signed = signer.sign_log_round(
        round_id=4, tree_size=11, leaf_count=3, root=root, prev_root="cd" * 32, signed_at_us=5
    )
    expected = (
        b"SGCR2"
        + b"\x00\x00\x00\x08"
        + (4).to_bytes(8, "big")
        + b"\x00\x00\x00\x08"
        + (11).to_bytes(8, "big")
        + b"\x00\x00\x00\x08"
        + (3).to_bytes(8, "big")
        + b"\x00\x00\x00\x40"
        + root.encode()
        + b"\x00\x00\x00\x40"
        + b"cd" * 32
        + b"\x00\x00\x00\x08"
        + (5).to_bytes(8, "big")
        + b"\x00\x00\x00\x10"
        + signer.key_id.encode()
    )
    assert signed.message() == expected
    assert signed.message() == log_round_message(
        round_id=4,
        tree_size=11,
        leaf_count=3,
        root=root,
        prev_root="cd" * 32,
        signed_at_us=5,
        key_id=signer.key_id,
    )
    assert signature_valid(signer.public_raw, signed)
    as_manifest = {
        "round_id": 4,
        "format": "SGCR2",
        "tree_size": 11,
        "leaf_count": 3,
        "root": root,
        "prev_root": "cd" * 32,
        "signed_at_us": 5,
        "key_id": signer.key_id,
    }
    assert verify_bundle.round_message(as_manifest) == expected
    signature = bytes.fromhex(signed.signature)
    assert verify_bundle.ed25519_verify(signer.public_raw, expected, signature)
    for name, value in [
        ("round_id", 5),
        ("tree_size", 12),
        ("leaf_count", 4),
        ("root", "00" * 32),
        ("prev_root", "00" * 32),
        ("signed_at_us", 6),
        ("format", "SGCR1"),
    ]:
        other = {**as_manifest, name: value}
        assert not verify_bundle.ed25519_verify(
            signer.public_raw, verify_bundle.round_message(other), signature
        ), name
    # A checkpoint's place in the log: the round's first leaf plus its index in the round.
    for index in range(3):
        place = 8 + index
        checkpoint = {
            "seq": place + 1,
            "hash": hashes[place],
            "signed_at_us": 5,
            "key_id": signer.key_id,
            "leaf_index": index,
            "proof": [p.hex() for p in inclusion_proof(leaves, place)],
        }
        verify_bundle.check_in_round(f"s-{place}", checkpoint, as_manifest)
        for moved in ({"leaf_index": (index + 1) % 3}, {"hash": hashes[(place + 1) % 11]}):
            with pytest.raises(verify_bundle.VerificationError, match="bad_signature"):
                verify_bundle.check_in_round(f"s-{place}", {**checkpoint, **moved}, as_manifest)


def test_a_witness_over_http_keeps_what_was_posted(tmp_path):
    """An http(s) witness receives each round as a JSON POST; verify and the auditor read it
    back with GET.  A witness that answers with something else is an error, not a pass."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sagacity.consumers.archive._witness import publish, read
    from sagacity.errors import WitnessError

    kept: list[bytes] = []

    class Witness(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            kept.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def do_GET(self) -> None:
            body = kept[-1] if kept else b"nothing"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Witness)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/latest"
    try:
        with pytest.raises(WitnessError, match="holds no signed round"):
            read(url)
        signer = generate_key(tmp_path / "k.pem")
        signed = signer.sign_log_round(
            round_id=3, tree_size=9, leaf_count=4, root="ab" * 32, signed_at_us=7
        )
        publish(url, signed, public_hex=signer.public_hex)
        assert json.loads(kept[-1])["public_key"] == signer.public_hex
        assert read(url) == signed
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(WitnessError, match="refused the round"):
        publish(url, signed, public_hex=signer.public_hex)
