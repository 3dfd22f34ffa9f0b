"""Standing grants on a real Kafka journal: used, exceeded, revoked, expired, refused, forged.

An agent's conversation saga asks once for ``pay``; the approvals desk (its own process's
journal, the approvals key) grants ``pay`` for the saga under argument rules and a deadline;
later calls the rules describe run without a request, their ``INTENT`` and ``EXECUTED`` naming
the grant.  A rogue writer (any producer to the topic) tries to make a grant of its own count:
unsigned, signed by another key, copied from another saga, for a PRIVILEGED or an ungrantable
tool — none covers a call (docs/operations/grants.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sagacity import EntryDraft, EventType, Reversibility, Sagacity, compensable
from sagacity.chain._grammar import check
from sagacity.entries import _attributes as attr
from sagacity.errors import GrantRefusedError, SagacityError, WriterConflictError
from sagacity.gate._grants import sign_grant
from sagacity.producer import KafkaJournal
from sagacity.signing._decision_signature import DecisionSigner

pytestmark = [pytest.mark.kafka]
E = EventType
AWAITING = "[AWAITING_APPROVAL]"
MINUTE_US = 60_000_000


class Payments:
    """The agent's tools: ``pay`` may be granted; ``close_account`` is declared not
    grantable; ``make_admin`` is PRIVILEGED."""

    def __init__(self) -> None:
        self.paid: list[tuple[Any, str]] = []
        self.closed: list[str] = []
        self.admins: list[str] = []

    @compensable(reversibility=Reversibility.IRREVERSIBLE, effect_key=None)
    def pay(self, amount: Any, to: str) -> str:
        self.paid.append((amount, to))
        return f"paid {amount} to {to}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE, grantable=False, effect_key=None)
    def close_account(self, account: str) -> str:
        self.closed.append(account)
        return "closed"

    @compensable(reversibility=Reversibility.PRIVILEGED, effect_key=None)
    def make_admin(self, user: str) -> str:
        self.admins.append(user)
        return "admin"


@dataclass
class Clock:
    now_us: int = 1_900_000_000_000_000

    def __call__(self) -> int:
        return self.now_us


@dataclass
class Setup:
    """An agent, the approvals desk and a rogue writer on one fresh topic."""

    agent: Sagacity
    desk: Sagacity
    rogue: KafkaJournal
    payments: Payments
    tools: Any
    clock: Clock
    key: DecisionSigner
    journals: list[KafkaJournal] = field(default_factory=list)

    def talk(self, saga_id: str) -> Any:
        return self.agent.conversation(saga_id)

    def gated(self, saga_id: str) -> Any:
        """The conversation, after its first ``pay`` asked for approval (the saga handed off,
        so the desk may write to it)."""
        talk = self.talk(saga_id)
        assert talk.call(lambda: self.tools.pay(10, "a@x")).startswith(AWAITING)
        self.agent.journal.flush()
        return talk

    def grant(self, saga_id: str, *rules: str, tool: str = "pay", minutes: int = 10) -> Any:
        return self.desk.grant(
            saga_id,
            tool,
            list(rules),
            expires_at_us=self.clock.now_us + minutes * MINUTE_US,
            grantor="alice@example.com",
        )

    def entries(self, saga_id: str, kind: EventType | None = None) -> list[Any]:
        chain = self.desk.journal.entries(saga_id)
        return [e for e in chain if kind is None or e.event_type is kind]


@pytest.fixture
def setup(
    kafka_bootstrap: str, make_topic: Callable[..., str], approvals_key: DecisionSigner
) -> Iterator[Setup]:
    topic = make_topic(partitions=3)

    def journal(writer: str) -> KafkaJournal:
        return KafkaJournal(kafka_bootstrap, topic=topic, writer_id=writer, ack_timeout_s=10.0)

    clock = Clock()
    agent_journal, desk_journal, rogue = journal("agent-1"), journal("approvals-1"), journal("x")
    agent = Sagacity(
        agent_journal,
        compensation="delegated",
        approvals_public_key=approvals_key.public_hex,
        clock=clock,
    )
    desk = Sagacity(
        desk_journal, compensation="delegated", decision_signer=approvals_key, clock=clock
    )
    payments = Payments()
    tools = agent.wrap(payments)
    desk.wrap(Payments())
    made = Setup(agent, desk, rogue, payments, tools, clock, approvals_key)
    made.journals = [agent_journal, desk_journal, rogue]
    yield made
    for j in made.journals:
        with contextlib.suppress(SagacityError):
            j.close()


def test_a_call_within_the_rules_runs_without_a_request(setup: Setup) -> None:
    talk = setup.gated("used")
    view = setup.grant("used", "amount <= 100", 'to in ["a@x", "b@x"]')
    assert view.status == "active"
    assert talk.call(lambda: setup.tools.pay(60, "b@x")) == "paid 60 to b@x"
    # A string amount is not a number: the rule cannot judge it, so it is not covered.
    assert talk.call(lambda: setup.tools.pay("100.00", "a@x")).startswith(AWAITING)
    setup.agent.journal.flush()
    assert setup.payments.paid == [(60, "b@x")]
    [intent] = setup.entries("used", E.INTENT)
    grant_id = view.grant.grant_id
    assert intent.attributes[attr.GRANT_ID] == grant_id
    assert intent.attributes[attr.GRANT_SEQ] == str(view.grant.seq)
    [executed] = setup.entries("used", E.EXECUTED)
    assert executed.attributes[attr.GRANT_ID] == grant_id
    assert len(setup.entries("used", E.AWAITING_APPROVAL)) == 2  # the first ask, the string
    assert check(setup.entries("used")) == []
    talk.end()


def test_a_call_beyond_the_rules_goes_to_a_request(setup: Setup) -> None:
    talk = setup.gated("exceeded")
    setup.grant("exceeded", "amount <= 100", 'to in ["a@x", "b@x"]')
    for amount, to in ((101, "a@x"), (50, "c@x")):
        assert talk.call(lambda a=amount, t=to: setup.tools.pay(a, t)).startswith(AWAITING)
    setup.agent.journal.flush()
    assert setup.payments.paid == []
    requests = setup.entries("exceeded", E.AWAITING_APPROVAL)
    assert [r.payload for r in requests[1:]] == [
        '{"amount":101,"to":"a@x"}',
        '{"amount":50,"to":"c@x"}',
    ]
    assert setup.entries("exceeded", E.INTENT) == []


def test_a_revoked_grant_covers_no_later_call(setup: Setup) -> None:
    talk = setup.gated("revoked")
    view = setup.grant("revoked", "amount <= 100")
    assert talk.call(lambda: setup.tools.pay(1, "a@x")) == "paid 1 to a@x"
    setup.agent.journal.flush()
    revoked = setup.desk.revoke_grant("revoked", view.grant.grant_id, "bob@example.com")
    assert (revoked.status, revoked.revoked_by) == ("revoked", "bob@example.com")
    [revocation] = setup.entries("revoked", E.GRANT_REVOKED)
    assert revocation.attributes[attr.GRANT_SIGNATURE].startswith("SGCG1:")
    assert talk.call(lambda: setup.tools.pay(2, "a@x")).startswith(AWAITING)
    setup.agent.journal.flush()
    assert setup.payments.paid == [(1, "a@x")]
    assert check(setup.entries("revoked")) == []
    with pytest.raises(SagacityError, match=r"revoked by bob@example\.com"):
        setup.desk.revoke_grant("revoked", view.grant.grant_id, "bob@example.com")


def test_a_grant_lapses_at_its_deadline_by_the_agents_clock(setup: Setup) -> None:
    talk = setup.gated("expired")
    setup.grant("expired", "amount <= 100", minutes=5)
    assert talk.call(lambda: setup.tools.pay(1, "a@x")) == "paid 1 to a@x"
    setup.clock.now_us += 5 * MINUTE_US  # the deadline itself: lapsed
    assert talk.call(lambda: setup.tools.pay(2, "a@x")).startswith(AWAITING)
    setup.agent.journal.flush()
    assert setup.payments.paid == [(1, "a@x")]
    [view] = setup.desk.grants("expired")
    assert view.status == "expired"


def test_privileged_and_ungrantable_tools_are_refused_at_grant_time(setup: Setup) -> None:
    setup.gated("refused")
    before = len(setup.entries("refused"))
    for tool, why in (("make_admin", "PRIVILEGED"), ("close_account", "grantable = false")):
        with pytest.raises(GrantRefusedError, match=why):
            setup.grant("refused", 'user == "x"', tool=tool)
    with pytest.raises(GrantRefusedError, match="grant rule"):
        setup.grant("refused", "amount <= 100 or 1 == 1")
    with pytest.raises(GrantRefusedError, match="deadline"):
        setup.grant("refused", "amount <= 1", minutes=0)
    assert len(setup.entries("refused")) == before  # nothing journaled


def _forge(
    setup: Setup,
    saga_id: str,
    tool: str,
    *,
    sign: DecisionSigner | None,
    journal: str | None = None,
) -> None:
    """A GRANTED the rogue writer appends to ``saga_id``, as the desk would word it."""
    opened = setup.entries(saga_id, E.SAGA_OPENED)[0]
    draft = EntryDraft(
        saga_id=saga_id,
        event_type=E.GRANTED,
        tool=tool,
        actor="alice@example.com",
        attributes={
            attr.GRANT_ID: f"forged-{tool}",
            attr.GRANT_RULES: '["amount <= 1000000"]' if tool == "pay" else '["user == \\"m\\""]',
            attr.GRANT_EXPIRES_AT_US: str(setup.clock.now_us + 10 * MINUTE_US),
            attr.GRANT_AGENT: opened.attributes[attr.WRITER],
            attr.JOURNAL: journal or setup.agent.journal_identity,
        },
        recorded_at_us=setup.clock.now_us,
    )
    setup.rogue.append(sign_grant(sign, draft) if sign else draft, durable=True)


def test_privileged_and_ungrantable_tools_are_ignored_at_use_time(setup: Setup) -> None:
    """Even a grant the approvals key signed (a compromised or mistaken desk) covers no call of
    a PRIVILEGED tool or one this process declares not grantable."""
    talk = setup.gated("ignored")
    _forge(setup, "ignored", "make_admin", sign=setup.key)
    _forge(setup, "ignored", "close_account", sign=setup.key)
    assert talk.call(lambda: setup.tools.make_admin("m")).startswith(AWAITING)
    assert talk.call(lambda: setup.tools.close_account("acc-1")).startswith(AWAITING)
    setup.agent.journal.flush()
    assert (setup.payments.admins, setup.payments.closed) == ([], [])


@pytest.mark.parametrize("forgery", ["unsigned", "another_key", "another_journal"])
def test_a_forged_grant_covers_nothing(setup: Setup, forgery: str) -> None:
    """Unsigned; signed by a key nobody pins; or signed by the approvals key for another
    journal (a grant made there, copied here)."""
    talk = setup.gated(f"forged-{forgery}")
    sign = {"unsigned": None, "another_key": DecisionSigner.ephemeral()}.get(forgery, setup.key)
    elsewhere = "kafka:another-cluster/sagacity.journal" if forgery == "another_journal" else None
    _forge(setup, f"forged-{forgery}", "pay", sign=sign, journal=elsewhere)
    assert talk.call(lambda: setup.tools.pay(5, "a@x")).startswith(AWAITING)
    setup.agent.journal.flush()
    assert setup.payments.paid == []
    [view] = setup.desk.grants(f"forged-{forgery}")
    assert view.status == "not counted"
    assert (
        view.reason
        == {
            "unsigned": "unsigned_grant",
            "another_key": "unknown_grant_key",
            "another_journal": "grant_for_another_journal",
        }[forgery]
    )


def test_a_grant_copied_from_another_saga_covers_nothing(setup: Setup) -> None:
    setup.gated("saga-a")
    genuine = setup.grant("saga-a", "amount <= 100").grant.entry
    talk = setup.gated("saga-b")
    copy = EntryDraft(
        saga_id="saga-b",
        event_type=genuine.event_type,
        tool=genuine.tool,
        actor=genuine.actor,
        attributes=dict(genuine.attributes),
        recorded_at_us=genuine.recorded_at_us,
    )
    setup.rogue.append(copy, durable=True)
    assert talk.call(lambda: setup.tools.pay(5, "a@x")).startswith(AWAITING)
    setup.agent.journal.flush()
    assert setup.payments.paid == []
    [view] = setup.desk.grants("saga-b")
    assert (view.status, view.reason) == ("not counted", "bad_grant_signature")


def test_a_grant_for_another_agents_saga_covers_nothing_here(
    setup: Setup, kafka_bootstrap: str
) -> None:
    """A second agent (another writer) that continues the saga's calls after the hand-off is
    not the agent the grant names."""
    setup.gated("agents")
    setup.grant("agents", "amount <= 100")
    other_journal = KafkaJournal(
        kafka_bootstrap,
        topic=setup.agent.journal.topic,  # type: ignore[attr-defined]
        writer_id="agent-2",
    )
    setup.journals.append(other_journal)
    other = Sagacity(
        other_journal,
        compensation="delegated",
        approvals_public_key=setup.key.public_hex,
        clock=setup.clock,
    )
    other_payments = Payments()
    tools = other.wrap(other_payments)
    judged = other.covering_grant(
        other.registry.get("pay").definition,  # type: ignore[union-attr]
        "agents",
        '{"amount":5,"to":"a@x"}',
    )
    assert judged is None
    assert tools is not None
    mine = setup.agent.covering_grant(
        setup.agent.registry.get("pay").definition,  # type: ignore[union-attr]
        "agents",
        '{"amount":5,"to":"a@x"}',
    )
    assert mine is not None


def test_a_grant_is_refused_while_the_agent_holds_its_saga(setup: Setup) -> None:
    """Before its first request hands the saga off, the agent holds it: the desk's grant is
    refused by the journal's single-writer rule, and nothing is appended."""
    setup.talk("held")  # SAGA_OPENED: the agent holds the saga
    setup.agent.journal.flush()
    before = len(setup.entries("held"))
    with pytest.raises(WriterConflictError, match="open by writer"):
        setup.grant("held", "amount <= 100")
    assert len(setup.entries("held")) == before
