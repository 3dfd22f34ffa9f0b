"""``sagacity approvals`` with click's CliRunner against a running service over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity.chain import payload_sha256
from sagacity.cli import main
from sagacity.consumers.approvals import AuthConfig

from .conftest import ALICE, MALLORY, TOKENS, LiveService

pytestmark = pytest.mark.postgres


def cli(live: LiveService, who: str, *args: str, **kwargs: object) -> object:
    runner = CliRunner()
    return runner.invoke(
        main,
        ["approvals", "--url", live.url, *args],
        env={"SAGACITY_APPROVALS_TOKEN": TOKENS[who]},
        catch_exceptions=False,
        **kwargs,  # type: ignore[arg-type]
    )


def test_list_show_approve_resume_for_people_and_scripts(live: LiveService) -> None:
    seq = live.gate("cli-1")
    table = cli(live, "alice", "list")
    assert table.exit_code == 0, table.output
    assert "REQUEST" in table.output
    assert f"cli-1/{seq}" in table.output
    assert "send_wire_transfer" in table.output
    live.gate("cli-1b")
    listed = json.loads(cli(live, "alice", "--json", "list").output)
    assert [r["saga_id"] for r in listed["requests"]] == ["cli-1", "cli-1b"]
    oldest = json.loads(cli(live, "alice", "--json", "list", "--limit", "1").output)
    assert [(r["saga_id"], r["seq"]) for r in oldest["requests"]] == [("cli-1", seq)]
    shown = cli(live, "alice", "show", "cli-1", str(seq))
    assert ALICE in shown.output
    assert "signatures  0/1" in shown.output
    approved = cli(live, "alice", "--json", "approve", "cli-1", str(seq))
    assert approved.exit_code == 0
    assert json.loads(approved.output)["request"]["signed_by"] == ["alice@example.com"]
    before = len(live.journal.entries("cli-1"))
    refused = cli(live, "alice", "resume", "cli-1", str(seq), "--payload", MALLORY)
    assert refused.exit_code == 1
    assert "is not the approved one" in refused.output
    assert "nothing was sent" in refused.output
    assert len(live.journal.entries("cli-1")) == before  # refused here: nothing journaled
    as_json = cli(live, "alice", "resume", "cli-1", str(seq), "--payload", MALLORY, "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.output)["approved_sha256"] == payload_sha256(ALICE)
    dry = cli(live, "alice", "resume", "cli-1", str(seq), "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["payload"] == ALICE
    assert len(live.journal.entries("cli-1")) == before  # a dry run sends nothing
    done = cli(live, "alice", "resume", "cli-1", str(seq))  # default: the approved payload
    assert done.exit_code == 0, done.output
    assert "saga        COMPLETED" in done.output
    chain = cli(live, "alice", "show", "cli-1")
    assert "RESUME_REFUSED" not in chain.output
    assert "chain verified" in chain.output


def test_resume_from_a_file_reject_and_stats(live: LiveService, tmp_path: Path) -> None:
    ok, no = live.gate("cli-ok"), live.gate("cli-no")
    assert cli(live, "bob", "approve", "cli-ok", str(ok)).exit_code == 0
    payload = tmp_path / "payload.json"
    payload.write_bytes(ALICE.encode())
    done = cli(live, "bob", "resume", "cli-ok", str(ok), "--payload-file", str(payload))
    assert done.exit_code == 0, done.output
    assert "saga        COMPLETED" in done.output
    assert "result      transfer-ok" in done.output
    rejected = cli(live, "bob", "reject", "cli-no", str(no), "--reason", "wrong account")
    assert rejected.exit_code == 0
    assert "COMPENSATION_PENDING" in rejected.output
    again = cli(live, "bob", "--json", "reject", "cli-no", str(no))
    assert again.exit_code == 1
    assert json.loads(again.output)["status"] == 409
    stats = cli(live, "bob", "stats", "--window", "1h")
    assert stats.exit_code == 0
    assert "approve ratio   50.0%" in stats.output
    assert "not time to first look" in stats.output
    figures = json.loads(cli(live, "bob", "--json", "stats").output)
    assert (figures["approved"], figures["rejected"]) == (1, 1)
    assert figures["latency_p95_s"] is not None


def test_bad_credentials_other_tools_and_usage(live: LiveService, tmp_path: Path) -> None:
    seq = live.gate("cli-auth")
    runner = CliRunner()
    anonymous = runner.invoke(main, ["approvals", "--url", live.url, "list"], env={})
    assert anonymous.exit_code == 1
    assert "HTTP 401" in anonymous.output
    token_file = tmp_path / "token"
    token_file.write_text(TOKENS["eve"] + "\n")
    other = runner.invoke(
        main,
        [
            "approvals",
            "--url",
            live.url,
            "--token-file",
            str(token_file),
            "approve",
            "cli-auth",
            str(seq),
        ],
        env={},
    )
    assert other.exit_code == 1
    assert "HTTP 403" in other.output
    both = cli(
        live, "bob", "resume", "cli-auth", str(seq), "--payload", ALICE, "--payload-file", "-"
    )
    assert both.exit_code == 2
    unreachable = runner.invoke(main, ["approvals", "--url", "http://127.0.0.1:9", "list"])
    assert unreachable.exit_code == 3
    assert "cannot reach" in unreachable.output


def test_token_hash_prints_an_entry_the_service_accepts(tmp_path: Path) -> None:
    runner = CliRunner()
    digest = runner.invoke(main, ["approvals", "token-hash"], input="secret-token\n")
    assert digest.exit_code == 0
    assert len(digest.output.strip()) == 64
    entry = runner.invoke(
        main,
        ["approvals", "token-hash", "--name", "dana@example.com", "--tool", "send_wire_transfer"],
        input="secret-token\n",
    )
    path = tmp_path / "auth.toml"
    path.write_text(entry.output)
    principal = AuthConfig.load(path).authenticate("secret-token")
    assert principal is not None
    assert principal.name == "dana@example.com"
    assert principal.may_decide("send_wire_transfer")
    assert not principal.may_decide("grant_agent_access")
    generated = runner.invoke(main, ["approvals", "token-hash", "--generate"])
    assert generated.exit_code == 0
    assert "token (give it to the principal" in generated.output
    empty = runner.invoke(main, ["approvals", "token-hash"], input="")
    assert empty.exit_code == 2


def test_a_chunked_body_over_the_limit_is_413_without_journaling(live: LiveService) -> None:
    import httpx

    seq = live.gate("cli-chunked")

    def chunks() -> object:
        yield b'{"payload": "'
        for _ in range(400):
            yield b"x" * 1024
        yield b'"}'

    answer = httpx.post(
        f"{live.url}/sagacity/resume/cli-chunked/{seq}",
        content=chunks(),  # type: ignore[arg-type]
        headers={"Authorization": f"Bearer {TOKENS['bob']}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 413
    assert "request body over" in answer.json()["detail"]
    kinds = [e.event_type.value for e in live.journal.entries("cli-chunked")]
    assert kinds[-1] == "SAGA_ENDED"
    assert "RESUME_REFUSED" not in kinds


def test_the_openapi_document_lists_exactly_the_api(live: LiveService) -> None:
    import httpx

    spec = httpx.get(f"{live.url}/openapi.json").json()
    assert sorted(spec["paths"]) == [
        "/sagacity/approvals",
        "/sagacity/approvals/{saga_id}/{seq}",
        "/sagacity/approve/{saga_id}/{seq}",
        "/sagacity/grant/{saga_id}",
        "/sagacity/grants/{saga_id}",
        "/sagacity/reject/{saga_id}/{seq}",
        "/sagacity/resume/{saga_id}/{seq}",
        "/sagacity/revoke/{saga_id}/{grant_id}",
        "/sagacity/sagas/{saga_id}",
        "/sagacity/settle/{saga_id}/{seq}",
        "/sagacity/stats",
    ]
    resume = spec["paths"]["/sagacity/resume/{saga_id}/{seq}"]["post"]
    assert {"401", "403", "404", "409", "413", "422"} <= set(resume["responses"])
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def saga_cli(live: LiveService, who: str, *args: str) -> object:
    return CliRunner().invoke(
        main,
        ["saga", "resolve", "--url", live.url, *args],
        env={"SAGACITY_APPROVALS_TOKEN": TOKENS[who]},
        catch_exceptions=False,
    )


def test_saga_resolve_settles_a_suspect_step_as_the_token_principal(live: LiveService) -> None:
    seq = live.suspect("cli-suspect")
    denied = saga_cli(
        live, "alice", "cli-suspect", str(seq), "--outcome", "executed", "--note", "x"
    )
    assert denied.exit_code == 1  # alice may not decide reserve_inventory
    assert "HTTP 403" in denied.output
    bad = saga_cli(live, "eve", "cli-suspect", str(seq), "--outcome", "maybe", "--note", "x")
    assert bad.exit_code == 2
    settled = saga_cli(
        live, "eve", "cli-suspect", str(seq), "--outcome", "executed", "--note", "stock held"
    )
    assert settled.exit_code == 0, settled.output
    assert f"settled cli-suspect/{seq} executed by eve@example.com" in settled.output
    assert "COMPENSATION_PENDING" in settled.output
    entry = [e for e in live.journal.entries("cli-suspect") if e.event_type == "SUSPECT_SETTLED"]
    assert [(e.actor, e.attributes["note"]) for e in entry] == [("eve@example.com", "stock held")]
    again = saga_cli(live, "bob", "cli-suspect", str(seq), "--outcome", "executed", "--note", "y")
    assert again.exit_code == 1
    assert "HTTP 409: cannot settle: the step was already settled executed by eve@" in again.output
    unknown = saga_cli(live, "bob", "cli-suspect", "1", "--outcome", "executed", "--note", "y")
    assert "HTTP 404" in unknown.output


def test_resume_of_a_request_with_redacted_fields_needs_the_live_payload(
    live: LiveService,
) -> None:
    """docs/adr/0019-erasure.md §5: the request holds the redaction keys, not the values, and
    only the service has the salts: the CLI neither resends the request's payload nor checks
    one itself; nothing is sent."""
    from sagacity import EntryDraft, EventType

    redacted = '{"amount":"100","to":{"$redacted":"' + "ab" * 32 + '"}}'
    live.journal.append(EntryDraft(saga_id="cli-red", event_type=EventType.SAGA_OPENED))
    request = live.journal.append(
        EntryDraft(
            saga_id="cli-red",
            event_type=EventType.AWAITING_APPROVAL,
            tool="send_wire_transfer",
            payload=redacted,
            attributes={
                "payload_sha256": payload_sha256(redacted),
                "signatures_required": "1",
                "reversibility": "IRREVERSIBLE",
                "policy_version": "1",
            },
        )
    )
    live.server.service.materialise("cli-red")
    assert cli(live, "alice", "approve", "cli-red", str(request.seq)).exit_code == 0
    before = len(live.journal.entries("cli-red"))
    default = cli(live, "alice", "resume", "cli-red", str(request.seq))
    assert default.exit_code == 1
    assert "redacted fields ($.to)" in default.output
    assert "give the live payload with --payload or --payload-file" in default.output
    dry = cli(live, "alice", "--json", "resume", "cli-red", str(request.seq), "--dry-run")
    assert dry.exit_code == 1
    assert json.loads(dry.output)["redacted"] == ["$.to"]
    assert "only the service can check a payload" in json.loads(dry.output)["detail"]
    assert len(live.journal.entries("cli-red")) == before  # nothing was sent
