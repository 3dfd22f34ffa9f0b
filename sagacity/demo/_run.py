"""One run of the demonstration: its directory, the services it starts, the commands and agent
processes it runs, and the expectations it checks."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagacity.demo import (
    APPROVER,
    COMPENSATION_TOOLS,
    DemoError,
    DemoReport,
    DemoSettings,
    new_run_id,
)
from sagacity.demo._processes import SAGACITY, Completed, Service, run_command
from sagacity.signing._decision_signature import PUBLIC_KEY_ENV, DecisionSigner, generate_key

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,40}$")
_SECRETS = ("approver.token", "approvals-signing.pem")
"""What :meth:`DemoRun.start_services` writes that no one else may read (the run's own KEK
besides, when it made one): deleted at the run's end."""


class DemoRun:
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
        self.secrets: list[Path] = []
        """What this run wrote that no one else may read: deleted at its end."""
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
            SAGACITY_KEY_ENCRYPTION_KEY_FILE=str(self._key_encryption_key()),
            PYTHONUNBUFFERED="1",
        )
        self.env = env

    def _key_encryption_key(self) -> Path:
        """The key the run's journal is sealed under: the settings', else one of its own."""
        if self.settings.key_encryption_key is not None:
            return self.settings.key_encryption_key
        from sagacity.privacy._envelope import write_key_encryption_key

        path = self.dir / "journal.kek"
        if not path.exists():
            write_key_encryption_key(path)
            self.secrets.append(path)
        return path

    def announce_sealing(self) -> None:
        """Say which key-encryption key the run's journal is sealed under."""
        from sagacity.privacy._envelope import KeyEncryptionKey

        kek = Path(self.env["SAGACITY_KEY_ENCRYPTION_KEY_FILE"])
        self.echo(
            f"[keys]     journal data sealed under key-encryption key "
            f"{KeyEncryptionKey.from_file(kek).key_id} ({kek}): each saga can be erased"
        )

    def remove_secrets(self) -> None:
        """Delete the keys and the token this run made (its logs stay in its directory)."""
        made = [*self.secrets, *(self.dir / name for name in _SECRETS)]
        removed = [path for path in made if path.exists()]
        for path in removed:
            path.unlink()
        if removed:
            self.echo(f"[cleanup]  keys and token removed; logs kept in {self.dir}")

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


def decoded(done: Completed) -> dict[str, Any]:
    """The JSON object a ``--json`` command printed (``{}`` when it printed none)."""
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
