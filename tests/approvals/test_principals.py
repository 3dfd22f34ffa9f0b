"""The principals file's roles, and ``sagacity approvals token-hash`` writing them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sagacity.cli import main
from sagacity.consumers.approvals import AuthConfig, Role, auth_entry, token_sha256
from sagacity.consumers.approvals._auth import agent_only
from sagacity.errors import ConfigurationError, PermissionDeniedError

HASH = "a" * 64


def _load(tmp_path: Path, text: str) -> AuthConfig:
    path = tmp_path / "auth.toml"
    path.write_text(text)
    return AuthConfig.load(path)


def test_roles_are_read_and_an_entry_without_one_stays_an_approver_of_every_tool(
    tmp_path: Path,
) -> None:
    config = _load(
        tmp_path,
        "\n".join(
            [
                # Written before roles: an approver, of every tool.
                '[[principals]]\nname = "old"\ntoken_sha256 = "' + token_sha256("t-old") + '"',
                auth_entry("claude@alice", "t-agent", ["send_wire"], role="agent"),
                auth_entry("alice", "t-alice", ["send_wire"], agents=["claude@alice"]),
                auth_entry("audit", "t-audit", role="auditor"),
            ]
        ),
    )
    old = config.authenticate("t-old")
    agent = config.authenticate("t-agent")
    alice = config.authenticate("t-alice")
    audit = config.authenticate("t-audit")
    assert old is not None
    assert agent is not None
    assert alice is not None
    assert audit is not None
    assert old.role is Role.APPROVER
    assert old.may_decide("anything")
    # An agent calls its tools and decides and reads nothing.
    assert agent.role is Role.AGENT
    assert agent.may_call("send_wire")
    assert not agent.may_call("grant")
    assert not agent.may_decide("send_wire")
    assert not agent.may_read(["send_wire"])
    assert agent.visible_tools() == []
    # An approver decides its tools, reads the sagas naming one, calls nothing over MCP.
    assert alice.may_decide("send_wire")
    assert not alice.may_decide("grant")
    assert alice.may_read(["reserve", "send_wire"])
    assert not alice.may_read(["reserve"])
    assert not alice.may_call("send_wire")
    assert alice.identities == {"alice", "claude@alice"}
    # An auditor reads everything and decides nothing.
    assert audit.may_read(["anything"])
    assert audit.visible_tools() is None
    assert not audit.may_decide("anything")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('role = "admin"\ntools = ["*"]', "'role' must be one of approver, agent, auditor"),
        ('role = "agent"', "an agent names its 'tools'"),
        ('role = "approver"\ntools = []', "an approver names its 'tools'"),
        ('role = "auditor"\ntools = ["*"]', "an auditor reads every saga and decides none"),
        ('role = "agent"\ntools = ["*"]\nagents = ["x"]', "only an approver lists 'agents'"),
        ('role = "approver"\ntools = ["*"]\nagents = "x"', "'agents' must be a list of names"),
    ],
)
def test_malformed_role_entries_are_refused(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        _load(tmp_path, f'[[principals]]\nname = "p"\ntoken_sha256 = "{HASH}"\n{entry}\n')


def test_one_name_holds_one_role(tmp_path: Path) -> None:
    text = auth_entry("alice", "t1", ["*"]) + auth_entry("alice", "t2", ["*"], role="agent")
    with pytest.raises(ConfigurationError, match="'alice' is listed as approver and as agent"):
        _load(tmp_path, text)
    # Two tokens of one approver (a rotation) are fine.
    rotated = _load(tmp_path, auth_entry("alice", "t1", ["*"]) + auth_entry("alice", "t2", ["*"]))
    assert len(rotated) == 2


def test_only_an_agent_passes_the_mcp_servers_check(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[[principals]]\nname = "old"\ntoken_sha256 = "'
        + token_sha256("t-old")
        + '"\n'
        + auth_entry("bot", "t-bot", ["*"], role="agent")
        + auth_entry("audit", "t-audit", role="auditor"),
    )
    bot = agent_only(config.authenticate("t-bot"))
    assert bot is not None
    assert bot.name == "bot"
    assert agent_only(config.authenticate("unknown")) is None
    with pytest.raises(PermissionDeniedError) as refused:
        agent_only(config.authenticate("t-old"))
    # One line that says what is wrong and what to do.
    assert "\n" not in refused.value.message
    assert "old is an approver, not an agent" in refused.value.message
    assert "an entry without a role is an approver" in refused.value.message
    assert "token-hash --role agent" in refused.value.message
    with pytest.raises(PermissionDeniedError, match="audit is an auditor, not an agent"):
        agent_only(config.authenticate("t-audit"))


def _token_hash(*args: str) -> Result:
    return CliRunner().invoke(main, ["approvals", "token-hash", *args], input="secret-token\n")


def test_token_hash_writes_the_role_and_every_tool_only_when_asked(tmp_path: Path) -> None:
    # An approver without --tool no longer gets every tool by accident.
    bare = _token_hash("--name", "dana@example.com")
    assert bare.exit_code == 2
    assert "--all-tools" in bare.output
    everything = _token_hash("--name", "dana@example.com", "--all-tools", "--agent", "bot-7")
    agent = _token_hash("--name", "bot-7", "--role", "agent", "--tool", "send_wire")
    audit = _token_hash("--name", "audit@example.com", "--role", "auditor")
    for result in (everything, agent, audit):
        assert result.exit_code == 0, result.output
    assert 'role = "approver"' in everything.output
    path = tmp_path / "auth.toml"
    path.write_text(everything.output)
    dana = AuthConfig.load(path).authenticate("secret-token")
    assert dana is not None
    assert dana.role is Role.APPROVER
    assert dana.may_decide("anything")
    assert dana.agents == {"bot-7"}
    path.write_text(agent.output)
    bot = AuthConfig.load(path).authenticate("secret-token")
    assert bot is not None
    assert bot.role is Role.AGENT
    assert bot.may_call("send_wire")
    assert not bot.may_call("grant")
    path.write_text(audit.output)
    auditor = AuthConfig.load(path).authenticate("secret-token")
    assert auditor is not None
    assert auditor.role is Role.AUDITOR


def test_token_hash_writes_an_approvers_groups_and_slack_user(tmp_path: Path) -> None:
    made = _token_hash(
        "--name",
        "ann@example.com",
        "--tool",
        "send_wire",
        "--group",
        "finance",
        "--group",
        "treasury",
        "--slack-user",
        "U024BE7LH",
    )
    assert made.exit_code == 0, made.output
    path = tmp_path / "auth.toml"
    path.write_text(made.output)
    config = AuthConfig.load(path)
    ann = config.authenticate("secret-token")
    assert ann is not None
    assert ann.groups == {"finance", "treasury"}
    assert config.by_slack_user("U024BE7LH") == ann


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "a", "--role", "agent"], "an agent needs its tools"),
        (["--name", "a", "--tool", "x", "--all-tools"], "not both"),
        (["--name", "a", "--role", "auditor", "--tool", "x"], "an auditor reads every saga"),
        (["--name", "a", "--role", "agent", "--all-tools", "--agent", "b"], "only with --role"),
        (["--role", "agent"], "give --name"),
        (["--name", "a", "--role", "agent", "--tool", "x", "--group", "g"], "only with --role"),
        (["--name", "a", "--role", "auditor", "--slack-user", "U1"], "only with --role"),
        (["--name", "a", "--all-tools", "--slack-user", "bob"], "must be a Slack user id"),
        (["--slack-user", "U024BE7LH"], "give --name"),
    ],
)
def test_token_hash_refuses_an_entry_that_says_too_little_or_too_much(
    args: list[str], message: str
) -> None:
    result = _token_hash(*args)
    assert result.exit_code == 2
    assert message in result.output


def test_a_json_principals_file_carries_roles_too(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    path.write_text(
        json.dumps(
            {
                "principals": [
                    {
                        "name": "bot",
                        "role": "agent",
                        "token_sha256": token_sha256("t"),
                        "tools": ["x"],
                    }
                ]
            }
        )
    )
    bot = AuthConfig.load(path).authenticate("t")
    assert bot is not None
    assert bot.role is Role.AGENT
