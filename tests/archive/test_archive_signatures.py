"""Checkpoint signatures: one form signed, checked by another implementation, fail closed."""

from __future__ import annotations

import dataclasses

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.consumers.archive import Signer
from sagacity.consumers.archive._checkpoints import signature_valid


@pytest.fixture
def signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def _checkpoint(signer: Signer):
    return signer.sign(saga_id="sig-1", seq=7, hash="ab" * 32, signed_at_us=1_700_000_000_000_000)


def test_a_checkpoint_signature_verifies_over_exactly_the_signed_bytes(signer: Signer) -> None:
    checkpoint = _checkpoint(signer)
    assert signature_valid(signer.public_raw, checkpoint)
    # Exactly the signed bytes: any field changed, and it no longer verifies.
    for change in (
        {"seq": 8},
        {"hash": "ac" + "ab" * 31},
        {"saga_id": "sig-2"},
        {"signed_at_us": checkpoint.signed_at_us + 1},
    ):
        assert not signature_valid(signer.public_raw, dataclasses.replace(checkpoint, **change))


@pytest.mark.parametrize(
    ("signature", "public"),
    [
        ("zz" * 64, None),  # not hex
        ("00" * 63, None),  # too short
        ("00" * 64, None),  # well formed, wrong
        (None, bytes(32)),  # a small-order public key
        (None, b"\xff" * 32),  # not a curve point
        (None, b"\x01" * 31),  # not 32 bytes
    ],
)
def test_a_malformed_signature_or_key_is_invalid_never_an_error(
    signer: Signer, signature: str | None, public: bytes | None
) -> None:
    checkpoint = _checkpoint(signer)
    if signature is not None:
        checkpoint = dataclasses.replace(checkpoint, signature=signature)
    assert signature_valid(public or signer.public_raw, checkpoint) is False
