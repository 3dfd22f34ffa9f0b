"""``sagacity approvals``: list, show, decide and resume approval requests over the HTTP API.

The token comes from ``$SAGACITY_APPROVALS_TOKEN`` or ``--token-file``; the service records the
principal it belongs to as the approver.  Tables for people; ``--json`` for scripts.  Exit
status: 0 done, 1 the service refused (the reason is printed), 2 bad usage.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click

from sagacity.cli._exit import FAILED, UNAVAILABLE, USAGE, CommandError
from sagacity.cli._options import json_option, parse_duration, wants_json

DEFAULT_URL = "http://127.0.0.1:8085"


class _Client:
    def __init__(self, url: str, token: str | None, as_json: bool, timeout: float) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.as_json = as_json
        self.timeout = timeout

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """The JSON answer of one request; an HTTP error exits 1 with its detail.

        The standard library's client keeps the command quick to start.
        """
        import urllib.error
        import urllib.parse
        import urllib.request

        url = self.url + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CommandError(
                f"cannot reach the approvals service at {self.url}: {reason}", UNAVAILABLE
            ) from exc
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = {"detail": raw.decode("utf-8", "replace")}
        if 200 <= status < 300:
            return answer
        detail = answer.get("detail") if isinstance(answer, dict) else answer
        # 4xx: the service refused the request (1); 5xx: it could not serve it (3).
        code = UNAVAILABLE if status >= 500 else FAILED
        if self.as_json:
            click.echo(json.dumps({"status": status, "detail": detail}))
            sys.exit(code)
        raise CommandError(f"HTTP {status}: {detail}", code)

    def refuse(self, detail: str, **fields: Any) -> NoReturn:
        """Refuse here, before anything is sent: exit 1 with ``detail``."""
        if self.as_json:
            click.echo(json.dumps({"status": None, "detail": detail, **fields}))
            sys.exit(FAILED)
        raise CommandError(detail, FAILED)


def _redacted_fields(payload: object, path: str = "$") -> list[str]:
    """The paths of the redacted values (``{"$redacted": ...}``) in a request's payload."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return []
    if isinstance(payload, dict):
        if len(payload) == 1 and isinstance(payload.get("$redacted"), str):
            return [path]
        return [p for k, v in payload.items() for p in _redacted_fields(v, f"{path}.{k}")]
    return []


def _when(micros: int | None) -> str:
    if micros is None:
        return "-"
    try:
        return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):
        # A time a writer chose beyond the calendar: shown as it is, never a crash.
        return f"{micros} us"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def _emit(client: _Client, data: Any, human: str) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if client.as_json else human)


def _request_text(r: dict[str, Any]) -> str:
    signed = ", ".join(r["signed_by"]) or "-"
    return "\n".join(
        [
            f"request     {r['saga_id']}/{r['seq']}",
            f"tool        {r['tool']} ({r['reversibility']})",
            f"payload     {r['payload']}",
            f"sha256      {r['payload_sha256']}",
            f"entry       {r.get('request_hash') or '-'}",
            f"state       {r['state']}",
            f"signatures  {len(r['signed_by'])}/{r['signatures_required']}: {signed}",
            f"requested   {_when(r['requested_at_us'])} (policy {r['policy_version']})",
            f"deadline    {_when(r['deadline_us'])}",
            f"decision    {r['decision'] or '-'} by {r['decided_by'] or '-'} at "
            f"{_when(r['decided_at_us'])} (policy {r['decision_policy_version'] or '-'})",
        ]
    )


def _decision_text(d: dict[str, Any]) -> str:
    lines = [_request_text(d["request"])]
    if d.get("saga_status"):
        lines.append(f"saga        {d['saga_status']}")
    if d.get("value") is not None:
        lines.append(f"result      {d['value']}")
    if d.get("error"):
        lines.append(f"error       {d['error']}")
    return "\n".join(lines)


@click.group("approvals")
@click.option(
    "--url",
    envvar="SAGACITY_APPROVALS_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="The approvals service.",
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="File holding the bearer token (default: $SAGACITY_APPROVALS_TOKEN).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds per request.")
@click.pass_context
def approvals(
    ctx: click.Context, url: str, token_file: Path | None, as_json: bool, timeout: float
) -> None:
    """Approval requests: list, show, approve, reject, resume, stats."""
    token = (
        token_file.read_text(encoding="utf-8").strip()
        if token_file is not None
        else os.environ.get("SAGACITY_APPROVALS_TOKEN")
    )
    ctx.obj = _Client(url, token or None, wants_json(ctx, as_json), timeout)


@approvals.command("list")
@click.option(
    "--state",
    default="open",
    show_default=True,
    type=click.Choice(
        ["open", "all", "pending", "approved", "rejected", "expired", "refused", "resumed", "ended"]
    ),
)
@click.option("--limit", default=500, show_default=True, help="At most this many, oldest first.")
@json_option
@click.pass_obj
def list_requests(client: _Client, state: str, limit: int) -> None:
    """Requests (open ones by default) for the tools your token may decide."""
    data = client.call("GET", "/sagacity/approvals", params={"state": state, "limit": limit})
    rows = [
        [
            f"{r['saga_id']}/{r['seq']}",
            r["tool"],
            r["state"],
            f"{len(r['signed_by'])}/{r['signatures_required']}",
            _when(r["requested_at_us"]),
            r["payload"] if len(r["payload"]) <= 48 else r["payload"][:45] + "...",
        ]
        for r in data["requests"]
    ]
    human = (
        _table(rows, ["REQUEST", "TOOL", "STATE", "SIGNED", "REQUESTED (UTC)", "PAYLOAD"])
        if rows
        else "no requests"
    )
    _emit(client, data, human)


@approvals.command("show")
@click.argument("saga_id")
@click.argument("seq", type=int, required=False)
@json_option
@click.pass_obj
def show(client: _Client, saga_id: str, seq: int | None) -> None:
    """One request (SAGA_ID SEQ), or a saga's status and chain (SAGA_ID)."""
    if seq is not None:
        data = client.call("GET", f"/sagacity/approvals/{saga_id}/{seq}")
        _emit(client, data, _request_text(data))
        return
    data = client.call("GET", f"/sagacity/sagas/{saga_id}")
    rows = [
        [
            str(e["seq"]),
            e["event_type"],
            e["tool"] or "-",
            e["actor"] or "-",
            (e["payload"] or e["result"] or e["error"] or "")[:60],
        ]
        for e in data["entries"]
    ]
    verified = "verified" if data["verified"] else f"DOES NOT VERIFY: {data['verification']}"
    human = f"saga {data['saga_id']}: {data['status']} (chain {verified})\n" + _table(
        rows, ["SEQ", "EVENT", "TOOL", "ACTOR", "DETAIL"]
    )
    _emit(client, data, human)


@approvals.command("approve")
@click.argument("saga_id")
@click.argument("seq", type=int)
@click.option(
    "--request-hash",
    default=None,
    help="The request entry's hash you checked (`approvals show SAGA SEQ`, line `entry`); the "
    "service refuses the approval if the chain's request is another.  Default: the request "
    "as read now (printed with the outcome).",
)
@json_option
@click.pass_obj
def approve(client: _Client, saga_id: str, seq: int, request_hash: str | None) -> None:
    """Sign the request as the token's principal (nothing runs yet), bound to its entry hash."""
    if request_hash is None:
        shown = client.call("GET", f"/sagacity/approvals/{saga_id}/{seq}")
        request_hash = shown.get("request_hash")
    body = {"request_hash": request_hash} if request_hash else None
    data = client.call("POST", f"/sagacity/approve/{saga_id}/{seq}", body=body)
    _emit(client, data, _decision_text(data))


@approvals.command("reject")
@click.argument("saga_id")
@click.argument("seq", type=int)
@click.option("--reason", default=None, help="Why (journaled with the rejection).")
@json_option
@click.pass_obj
def reject(client: _Client, saga_id: str, seq: int, reason: str | None) -> None:
    """Reject the request; the saga's executed steps are handed to compensation."""
    body = {"reason": reason} if reason is not None else None
    data = client.call("POST", f"/sagacity/reject/{saga_id}/{seq}", body=body)
    _emit(client, data, _decision_text(data))


@approvals.command("resume")
@click.argument("saga_id")
@click.argument("seq", type=int)
@click.option(
    "--payload",
    default=None,
    help="The live payload, exactly as given to you (default: the approved payload).",
)
@click.option(
    "--payload-file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Read the payload from a file ('-' for stdin), byte for byte.",
)
@click.option(
    "--dry-run", is_flag=True, help="Check the payload against the approval; send nothing."
)
@json_option
@click.pass_obj
def resume(
    client: _Client,
    saga_id: str,
    seq: int,
    payload: str | None,
    payload_file: Any,
    dry_run: bool,
) -> None:
    """Run the approved call with the approved payload.

    Without --payload or --payload-file the payload the request holds is sent.  A payload given
    is checked here against the request's SHA-256 first: a mismatch is refused before anything
    is sent (exit 1, nothing journaled).  The service checks the binding again.  A request with
    redacted fields (docs/adr/0019-erasure.md §5) needs the live payload given, and only the
    service can check it (the salts binding the redacted values are sealed in the journal).
    """
    from sagacity.chain import payload_sha256

    if payload is not None and payload_file is not None:
        raise click.UsageError("give at most one of --payload or --payload-file")
    request = client.call("GET", f"/sagacity/approvals/{saga_id}/{seq}")
    approved = request.get("payload_sha256")
    given = payload if payload is not None else payload_file.read() if payload_file else None
    redacted = _redacted_fields(request.get("payload"))
    if redacted and (given is None or dry_run):
        # Their values were never journaled, and only the service holds the salts that bind
        # them: the request's own payload would be refused, and no payload is checked here.
        client.refuse(
            f"the request's payload has redacted fields ({', '.join(redacted)}), never "
            "journaled in clear: "
            + (
                "only the service can check a payload against it"
                if dry_run
                else "give the live payload with --payload or --payload-file"
            )
            + "; nothing was sent",
            redacted=redacted,
        )
    text = request["payload"] if given is None else given
    digest = payload_sha256(text)
    if not redacted and (approved is None or digest != approved):
        what = "the request's payload" if given is None else "the payload given"
        detail = (
            f"{what} (sha256 {digest}) is not the approved one (sha256 {approved}); "
            "nothing was sent"
        )
        client.refuse(detail, payload_sha256=digest, approved_sha256=approved)
    if dry_run:
        data = {"dry_run": True, "request": request, "payload": text, "payload_sha256": digest}
        human = (
            _request_text(request)
            + "\ndry run     the payload matches the approved sha256; nothing was sent"
        )
        _emit(client, data, human)
        return
    data = client.call("POST", f"/sagacity/resume/{saga_id}/{seq}", body={"payload": text})
    _emit(client, data, _decision_text(data))


@approvals.command("stats")
@click.option("--window", default="24h", show_default=True, help="e.g. 90s, 15m, 24h, 7d.")
@json_option
@click.pass_obj
def stats(client: _Client, window: str) -> None:
    """Approve/reject ratio and request-to-decision latency p50/p95 over the window."""
    data = client.call("GET", "/sagacity/stats", params={"window_s": parse_duration(window)})

    def fmt(value: float | None, suffix: str = "s") -> str:
        return "-" if value is None else f"{value:.3f}{suffix}"

    ratio = data["approve_ratio"]
    human = "\n".join(
        [
            f"window          {data['window_s']:g}s",
            f"approved        {data['approved']}",
            f"rejected        {data['rejected']}",
            f"expired         {data['expired']}",
            f"approve ratio   {'-' if ratio is None else f'{ratio:.1%}'}",
            f"latency p50     {fmt(data['latency_p50_s'])}",
            f"latency p95     {fmt(data['latency_p95_s'])}",
            f"open now        {data['pending']} (oldest {fmt(data['oldest_pending_age_s'])})",
            f"latency covers  {data['latency_covers']}",
        ]
    )
    _emit(client, data, human)


@approvals.command("token-hash")
@click.option("--name", default=None, help="Principal name: print a whole auth-file entry.")
@click.option(
    "--role",
    type=click.Choice(["approver", "agent", "auditor"]),
    default="approver",
    show_default=True,
    help="approver: decides for its tools; agent: calls its tools over MCP, decides nothing; "
    "auditor: reads every saga, decides nothing.",
)
@click.option(
    "--tool",
    "tools",
    multiple=True,
    help="A tool the approver decides or the agent calls (repeat).",
)
@click.option(
    "--all-tools", is_flag=True, help="Every tool (instead of --tool): say it to mean it."
)
@click.option(
    "--agent",
    "agents",
    multiple=True,
    help="An approver's own agent identity (an agent's name, a writer id): the approver "
    "decides none of its requests (repeat).",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    help="A group the approver is in, as routes name it (repeat; docs/operations/routing.md).",
)
@click.option(
    "--slack-user",
    default=None,
    help="The approver's Slack user id (U…): it decides in Slack as this principal "
    "(docs/operations/slack.md).",
)
@click.option("--generate", is_flag=True, help="Make a new random token (printed on stderr).")
@click.option(
    "--save-token",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --generate: write the token to this file (mode 0600, never overwritten) for "
    "the principal's --token-file, instead of printing it.",
)
def token_hash(
    name: str | None,
    role: str,
    tools: tuple[str, ...],
    all_tools: bool,
    agents: tuple[str, ...],
    groups: tuple[str, ...],
    slack_user: str | None,
    generate: bool,
    save_token: Path | None,
) -> None:
    """Print the SHA-256 of a token read from stdin, or an auth-file entry with --name.

    An approver or an agent names its tools with --tool (repeat), or --all-tools for every
    one; an auditor has none. See docs/operations/approvals.md, "Principals".
    """
    from sagacity.consumers.approvals._auth import ANY_TOOL, auth_entry, new_token, token_sha256
    from sagacity.errors import ConfigurationError

    _check_entry(
        name, role, tools, all_tools, (*agents, *groups, *([slack_user] if slack_user else []))
    )
    if save_token is not None and not generate:
        raise click.UsageError("--save-token writes a generated token: give --generate")
    if generate:
        token = new_token()
        if save_token is not None:
            _save_token(save_token, token)
            click.echo(
                f"token written to {save_token.resolve()} (give it to the principal)", err=True
            )
        else:
            click.echo(f"token (give it to the principal; it is not stored): {token}", err=True)
    else:
        token = sys.stdin.readline().strip()
        if not token:
            raise click.UsageError("no token on stdin (or pass --generate)")
    if name is None:
        click.echo(token_sha256(token))
        return
    try:
        entry = auth_entry(
            name,
            token,
            [ANY_TOOL] if all_tools else list(tools),
            role=role,
            agents=agents,
            groups=groups,
            slack_user=slack_user,
        )
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(entry, nl=False)


def _check_entry(
    name: str | None,
    role: str,
    tools: tuple[str, ...],
    all_tools: bool,
    approver_only: tuple[str, ...],
) -> None:
    """Refuse the options of ``token-hash`` that do not make an entry (``approver_only``: the
    values of --agent, --group and --slack-user given).

    Raises:
        click.UsageError: naming what to give instead.
    """
    if name is None and (tools or all_tools or approver_only or role != "approver"):
        raise click.UsageError(
            "--role, --tool, --all-tools, --agent, --group and --slack-user describe an entry: "
            "give --name"
        )
    if name is None:
        return
    if tools and all_tools:
        raise click.UsageError("give --tool (repeat) or --all-tools, not both")
    if role == "auditor" and (tools or all_tools):
        raise click.UsageError("an auditor reads every saga and decides none: no --tool")
    if role != "auditor" and not (tools or all_tools):
        raise click.UsageError(
            f"an {role} needs its tools: --tool NAME (repeat), or --all-tools for every tool"
        )
    if approver_only and role != "approver":
        raise click.UsageError(
            "--agent, --group and --slack-user describe an approver: only with --role approver"
        )


def _save_token(path: Path, token: str) -> None:
    """Write ``token`` to a new file only its owner reads.

    Raises:
        CommandError: the file exists or cannot be made (exit 2).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise CommandError(f"--save-token {path}: {exc.strerror}", USAGE) from exc
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")


@approvals.command("keygen")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the private key (mode 0600; an existing file is refused).",
)
def keygen(out: Path) -> None:
    """Create the approvals service's Ed25519 decision key; print the public key to pin.

    The service reads the private key from SAGACITY_APPROVALS_SIGNING_KEY; every agent, the
    approvals and compensation services and the archive pin the public key in
    SAGACITY_APPROVALS_PUBLIC_KEY.
    """
    from sagacity.errors import SagacityError
    from sagacity.signing._decision_signature import generate_key

    try:
        signer = generate_key(out)
    except SagacityError as exc:
        raise CommandError(str(exc), USAGE) from exc
    click.echo(f"private key: {out.resolve()}")
    click.echo(f"key id:      {signer.key_id}")
    click.echo(f"public key:  {signer.public_hex}")


# The standing grants' commands (grant, grants, revoke) register on the group above.
from sagacity.cli import _approvals_grants as _approvals_grants  # noqa: E402
