"""Deciding in Slack end to end (docs/operations/slack.md): real Kafka and PostgreSQL, the
approvals service as deployed, the bot's Web API calls received by a loopback Slack, and clicks
signed with the algorithm Slack documents.  Each attack is refused and journals nothing the
service's decision path would not journal for the same attempt in the console."""

from __future__ import annotations

import json
import time

import pytest

from sagacity import EventType, SagaStatus, verify
from sagacity.chain import payload_sha256
from sagacity.privacy._redaction import MASK
from sagacity.saga._scope import calling_as
from tests.console.conftest import saga_id
from tests.slack.conftest import ACCOUNT, SLACK_USERS, World, auth_text, button, shown_value
from tests.slack.loopback import CHANNEL, about, click_body

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
APPROVE, REJECT = "sagacity_approve", "sagacity_reject"
ALICE, BOB, CAROL = SLACK_USERS["alice"], SLACK_USERS["bob"], SLACK_USERS["carol"]


def _texts(message: dict[str, object]) -> str:
    return json.dumps(message, ensure_ascii=False)


def test_a_request_is_posted_approved_by_a_signed_click_and_resumed(world: World) -> None:
    saga = saga_id("slack")
    seq = world.gate(saga)
    request = next(e for e in world.entries(saga) if e.seq == seq)
    assert request.payload is not None
    message = world.posted(saga)
    call = world.slack.wait("chat.postMessage", about(saga))
    assert call.authorization == "Bearer xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"
    assert message["channel"] == CHANNEL
    # The payload as the console shows it: the account masked, never in clear.
    shown = _texts(message)
    assert ACCOUNT not in shown
    assert json.dumps(MASK, ensure_ascii=False).strip('"') in shown
    assert f'\\"order\\": \\"{saga}\\"' in shown
    # Its SHA-256 and the request entry's hash, and the buttons naming exactly that request.
    assert f"payload SHA-256: {payload_sha256(request.payload)}" in shown
    assert f"request entry hash: {request.hash}" in shown
    assert shown_value(message) == {"saga": saga, "seq": seq, "request_hash": request.hash}
    assert button(message, REJECT) is not None

    answer = world.click(ALICE, APPROVE, json.dumps(shown_value(message)))
    assert answer.status_code == 200, answer.text
    approvals = world.of(saga, E.APPROVED)
    assert [e.actor for e in approvals] == ["alice@example.com"]
    # The message is rewritten with the outcome and who decided, without its buttons.
    update = world.slack.wait("chat.update", about(saga))
    assert update.body["channel"] == CHANNEL
    assert world.server.slack is not None
    posted = world.server.slack.store.message(saga, seq)
    assert posted is not None
    assert (posted.channel, posted.ts) == (CHANNEL, update.body["ts"])
    assert "Approved by alice@example.com" in _texts(update.body)
    assert button(update.body, APPROVE) is None
    assert button(update.body, REJECT) is None

    # The saga resumes with that payload (the agent's clear account, redacted to the same).
    result = world.agent.resume_saga(
        saga,
        seq,
        json.dumps({"order": saga, "account": ACCOUNT, "amount": 120}, separators=(",", ":")),
    )
    assert result.status is SagaStatus.COMPLETED, result
    assert (saga, ACCOUNT, 120) in world.till.paid
    assert verify(world.entries(saga), saga_id=saga).ok

    # A second click on the stale message is refused, clearly, and decides nothing more.
    again = world.click(BOB, APPROVE, json.dumps(shown_value(message)))
    assert again.status_code == 200
    assert "Nothing was decided" in world.told(BOB, saga)
    assert [e.actor for e in world.of(saga, E.APPROVED)] == ["alice@example.com"]


def test_a_rejection_in_slack_is_journaled_and_the_message_rewritten(world: World) -> None:
    saga = saga_id("slack-no")
    seq = world.gate(saga)
    message = world.posted(saga)
    value = button(message, REJECT)
    assert value is not None
    assert world.click(BOB, REJECT, value["value"]).status_code == 200
    (rejected,) = world.of(saga, E.REJECTED)
    assert rejected.actor == "bob@example.com"
    assert rejected.seq > seq
    update = world.slack.wait("chat.update", about(saga))
    assert "Rejected by bob@example.com" in _texts(update.body)
    assert button(update.body, APPROVE) is None


def test_a_forged_signature_is_refused_and_nothing_journaled(world: World) -> None:
    saga = saga_id("forged")
    world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))
    answer = world.click(ALICE, APPROVE, value, secret="not-the-apps-signing-secret")
    assert answer.status_code == 401
    assert "signature does not verify" in answer.json()["detail"]
    assert world.of(saga, E.APPROVED) == []
    assert world.of(saga, E.APPROVAL_REFUSED) == []


def test_a_stale_timestamp_is_refused_and_nothing_journaled(world: World) -> None:
    saga = saga_id("stale")
    world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))
    # Signed correctly, six minutes ago: a captured body replayed later.
    answer = world.click(ALICE, APPROVE, value, at=int(time.time()) - 360)
    assert answer.status_code == 401
    assert "stale" in answer.json()["detail"]
    assert world.of(saga, E.APPROVED) == []


def test_a_replayed_body_is_refused_even_after_the_refusals_cause_is_gone(world: World) -> None:
    saga = saga_id("replay")
    world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))
    # dave clicks before his Slack user is mapped: refused, nothing decided.
    body = click_body("U0LATE", APPROVE, value)
    stamp = int(time.time())
    first = world.click("U0LATE", APPROVE, value, body=body, at=stamp)
    assert first.status_code == 200
    assert "not mapped to a principal" in world.told("U0LATE", saga)
    assert world.of(saga, E.APPROVED) == []
    # The operator maps him; the captured body, sent again as it was, must not act now.
    world.auth.write_text(auth_text(late="U0LATE"), encoding="utf-8")
    assert world.server.auth is not None
    world.wait_for(lambda: world.server.auth.by_slack_user("U0LATE"), "the mapping to load")  # type: ignore[union-attr]
    replay = world.click("U0LATE", APPROVE, value, body=body, at=stamp)
    assert replay.status_code == 401
    assert "already received" in replay.json()["detail"]
    assert world.of(saga, E.APPROVED) == []


def test_a_click_by_an_unmapped_slack_user_is_refused(world: World) -> None:
    saga = saga_id("unmapped")
    world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))
    answer = world.click("U0STRANGER", APPROVE, value)
    assert answer.status_code == 200  # Slack is answered; the clicker is told why
    told = world.told("U0STRANGER", saga)
    assert "U0STRANGER is not mapped to a principal" in told
    assert world.of(saga, E.APPROVED) == []
    assert world.of(saga, E.APPROVAL_REFUSED) == []


def test_a_click_naming_another_request_hash_is_refused(world: World) -> None:
    saga = saga_id("decoy")
    world.gate(saga)
    value = shown_value(world.posted(saga))
    decoy = {**value, "request_hash": "ab" * 32}  # a request the person was never shown
    answer = world.click(ALICE, APPROVE, json.dumps(decoy))
    assert answer.status_code == 200
    assert "Nothing was decided" in world.told(ALICE, saga)
    assert world.of(saga, E.APPROVED) == []
    assert len(world.of(saga, E.APPROVAL_REFUSED)) == 1
    # The real message still stands for the real request: it can still be approved.
    assert world.click(ALICE, APPROVE, json.dumps(value)).status_code == 200
    assert [e.actor for e in world.of(saga, E.APPROVED)] == ["alice@example.com"]


def test_a_click_by_a_principal_whose_scope_does_not_cover_the_tool_is_refused(
    world: World,
) -> None:
    saga = saga_id("scope")
    world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))
    answer = world.click(CAROL, APPROVE, value)  # carol decides only `charge`
    assert answer.status_code == 200
    assert "may not decide requests for tool 'pay'" in world.told(CAROL, saga)
    assert world.of(saga, E.APPROVED) == []


def test_a_click_by_the_requests_own_caller_is_refused(world: World) -> None:
    saga = saga_id("own")
    with calling_as("alice@example.com"):  # alice's own call, as a front journals it
        world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))
    answer = world.click(ALICE, APPROVE, value)
    assert answer.status_code == 200
    assert "nobody decides their own request" in world.told(ALICE, saga)
    assert world.of(saga, E.APPROVED) == []


def test_a_privileged_request_keeps_its_buttons_until_its_second_approver(world: World) -> None:
    saga = saga_id("two")
    world.gate_grant(saga)
    message = world.posted(saga)
    assert "0 of 2 signatures" in _texts(message)
    value = json.dumps(shown_value(message))
    assert world.click(ALICE, APPROVE, value).status_code == 200
    first = world.slack.wait("chat.update", about(saga))
    assert "Signed by alice@example.com so far" in _texts(first.body)
    assert button(first.body, APPROVE) is not None  # the second approver still decides here
    # alice cannot be both signatures.
    assert world.click(ALICE, APPROVE, value).status_code == 200
    assert "Nothing was decided" in world.told(ALICE, saga)
    assert world.click(BOB, APPROVE, value).status_code == 200
    assert [e.actor for e in world.of(saga, E.APPROVED)] == [
        "alice@example.com",
        "bob@example.com",
    ]
    final = world.slack.wait(
        "chat.update", lambda c: about(saga)(c) and "Approved by" in _texts(c.body)
    )
    assert "alice@example.com, bob@example.com" in _texts(final.body)
    assert button(final.body, APPROVE) is None


def test_a_request_decided_in_the_console_loses_its_buttons_in_slack(world: World) -> None:
    saga = saga_id("elsewhere")
    seq = world.gate(saga)
    message = world.posted(saga)
    auth = world.server.auth
    assert auth is not None
    bob = auth.by_slack_user(BOB)
    assert bob is not None
    # The console's form and the API call the same service method; no click in Slack.
    world.server.service.reject(bob, saga, seq, reason="not this one")
    update = world.slack.wait("chat.update", about(saga))
    assert "Rejected by bob@example.com" in _texts(update.body)
    assert button(update.body, APPROVE) is None
    assert button(message, APPROVE) is not None


def test_healthz_counts_what_slack_posted_decided_and_refused(world: World) -> None:
    saga = saga_id("counted")
    world.gate(saga)
    value = json.dumps(shown_value(world.posted(saga)))

    def counts() -> dict[str, int]:
        health = world.server.health()
        slack: dict[str, int] = health["slack"]
        return slack

    before = counts()
    assert before["posted"] >= 1
    forged = world.click(ALICE, APPROVE, value, secret="not-the-apps-signing-secret")
    assert forged.status_code == 401
    world.click("U0NOBODY", APPROVE, value)
    world.click(ALICE, APPROVE, value)
    assert [e.actor for e in world.of(saga, E.APPROVED)] == ["alice@example.com"]
    after = counts()
    assert {k: after[k] - before[k] for k in ("unauthenticated", "refused", "decided")} == {
        "unauthenticated": 1,
        "refused": 1,
        "decided": 1,
    }
    assert after["post_failures"] == before["post_failures"]
