"""Auth files and settings: malformed configuration is refused with a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagacity.consumers._tools import load_tools
from sagacity.consumers.approvals import (
    ApprovalsSettings,
    AuthConfig,
    AuthFile,
    auth_entry,
    token_sha256,
)
from sagacity.errors import ConfigurationError


def test_json_and_toml_auth_files_map_tokens_to_principals(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text(
        json.dumps(
            {"principals": [{"name": "ops", "token_sha256": token_sha256("t1"), "tools": ["*"]}]}
        )
    )
    config = AuthConfig.load(path)
    principal = config.authenticate("t1")
    assert principal is not None
    assert principal.may_decide("anything")
    assert config.authenticate("t2") is None
    toml = tmp_path / "auth.toml"
    toml.write_text(auth_entry("a", "t3", ["x"]))
    assert AuthConfig.load(toml).authenticate("t3") is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "non-empty 'principals'"),
        ("principals = 3", "non-empty 'principals'"),
        ('[[principals]]\nname = ""\ntoken_sha256 = "' + "a" * 64 + '"', "'name'"),
        ('[[principals]]\nname = "a"\ntoken_sha256 = "plaintext"', "64 lowercase hex"),
        ('[[principals]]\nname = "a"\ntoken_sha256 = "' + "a" * 64 + '"\ntools = "x"', "'tools'"),
        (
            '[[principals]]\nname = "a"\ntoken_sha256 = "' + "a" * 64 + '"\n'
            '[[principals]]\nname = "b"\ntoken_sha256 = "' + "a" * 64 + '"',
            "listed twice",
        ),
        ("not = [toml", "does not parse"),
    ],
)
def test_malformed_auth_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "auth.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        AuthConfig.load(path)


def test_a_missing_auth_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read auth file"):
        AuthConfig.load(tmp_path / "nope.toml")


def test_settings_require_a_database_and_authentication() -> None:
    with pytest.raises(ConfigurationError, match="needs PostgreSQL"):
        ApprovalsSettings.from_env({})
    with pytest.raises(ConfigurationError, match="authenticates approvers"):
        ApprovalsSettings.from_env({"SAGACITY_DATABASE_URL": "postgresql://x/y"})
    settings = ApprovalsSettings.from_env(
        {
            "SAGACITY_DATABASE_URL": "postgresql://shared/db",
            "SAGACITY_APPROVALS_DATABASE_URL": "postgresql://own/db",
            "SAGACITY_APPROVALS_AUTH_FILE": "/etc/auth.toml",
            "SAGACITY_APPROVALS_APPROVAL_TTL_S": "0",
        },
        port=9999,
        host=None,
    )
    assert settings.database_url == "postgresql://own/db"
    assert settings.port == 9999
    assert settings.host == "127.0.0.1"
    assert settings.approval_ttl_s is None
    with pytest.raises(ConfigurationError, match=r"port \(SAGACITY_APPROVALS_PORT\): .*integer"):
        ApprovalsSettings.from_env({"SAGACITY_DATABASE_URL": "x", "SAGACITY_APPROVALS_PORT": "p"})
    grouped = ApprovalsSettings.from_env(
        {"SAGACITY_DATABASE_URL": "x", "SAGACITY_APPROVALS_GROUP": "g2", "SAGACITY_TOPIC": "t2"},
        insecure_dev=True,
    )
    assert (grouped.group_id, grouped.topic) == ("g2", "t2")
    with pytest.raises(ConfigurationError, match="authenticates approvers"):
        # --insecure-dev is an option only, never read from a variable
        ApprovalsSettings.from_env(
            {"SAGACITY_DATABASE_URL": "x", "SAGACITY_APPROVALS_INSECURE_DEV": "1"}
        )


def test_tool_specs_must_import() -> None:
    [bank] = load_tools(["tests.approvals.tools:Bank"])
    assert hasattr(bank, "send_wire_transfer")
    for spec, message in (
        ("tests.approvals.tools", "is not of the form package.module:attr"),
        ("no.such.module:x", "cannot import 'no.such.module'"),
        ("tests.approvals.tools:Nope", "has no attribute 'Nope'"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            load_tools([spec])


def test_every_error_family_maps_to_a_documented_status() -> None:
    from sagacity import errors
    from sagacity.consumers.approvals._statuses import status_for

    expected = {
        errors.AuthenticationError: 401,
        errors.PermissionDeniedError: 403,
        errors.UnknownSagaError: 404,
        errors.ApprovalNotFound: 404,
        errors.InvalidArgumentError: 422,
        errors.SerializationError: 422,
        errors.AlreadyDecidedError: 409,
        errors.DecisionInProgressError: 409,
        errors.ApprovalMissingError: 409,
        errors.PayloadMismatchError: 409,
        errors.StepInDoubtError: 409,
        errors.UnverifiableApprovalError: 409,
        errors.ConstraintViolation: 409,
        errors.ApprovalExpiredError: 409,
        errors.ChainIntegrityError: 409,
        errors.WriterConflictError: 409,
        errors.TailMovedError: 409,
        errors.DeclarationError: 503,
        errors.JournalUnavailableError: 503,
        errors.PersistenceError: 503,
    }
    for error, status in expected.items():
        assert status_for(error("x")) == status, error


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def test_an_edited_auth_file_takes_effect_after_the_check_interval(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    path.write_text(auth_entry("alice", "t-alice", ["*"]))
    clock = FakeClock()
    auth = AuthFile(path, check_interval_s=2.0, clock=clock)
    assert auth.authenticate("t-alice") is not None
    # Alice's token is revoked and Bob's added, by an atomic rename as editors and
    # configuration managers do.
    _write_atomically(path, auth_entry("bob", "t-bob", ["send_wire_transfer"]))
    clock.now += 1.0
    assert auth.authenticate("t-alice") is not None, "looked at the file before the interval"
    clock.now += 1.5
    assert auth.authenticate("t-alice") is None
    bob = auth.authenticate("t-bob")
    assert bob is not None
    assert bob.tools == frozenset({"send_wire_transfer"})
    assert (auth.reloads, auth.failures, auth.error) == (1, 0, None)
    # Rewritten in place with the same principals: re-read, still the same answer.
    path.write_text(auth_entry("bob", "t-bob", ["send_wire_transfer"]) + "\n")
    clock.now += 2.0
    assert auth.authenticate("t-bob") is not None
    assert auth.reloads == 2


@pytest.mark.parametrize(
    "breakage",
    ["unparsable", "deleted"],
)
def test_a_broken_edit_fails_closed_until_the_file_loads_again(
    tmp_path: Path, breakage: str
) -> None:
    path = tmp_path / "auth.toml"
    path.write_text(auth_entry("alice", "t-alice", ["*"]) + auth_entry("mallory", "t-m", ["*"]))
    clock = FakeClock()
    auth = AuthFile(path, check_interval_s=1.0, clock=clock)
    assert auth.authenticate("t-m") is not None
    # The operator revokes Mallory's token but the edit is botched: the old principals (Mallory
    # included) must not stay in force.
    if breakage == "unparsable":
        path.write_text(auth_entry("alice", "t-alice", ["*"]) + "[[principals]\n")
        expected = "does not parse"
    else:
        path.unlink()
        expected = "cannot read auth file"
    clock.now += 1.0
    for token in ("t-m", "t-alice"):
        with pytest.raises(ConfigurationError, match=expected) as refused:
            auth.authenticate(token)
        assert "decisions are refused until the auth file loads again" in str(refused.value)
    assert auth.failures == 1, "one broken edit is counted once, however often it is looked at"
    assert auth.error is not None
    assert expected in auth.error
    path.write_text(auth_entry("alice", "t-alice", ["*"]))
    clock.now += 1.0
    assert auth.authenticate("t-alice") is not None
    assert auth.authenticate("t-m") is None
    assert auth.error is None
    assert auth.reloads == 1


def test_an_auth_file_that_does_not_load_at_start_up_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "auth.toml"
    path.write_text("principals = 3")
    with pytest.raises(ConfigurationError, match="non-empty 'principals'"):
        AuthFile(path)


def test_console_and_notification_settings_from_the_environment() -> None:
    base = {"SAGACITY_DATABASE_URL": "postgresql://x/y", "SAGACITY_APPROVALS_AUTH_FILE": "a"}
    settings = ApprovalsSettings.from_env(
        {
            **base,
            "SAGACITY_APPROVALS_NOTIFY": "https://a.example/h https://b.example/h",
            "SAGACITY_APPROVALS_NOTIFY_FORMAT": "slack",
            "SAGACITY_APPROVALS_NOTIFY_BEFORE_EXPIRY_S": "60",
            "SAGACITY_APPROVALS_PUBLIC_URL": "https://approvals.example",
            "SAGACITY_APPROVALS_CONSOLE_SESSION_TTL_S": "600",
        }
    )
    assert settings.notify == ("https://a.example/h", "https://b.example/h")
    assert settings.notify_format == "slack"
    assert settings.notify_before_expiry_s == 60
    assert settings.public_url == "https://approvals.example"
    assert settings.console_session_ttl_s == 600
    with pytest.raises(ConfigurationError, match="--notify-format must be json or slack"):
        ApprovalsSettings.from_env({**base, "SAGACITY_APPROVALS_NOTIFY_FORMAT": "xml"})
