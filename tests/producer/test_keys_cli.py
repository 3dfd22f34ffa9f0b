"""The key commands and files: approvals decision keys, writer keys and the writer registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity._env import kafka_journal, kafka_settings_from_env
from sagacity.cli import main
from sagacity.errors import ConfigurationError, SigningKeyError
from sagacity.signing._decision_signature import DecisionSigner
from sagacity.signing._writer_signature import Reason, WriterKey, WriterRegistry

HASH = "ab" * 32


def test_approvals_keygen_writes_a_private_key_and_prints_the_public_one(tmp_path: Path) -> None:
    out = tmp_path / "approvals.pem"
    done = CliRunner().invoke(main, ["approvals", "keygen", "--out", str(out)])
    assert done.exit_code == 0, done.output
    signer = DecisionSigner.from_file(out)
    assert f"public key:  {signer.public_hex}" in done.output
    assert out.stat().st_mode & 0o777 == 0o600
    again = CliRunner().invoke(main, ["approvals", "keygen", "--out", str(out)])
    assert again.exit_code != 0
    assert "refusing to overwrite" in again.output


@pytest.mark.parametrize("flag", [[], ["--hmac"]])
def test_writer_keygen_prints_the_registry_entry_that_verifies_its_events(
    tmp_path: Path, flag: list[str]
) -> None:
    out = tmp_path / "w.key"
    done = CliRunner().invoke(
        main, ["archive", "writer-keygen", "--writer", "agent-7", "--out", str(out), *flag]
    )
    assert done.exit_code == 0, done.output
    registry_file = tmp_path / "writers.toml"
    registry_file.write_text(done.output)
    registry = WriterRegistry.from_file(registry_file)
    key = WriterKey.from_file(out, "agent-7")
    signature = key.sign(saga_id="s", seq=3, hash=HASH)
    ok = registry.check(writer="agent-7", saga_id="s", seq=3, hash=HASH, signature=signature)
    assert ok is None
    moved = registry.check(writer="agent-7", saga_id="s", seq=4, hash=HASH, signature=signature)
    assert moved is not None
    assert moved[0] == Reason.BAD_SIGNATURE
    other = registry.check(writer="agent-8", saga_id="s", seq=3, hash=HASH, signature=signature)
    assert other is not None
    assert other[0] == Reason.UNREGISTERED
    unsigned = registry.check(writer="agent-7", saga_id="s", seq=3, hash=HASH, signature=None)
    assert unsigned is not None
    assert unsigned[0] == Reason.UNSIGNED


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("writers = 3", "must be a table"),
        ('[writers."a"]\nhmac_sha256 = "zz"', "not hex"),
        ('[writers."a"]\nhmac_sha256 = "00"', "not a valid key"),
        ('[writers."a"]\ned25519 = "00"\nhmac_sha256 = "00"', "exactly one"),
        ("[writers", "writer registry"),
    ],
)
def test_a_bad_writer_registry_is_refused_clearly(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "writers.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=problem):
        WriterRegistry.from_file(path)


def test_a_writer_key_needs_a_stable_writer_id(tmp_path: Path) -> None:
    key = tmp_path / "w.key"
    key.write_text("hmac-sha256:" + "11" * 32)
    settings = kafka_settings_from_env(
        {"SAGACITY_BOOTSTRAP_SERVERS": "127.0.0.1:1", "SAGACITY_WRITER_KEY": str(key)}
    )
    with pytest.raises(ConfigurationError, match="SAGACITY_WRITER_ID"):
        kafka_journal(settings)
    key.write_text("hmac-sha256:11")
    with pytest.raises(SigningKeyError, match="at least 16 bytes"):
        WriterKey.from_file(key, "w")
    key.write_text("nonsense")
    with pytest.raises(SigningKeyError, match="not a PEM private key"):
        WriterKey.from_file(key, "w")
