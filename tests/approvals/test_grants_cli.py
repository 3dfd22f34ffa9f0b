"""``sagacity approvals grant / grants / revoke`` with click's CliRunner against a running
service over HTTP (its working table on a real PostgreSQL schema)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from sagacity import EventType
from sagacity.cli import main
from sagacity.entries import _attributes as attr

from .conftest import TOKENS, LiveService

pytestmark = pytest.mark.postgres
AWAITING = "[AWAITING_APPROVAL]"


def cli(live: LiveService, who: str, *args: str) -> Result:
    return CliRunner().invoke(
        main,
        ["approvals", "--url", live.url, *args],
        env={"SAGACITY_APPROVALS_TOKEN": TOKENS[who]},
        catch_exceptions=False,
    )


def test_grant_list_use_and_revoke_from_the_command_line(live: LiveService) -> None:
    talk = live.agent.conversation("cli-grant")
    assert talk.call(lambda: live.bank.send_wire_transfer("100", "alice")).startswith(AWAITING)
    granted = cli(
        live,
        "alice",
        "--json",
        "grant",
        "cli-grant",
        "send_wire_transfer",
        "--rule",
        'to == "alice"',
        "--for",
        "10m",
    )
    assert granted.exit_code == 0, granted.output
    grant = json.loads(granted.output)
    assert (grant["status"], grant["granted_by"]) == ("active", "alice@example.com")
    listed = cli(live, "alice", "grants", "cli-grant")
    assert grant["grant_id"] in listed.output
    assert "active" in listed.output
    # A wire to alice runs without a request; one to mallory goes to one.
    assert talk.call(lambda: live.bank.send_wire_transfer("5", "alice")) == "transfer-ok"
    assert talk.call(lambda: live.bank.send_wire_transfer("5", "mallory")).startswith(AWAITING)
    [intent] = [e for e in live.journal.entries("cli-grant") if e.event_type is EventType.INTENT]
    assert intent.attributes[attr.GRANT_ID] == grant["grant_id"]
    revoked = cli(live, "bob", "revoke", "cli-grant", grant["grant_id"])
    assert revoked.exit_code == 0, revoked.output
    assert "revoked by  bob@example.com" in revoked.output
    assert talk.call(lambda: live.bank.send_wire_transfer("6", "alice")).startswith(AWAITING)
    again = cli(live, "bob", "revoke", "cli-grant", grant["grant_id"])
    assert again.exit_code == 1
    assert "was revoked by bob@example.com" in again.output


def test_grants_refused_on_the_command_line_journal_nothing(live: LiveService) -> None:
    talk = live.agent.conversation("cli-refused")
    assert talk.call(lambda: live.bank.send_wire_transfer("1", "alice")).startswith(AWAITING)
    before = len(live.journal.entries("cli-refused"))
    privileged = cli(
        live, "alice", "grant", "cli-refused", "grant_agent_access", "--rule", 'role == "r"'
    )
    assert privileged.exit_code == 1
    assert "PRIVILEGED" in privileged.output
    scoped = cli(live, "eve", "grant", "cli-refused", "send_wire_transfer", "--rule", "amount <= 1")
    assert scoped.exit_code == 1
    assert "may not grant" in scoped.output
    bad = cli(live, "alice", "grant", "cli-refused", "send_wire_transfer", "--rule", "amount <=")
    assert bad.exit_code == 1
    assert "grant rule" in bad.output
    too_long = cli(
        live,
        "alice",
        "grant",
        "cli-refused",
        "send_wire_transfer",
        "--rule",
        "n == 1",
        "--for",
        "60d",
    )
    assert too_long.exit_code == 1
    assert len(live.journal.entries("cli-refused")) == before


def test_a_second_grant_by_the_same_approver_and_no_grant_in_their_own_agents_saga(
    live: LiveService,
) -> None:
    """An approver's earlier grant does not make the saga theirs; a saga opened by an agent
    bound to dave (agents = ["agent@example.com"]) is one he may not grant in."""
    from sagacity import Sagacity

    from .tools import Bank

    talk = live.agent.conversation("cli-twice")
    assert talk.call(lambda: live.bank.send_wire_transfer("1", "alice")).startswith(AWAITING)
    for rule in ('to == "alice"', 'to == "bob"'):
        granted = cli(live, "alice", "grant", "cli-twice", "send_wire_transfer", "--rule", rule)
        assert granted.exit_code == 0, granted.output
    davids = Sagacity(live.journal, compensation="delegated", writer_id="agent@example.com")
    bank = davids.wrap(Bank())
    own = davids.conversation("cli-own")
    assert own.call(lambda: bank.send_wire_transfer("1", "alice")).startswith(AWAITING)
    before = len(live.journal.entries("cli-own"))
    refused = cli(live, "dave", "grant", "cli-own", "send_wire_transfer", "--rule", "amount <= 1")
    assert refused.exit_code == 1
    assert "agent@example.com, an identity of dave@example.com" in refused.output
    assert len(live.journal.entries("cli-own")) == before
