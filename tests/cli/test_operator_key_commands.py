"""The operator key's commands: ``keys operator-keygen`` and the commands that sign with it
(``saga compensate``, ``erase --apply``) refuse a missing or unusable key in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.signing._operator_signature import OperatorSigner, OperatorVerifier

# No broker nor database is reached: every case stops at the key, before connecting.
_ENV = {
    "SAGACITY_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "SAGACITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
    "SAGACITY_OPERATOR_SIGNING_KEY": "",
    "SAGACITY_KEY_ENCRYPTION_KEY_FILE": "",
}


def _run(*args: str, **env: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={**_ENV, **env})
    return result.exit_code, result.stdout + result.stderr


def test_operator_keygen_writes_a_key_and_prints_what_to_pin(tmp_path: Path) -> None:
    out = tmp_path / "operator.pem"
    code, text = _run("keys", "operator-keygen", "--out", str(out))
    assert code == 0, text
    signer = OperatorSigner.from_file(out)
    assert f"SAGACITY_OPERATOR_PUBLIC_KEY={signer.public_hex}" in text
    assert f"key id:       {signer.key_id}" in text
    assert out.stat().st_mode & 0o777 == 0o600
    assert OperatorVerifier.parse(signer.public_hex).key_ids == (signer.key_id,)
    code, text = _run("keys", "operator-keygen", "--out", str(out))
    assert code == 2
    assert text.strip().splitlines() == [
        f"error: {out} exists; refusing to overwrite a signing key"
    ]


COMMANDS = [
    ("saga", "compensate", "--saga", "s-1", "--reason", "refund"),
    ("erase", "--saga", "s-1", "--reason", "art. 17", "--apply"),
]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_signing_command_without_the_operator_key_says_how_to_get_one(
    command: tuple[str, ...],
) -> None:
    code, text = _run(*command)
    assert code == 2, text
    assert "no operator key: pass --operator-key FILE or set SAGACITY_OPERATOR_SIGNING_KEY" in text
    assert "Traceback" not in text


@pytest.mark.parametrize("command", COMMANDS)
def test_a_signing_command_with_an_unusable_key_names_it_in_one_line(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    bad = tmp_path / "not-a-key.pem"
    bad.write_text("hello")
    code, text = _run(*command, "--operator-key", str(bad))
    assert code == 2, text
    assert f"--operator-key: {bad} is not a PEM private key" in text
    assert "Traceback" not in text
    missing = tmp_path / "missing.pem"
    code, text = _run(*command, SAGACITY_OPERATOR_SIGNING_KEY=str(missing))
    assert code == 2, text
    assert f"cannot read signing key {missing}" in text
    assert "Traceback" not in text


def test_a_malformed_pinned_operator_key_is_named() -> None:
    code, text = _run(
        "erase", "--saga", "s-1", "--reason", "r", SAGACITY_OPERATOR_PUBLIC_KEY="not-a-key"
    )
    assert code == 2, text
    assert "SAGACITY_OPERATOR_PUBLIC_KEY: operator public key 'not-a-key'" in text
    assert "Traceback" not in text
