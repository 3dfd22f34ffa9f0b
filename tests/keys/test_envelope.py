"""The envelope without a database: sealing, tampering, misplacing, and the KEK file."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity.errors import (
    CiphertextAuthenticationError,
    InvalidArgumentError,
    KeyEncryptionKeyError,
)
from sagacity.privacy._envelope import (
    KEK_SETTING,
    SEAL_OVERHEAD,
    DataKey,
    KeyEncryptionKey,
    KeyRing,
    write_key_encryption_key,
)

PAYLOAD = b'{"name":"Ada Lovelace","card":"4111111111111111"}'


def test_a_sealed_field_opens_to_its_plaintext_and_hides_it() -> None:
    key, _ = DataKey.generate("s-1")
    sealed = key.seal(4, "payload", PAYLOAD)
    assert len(sealed) == len(PAYLOAD) + SEAL_OVERHEAD
    assert b"Lovelace" not in sealed
    assert key.open(4, "payload", sealed) == PAYLOAD
    assert key.seal(4, "payload", PAYLOAD) != sealed  # a fresh nonce each time


@pytest.mark.parametrize("bit", [0, 35, 4 * 8, 16 * 8 + 3, -1])
def test_one_altered_bit_fails_authentication(bit: int) -> None:
    key, _ = DataKey.generate("s-1")
    sealed = bytearray(key.seal(4, "payload", PAYLOAD))
    index = bit // 8 if bit >= 0 else len(sealed) - 1
    sealed[index] ^= 1 << (bit % 8 if bit >= 0 else 0)
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed") as caught:
        key.open(4, "payload", bytes(sealed))
    assert (caught.value.saga_id, caught.value.seq, caught.value.field) == ("s-1", 4, "payload")


@pytest.mark.parametrize(
    ("saga_id", "seq", "field"),
    [("s-2", 4, "payload"), ("s-1", 5, "payload"), ("s-1", 4, "result")],
)
def test_a_field_moved_to_another_place_fails_authentication(
    saga_id: str, seq: int, field: str
) -> None:
    raw = DataKey.generate("s-1")[1]
    sealed = DataKey.of("s-1", raw).seal(4, "payload", PAYLOAD)
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        DataKey.of(saga_id, raw).open(seq, field, sealed)


def test_a_truncated_or_foreign_blob_fails_authentication() -> None:
    key, _ = DataKey.generate("s-1")
    with pytest.raises(CiphertextAuthenticationError, match="not a sealed field"):
        key.open(1, "payload", b"SGE1short")
    with pytest.raises(CiphertextAuthenticationError, match="not a sealed field"):
        key.open(1, "payload", PAYLOAD)


def test_only_bytes_are_sealed() -> None:
    key, _ = DataKey.generate("s-1")
    with pytest.raises(InvalidArgumentError, match="must be bytes, not str"):
        key.seal(1, "payload", PAYLOAD.decode())  # type: ignore[arg-type]


def test_a_wrapped_key_opens_only_under_its_kek_and_for_its_saga(tmp_path: Path) -> None:
    kek = write_key_encryption_key(tmp_path / "a.kek")
    other = write_key_encryption_key(tmp_path / "b.kek")
    raw = DataKey.generate("s-1")[1]
    wrapped = kek.wrap("s-1", raw)
    assert raw not in wrapped
    assert kek.unwrap("s-1", wrapped) == raw
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        other.unwrap("s-1", wrapped)
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        kek.unwrap("s-2", wrapped)
    altered = bytearray(wrapped)
    altered[20] ^= 0x80
    with pytest.raises(CiphertextAuthenticationError, match="authentication failed"):
        kek.unwrap("s-1", bytes(altered))


def test_the_kek_file_is_private_never_overwritten_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "k.kek"
    kek = write_key_encryption_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert KeyEncryptionKey.from_file(path).key_id == kek.key_id
    before = path.read_bytes()
    with pytest.raises(KeyEncryptionKeyError, match="refusing to overwrite"):
        write_key_encryption_key(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "does not exist"),
        ("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI\n", "is not a key-encryption key"),
        ("sagacity-kek-1:zz", "is not a key-encryption key"),
        ("sagacity-kek-1:" + "ab" * 16, "is not a key-encryption key"),
        ("ab" * 32, "is not a key-encryption key"),
        (b"\xff\xfe", "cannot read"),
    ],
)
def test_a_bad_kek_file_is_refused_naming_the_setting(
    tmp_path: Path, content: str | bytes | None, problem: str
) -> None:
    path = tmp_path / "k.kek"
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(KeyEncryptionKeyError, match=problem) as caught:
        KeyRing.from_setting(str(path))
    assert caught.value.setting == KEK_SETTING
    assert caught.value.message.startswith(f"{KEK_SETTING}: ")


@pytest.mark.parametrize("value", [None, "", " , "])
def test_an_unset_kek_setting_is_refused_naming_it(value: str | None) -> None:
    with pytest.raises(KeyEncryptionKeyError, match=f"{KEK_SETTING}: not set"):
        KeyRing.from_setting(value)


def test_a_keyring_names_its_keys_primary_first(tmp_path: Path) -> None:
    new = write_key_encryption_key(tmp_path / "new.kek")
    old = write_key_encryption_key(tmp_path / "old.kek")
    ring = KeyRing.from_setting(f"{tmp_path / 'new.kek'}, {tmp_path / 'old.kek'}")
    assert ring.key_ids == (new.key_id, old.key_id)
    assert ring.primary.key_id == new.key_id
    assert ring.get(old.key_id) is not None
    assert ring.get("0" * 16) is None
