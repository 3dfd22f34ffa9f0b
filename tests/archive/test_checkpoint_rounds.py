"""Signing rounds (docs/adr/0012-checkpoint-rounds.md): the Merkle tree, its inclusion proofs
and the signed round, checked against RFC 6962's definition and the standalone verifier's own
implementation (both must agree byte for byte)."""

from __future__ import annotations

import hashlib
import random

import pytest

from sagacity.consumers.archive import verify_bundle
from sagacity.consumers.archive._checkpoints import (
    RootBuilder,
    generate_key,
    inclusion_proof,
    leaf_hash,
    merkle_root,
    root_from_proof,
    round_message,
    signature_valid,
)


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, as written there: split at the largest power of two below n."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _leaves(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [
        leaf_hash(saga_id=f"s-{i}", seq=rng.randint(1, 99), hash=rng.randbytes(32).hex())
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [*range(1, 34), 64, 65, 100, 127, 128, 129])
def test_root_proofs_and_streaming_agree_with_rfc6962(n):
    leaves = _leaves(n, seed=n)
    root = merkle_root(leaves)
    assert root == _mth(leaves)
    builder = RootBuilder()
    for leaf in leaves:
        builder.add(leaf)
    assert (builder.count, builder.root()) == (n, root)
    for index, leaf in enumerate(leaves):
        proof = inclusion_proof(leaves, index)
        assert len(proof) <= n.bit_length()
        assert root_from_proof(leaf, index, n, proof) == root
        assert verify_bundle.root_from_proof(leaf, index, n, proof) == root


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_a_proof_proves_nothing_else(n):
    leaves = _leaves(n, seed=100 + n)
    root = merkle_root(leaves)
    for index, leaf in enumerate(leaves):
        proof = inclusion_proof(leaves, index)
        other = leaves[(index + 1) % n]
        assert root_from_proof(other, index, n, proof) != root  # another leaf at this place
        for wrong in {index ^ 1, index + 1, index - 1} - {index}:
            assert root_from_proof(leaf, wrong, n, proof) != root  # this leaf elsewhere
        for position in range(len(proof)):
            bad = list(proof)
            bad[position] = bytes(32)
            assert root_from_proof(leaf, index, n, bad) != root
        assert root_from_proof(leaf, index, n, [*proof, bytes(32)]) is None  # too long
    assert root_from_proof(leaves[0], n, n, []) is None


def test_leaf_bytes_are_the_documented_ones():
    """0x00 then "SGCL1" and the length-prefixed fields (interior nodes start with 0x01)."""
    expected = hashlib.sha256(
        b"\x00SGCL1"
        + b"\x00\x00\x00\x01s"
        + b"\x00\x00\x00\x08"
        + (1).to_bytes(8, "big")
        + b"\x00\x00\x00\x40"
        + b"ab" * 32
    ).digest()
    assert leaf_hash(saga_id="s", seq=1, hash="ab" * 32) == expected
    a, b = _leaves(2)
    assert merkle_root([a, b]) == hashlib.sha256(b"\x01" + a + b).digest()


def test_standalone_verifier_agrees_on_leaves_and_round_messages(tmp_path):
    for saga, seq, hash in [("s-1", 1, "00" * 32), ("é ✓", 2**40, "ff" * 32)]:
        assert verify_bundle.leaf_hash(saga, seq, hash) == leaf_hash(
            saga_id=saga, seq=seq, hash=hash
        )
    signer = generate_key(tmp_path / "k.pem")
    root = merkle_root(_leaves(5)).hex()
    prev = "cd" * 32
    signed = signer.sign_round(
        round_id=7, leaf_count=5, root=root, prev_root=prev, signed_at_us=123
    )
    assert signed.message() == round_message(
        round_id=7, leaf_count=5, root=root, prev_root=prev, signed_at_us=123, key_id=signer.key_id
    )
    as_manifest = {
        "round_id": 7,
        "leaf_count": 5,
        "root": root,
        "prev_root": prev,
        "signed_at_us": 123,
        "key_id": signer.key_id,
    }
    assert verify_bundle.round_message(as_manifest) == signed.message()
    assert signature_valid(signer.public_raw, signed)
    assert verify_bundle.ed25519_verify(
        signer.public_raw, signed.message(), bytes.fromhex(signed.signature)
    )
    for field, value in [
        ("round_id", 8),
        ("leaf_count", 4),
        ("root", "00" * 32),
        ("prev_root", "00" * 32),
    ]:
        other = {**as_manifest, field: value}
        assert not verify_bundle.ed25519_verify(
            signer.public_raw, verify_bundle.round_message(other), bytes.fromhex(signed.signature)
        )


def test_an_empty_tree_is_refused():
    with pytest.raises(ValueError, match="at least one leaf"):
        merkle_root([])
    with pytest.raises(ValueError, match="not in a tree"):
        inclusion_proof(_leaves(3), 3)
    assert RootBuilder().root() is None
