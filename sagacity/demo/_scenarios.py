"""The demonstration's scenarios, each run against the services a :class:`.DemoRun` started:
an order confirmed through an approval, an order compensated by the service, the stale-approval
attack; then the evidence, archived and verified."""

from __future__ import annotations

import time
from typing import Any

from sagacity.demo import APPROVER, ATTACK_PAYLOAD, DemoError, Saga, abbreviate, chain_table
from sagacity.demo._run import DemoRun, decoded
from sagacity.entries._events import EventType

E = EventType


def _awaiting(demo: DemoRun, scenario: str, saga_id: str) -> int:
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


def _approve(demo: DemoRun, scenario: str, saga_id: str, seq: int) -> dict[str, Any]:
    shown = demo.approvals("show", saga_id, str(seq))
    request = decoded(shown)
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
    decision = decoded(approved).get("request", {})
    demo.expect(
        approved.returncode == 0 and decision.get("signed_by") == [APPROVER],
        scenario,
        f"`sagacity approvals approve` to sign {saga_id}/{seq} as {APPROVER}",
        f"it exited {approved.returncode}: {abbreviate(approved.stdout + approved.stderr, 200)}",
        log=demo.log_of("approvals"),
    )
    return request


def _approved_in_console(
    demo: DemoRun, scenario: str, saga_id: str, seq: int, request: dict[str, Any]
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
        shown = decoded(demo.sagacity("approvals", *argv, "show", saga_id, str(seq)))
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


def confirmed(demo: DemoRun, sagacity: Any) -> None:
    """Saga 1: an order confirmed through an approval granted on the command line."""
    from sagacity.demo import tools

    demo.echo("\nsaga 1: an order confirmed through an approval granted on the command line")
    saga_id = f"order-confirmed-{demo.run_id}"
    seq = _awaiting(demo, "confirmed", saga_id)
    request = _approve(demo, "confirmed", saga_id, seq)
    demo.echo(f"[resume]   {saga_id}/{seq} with the payload exactly as shown")
    resumed = demo.approvals("resume", saga_id, str(seq), "--payload", request["payload"])
    status = decoded(resumed).get("saga_status")
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


def failed(demo: DemoRun, sagacity: Any) -> None:
    """Saga 2: an order that fails at ``create_order``, compensated by the service."""
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


def attack(demo: DemoRun, sagacity: Any) -> None:
    """Saga 3: the stale-approval attack, refused by the CLI and by the service."""
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
    demo.echo(f"[attack]   the CLI: {decoded(local).get('detail')}")
    demo.expect(
        local.returncode == 1 and "nothing was sent" in str(decoded(local).get("detail")),
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


def _outcome(demo: DemoRun, sagacity: Any, saga_id: str, stage: str) -> str:
    from sagacity.errors import OutcomeTimeoutError

    try:
        result = sagacity.wait_for_outcome(
            saga_id, timeout=demo.settings.timeout_s, poll_interval=0.5
        )
    except OutcomeTimeoutError as exc:
        raise DemoError(stage, str(exc), log=demo.log_of("compensation")) from exc
    return str(result.status.value)


def _saga(name: str, saga_id: str, sagacity: Any) -> Saga:
    from sagacity.saga._outcome import outcome_from_chain

    entries = tuple(sagacity.entries(saga_id))
    outcome = outcome_from_chain(entries) if entries else None
    status = outcome.status.value if outcome is not None else "UNKNOWN"
    return Saga(name=name, saga_id=saga_id, status=status, entries=entries)


def archive_and_verify(demo: DemoRun, sagacity: Any) -> None:
    """The evidence: the three chains archived exactly as on Kafka, then verified."""
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


def _wait_for_archive(demo: DemoRun) -> dict[str, list[str]]:
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


def _archive_diff(demo: DemoRun, archived: dict[str, list[str]]) -> str:
    return ", ".join(
        f"{s.saga_id} {len(archived[s.saga_id])} archived / {len(s.entries)} on Kafka"
        for s in demo.report.sagas
        if archived[s.saga_id] != [e.hash for e in s.entries]
    )
