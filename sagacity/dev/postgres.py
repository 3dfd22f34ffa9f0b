"""A PostgreSQL server run from the distribution's binaries, in a directory of its own.

PostgreSQL refuses to run as root. When the caller is root (CI, containers) the server runs as
the unprivileged ``postgres`` system user (created if missing), and its directory is owned by
that user; if that user cannot reach the requested directory (for example a checkout under
``/root``), the server's files go to ``/var/lib/sagacity/sagacity-postgres/<hash>`` instead and the
state file says where.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagacity.dev import _proc
from sagacity.dev._ports import HOST, claim_port, pick_free_port, port_answers, port_is_free
from sagacity.dev._tools import find_postgres_bin
from sagacity.errors import DevStackError, ProcessStartError

DATABASE = "sagacity"
SUPERUSER = "postgres"
SERVICE_USER = "postgres"
"""The unprivileged account the server runs as when the caller is root."""

SERVER_SETTINGS: dict[str, str] = {
    "listen_addresses": HOST,
    "max_connections": "100",
    "shared_buffers": "32MB",
    # A disposable development database: durability traded for speed.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}

_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.NNNNN".


@dataclass(frozen=True, kw_only=True)
class PostgresState:
    """What a running server's ``state.json`` records."""

    pid: int
    port: int
    root: str
    """Directory holding ``data/``, ``run/`` (the unix socket) and the log."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {"pid": self.pid, "port": self.port, "root": self.root}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostgresState:
        """Inverse of :meth:`to_dict`; raises ``KeyError``/``TypeError``/``ValueError`` on junk."""
        return cls(pid=int(data["pid"]), port=int(data["port"]), root=str(data["root"]))


def _service_account() -> pwd.struct_passwd | None:
    """The account to run the server as: ``None`` (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise DevStackError(
            f"running as root and there is no {SERVICE_USER!r} user to run PostgreSQL as, "
            "nor useradd to create one; create an unprivileged user named "
            f"{SERVICE_USER!r} (apt-get install postgresql creates it)"
        )
    subprocess.run(
        [useradd, "--system", "--user-group", "--no-create-home", "--shell", "/bin/sh",
         SERVICE_USER],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return pwd.getpwnam(SERVICE_USER)


class PostgresServer:
    """One PostgreSQL server with its own data directory and port on 127.0.0.1.

    Args:
        home: directory for the server's state (created if missing).
        port: TCP port; default a free one. An explicit port that is taken is refused.
        database: database created on first start.
    """

    def __init__(self, home: Path, *, port: int | None = None, database: str = DATABASE):
        self.home = Path(home).resolve()
        self._explicit_port = port
        self.database = database

    @property
    def state_file(self) -> Path:
        """The JSON record of the running server (always inside ``home``)."""
        return self.home / "state.json"

    def state(self) -> PostgresState | None:
        """The recorded state, or ``None`` when there is none or it is unreadable."""
        return _proc.read_state(self.state_file, PostgresState.from_dict)

    def dsn(self, port: int | None = None) -> str:
        """The conninfo URL of the database on the running server.

        Raises:
            DevStackError: no server has been started here.
        """
        if port is None:
            state = self.state()
            if state is None:
                raise DevStackError(f"no PostgreSQL server has been started in {self.home}")
            port = state.port
        return f"postgresql://{SUPERUSER}@{HOST}:{port}/{self.database}"

    def is_running(self) -> bool:
        """Whether the recorded server process is alive and its port answers."""
        state = self.state()
        if state is None:
            return False
        data = str(Path(state.root) / "data")
        return _proc.pid_alive(state.pid, marker=data) and port_answers(state.port)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, *, timeout: float = 60.0) -> str:
        """Initialise (first time), start the server, create the database; return its DSN.

        Idempotent: a server already running here is reused.

        Raises:
            MissingToolError: the PostgreSQL server programs are not installed.
            PortInUseError: an explicitly requested port is taken.
            ProcessStartError: initdb or the server failed; the message ends with its log.
        """
        if self.is_running() or self._await_starting(timeout):
            return self.dsn()
        bindir = find_postgres_bin()
        account = _service_account()
        self.home.mkdir(parents=True, exist_ok=True)
        previous = self.state()
        port = self._choose_port(previous)
        root = Path(previous.root) if previous else self._choose_root(account)
        self._prepare(root, account)
        data = root / "data"
        if not (data / "PG_VERSION").is_file():
            self._initdb(bindir, data, account)
        self._launch(bindir, root, port, timeout, account)
        self._create_database(port)
        return self.dsn(port)

    def _write_state(self, state: PostgresState) -> None:
        _proc.write_state(self.state_file, state.to_dict())

    def _await_starting(self, timeout: float) -> bool:
        """Wait for a server another process is starting here; False if there is none."""
        deadline = time.monotonic() + timeout
        while (state := self.state()) is not None and _proc.pid_alive(
            state.pid, marker=str(Path(state.root) / "data")
        ):
            if _accepts_connections(state.port):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return False

    def _choose_port(self, previous: PostgresState | None) -> int:
        if self._explicit_port is not None:
            return claim_port(self._explicit_port)
        if previous is not None and port_is_free(previous.port):
            return previous.port
        return pick_free_port()

    def _choose_root(self, account: pwd.struct_passwd | None) -> Path:
        root = self.home / "server"
        socket_dir = root / "run"
        if len(str(socket_dir)) <= _SOCKET_PATH_MAX and (
            account is None or _reachable_by(account, self.home)
        ):
            return root
        return self._fallback_root()

    def _fallback_root(self) -> Path:
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:16]
        base = Path("/var/lib/sagacity") if os.geteuid() == 0 else Path(tempfile.gettempdir())
        return base / "sagacity-postgres" / digest

    def _prepare(self, root: Path, account: pwd.struct_passwd | None) -> None:
        for directory in (root, root / "run"):
            directory.mkdir(parents=True, exist_ok=True)
        if account is not None:
            for directory in (root, root / "run"):
                os.chown(directory, account.pw_uid, account.pw_gid)
            if (root / "data").exists():
                subprocess.run(
                    ["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", str(root / "data")],
                    check=True,
                )
        root.chmod(0o700)

    def _initdb(self, bindir: Path, data: Path, account: pwd.struct_passwd | None) -> None:
        result = _run_as(
            account,
            [str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
             "--encoding=UTF8", "--locale=C", "--no-sync"],
        )  # fmt: skip
        if result.returncode != 0:
            shutil.rmtree(data, ignore_errors=True)
            raise ProcessStartError(
                f"initdb failed in {data} (exit {result.returncode})",
                log_tail="\n".join((result.stdout + result.stderr).splitlines()[-30:]),
            )

    def _launch(
        self,
        bindir: Path,
        root: Path,
        port: int,
        timeout: float,
        account: pwd.struct_passwd | None,
    ) -> int:
        settings = {
            **SERVER_SETTINGS,
            "port": str(port),
            "unix_socket_directories": str(root / "run"),
        }
        cmd = [str(bindir / "postgres"), "-D", str(root / "data")]
        for key, value in settings.items():
            cmd += ["-c", f"{key}={value}"]
        log = root / "postgres.log"
        with log.open("ab") as out:
            # Run directly (not through pg_ctl) so an early exit is seen at once; a session of
            # its own so the terminal's Ctrl-C for the starting command does not reach it.
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_as_account(account),
            )
        _proc.launched[proc.pid] = proc
        self._write_state(PostgresState(pid=proc.pid, port=port, root=str(root)))
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                _proc.forget(proc.pid)
                problem = f"exited with status {proc.returncode}"
            elif time.monotonic() > deadline:
                _proc.terminate(proc.pid, timeout=10.0, sig=signal.SIGINT)
                problem = f"did not accept connections in {timeout:.0f}s"
            elif _accepts_connections(port):
                return proc.pid
            else:
                time.sleep(0.1)
                continue
            raise ProcessStartError(
                f"PostgreSQL in {root} on {HOST}:{port} {problem}", log_tail=_proc.log_tail(log)
            )

    def _create_database(self, port: int) -> None:
        import psycopg
        from psycopg import sql

        admin = f"postgresql://{SUPERUSER}@{HOST}:{port}/postgres"
        deadline = time.monotonic() + 15.0
        while True:
            try:
                with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
                    exists = conn.execute(
                        "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
                    ).fetchone()
                    if exists is None:
                        conn.execute(sql.SQL("CREATE DATABASE {}").format(
                            sql.Identifier(self.database)))  # fmt: skip
                return
            except psycopg.OperationalError as exc:
                # Connections can still be refused for a moment after the first one worked.
                if time.monotonic() > deadline:
                    raise DevStackError(f"cannot create database {self.database}: {exc}") from exc
                time.sleep(0.2)

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop the server with a fast shutdown; returns whether one was running here.

        Only the process recorded in this directory's state and serving its data directory is
        signalled (SIGINT = fast shutdown, SIGQUIT after ``timeout`` s).
        """
        state = self.state()
        if state is None:
            return False
        data = str(Path(state.root) / "data")
        if not _proc.pid_alive(state.pid, marker=data):
            return False
        clean = _proc.terminate(state.pid, timeout=timeout, sig=signal.SIGINT)
        if not clean:
            with contextlib.suppress(OSError):
                os.kill(state.pid, signal.SIGQUIT)
        return True

    def purge(self) -> None:
        """Stop the server if it runs here and delete its data (also outside ``home``)."""
        self.stop()
        state = self.state()
        roots = {self.home / "server", self._fallback_root()}
        if state is not None:
            roots.add(Path(state.root))
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)


def _reachable_by(account: pwd.struct_passwd, directory: Path) -> bool:
    """Whether ``account`` can traverse every directory from ``/`` down to ``directory``."""
    result = subprocess.run(
        ["test", "-x", str(directory)],
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _as_account(account: pwd.struct_passwd | None) -> dict[str, Any]:
    """``subprocess`` keyword arguments that run a child as ``account`` (nothing if None)."""
    if account is None:
        return {}
    env = {**os.environ, "HOME": account.pw_dir, "USER": account.pw_name}
    env["LOGNAME"] = account.pw_name
    return {
        "user": account.pw_uid,
        "group": account.pw_gid,
        "extra_groups": [],
        "env": env,
        "cwd": "/",
    }


def _run_as(account: pwd.struct_passwd | None, cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **_as_account(account))


def _accepts_connections(port: int) -> bool:
    import psycopg

    if not port_answers(port, timeout=0.2):
        return False
    try:
        with psycopg.connect(f"postgresql://{SUPERUSER}@{HOST}:{port}/postgres", connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False  # still starting up ("the database system is starting up")
