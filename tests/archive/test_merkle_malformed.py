"""Every Merkle proof check refuses hashes that are not 32 bytes (RFC 9162's nodes are
SHA-256 digests): a leaf, a root or a proof node of another size proves nothing, in the
archive (``_merkle``) and in the standalone bundle verifier alike."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from sagacity.consumers.archive import _merkle, verify_bundle
from sagacity.consumers.archive._merkle import RootBuilder, inclusion_proof, merkle_root

LEAVES = [hashlib.sha256(bytes([i])).digest() for i in range(5)]
ROOT = merkle_root(LEAVES)
PROOF = inclusion_proof(LEAVES, 2)
MALFORMED = [b"", bytes(31), bytes(33), bytes(64)]

RootFromProof = Callable[[bytes, int, int, list[bytes]], bytes | None]
VERIFIERS: list[RootFromProof] = [_merkle.root_from_proof, verify_bundle.root_from_proof]


@pytest.mark.parametrize("root_from_proof", VERIFIERS)
def test_a_well_formed_proof_still_leads_to_its_root(root_from_proof: RootFromProof) -> None:
    assert root_from_proof(LEAVES[2], 2, 5, list(PROOF)) == ROOT


@pytest.mark.parametrize("root_from_proof", VERIFIERS)
@pytest.mark.parametrize("bad", MALFORMED)
def test_a_leaf_that_is_not_32_bytes_proves_nothing(
    root_from_proof: RootFromProof, bad: bytes
) -> None:
    assert root_from_proof(bad, 0, 1, []) is None  # an empty leaf was a one-leaf tree
    assert root_from_proof(bad, 2, 5, list(PROOF)) is None


@pytest.mark.parametrize("root_from_proof", VERIFIERS)
@pytest.mark.parametrize("bad", MALFORMED)
def test_a_proof_node_that_is_not_32_bytes_proves_nothing(
    root_from_proof: RootFromProof, bad: bytes
) -> None:
    for position in range(len(PROOF)):
        path = list(PROOF)
        path[position] = bad
        assert root_from_proof(LEAVES[2], 2, 5, path) is None


@pytest.mark.parametrize("bad", MALFORMED)
def test_the_inclusion_checks_refuse_a_root_that_is_not_32_bytes(bad: bytes) -> None:
    assert not _merkle.verify_inclusion(bad, 0, 1, [], bad)
    assert not _merkle.verify_inclusion(LEAVES[2], 2, 5, PROOF, bad)
    assert _merkle.verify_inclusion(LEAVES[2], 2, 5, PROOF, ROOT)
    assert not verify_bundle.verify_inclusion(bad, 0, 1, [], bad)
    assert not verify_bundle.verify_inclusion(LEAVES[2], 2, 5, list(PROOF), bad)
    assert verify_bundle.verify_inclusion(LEAVES[2], 2, 5, list(PROOF), ROOT)


@pytest.mark.parametrize("bad", MALFORMED)
def test_a_consistency_proof_with_a_malformed_hash_proves_nothing(bad: bytes) -> None:
    assert not _merkle.verify_consistency(1, 1, bad, bad, [])  # equal empty roots
    old_root, new_root = merkle_root(LEAVES[:3]), ROOT
    proof = _merkle.consistency_proof(LEAVES, 3)
    assert _merkle.verify_consistency(3, 5, old_root, new_root, proof)
    assert not _merkle.verify_consistency(3, 5, bad, new_root, proof)
    assert not _merkle.verify_consistency(3, 5, old_root, bad, proof)
    for position in range(len(proof)):
        path = list(proof)
        path[position] = bad
        assert not _merkle.verify_consistency(3, 5, old_root, new_root, path)


@pytest.mark.parametrize("bad", MALFORMED)
def test_trees_are_built_from_32_byte_leaves_only(bad: bytes) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        merkle_root([LEAVES[0], bad])
    with pytest.raises(ValueError, match="32 bytes"):
        RootBuilder().add(bad)
