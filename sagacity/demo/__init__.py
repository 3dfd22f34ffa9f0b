"""The demonstration: the Order / Product / Inventory example across separate processes.

:func:`run` does everything for real, on the Kafka broker and PostgreSQL database it is given:

1. creates the journal topic (if missing) and resets the shop's tables (:mod:`.tools`);
2. writes a fresh approver token into a principals file in the run directory and starts the
   approvals service (authenticated), the compensation service and the archive service as
   child processes, each logging to its own file in the run directory;
3. runs the agent process (:mod:`.agent`, a Pydantic AI agent with a scripted model, the
   Kafka journal, compensation delegated) for three sagas:

   * ``order-confirmed-<run>``: reserve, create the order, the confirmation email waits for
     approval; approved with ``sagacity approvals approve`` (or, with
     ``approve_in_console``, by a person in the console, whose address and a sign-in token
     the demo prints), resumed with
     ``sagacity approvals resume`` and the exact payload shown: ``COMPLETED``;
   * ``order-failed-<run>``: ``create_order`` refuses a discontinued product; the compensation
     service releases the reservation: ``COMPENSATED``, stock restored;
   * ``wire-attack-<run>``: a 100 wire to alice is approved, then resumed with 999999 to
     mallory: the CLI refuses it before sending; posted to the API past the CLI, 409
     "payload changed since approval", ``RESUME_REFUSED`` journaled, the
     reservation before it compensated by the service, the wire tool never called;

4. waits until the archive holds the three chains, runs ``sagacity verify --all`` and prints
   each chain as a table;
5. stops the services (also on failure: SIGTERM, then SIGKILL).

Every expectation is checked; the first one that fails raises :class:`DemoError` naming it,
with the tail of the log of the process concerned.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sagacity._defaults import DEFAULT_TOPIC
from sagacity._events import EventType, JournalEntry
from sagacity.demo._processes import SAGACITY, Completed, Service, run_command, tail
from sagacity.errors import SagacityError

COMPENSATION_TOOLS = "sagacity.demo.tools:TOOLS"
"""What the compensation and approvals services load (``--tools``)."""
APPROVER = "manager@example.com"
ATTACK_PAYLOAD = '{"amount":"999999","to":"mallory"}'
"""What the attacker resumes the approved 100-to-alice wire with."""

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,40}$")
E = EventType


class DemoError(SagacityError):
    """An expectation of the demonstration failed.

    Attributes:
        stage: the expectation's short name (``topic``, ``services``, ``confirmed``, ...).
        log: the log file of the process concerned, if any.
        log_tail: its last lines ("" when there is none).
    """

    def __init__(self, stage: str, message: str, *, log: Path | None = None):
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.log = log
        self.log_tail = tail(log) if log is not None else ""


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """Where and how the demonstration runs.

    ``run_id`` suffixes the saga ids (default: the UTC time and a random tag), so reruns on
    the same topic never collide; ``run_dir`` receives the logs and the principals file
    (default: a new temporary directory, kept after the run).
    """

    bootstrap_servers: str
    database_url: str
    topic: str = DEFAULT_TOPIC
    run_id: str | None = None
    run_dir: Path | None = None
    compensation_tools: str = COMPENSATION_TOOLS
    timeout_s: float = 60.0
    approve_in_console: bool = False


@dataclass(frozen=True, kw_only=True)
class Saga:
    """One of the demo's sagas, as it ended."""

    name: str
    saga_id: str
    status: str
    entries: tuple[JournalEntry, ...]


@dataclass(kw_only=True)
class DemoReport:
    """What the demonstration did."""

    run_id: str
    run_dir: Path
    sagas: list[Saga] = field(default_factory=list)
    expectations: list[str] = field(default_factory=list)


def topic_from_env() -> str:
    """``SAGACITY_TOPIC`` or the default journal topic."""
    return os.environ.get("SAGACITY_TOPIC") or DEFAULT_TOPIC


def new_run_id() -> str:
    """A run id unique per run: the UTC time and a random tag (``20260102-153000-1a2b``)."""
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def abbreviate(text: str | None, width: int = 52) -> str:
    """``text`` on one line, cut to ``width`` characters with ``...``; ``-`` when empty."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def chain_table(entries: Sequence[JournalEntry]) -> list[str]:
    """A saga's chain as table lines: seq, event, tool, payload/result/error, actor."""
    rows = [
        [str(e.seq), e.event_type.value, e.tool or "-", _detail(e), e.actor or "-"] for e in entries
    ]
    header = ["SEQ", "EVENT", "TOOL", "PAYLOAD / RESULT", "ACTOR"]
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _detail(entry: JournalEntry) -> str:
    attributes = entry.attributes
    text = entry.payload or entry.result or entry.error
    if entry.event_type is E.COMPENSATION_REQUESTED:
        text = f"reason={attributes.get('reason', '?')}"
    elif not text and "ref_seq" in attributes:
        text = f"ref_seq={attributes['ref_seq']}"
    return abbreviate(text)


class _Run:
    """One run's state: settings, environment for the children, services, checks."""

    def __init__(self, settings: DemoSettings, echo: Callable[[str], None]):
        self.settings = settings
        self.echo = echo
        run_id = settings.run_id or new_run_id()
        if not _RUN_ID.match(run_id):
            raise DemoError("settings", f"run id {run_id!r} must match {_RUN_ID.pattern}")
        self.run_id = run_id
        if settings.run_dir is not None:
            settings.run_dir.mkdir(parents=True, exist_ok=True)
            self.dir = settings.run_dir
        else:
            self.dir = Path(tempfile.mkdtemp(prefix=f"sagacity-demo-{run_id}-"))
        self.report = DemoReport(run_id=run_id, run_dir=self.dir)
        self.services: dict[str, Service] = {}
        self.commands_log = self.dir / "commands.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SAGACITY_") or k.startswith("SAGACITY_KAFKA_")
        }
        env.update(
            SAGACITY_BOOTSTRAP_SERVERS=settings.bootstrap_servers,
            SAGACITY_DATABASE_URL=settings.database_url,
            SAGACITY_DEMO_DATABASE_URL=settings.database_url,
            SAGACITY_TOPIC=settings.topic,
            PYTHONUNBUFFERED="1",
        )
        self.env = env

    # -- checks -----------------------------------------------------------------------------
    def expect(
        self, ok: bool, stage: str, what: str, failure: str, *, log: Path | None = None
    ) -> None:
        """Record ``what`` as met, or raise :class:`DemoError` with ``failure``."""
        if not ok:
            raise DemoError(stage, f"expected {what}; {failure}", log=log)
        self.report.expectations.append(what)
        self.echo(f"  ok  {what}")

    def log_of(self, name: str) -> Path:
        return self.services[name].log

    # -- services ---------------------------------------------------------------------------
    def start_services(self) -> None:
        from sagacity.consumers.approvals._auth import auth_entry, new_token
        from sagacity.dev import pick_free_port

        token = new_token()
        auth = self.dir / "approvals-auth.toml"
        auth.write_text(auth_entry(APPROVER, token, ["*"]), encoding="utf-8")
        self.token_file = self.dir / "approver.token"
        self.token_file.touch(mode=0o600)
        self.token_file.write_text(token + "\n", encoding="utf-8")
        self.echo(
            f"[auth]     approver {APPROVER}: token in {self.token_file.name}, its SHA-256 in "
            f"{auth.name} (the approvals service authenticates every decision)"
        )
        from sagacity._decision_signature import PUBLIC_KEY_ENV, DecisionSigner, generate_key

        key_file = self.dir / "approvals-signing.pem"
        signer = DecisionSigner.from_file(key_file) if key_file.exists() else generate_key(key_file)
        self.approvals_public_key = signer.public_hex
        self.env.update(
            SAGACITY_APPROVALS_SIGNING_KEY=str(key_file),
            **{PUBLIC_KEY_ENV: signer.public_hex},
        )
        self.echo(
            f"[keys]     approvals decision key {signer.key_id} in {key_file.name}; its public "
            f"key pinned in {PUBLIC_KEY_ENV} for the agent and every service"
        )
        groups = f"sagacity-demo-{self.settings.topic}"
        ports = {name: pick_free_port() for name in ("approvals", "compensation", "archive")}
        self.approvals_url = f"http://127.0.0.1:{ports['approvals']}"
        self.echo(f"[console]  {self.approvals_url}/ui/ (sign in as {APPROVER} with token {token})")
        argvs = {
            "approvals": [
                "serve",
                "approvals",
                "--auth",
                str(auth),
                "--tools",
                COMPENSATION_TOOLS,
                "--port",
                str(ports["approvals"]),
                "--group",
                f"{groups}-approvals",
            ],
            "compensation": [
                "serve",
                "compensation",
                "--tools",
                self.settings.compensation_tools,
                "--group",
                f"{groups}-compensation",
                "--port",
                str(ports["compensation"]),
                "--handoff-grace",
                "2",
            ],
            "archive": [
                "serve",
                "archive",
                "--group",
                f"{groups}-archive",
                "--port",
                str(ports["archive"]),
            ],
        }
        ready = {
            "approvals": f"{self.approvals_url}/healthz",
            "compensation": f"http://127.0.0.1:{ports['compensation']}/readyz",
            "archive": f"http://127.0.0.1:{ports['archive']}/healthz",
        }
        for name, argv in argvs.items():
            service = Service(
                name=name,
                argv=[*SAGACITY, *argv],
                env=self.env,
                log=self.dir / f"{name}.log",
                ready_url=ready[name],
                cwd=self.dir,
            )
            self.services[name] = service
            service.start()
            self.echo(f"[start]    {name} service pid {service.pid}, log {service.log.name}")
        deadline = time.monotonic() + self.settings.timeout_s
        for name, service in self.services.items():
            problem = service.wait_ready(deadline)
            self.expect(
                problem is None,
                "services",
                f"the {name} service ready ({service.ready_url})",
                f"it {problem}",
                log=service.log,
            )

    def stop_services(self) -> None:
        # Every service is stopped before anything is reported: a closed stdout (the demo piped
        # into `head`) must not leave services running.
        lines = []
        for name, service in reversed(list(self.services.items())):
            try:
                outcome = service.stop()
            except Exception as exc:  # stop the others whatever went wrong with this one
                outcome = f"could not be stopped: {exc}"
            lines.append(f"[stop]     {name} service pid {service.pid}: {outcome}")
        for line in lines:
            with contextlib.suppress(OSError):
                self.echo(line)

    # -- commands ---------------------------------------------------------------------------
    def sagacity(self, *args: str) -> Completed:
        """``sagacity ARGS`` as a child process (logged to ``commands.log``)."""
        return run_command(
            [*SAGACITY, *args],
            env=self.env,
            cwd=self.dir,
            log=self.commands_log,
            timeout_s=self.settings.timeout_s,
        )

    def approvals(self, *args: str) -> Completed:
        """``sagacity approvals --json ARGS`` with the approver's token."""
        argv = ["approvals", "--url", self.approvals_url, "--token-file", str(self.token_file)]
        self.echo(
            f"  $ sagacity approvals --url {self.approvals_url} --token-file "
            f"{self.token_file.name} --json {shlex.join(args)}"
        )
        return self.sagacity(*argv, "--json", *args)

    def post_resume(self, saga_id: str, seq: int, payload: str) -> tuple[int, str]:
        """``POST /sagacity/resume/…`` straight to the API, as a client other than the CLI."""
        import httpx

        token = self.token_file.read_text(encoding="utf-8").strip()
        response = httpx.post(
            f"{self.approvals_url}/sagacity/resume/{saga_id}/{seq}",
            json={"payload": payload},
            headers={"Authorization": f"Bearer {token}"},
            timeout=self.settings.timeout_s,
        )
        try:
            detail = str(response.json().get("detail"))
        except ValueError:
            detail = response.text
        return response.status_code, detail

    def agent(self, scenario: str, saga_id: str) -> dict[str, Any]:
        """Run the agent process for one scenario; its one-line JSON saga result."""
        log = self.dir / f"agent-{scenario}.log"
        done = run_command(
            [*SAGACITY[:2], "sagacity.demo.agent", scenario, saga_id],
            env=self.env,
            cwd=self.dir,
            log=log,
            timeout_s=self.settings.timeout_s,
        )
        self.echo(f"[agent]    {scenario}: saga {saga_id} (log {log.name})")
        result: dict[str, Any] = {}
        if done.returncode == 0 and done.stdout.strip():
            try:
                result = json.loads(done.stdout.strip().splitlines()[-1])
            except ValueError:
                result = {}
        self.expect(
            bool(result),
            scenario,
            f"the agent process to run saga {saga_id}",
            f"it exited {done.returncode} without a result",
            log=log,
        )
        return result


def _decoded(done: Completed) -> dict[str, Any]:
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@contextmanager
def _journal(settings: DemoSettings, approvals_public_key: str) -> Iterator[Any]:
    from sagacity._env import client_settings
    from sagacity._saga import Sagacity
    from sagacity.producer import KafkaJournal

    journal = KafkaJournal(
        settings.bootstrap_servers, topic=settings.topic, client=client_settings(os.environ)
    )
    try:
        yield Sagacity(journal, compensation="delegated", approvals_public_key=approvals_public_key)
    finally:
        journal.close()


def run(settings: DemoSettings, *, echo: Callable[[str], None] = print) -> DemoReport:
    """Run the demonstration against the broker and database of ``settings``.

    Raises:
        DemoError: an expectation failed; ``stage`` names it, ``log_tail`` shows why.
    """
    started = time.monotonic()
    demo = _Run(settings, echo)
    echo(f"[stack]    kafka {settings.bootstrap_servers} | postgres {settings.database_url}")
    echo(f"[run]      {demo.run_id}, logs in {demo.dir}")
    partitions, created = _ensure_topic(settings)
    verb = "created with the journal's settings" if created else "exists"
    echo(f"[topic]    {settings.topic} {verb} ({partitions} partitions)")
    _prepare_shop(settings)
    echo("[shop]     tables reset: p-1 Widget (stock 10), p-2 Discontinued gadget (stock 5)")
    try:
        demo.start_services()
        with _journal(settings, demo.approvals_public_key) as sagacity:
            _confirmed(demo, sagacity)
            _failed(demo, sagacity)
            _attack(demo, sagacity)
            _archive_and_verify(demo, sagacity)
    finally:
        demo.stop_services()
    echo(
        f"demo complete: all {len(demo.report.expectations)} expectations met "
        f"in {time.monotonic() - started:.1f}s"
    )
    return demo.report


def _prepare_shop(settings: DemoSettings) -> None:
    import psycopg

    from sagacity.demo import tools

    try:
        tools.prepare(settings.database_url)
    except psycopg.Error as exc:
        raise DemoError("shop", f"cannot prepare the shop's tables: {exc}") from exc


def _awaiting(demo: _Run, scenario: str, saga_id: str) -> int:
    result = demo.agent(scenario, saga_id)
    seq = result.get("awaiting_seq")
    demo.expect(
        result.get("status") == "AWAITING_APPROVAL" and isinstance(seq, int),
        scenario,
        f"{saga_id} to stop at the gate: AWAITING_APPROVAL",
        f"the agent reported {result}",
        log=demo.dir / f"agent-{scenario}.log",
    )
    assert isinstance(seq, int)
    return seq


def _approve(demo: _Run, scenario: str, saga_id: str, seq: int) -> dict[str, Any]:
    shown = demo.approvals("show", saga_id, str(seq))
    request = _decoded(shown)
    demo.expect(
        shown.returncode == 0 and isinstance(request.get("payload"), str),
        scenario,
        f"`sagacity approvals show {saga_id} {seq}` to list the request",
        f"it exited {shown.returncode}: {abbreviate(shown.stdout + shown.stderr, 200)}",
        log=demo.log_of("approvals"),
    )
    echo = demo.echo
    echo(f"[approve]  {saga_id}/{seq} {request.get('tool')} payload {request.get('payload')}")
    if demo.settings.approve_in_console and scenario == "confirmed":
        return _approved_in_console(demo, scenario, saga_id, seq, request)
    approved = demo.approvals("approve", saga_id, str(seq))
    decision = _decoded(approved).get("request", {})
    demo.expect(
        approved.returncode == 0 and decision.get("signed_by") == [APPROVER],
        scenario,
        f"`sagacity approvals approve` to sign {saga_id}/{seq} as {APPROVER}",
        f"it exited {approved.returncode}: {abbreviate(approved.stdout + approved.stderr, 200)}",
        log=demo.log_of("approvals"),
    )
    return request


def _approved_in_console(
    demo: _Run, scenario: str, saga_id: str, seq: int, request: dict[str, Any]
) -> dict[str, Any]:
    """Wait for a person to approve the request in the console (``--approve-in-console``)."""
    demo.echo(
        f"[approve]  waiting for {APPROVER} to approve it in the console: "
        f"{demo.approvals_url}/ui/requests/{saga_id}/{seq}"
    )
    deadline = time.monotonic() + demo.settings.timeout_s
    signed: list[str] = []
    while time.monotonic() < deadline:
        argv = ["--url", demo.approvals_url, "--token-file", str(demo.token_file), "--json"]
        shown = _decoded(demo.sagacity("approvals", *argv, "show", saga_id, str(seq)))
        signed = list(shown.get("signed_by") or [])
        if signed:
            break
        time.sleep(0.5)
    demo.expect(
        signed == [APPROVER],
        scenario,
        f"{APPROVER} to approve {saga_id}/{seq} in the console",
        f"signed by {signed or 'nobody'} after {demo.settings.timeout_s:g}s",
        log=demo.log_of("approvals"),
    )
    return request


def _confirmed(demo: _Run, sagacity: Any) -> None:
    from sagacity.demo import tools

    demo.echo("\nsaga 1: an order confirmed through an approval granted on the command line")
    saga_id = f"order-confirmed-{demo.run_id}"
    seq = _awaiting(demo, "confirmed", saga_id)
    request = _approve(demo, "confirmed", saga_id, seq)
    demo.echo(f"[resume]   {saga_id}/{seq} with the payload exactly as shown")
    resumed = demo.approvals("resume", saga_id, str(seq), "--payload", request["payload"])
    status = _decoded(resumed).get("saga_status")
    demo.expect(
        resumed.returncode == 0 and status == "COMPLETED",
        "confirmed",
        "`sagacity approvals resume` with the exact approved payload to complete the saga",
        f"it exited {resumed.returncode}, saga {status}: "
        f"{abbreviate(resumed.stdout + resumed.stderr, 200)}",
        log=demo.log_of("approvals"),
    )
    emails = tools.snapshot(demo.settings.database_url).emails
    demo.expect(
        emails == [("order-1", "customer@example.com")],
        "confirmed",
        "the confirmation email sent exactly once (demo_email)",
        f"demo_email holds {emails}",
    )
    demo.report.sagas.append(_saga("confirmed", saga_id, sagacity))


def _failed(demo: _Run, sagacity: Any) -> None:
    from sagacity.demo import tools

    demo.echo("\nsaga 2: an order that fails at create_order, compensated by the service")
    saga_id = f"order-failed-{demo.run_id}"
    result = demo.agent("failed", saga_id)
    demo.expect(
        result.get("status") == "COMPENSATION_PENDING",
        "failed",
        f"{saga_id} to fail and hand compensation over: COMPENSATION_PENDING",
        f"the agent reported {result}",
        log=demo.dir / "agent-failed.log",
    )
    outcome = _outcome(demo, sagacity, saga_id, "failed")
    demo.expect(
        outcome == "COMPENSATED",
        "failed",
        "the compensation service to compensate it: COMPENSATED",
        f"the chain's outcome is {outcome}",
        log=demo.log_of("compensation"),
    )
    shop = tools.snapshot(demo.settings.database_url)
    demo.expect(
        shop.stock.get("p-2") == 5 and shop.reservations.get("res-2") == "released",
        "failed",
        "the reservation released and the p-2 stock back to 5 (demo_product)",
        f"stock {shop.stock}, reservations {shop.reservations}",
        log=demo.log_of("compensation"),
    )
    demo.report.sagas.append(_saga("failed", saga_id, sagacity))


def _attack(demo: _Run, sagacity: Any) -> None:
    from sagacity.demo import tools

    demo.echo("\nsaga 3: the stale-approval attack (approved: 100 to alice; resumed: mallory)")
    saga_id = f"wire-attack-{demo.run_id}"
    seq = _awaiting(demo, "wire", saga_id)
    request = _approve(demo, "wire", saga_id, seq)
    demo.expect(
        request.get("payload") == '{"amount":"100","to":"alice"}',
        "wire",
        'the approved payload {"amount":"100","to":"alice"}',
        f"the request holds {request.get('payload')}",
    )
    demo.echo(f"[attack]   resume {saga_id}/{seq} with {ATTACK_PAYLOAD}")
    local = demo.approvals("resume", saga_id, str(seq), "--payload", ATTACK_PAYLOAD)
    demo.echo(f"[attack]   the CLI: {_decoded(local).get('detail')}")
    demo.expect(
        local.returncode == 1 and "nothing was sent" in str(_decoded(local).get("detail")),
        "wire",
        "the CLI to refuse the changed payload before sending it",
        f"it exited {local.returncode}: {abbreviate(local.stdout + local.stderr, 200)}",
    )
    demo.echo(f"[attack]   past the CLI: POST {demo.approvals_url}/sagacity/resume/{saga_id}/{seq}")
    status, detail = demo.post_resume(saga_id, seq, ATTACK_PAYLOAD)
    demo.echo(f"[attack]   answer: HTTP {status} {detail}")
    demo.expect(
        status == 409 and "payload changed since approval" in detail,
        "wire",
        'the service to refuse the resume: 409 "payload changed since approval"',
        f"it answered HTTP {status}: {abbreviate(detail, 200)}",
        log=demo.log_of("approvals"),
    )
    outcome = _outcome(demo, sagacity, saga_id, "wire")
    demo.expect(
        outcome == "COMPENSATED",
        "wire",
        "the compensation service to undo the steps before the gate: COMPENSATED",
        f"the chain's outcome is {outcome}",
        log=demo.log_of("compensation"),
    )
    saga = _saga("wire", saga_id, sagacity)
    events = [(e.event_type, e.tool) for e in saga.entries]
    refusal = [e for e in saga.entries if e.event_type is E.RESUME_REFUSED]
    demo.expect(
        len(refusal) == 1 and refusal[0].attributes.get("ref_seq") == str(seq),
        "wire",
        f"RESUME_REFUSED journaled for {saga_id}/{seq}",
        f"the chain holds {[e.value for e, _ in events]}",
    )
    demo.expect(
        (E.INTENT, "wire_payment") not in events,
        "wire",
        "no INTENT for wire_payment on the chain",
        "the chain shows the wire was attempted",
    )
    shop = tools.snapshot(demo.settings.database_url)
    demo.expect(
        shop.wires == [],
        "wire",
        "the wire tool never called (demo_wire is empty)",
        f"demo_wire holds {shop.wires}",
    )
    demo.expect(
        shop.reservations.get("res-3") == "released" and shop.stock.get("p-1") == 8,
        "wire",
        "the attacked saga's reservation released (p-1 stock 8: only saga 1's order holds units)",
        f"stock {shop.stock}, reservations {shop.reservations}",
        log=demo.log_of("compensation"),
    )
    demo.report.sagas.append(saga)


def _outcome(demo: _Run, sagacity: Any, saga_id: str, stage: str) -> str:
    from sagacity.errors import OutcomeTimeoutError

    try:
        result = sagacity.wait_for_outcome(
            saga_id, timeout=demo.settings.timeout_s, poll_interval=0.5
        )
    except OutcomeTimeoutError as exc:
        raise DemoError(stage, str(exc), log=demo.log_of("compensation")) from exc
    return str(result.status.value)


def _saga(name: str, saga_id: str, sagacity: Any) -> Saga:
    from sagacity._outcome import outcome_from_chain

    entries = tuple(sagacity.entries(saga_id))
    outcome = outcome_from_chain(entries) if entries else None
    status = outcome.status.value if outcome is not None else "UNKNOWN"
    return Saga(name=name, saga_id=saga_id, status=status, entries=entries)


def _archive_and_verify(demo: _Run, sagacity: Any) -> None:
    del sagacity
    demo.echo("\nevidence: the archive in PostgreSQL, verified")
    archived = _wait_for_archive(demo)
    demo.expect(
        all(archived[s.saga_id] == [e.hash for e in s.entries] for s in demo.report.sagas),
        "archive",
        "the archive to hold the three chains exactly as on Kafka (same hashes)",
        f"archived heads differ: {_archive_diff(demo, archived)}",
        log=demo.log_of("archive"),
    )
    verified = demo.sagacity("verify", "--all", "--database-url", demo.settings.database_url)
    for line in verified.stdout.splitlines():
        if line.startswith(("sagas verified", "sagas ok", "sagas failed", "events ")):
            demo.echo(f"[verify]   {' '.join(line.split())}")
    demo.expect(
        verified.returncode == 0,
        "verify",
        "`sagacity verify --all` to exit 0 (every archived chain verifies)",
        f"it exited {verified.returncode}: {abbreviate(verified.stdout + verified.stderr, 400)}",
        log=demo.commands_log,
    )
    for saga in demo.report.sagas:
        demo.echo(f"\n{saga.saga_id}: {saga.status} ({len(saga.entries)} entries)")
        for line in chain_table(saga.entries):
            demo.echo(f"  {line}")
    demo.echo("")


def _wait_for_archive(demo: _Run) -> dict[str, list[str]]:
    import psycopg

    ids = [s.saga_id for s in demo.report.sagas]
    want = {s.saga_id: len(s.entries) for s in demo.report.sagas}
    deadline = time.monotonic() + demo.settings.timeout_s
    rows: list[tuple[str, int, str]] = []
    while True:
        try:
            with psycopg.connect(demo.settings.database_url) as conn:
                rows = conn.execute(
                    "SELECT saga_id, seq, hash FROM side_effect_journal "
                    "WHERE saga_id = ANY(%s) ORDER BY saga_id, seq",
                    (ids,),
                ).fetchall()
        except psycopg.errors.UndefinedTable:
            rows = []
        except psycopg.Error as exc:
            raise DemoError("archive", str(exc), log=demo.log_of("archive")) from exc
        have: dict[str, list[str]] = {saga_id: [] for saga_id in ids}
        for saga_id, _seq, digest in rows:
            have[saga_id].append(digest)
        if all(len(have[s]) >= n for s, n in want.items()):
            return have
        if time.monotonic() >= deadline:
            counts = {s: f"{len(have[s])}/{n}" for s, n in want.items()}
            raise DemoError(
                "archive",
                f"the archive did not catch up in {demo.settings.timeout_s:g}s: {counts}",
                log=demo.log_of("archive"),
            )
        time.sleep(0.5)


def _archive_diff(demo: _Run, archived: dict[str, list[str]]) -> str:
    return ", ".join(
        f"{s.saga_id} {len(archived[s.saga_id])} archived / {len(s.entries)} on Kafka"
        for s in demo.report.sagas
        if archived[s.saga_id] != [e.hash for e in s.entries]
    )


def _ensure_topic(settings: DemoSettings) -> tuple[int, bool]:
    """The topic's partition count, creating it with the journal's settings if missing."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from sagacity.errors import JournalError, TopicConfigError
    from sagacity.producer._topic import TopicSpec, check, create, describe

    bootstrap = settings.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    refusal: Exception | None = None
    try:
        created = settings.topic not in admin.list_topics(timeout=30).topics
        info = None
        if created:
            try:
                info = create(admin, settings.topic, TopicSpec(), bootstrap=bootstrap, timeout=30)
            except TopicConfigError as exc:
                # Created meanwhile, or not yet in the metadata we listed: use it if it exists.
                refusal = exc
                created = False
        if info is None:
            try:
                info = describe(admin, settings.topic, bootstrap=bootstrap, timeout=30)
            except JournalError as exc:
                raise DemoError("topic", str(refusal or exc)) from exc
    except (KafkaException, JournalError) as exc:
        raise DemoError("topic", str(exc)) from exc
    fatal = [f.detail for f in check(info) if f.fatal]
    if fatal:
        raise DemoError("topic", "; ".join(fatal))
    return info.partitions, created
