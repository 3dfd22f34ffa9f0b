"""The Slack integration's edges without a broker: its configuration, the principals' Slack
users, the reading of a click, and the signature gate's refusals in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sagacity.cli import main
from sagacity.consumers.approvals import ApprovalsSettings, AuthConfig
from sagacity.consumers.approvals.slack import slack_config
from sagacity.consumers.approvals.slack._click import parse_click
from sagacity.errors import ConfigurationError, InvalidArgumentError
from tests.slack.loopback import click_body

HASH = "ab" * 32
VALUE = json.dumps({"saga": "s-1", "seq": 3, "request_hash": HASH})


def _settings(tmp_path: Path, **slack: Any) -> ApprovalsSettings:
    auth = tmp_path / "auth.toml"
    auth.write_text("", encoding="utf-8")
    return ApprovalsSettings(database_url="postgresql://nowhere/x", auth_file=str(auth), **slack)


def _files(tmp_path: Path, secret: str = "s3cret\n", token: str = "xoxb-1\n") -> dict[str, str]:
    (tmp_path / "secret").write_text(secret, encoding="utf-8")
    (tmp_path / "token").write_text(token, encoding="utf-8")
    return {
        "slack_signing_secret_file": str(tmp_path / "secret"),
        "slack_bot_token_file": str(tmp_path / "token"),
        "slack_channel": "C0APPROVALS",
    }


def test_no_slack_setting_is_no_slack(tmp_path: Path) -> None:
    assert slack_config(_settings(tmp_path)) is None


def test_the_secrets_are_read_from_their_files(tmp_path: Path) -> None:
    config = slack_config(_settings(tmp_path, **_files(tmp_path)))
    assert config is not None
    assert (config.signing_secret, config.bot_token) == ("s3cret", "xoxb-1")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"slack_signing_secret_file": "/nonexistent/secret"}, "cannot read the file"),
        ({"slack_bot_token_file": None}, "needs both"),
        ({"slack_channel": None}, "needs --slack-channel"),
    ],
)
def test_a_broken_slack_setting_is_a_clear_error(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    given = {**_files(tmp_path), **change}
    with pytest.raises(ConfigurationError, match=message):
        slack_config(_settings(tmp_path, **{k: v for k, v in given.items() if v is not None}))


def test_an_empty_secret_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"--slack-bot-token-file .*: the file is empty"):
        slack_config(_settings(tmp_path, **_files(tmp_path, token="\n")))


def test_slack_without_principals_is_refused(tmp_path: Path) -> None:
    settings = ApprovalsSettings(
        database_url="postgresql://nowhere/x", insecure_dev=True, **_files(tmp_path)
    )
    with pytest.raises(ConfigurationError, match="needs the principals file"):
        slack_config(settings)


def test_the_command_names_the_missing_file_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SAGACITY_BOOTSTRAP_SERVERS", "SAGACITY_APPROVALS_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(name, raising=False)
    auth = tmp_path / "auth.toml"
    auth.write_text('[[principals]]\nname = "a"\ntoken_sha256 = "' + "0" * 64 + '"\n')
    (tmp_path / "token").write_text("xoxb-1\n", encoding="utf-8")
    result = CliRunner().invoke(
        main,
        [
            "serve",
            "approvals",
            "--auth",
            str(auth),
            "--database-url",
            "postgresql://nowhere/x",
            "--slack-signing-secret-file",
            str(tmp_path / "missing"),
            "--slack-bot-token-file",
            str(tmp_path / "token"),
            "--slack-channel",
            "C0APPROVALS",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--slack-signing-secret-file" in result.output
    assert "cannot read the file" in result.output


def _principals(*extra: str) -> str:
    base = '[[principals]]\nname = "alice"\nrole = "approver"\ntools = ["*"]\n'
    return "\n".join(
        base.replace("alice", f"p{i}") + f'token_sha256 = "{str(i) * 64}"\n' + line
        for i, line in enumerate(extra, start=1)
    )


def test_a_principal_is_found_by_its_slack_user() -> None:
    import tomllib

    config = AuthConfig.from_mapping(tomllib.loads(_principals('slack_user = "U024BE7LH"\n', "")))
    found = config.by_slack_user("U024BE7LH")
    assert found is not None
    assert found.name == "p1"
    assert config.by_slack_user("U0OTHER") is None


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (('slack_user = "alice"\n',), "must be a Slack user id"),
        (('slack_user = "U024BE7LH\\n"\n',), "must be a Slack user id"),
        (('slack_user = "U024BE7LH"\n', 'slack_user = "U024BE7LH"\n'), "one Slack user"),
    ],
)
def test_a_bad_slack_user_is_refused(entries: tuple[str, ...], message: str) -> None:
    import tomllib

    with pytest.raises(ConfigurationError, match=message):
        AuthConfig.from_mapping(tomllib.loads(_principals(*entries)))


def test_an_agent_has_no_slack_user() -> None:
    import tomllib

    text = _principals('slack_user = "U024BE7LH"\n').replace('"approver"', '"agent"')
    with pytest.raises(ConfigurationError, match="only an approver has a 'slack_user'"):
        AuthConfig.from_mapping(tomllib.loads(text))


def test_a_click_names_its_user_button_and_request() -> None:
    click = parse_click(click_body("U0ALICE", "sagacity_approve", VALUE))
    assert click is not None
    assert (click.user, click.approve, click.saga_id, click.seq) == ("U0ALICE", True, "s-1", 3)
    assert click.request_hash == HASH


def test_the_console_link_decides_nothing() -> None:
    assert parse_click(click_body("U0ALICE", "sagacity_open", "")) is None


@pytest.mark.parametrize(
    "body",
    [
        b"not a form",
        b"payload=%7Bnot-json",
        click_body("alice", "sagacity_approve", VALUE),
        click_body("U0ALICE", "sagacity_approve", json.dumps({"saga": "s-1", "seq": 0})),
        click_body("U0ALICE", "sagacity_approve", json.dumps({"saga": "s 1", "seq": 3})),
        click_body("U0ALICE", "sagacity_approve", json.dumps({"saga": "s-1", "seq": True})),
        click_body(
            "U0ALICE", "sagacity_approve", json.dumps({"saga": "s-1", "seq": 3, "request_hash": 7})
        ),
    ],
)
def test_a_malformed_click_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_click(body)


def test_two_entries_of_one_approver_may_share_its_slack_user() -> None:
    import tomllib

    line = 'slack_user = "U024BE7LH"\n'
    text = _principals(line, line).replace('name = "p2"', 'name = "p1"')
    found = AuthConfig.from_mapping(tomllib.loads(text)).by_slack_user("U024BE7LH")
    assert found is not None
    assert found.name == "p1"


def _row(payload: str, *, entry_hash: str | None = HASH) -> Any:
    from sagacity.chain import payload_sha256
    from sagacity.ports import RequestRow, RowState

    return RequestRow(
        saga_id="s-1",
        seq=3,
        tool="<https://evil.example|pay>",
        payload=payload,
        payload_sha256=payload_sha256(payload),
        requested_at_us=1,
        expires_at_us=None,
        signatures_required=1,
        policy_version="1",
        reversibility="IRREVERSIBLE",
        state=RowState.PENDING,
        signed_by=(),
        decision=None,
        decided_by=None,
        decided_at_us=None,
        decision_policy_version=None,
        closed_at_us=None,
        entry_hash=entry_hash,
    )


def _buttons(message: Any) -> list[str]:
    return [
        element["action_id"]
        for block in message.blocks
        if block["type"] == "actions"
        for element in block["elements"]
    ]


def test_a_payload_too_long_to_show_whole_cannot_be_approved_in_slack() -> None:
    from sagacity.consumers.approvals.slack._blocks import MAX_SHOWN, request_message

    message = request_message(_row(json.dumps({"x": "y" * MAX_SHOWN})), public_url="http://h")
    assert _buttons(message) == ["sagacity_reject", "sagacity_open"]
    assert "too long to show here whole" in json.dumps(message.blocks)


def test_a_request_without_its_entry_hash_cannot_be_approved_in_slack() -> None:
    from sagacity.consumers.approvals.slack._blocks import request_message

    message = request_message(_row('{"a":1}', entry_hash=None), public_url="http://h")
    assert "sagacity_approve" not in _buttons(message)


def test_a_writers_text_is_never_slack_markup() -> None:
    from sagacity.consumers.approvals.slack._blocks import request_message

    message = request_message(_row('{"note":"<!channel> <https://x|y>"}'), public_url="http://h")
    assert _buttons(message) == ["sagacity_approve", "sagacity_reject", "sagacity_open"]
    for block in message.blocks:
        for part in [block.get("text"), *block.get("elements", [])]:
            if isinstance(part, dict) and "type" in part and part["type"].endswith("text"):
                assert part["type"] in ("plain_text", "rich_text_preformatted", "text"), part
    assert "mrkdwn" not in json.dumps(message.blocks)
