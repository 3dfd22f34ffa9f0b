"""Routing, escalation, fallback, deadline extensions and M of N, on real Kafka and PostgreSQL.

The agent journals to a real topic; the approvals service (its core, its working table on a
real schema, its routing read from a principals file) decides on the same topic with a fast,
injected clock, so hours pass in a line (docs/operations/routing.md).
"""

from __future__ import annotations

import hashlib
import json
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sagacity import EventType, Sagacity, SagaStatus, compose
from sagacity.adapters import ModelLines
from sagacity.consumers.approvals import ApprovalService, AuthFile, extend_deadline
from sagacity.consumers.approvals._api import create_app
from sagacity.consumers.approvals._auth import Principal
from sagacity.consumers.approvals._deadline import row_deadline_us
from sagacity.consumers.approvals._routing import FALLBACK_ACTOR, LiveRouting
from sagacity.consumers.approvals.console._notify import ESCALATED, NEW_REQUEST, Notifier
from sagacity.entries import _attributes as attr
from sagacity.entries._events import now_micros
from sagacity.errors import (
    AlreadyDecidedError,
    ApprovalMissingError,
    ConfigurationError,
    PermissionDeniedError,
    SelfApprovalError,
)
from sagacity.gate._requests import RequestStatus, request_state
from sagacity.postgres import PostgresRequestStore
from sagacity.producer import KafkaJournal
from sagacity.saga._outcome import outcome_from_chain
from sagacity.signing._decision_signature import DecisionSigner
from sagacity.signing._operator_signature import OperatorVerifier
from sagacity.signing._operator_signature import generate_key as operator_keygen
from sagacity.testing import InMemoryNoticeClaims

from .conftest import ALICE
from .tools import Bank

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
HOUR_US = 3600 * 1_000_000
TOKENS = {name: f"tok-{name}-0123456789abcdef" for name in ("ann", "fay", "tom", "bob")}
GROUPS = {"ann": ["finance"], "fay": ["finance"], "tom": ["treasury"], "bob": []}
GRANT = '{"principal":"agent-7","role":"operator"}'


def principals_file(path: Path, routes: str) -> Path:
    """Four approvers of every tool (ann and fay in finance, tom in treasury, bob in no
    group) and ``routes``."""
    entries = []
    for name, token in TOKENS.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        entries.append(
            f'[[principals]]\nname = {json.dumps(name)}\nrole = "approver"\n'
            f'token_sha256 = "{digest}"\ntools = ["*"]\ngroups = {json.dumps(GROUPS[name])}\n'
        )
    path.write_text("\n".join(entries) + "\n" + textwrap.dedent(routes), encoding="utf-8")
    return path


ROUTES = """
[[routes]]
tools = ["send_wire_transfer"]
groups = ["finance"]
fallback = "{fallback}"

[[routes.escalate]]
after = "1h"
groups = ["treasury"]
notify = ["http://treasury.example/hook"]

[[routes]]
tools = ["grant_agent_access"]
groups = ["finance"]
principals = ["bob"]
approvers = {{ count = 2, groups = ["finance"] }}
"""


class Clock:
    """The service's clock: real time, moved ahead by the test."""

    def __init__(self) -> None:
        self.offset = 0

    def __call__(self) -> int:
        return now_micros() + self.offset

    def advance(self, micros: int) -> None:
        self.offset += micros


class Routed:
    """An agent and an approvals service on one topic; the service routes by ``auth``."""

    def __init__(self, bootstrap: str, topic: str, dsn: str, auth: Path, operator: bytes) -> None:
        self.clock = Clock()
        signer = DecisionSigner.ephemeral()
        self.agent_journal = KafkaJournal(bootstrap, topic=topic)
        self.agent = Sagacity(
            self.agent_journal, compensation="delegated", approvals_public_key=signer.public_hex
        )
        self.bank = self.agent.wrap(Bank())
        self.auth = AuthFile(auth, check_interval_s=0)
        self.routing = LiveRouting(lambda: self.auth.current().routing)
        self.journal = KafkaJournal(bootstrap, topic=topic)
        self.sagacity = Sagacity(
            self.journal,
            compensation="delegated",
            approval_ttl=4 * 3600,
            clock=self.clock,
            decision_signer=signer,
            approver_groups=self.routing,
            operator_public_key=OperatorVerifier([operator]),
        )
        self.sagacity.wrap(Bank())
        self.store = PostgresRequestStore(
            dsn,
            topic=topic,
            verifier=self.sagacity.decision_verifier,
            journal=self.sagacity.journal_identity,
            clock=self.clock,
            operator=self.sagacity.operator_verifier,
        )
        self.store.migrate()
        self.service = ApprovalService(self.sagacity, self.store, routing=self.routing)

    def who(self, name: str) -> Principal:
        principal = self.auth.authenticate(TOKENS[name])
        assert principal is not None
        return principal

    def gate(self, saga_id: str, *, privileged: bool = False) -> int:
        def work() -> None:
            if privileged:
                self.bank.grant_agent_access("agent-7", "operator")
            else:
                self.bank.send_wire_transfer("100", "alice")

        result = self.agent.saga(saga_id, work)
        assert result.status is SagaStatus.AWAITING_APPROVAL
        assert result.awaiting_seq is not None
        self.service.materialise(saga_id)
        return result.awaiting_seq

    def approve(self, name: str, saga_id: str, seq: int) -> Any:
        row = self.service.get(self.who(name), saga_id, seq)
        return self.service.approve(self.who(name), saga_id, seq, request_hash=row.entry_hash)

    def kinds(self, saga_id: str) -> list[str]:
        return [e.event_type.value for e in self.journal.entries(saga_id)]

    def close(self) -> None:
        self.agent_journal.close()
        self.journal.close()


@pytest.fixture
def operator_key(tmp_path: Path) -> Any:
    return operator_keygen(tmp_path / "operator.pem")


@pytest.fixture
def routed_with(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
    operator_key: Any,
) -> Iterator[Callable[[str], Routed]]:
    made: list[Routed] = []

    def make(fallback: str = "expire") -> Routed:
        auth = principals_file(tmp_path / "principals.toml", ROUTES.format(fallback=fallback))
        routed = Routed(kafka_bootstrap, make_topic(), pg_dsn, auth, operator_key.public_raw)
        made.append(routed)
        return routed

    yield make
    for routed in made:
        routed.close()


def test_a_routed_request_is_decided_and_offered_only_to_its_group(
    routed_with: Callable[[str], Routed],
) -> None:
    r = routed_with("expire")
    seq = r.gate("wire-routed")
    # bob and tom decide every tool, but the wire is routed to finance.
    for outsider in ("bob", "tom"):
        with pytest.raises(PermissionDeniedError, match="routed to group:finance"):
            r.approve(outsider, "wire-routed", seq)
        assert [x.saga_id for x in r.service.requests(r.who(outsider), states=["pending"])] == []
    assert "APPROVED" not in r.kinds("wire-routed")
    # The API's inbox offers it to ann and to nobody outside the route.
    app = create_app(r.service, auth=r.auth)
    transport = httpx.ASGITransport(app=app)

    def inbox(name: str) -> list[str]:
        async def get() -> list[str]:
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                answer = await client.get(
                    "/sagacity/approvals", headers={"Authorization": f"Bearer {TOKENS[name]}"}
                )
                assert answer.status_code == 200, answer.text
                shown = answer.json()["requests"]
                # Whom the route offers it to now is said with it.
                assert all(x["routed_to"] == ["group:finance"] for x in shown)
                return [x["saga_id"] for x in shown]

        import asyncio

        return asyncio.run(get())

    assert inbox("ann") == ["wire-routed"]
    assert inbox("bob") == []
    r.approve("ann", "wire-routed", seq)
    assert r.service.resume(r.who("ann"), "wire-routed", seq, ALICE).result is not None


def test_escalation_after_the_delay_lets_the_next_group_decide_and_tells_it(
    routed_with: Callable[[str], Routed],
) -> None:
    r = routed_with("expire")
    seq = r.gate("wire-escalated")
    with pytest.raises(PermissionDeniedError):
        r.approve("tom", "wire-escalated", seq)
    posted: list[tuple[str, dict[str, Any]]] = []

    def post(url: str, body: dict[str, Any], _timeout: float) -> int:
        posted.append((url, body))
        return 200

    notifier = Notifier(
        r.store,
        r.sagacity,
        claims=InMemoryNoticeClaims(),
        urls=["http://all.example/hook"],
        public_url="http://console",
        post=post,
        routing=r.routing,
    )
    notifier.migrate()
    first = {n.kind: n for n in notifier.candidates()}
    assert first[NEW_REQUEST].detail is not None
    assert first[NEW_REQUEST].detail["routed_to"] == ["group:finance"]
    assert ESCALATED not in first
    r.service.sweep()
    assert "APPROVAL_ESCALATED" not in r.kinds("wire-escalated")

    r.clock.advance(HOUR_US + 1)
    r.service.sweep()
    r.service.sweep()  # journaled once per tier
    [escalated] = [
        e for e in r.journal.entries("wire-escalated") if e.event_type is E.APPROVAL_ESCALATED
    ]
    assert escalated.attributes[attr.TIER] == "1"
    assert escalated.attributes[attr.ROUTED_TO] == "group:treasury"
    assert escalated.attributes[attr.REF_SEQ] == str(seq)
    row = r.store.get("wire-escalated", seq)
    assert row is not None
    assert r.service.routed_to(row) == ["group:finance", "group:treasury"]
    told = [n for n in notifier.candidates() if n.kind == ESCALATED]
    assert [(n.urls, n.detail) for n in told] == [
        (("http://treasury.example/hook",), {"routed_to": ["group:treasury"], "tier": 1})
    ]
    # Delivered: the escalation to treasury's hook only, once; the new request to --notify.
    sent = {(n.kind, n.claim) for n in notifier.scan()}
    assert sent == {(NEW_REQUEST, None), (ESCALATED, f"{ESCALATED}.1")}
    assert notifier.scan() == []
    deadline = time.monotonic() + 10
    while len(posted) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    notifier.stop()
    assert sorted((url, body["event"]) for url, body in posted) == [
        ("http://all.example/hook", NEW_REQUEST),
        ("http://treasury.example/hook", ESCALATED),
    ]
    # tom may decide from now on, and sees it.
    assert [x.saga_id for x in r.service.requests(r.who("tom"), states=["pending"])] == [
        "wire-escalated"
    ]
    r.approve("tom", "wire-escalated", seq)
    done = r.service.resume(r.who("tom"), "wire-escalated", seq, ALICE)
    assert done.result is not None
    assert done.result.status is SagaStatus.COMPLETED


@pytest.mark.parametrize(("fallback", "status"), [("expire", "EXPIRED"), ("reject", "REJECTED")])
def test_the_fallback_at_the_deadline_is_journaled_as_such(
    routed_with: Callable[[str], Routed], fallback: str, status: str
) -> None:
    r = routed_with(fallback)
    saga = f"wire-{fallback}"
    seq = r.gate(saga)
    r.clock.advance(4 * HOUR_US - 60_000_000)
    assert r.service.sweep() == []
    r.clock.advance(120_000_000)
    assert r.service.sweep() == [(saga, seq)]
    entries = r.journal.entries(saga)
    state = request_state(entries, seq)
    assert state is not None
    assert state.status is RequestStatus(status.lower())
    [closing] = [e for e in entries if e.event_type.value == status]
    if fallback == "reject":
        assert closing.actor == FALLBACK_ACTOR
        assert closing.error is not None
        assert "fallback is reject" in closing.error
    # The saga's end, as the compensation service writes it from the hand-off's reason.
    [handoff] = [e for e in entries if e.event_type is E.COMPENSATION_REQUESTED]
    assert handoff.attributes[attr.REASON] == status
    ended = Sagacity(r.journal).compensate(saga, reason=EventType(status))
    assert ended.status.value == status
    # What the model is told says the same: expired is not denied, nor pending.
    line = ModelLines().decided(ended, tool="send_wire_transfer", seq=seq)
    assert line is not None
    assert line.startswith(f"[{status}]")
    assert ("expired" in line) is (status == "EXPIRED")
    assert "pending" not in line
    assert ("expired awaiting approval" in ended.summary()) is (status == "EXPIRED")
    outcome = outcome_from_chain(r.journal.entries(saga))
    assert outcome is not None
    assert outcome.status.value == status
    # A late approval is the fallback's too, never a signature.
    with pytest.raises(
        AlreadyDecidedError,
        match=r"cannot approve: the request (expired|was rejected by sagacity:fallback)",
    ):
        r.approve("ann", saga, seq)


def test_a_fallback_of_approve_is_refused_when_the_service_starts(
    routed_with: Callable[[str], Routed], tmp_path: Path, pg_dsn: str
) -> None:
    from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings

    auth = principals_file(tmp_path / "approve.toml", ROUTES.format(fallback="approve"))
    settings = ApprovalsSettings(database_url=pg_dsn, auth_file=str(auth), insecure_dev=False)
    with pytest.raises(ConfigurationError, match='fallback = "approve" is refused'):
        ApprovalsServer(
            settings,
            dependencies=compose.approvals_on(Sagacity().journal, settings),
            consume=False,
            tools=[Bank()],
        )


def _forged_extension(r: Routed, saga_id: str, seq: int, signer: Any | None) -> None:
    """A DEADLINE_EXTENDED by the agent: unsigned, or signed with a key nobody pinned."""
    from sagacity.gate._deadline_extension import extension_draft
    from sagacity.signing._operator_signature import append_signed

    draft = extension_draft(
        saga_id, seq, 24 * HOUR_US, actor="operator:mallory", recorded_at_us=now_micros(), tool=None
    )
    if signer is None:
        r.agent_journal.append(draft, durable=True)
    else:
        append_signed(r.agent_journal, draft, signer)


@pytest.mark.parametrize("forgery", ["unsigned", "wrong_key"])
def test_a_forged_deadline_extension_extends_nothing(
    routed_with: Callable[[str], Routed], tmp_path: Path, forgery: str
) -> None:
    r = routed_with("expire")
    seq = r.gate(f"wire-forged-{forgery}")
    signer = operator_keygen(tmp_path / "mallory.pem") if forgery == "wrong_key" else None
    _forged_extension(r, f"wire-forged-{forgery}", seq, signer)
    assert "DEADLINE_EXTENDED" in r.kinds(f"wire-forged-{forgery}")
    r.service.materialise(f"wire-forged-{forgery}")
    row = r.store.get(f"wire-forged-{forgery}", seq)
    assert row is not None
    assert row.extended_by_us == 0
    r.clock.advance(4 * HOUR_US + 10)
    assert r.service.sweep() == [(f"wire-forged-{forgery}", seq)]
    assert r.kinds(f"wire-forged-{forgery}")[-3:] == [
        "EXPIRED",
        "COMPENSATION_REQUESTED",
        "SAGA_ENDED",
    ]


def test_a_signed_deadline_extension_is_honoured(
    routed_with: Callable[[str], Routed], operator_key: Any
) -> None:
    r = routed_with("expire")
    seq = r.gate("wire-extended")
    entry = extend_deadline(
        r.agent_journal,
        "wire-extended",
        seq,
        2 * HOUR_US,
        actor="operator:olga",
        signer=operator_key,
    )
    assert entry.event_type is E.DEADLINE_EXTENDED
    r.service.materialise("wire-extended")
    row = r.store.get("wire-extended", seq)
    assert row is not None
    assert row.extended_by_us == 2 * HOUR_US
    # What the API, the inbox and the notices show: the extended deadline.
    unextended = r.sagacity.approval_deadline_us(row.request(), seen_at_us=row.seen_at_us)
    assert unextended is not None
    assert row_deadline_us(r.sagacity, row) == unextended + 2 * HOUR_US
    r.clock.advance(4 * HOUR_US + 10)
    # The sweep does not take it up again before its extended deadline.
    assert r.store.overdue(r.clock(), r.sagacity.approval_ttl_us) == []
    assert r.service.sweep() == []
    assert "EXPIRED" not in r.kinds("wire-extended")
    # A resumer pinning the operator key (Sagacity.from_env reads it) sees the same deadline;
    # one without it sees the deadline unextended.
    entries = r.journal.entries("wire-extended")
    state = request_state(entries, seq)
    assert state is not None
    deadlines = {
        pinned: Sagacity(
            r.journal,
            approval_ttl=4 * 3600,
            operator_public_key=OperatorVerifier([operator_key.public_raw]) if pinned else None,
        ).approval_deadline_us(
            state.request, seen_at_us=state.request.requested_at_us, entries=entries
        )
        for pinned in (True, False)
    }
    assert deadlines[True] - deadlines[False] == 2 * HOUR_US
    r.clock.advance(2 * HOUR_US)
    assert r.service.sweep() == [("wire-extended", seq)]


def test_the_cli_journals_a_signed_extension_the_service_honours(
    routed_with: Callable[[str], Routed], tmp_path: Path, kafka_bootstrap: str, pg_dsn: str
) -> None:
    """``sagacity approvals extend`` as docs/operations/routing.md shows it."""
    from click.testing import CliRunner

    from sagacity.cli import main

    r = routed_with("expire")
    seq = r.gate("wire-cli")
    topic = r.journal.topic
    args = ["approvals", "extend", "--saga", "wire-cli", "--seq", str(seq), "--by", "2h"]
    where = ["--bootstrap-servers", kafka_bootstrap, "--topic", topic]
    key = ["--operator-key", str(tmp_path / "operator.pem")]
    env = {"SAGACITY_DATABASE_URL": pg_dsn}
    done = CliRunner().invoke(main, [*args, *key, *where], env=env)
    assert done.exit_code == 0, done.output
    assert "journaled DEADLINE_EXTENDED" in done.output
    r.clock.advance(4 * HOUR_US + 10)
    assert r.service.sweep() == []
    # Without the key nothing is journaled.
    refused = CliRunner().invoke(
        main, [*args, *where], env={**env, "SAGACITY_OPERATOR_SIGNING_KEY": ""}
    )
    assert refused.exit_code == 2, refused.output
    assert r.kinds("wire-cli").count("DEADLINE_EXTENDED") == 1


def test_two_of_finance(routed_with: Callable[[str], Routed]) -> None:
    r = routed_with("expire")
    saga = "grant-two-of-finance"
    seq = r.gate(saga, privileged=True)
    r.approve("ann", saga, seq)
    with pytest.raises(ApprovalMissingError, match="1 of 2"):
        r.service.resume(r.who("ann"), saga, seq, GRANT)
    # bob is routed (by name) but is not in finance: his approval would not count, so it is
    # refused and journaled, never signed.
    with pytest.raises(PermissionDeniedError, match="2 of finance"):
        r.approve("bob", saga, seq)
    refused = [e for e in r.journal.entries(saga) if e.event_type is E.APPROVAL_REFUSED]
    assert [e.actor for e in refused] == ["bob"]
    # An approval the service's key did sign for bob (say, while the file put him in finance)
    # does not count either: membership is read at resume.
    unrouted = Sagacity(
        r.journal, compensation="delegated", decision_signer=r.sagacity.decision_signer
    )
    unrouted.wrap(Bank())
    unrouted.approve(
        saga, seq, "bob", request_hash=r.service.get(r.who("ann"), saga, seq).entry_hash
    )
    with pytest.raises(ApprovalMissingError, match="1 of 2"):
        r.service.resume(r.who("ann"), saga, seq, GRANT)
    r.approve("fay", saga, seq)
    done = r.service.resume(r.who("fay"), saga, seq, GRANT)
    assert done.result is not None
    assert done.result.status is SagaStatus.COMPLETED


def test_routes_naming_unknown_groups_do_not_load(tmp_path: Path) -> None:
    path = principals_file(
        tmp_path / "typo.toml", '[[routes]]\ntools = ["send_wire_transfer"]\ngroups = ["fnance"]\n'
    )
    with pytest.raises(ConfigurationError, match="fnance is no group"):
        AuthFile(path)


def test_the_request_page_offers_no_decision_to_someone_it_is_not_routed_to(
    routed_with: Callable[[str], Routed],
) -> None:
    import jinja2

    from sagacity.consumers.approvals.console import _page, _routes

    r = routed_with("expire")
    seq = r.gate("wire-page")
    row = r.service.get(r.who("bob"), "wire-page", seq)  # bob may read it (his tools: all)
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_routes.HERE / "templates")), autoescape=True
    )
    environment.globals.update(when=_page.when, span=_page.span)

    def page(name: str) -> str:
        return environment.get_template("request.html").render(
            row=row,
            before=[],
            after=[],
            pretty=None,
            redacted=[],
            visible=None,
            payload_bytes=len(row.payload),
            computed_sha256=row.payload_sha256,
            hash_matches=True,
            deadline=None,
            left="no limit",
            writer="w",
            signed_by_me=False,
            undo=[],
            routed_away=r.service.routed_refusal(r.who(name), row),
        )

    assert 'class="decide"' not in page("bob")
    assert "routed to group:finance" in page("bob")
    assert 'class="decide"' in page("ann")


def test_the_example_of_the_routing_page_loads() -> None:
    """docs/operations/routing.md's principals file, with real token hashes, loads as written."""
    import re
    import tomllib

    from sagacity.consumers.approvals import AuthConfig

    page = (Path(__file__).parents[2] / "docs/operations/routing.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```toml\n(.*?)```", page, re.DOTALL)
    hashes = iter(hashlib.sha256(str(i).encode()).hexdigest() for i in range(10))
    text = re.sub(r'token_sha256 = "…"', lambda _: f'token_sha256 = "{next(hashes)}"', block)
    config = AuthConfig.from_mapping(tomllib.loads(text), source="routing.md")
    route = config.routing.route("send_wire_transfer")
    assert route is not None
    assert [t.names() for t in route.tiers] == [["group:finance"], ["group:treasury"]]
    assert route.fallback == "reject"
    rule = config.routing.group_rule("grant_agent_access")
    assert rule is not None
    assert rule.describe() == "2 of finance"


@pytest.mark.parametrize("who", ["writer", "database_operator"])
def test_a_backdated_request_does_not_escalate_early(
    routed_with: Callable[[str], Routed], pg_dsn: str, who: str
) -> None:
    """Escalation widens who decides: neither the request's writer (an early
    ``requested_at_us``) nor a database operator (an early ``seen_at_us``) can hurry it."""
    import psycopg

    r = routed_with("expire")
    saga = f"wire-backdated-{who}"
    if who == "writer":
        early = Sagacity(
            r.agent_journal, compensation="delegated", clock=lambda: now_micros() - 2 * HOUR_US
        )
        bank = early.wrap(Bank())
        result = early.saga(saga, lambda: bank.send_wire_transfer("100", "alice"))
        assert result.awaiting_seq is not None
        seq = result.awaiting_seq
        r.service.materialise(saga)
    else:
        seq = r.gate(saga)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE sagacity_approval_request SET seen_at_us = seen_at_us - %s "
                "WHERE saga_id = %s",
                (2 * HOUR_US, saga),
            )
    with pytest.raises(PermissionDeniedError, match="routed to group:finance"):
        r.approve("tom", saga, seq)
    r.service.sweep()
    assert "APPROVAL_ESCALATED" not in r.kinds(saga)


SETTLE_ROUTES = """
[[routes]]
tools = ["reserve_inventory"]
groups = ["finance"]
"""


def test_a_suspect_step_is_settled_as_a_request_of_its_tool_is_decided(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
    operator_key: Any,
) -> None:
    """Settling a step in doubt decides whether its undo runs: it follows the tool's route, the
    tool is the one the step's own entry names (a SUSPECT naming another tool changes
    nothing), and whoever made the call does not settle it."""
    from sagacity import EntryDraft

    auth = principals_file(tmp_path / "settle.toml", SETTLE_ROUTES)
    # fay acts through the agent identity that made the call.
    text = auth.read_text(encoding="utf-8").replace(
        'name = "fay"\n', 'name = "fay"\nagents = ["agent:fay-bot"]\n'
    )
    auth.write_text(text, encoding="utf-8")
    r = Routed(kafka_bootstrap, make_topic(), pg_dsn, auth, operator_key.public_raw)
    try:
        inline = Sagacity(r.agent_journal)
        inline.wrap(Bank())
        saga = "suspect-routed"
        inline.saga(saga, lambda: None)
        intent = r.agent_journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.INTENT,
                tool="reserve_inventory",
                actor="agent:fay-bot",
                payload='{"sku":"SKU-2"}',
                attributes={"reversibility": "REVERSIBLE"},
            ),
            durable=True,
        )
        # A SUSPECT worded by a writer: it names a tool nobody routed.
        r.agent_journal.append(
            EntryDraft(
                saga_id=saga,
                event_type=E.SUSPECT,
                tool="lookup_price",
                attributes={"ref_seq": str(intent.seq), "phase": "call"},
            ),
            durable=True,
        )
        # bob and tom decide every tool, but reserve_inventory is routed to finance.
        for outsider in ("bob", "tom"):
            with pytest.raises(PermissionDeniedError, match="routed to group:finance"):
                r.service.settle(r.who(outsider), saga, intent.seq, outcome="executed", note="x")
        with pytest.raises(SelfApprovalError, match="made by its agent"):
            r.service.settle(r.who("fay"), saga, intent.seq, outcome="not_executed", note="x")
        assert "SUSPECT_SETTLED" not in r.kinds(saga)
        r.service.settle(r.who("ann"), saga, intent.seq, outcome="executed", note="held")
        [settled] = [e for e in r.journal.entries(saga) if e.event_type is E.SUSPECT_SETTLED]
        assert settled.actor == "ann"
    finally:
        r.close()


TWO_OF_FINANCE = """
[[routes]]
tools = ["send_wire_transfer"]
groups = ["finance"]
approvers = { count = 2, groups = ["finance"] }
"""


def test_a_resumer_without_the_routes_waits_for_the_count_the_service_signed(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
    operator_key: Any,
) -> None:
    """The wire is IRREVERSIBLE (one signature by its declaration) but routed to two of
    finance: the agent's own Sagacity, which pins the service's key but has no principals
    file, reads the count from the signed approvals and does not resume after one."""
    auth = principals_file(tmp_path / "two.toml", TWO_OF_FINANCE)
    r = Routed(kafka_bootstrap, make_topic(), pg_dsn, auth, operator_key.public_raw)
    try:
        seq = r.gate("wire-two")
        first = r.approve("ann", "wire-two", seq)
        assert first.request.signatures_required == 2
        [approval] = [e for e in r.journal.entries("wire-two") if e.event_type is E.APPROVED]
        assert approval.attributes[attr.SIGNATURES_REQUIRED] == "2"
        assert approval.attributes[attr.DECISION_SIGNATURE].startswith("SGCD3:")
        row = r.store.get("wire-two", seq)
        assert row is not None
        assert (row.state.value, row.signatures_required) == ("pending", 2)
        with pytest.raises(ApprovalMissingError, match="only 1 of 2 required signatures"):
            r.agent.resume_saga("wire-two", seq, ALICE)
        assert "INTENT" not in r.kinds("wire-two")[seq:]
        r.approve("fay", "wire-two", seq)
        assert r.agent.resume_saga("wire-two", seq, ALICE).status is SagaStatus.COMPLETED
    finally:
        r.close()


def test_a_count_signed_before_the_route_was_loosened_is_reached_not_stuck(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    pg_dsn: str,
    tmp_path: Path,
    operator_key: Any,
) -> None:
    """Two of finance when ann approved; the route loosened to one since: her approval says
    two, every resumer waits for two, and the service takes the second instead of refusing
    it as one too many."""
    auth = principals_file(tmp_path / "loosened.toml", TWO_OF_FINANCE)
    r = Routed(kafka_bootstrap, make_topic(), pg_dsn, auth, operator_key.public_raw)
    try:
        seq = r.gate("wire-loosened")
        r.approve("ann", "wire-loosened", seq)
        principals_file(
            auth, TWO_OF_FINANCE.replace('approvers = { count = 2, groups = ["finance"] }\n', "")
        )
        assert r.routing().route("send_wire_transfer") is not None
        assert r.routing().route("send_wire_transfer").approvers is None  # type: ignore[union-attr]
        with pytest.raises(ApprovalMissingError, match="only 1 of 2 required signatures"):
            r.service.resume(r.who("ann"), "wire-loosened", seq, ALICE)
        r.approve("fay", "wire-loosened", seq)
        assert r.service.resume(r.who("ann"), "wire-loosened", seq, ALICE).result is not None
    finally:
        r.close()
