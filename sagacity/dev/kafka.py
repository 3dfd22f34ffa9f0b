"""A single-node Apache Kafka broker (KRaft, combined broker/controller) run from the jar cache.

Tests use :class:`KafkaBroker` directly for a private broker of their own; the
:class:`~sagacity.dev.stack.Stack` uses it for the checkout's shared one.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from sagacity.dev import _proc
from sagacity.dev._jars import KAFKA_VERSION, ensure_kafka_jars
from sagacity.dev._ports import HOST, claim_port, pick_free_port, port_answers, port_is_free
from sagacity.dev._props import broker_properties, log4j_properties, render_properties
from sagacity.dev._secure import ADMIN, Security
from sagacity.dev._tools import find_java
from sagacity.errors import DevStackError, ProcessStartError

JVM_OPTIONS: tuple[str, ...] = (
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
"""JVM flags for a small test broker: serial GC and C1 only start fastest on two cores."""

_BIND_FAILURE = ("Address already in use", "BindException")
_quiet = logging.getLogger("sagacity.dev.kafka.client")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, not starting '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass(frozen=True, kw_only=True)
class BrokerState:
    """What a running broker's ``state.json`` records."""

    pid: int
    port: int
    controller_port: int
    version: str
    cluster_id: str
    cds_dump: str | None = None
    """A class-data archive this run writes when it exits, to be moved into place after."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return {
            "pid": self.pid,
            "port": self.port,
            "controller_port": self.controller_port,
            "version": self.version,
            "cluster_id": self.cluster_id,
            "cds_dump": self.cds_dump,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BrokerState:
        """Inverse of :meth:`to_dict`; raises ``KeyError``/``TypeError``/``ValueError`` on junk."""
        return cls(
            pid=int(data["pid"]),
            port=int(data["port"]),
            controller_port=int(data["controller_port"]),
            version=str(data["version"]),
            cluster_id=str(data["cluster_id"]),
            cds_dump=str(data["cds_dump"]) if data.get("cds_dump") else None,
        )


class KafkaBroker:
    """One Kafka broker process with its own directory, ports and data.

    The directory ``home`` holds ``server.properties``, ``data/`` (the log and metadata), the
    logs and ``state.json`` (pid, ports). Stopping keeps the data: a later :meth:`start` on the
    same ``home`` serves the same topics and messages, on the same ports if they are still free.

    Args:
        home: the broker's directory (created if missing).
        version: Apache Kafka release, resolved from Maven Central into the cache.
        port: client port; default a free one. An explicit port that is taken is refused.
        controller_port: KRaft controller port; default a free one.
        heap: maximum Java heap (``-Xmx``).
        cache: jar cache root (default ``SAGACITY_CACHE_DIR`` or ``~/.cache/sagacity``).
        node_id: the KRaft node id (1 for a single node).
        voters: the static controller quorum ``id@host:port,...`` when this node is one of a
            cluster (see :class:`~sagacity.dev.cluster.KafkaCluster`); default this node alone.
        replication: copies of internal and new topics (the cluster's size).
        cluster_id: the KRaft cluster id to format with (a cluster's nodes share one);
            default the id recorded here, else a new one.
        security: TLS, SASL/SCRAM users and the authorizer (``sagacity dev up --secure``,
            :mod:`sagacity.dev._secure`); ``None``: plaintext, no authorisation.
    """

    def __init__(
        self,
        home: Path,
        *,
        version: str = KAFKA_VERSION,
        port: int | None = None,
        controller_port: int | None = None,
        heap: str = "512m",
        cache: Path | None = None,
        node_id: int = 1,
        voters: str | None = None,
        replication: int = 1,
        cluster_id: str | None = None,
        security: Security | None = None,
    ) -> None:
        self.home = Path(home).resolve()
        self.version = version
        self._explicit = (port, controller_port)
        self.heap = heap
        self.cache = cache
        self.node_id = node_id
        self.voters = voters
        self.replication = replication
        self.cluster_id = cluster_id
        self.security = security

    # --- paths and state -------------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        """The broker's ``server.properties``."""
        return self.home / "server.properties"

    @property
    def data_dir(self) -> Path:
        """The broker's log directory (topics and KRaft metadata)."""
        return self.home / "data"

    @property
    def log_file(self) -> Path:
        """The broker's own log (log4j)."""
        return self.home / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        """Where the JVM's standard output and error go."""
        return self.home / "logs" / "stdout.log"

    @property
    def state_file(self) -> Path:
        """The JSON record of the running process."""
        return self.home / "state.json"

    def state(self) -> BrokerState | None:
        """The recorded state, or ``None`` when there is none or it is unreadable."""
        return _proc.read_state(self.state_file, BrokerState.from_dict)

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:<port>`` of the running broker.

        Raises:
            DevStackError: the broker has never been started in this directory.
        """
        state = self.state()
        if state is None:
            raise DevStackError(f"no broker has been started in {self.home}")
        return f"{HOST}:{state.port}"

    def is_running(self) -> bool:
        """Whether this directory's broker process is alive and its client port answers."""
        state = self.state()
        if state is None or not self._alive(state.pid):
            return False
        return port_answers(state.port)

    def _alive(self, pid: int) -> bool:
        return _proc.pid_alive(pid, marker=str(self.config_file))

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, *, timeout: float = 120.0) -> str:
        """Start the broker (formatting its storage the first time) and wait until it serves.

        Returns the bootstrap servers. Idempotent: a broker already running here is reused.

        Raises:
            MissingToolError: Java (or, on first use, Maven) is missing.
            PortInUseError: an explicitly requested port is taken.
            ProcessStartError: the broker exited or did not answer in ``timeout`` seconds;
                the message ends with its log.
        """
        if self.is_running() or self._await_starting(timeout):
            return self.bootstrap_servers
        previous = self.state()
        deadline = time.monotonic() + timeout
        for attempt in range(3):
            port, controller_port = self._choose_ports(previous if attempt == 0 else None)
            try:
                proc = self.spawn(port, controller_port)
                self.await_ready(proc, deadline)
            except ProcessStartError as exc:
                lost_race = any(marker in exc.log_tail for marker in _BIND_FAILURE)
                if lost_race and self._explicit == (None, None) and attempt < 2:
                    continue  # another process bound a picked port first: pick again
                raise
            return f"{HOST}:{port}"
        raise AssertionError("unreachable")  # pragma: no cover

    def _await_starting(self, timeout: float) -> bool:
        """Wait for a broker another process is starting here; False if there is none."""
        deadline = time.monotonic() + timeout
        while (state := self.state()) is not None and self._alive(state.pid):
            if port_answers(state.port) and self._answers(state.port):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        return False

    def _choose_ports(self, previous: BrokerState | None) -> tuple[int, int]:
        port, controller_port = self._explicit
        if port is not None:
            claim_port(port)
        if controller_port is not None:
            claim_port(controller_port)
        # Reuse the ports of the last run when they are still free, so clients that cached the
        # address reconnect; a port now taken by someone else is never reused.
        if previous is not None:
            if port is None and port_is_free(previous.port):
                port = previous.port
            if controller_port is None and port_is_free(previous.controller_port):
                controller_port = previous.controller_port
        if port is None:
            port = pick_free_port(avoid=frozenset({controller_port or 0}))
        if controller_port is None or controller_port == port:
            controller_port = pick_free_port(avoid=frozenset({port}))
        return port, controller_port

    def _write_config(self, port: int, controller_port: int) -> None:
        props = broker_properties(
            port=port,
            controller_port=controller_port,
            log_dir=self.data_dir,
            node_id=self.node_id,
            voters=self.voters,
            replication=self.replication,
        )
        if self.security is not None:
            props.update(
                self.security.broker_properties(port=port, controller_port=controller_port)
            )
        self.config_file.write_text(render_properties(props))
        (self.home / "log4j2.properties").write_text(log4j_properties(self.log_file))

    def _java_command(self, java: str, lib: Path, main: str, *args: str) -> list[str]:
        return [
            java,
            f"-Xmx{self.heap}",
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ]

    def _format(self, java: str, lib: Path, cluster_id: str) -> None:
        cmd = self._java_command(
            java, lib, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
            str(self.config_file), "-g",
            *(self.security.format_arguments() if self.security is not None else ()),
        )  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ProcessStartError(
                f"formatting Kafka storage in {self.data_dir} failed (exit {result.returncode})",
                log_tail="\n".join((result.stdout + result.stderr).splitlines()[-40:]),
            )

    def spawn(self, port: int, controller_port: int) -> subprocess.Popen[bytes]:
        """Write the configuration, format the storage if new, and launch the JVM (no wait).

        A cluster launches all its nodes first and then waits for each (:meth:`await_ready`):
        no node serves before a quorum of controllers is up.

        Raises:
            MissingToolError: Java (or, on first use, Maven) is missing.
            ProcessStartError: formatting the storage failed.
        """
        java = find_java()
        lib = ensure_kafka_jars(self.version, cache=self.cache)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        previous = self.state()
        cluster_id = self.cluster_id or (previous.cluster_id if previous else random_cluster_id())
        self._write_config(port, controller_port)
        if not (self.data_dir / "meta.properties").is_file():
            self._format(java, lib, cluster_id)
        cds_flag, cds_dump = _class_data_sharing(java, lib)
        cmd = self._java_command(java, lib, "kafka.Kafka", str(self.config_file))
        if cds_flag:
            cmd.insert(1, cds_flag)
        with self.stdout_file.open("ab") as out:
            # A session of its own: the broker outlives the command that started it and does
            # not receive the terminal's Ctrl-C meant for that command.
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.home,
            )
        _proc.launched[proc.pid] = proc
        state = BrokerState(
            pid=proc.pid,
            port=port,
            controller_port=controller_port,
            version=self.version,
            cluster_id=cluster_id,
            cds_dump=cds_dump,
        )
        _proc.write_state(self.state_file, state.to_dict())
        return proc

    def await_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        """Wait until the launched ``proc`` serves metadata (it is killed at ``deadline``).

        Raises:
            ProcessStartError: it exited, or did not answer by ``deadline``; with its log.
        """
        state = self.state()
        if state is None or state.pid != proc.pid:
            raise ProcessStartError(f"no broker was launched in {self.home}", log_tail="")
        port = state.port
        while True:
            if proc.poll() is not None:
                _proc.forget(proc.pid)
                raise ProcessStartError(
                    f"Kafka broker in {self.home} exited with status {proc.returncode}",
                    log_tail=self._tails(),
                )
            if port_answers(port) and self._answers(port):
                return
            if time.monotonic() > deadline:
                self._kill(proc.pid)
                raise ProcessStartError(
                    f"Kafka broker in {self.home} did not answer on {HOST}:{port} in time",
                    log_tail=self._tails(),
                )
            time.sleep(0.25)

    def _answers(self, port: int) -> bool:
        client = self.security.client_settings(ADMIN) if self.security is not None else {}
        return _metadata_answers(f"{HOST}:{port}", client=client)

    def _tails(self) -> str:
        return "\n".join(
            part
            for part in (_proc.log_tail(self.log_file), _proc.log_tail(self.stdout_file, 15))
            if part
        )

    def _kill(self, pid: int, timeout: float = 10.0) -> bool:
        return _proc.terminate(pid, timeout=timeout)

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop the broker: SIGTERM (a clean, flushed shutdown), SIGKILL after ``timeout`` s.

        Returns whether a broker was running here. Only a process recorded in this
        directory's state and started with this directory's configuration is signalled.
        """
        state = self.state()
        if state is None or not self._alive(state.pid):
            if state is not None:
                _proc.forget(state.pid)
            return False
        clean = self._kill(state.pid, timeout=timeout)
        # An archive is complete only if the JVM exited on its own (not killed mid-write).
        _install_archive(state.cds_dump if clean else None)
        if not clean and state.cds_dump:
            Path(state.cds_dump).unlink(missing_ok=True)
        return True

    def purge(self) -> None:
        """Stop the broker if it runs here and delete its directory (data, logs, state)."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _archive_path(java: str, lib: Path) -> Path:
    # An archive is valid only for the exact JVM build and class path that wrote it; the
    # runtime's ``release`` file names the build, so a Java update gets a new archive.
    launcher = Path(java).resolve()
    try:
        release = (launcher.parent.parent / "release").read_text()
    except OSError:
        release = str(launcher.stat().st_mtime_ns)
    key = hashlib.sha256(f"{launcher}|{release}|{lib}".encode()).hexdigest()[:12]
    return lib.parent / f"classes-{key}.jsa"


def _class_data_sharing(java: str, lib: Path) -> tuple[str | None, str | None]:
    """The JVM flag for class-data sharing and, on a first run, the archive it will write.

    The first broker of a version writes a dynamic archive of the classes it loaded when it
    exits; later brokers map it and start about twice as fast. ``SAGACITY_DEV_CDS=0`` turns
    this off.
    """
    if os.environ.get("SAGACITY_DEV_CDS", "1") == "0":
        return None, None
    archive = _archive_path(java, lib)
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive}", None
    dump = archive.with_name(f"{archive.name}.{uuid.uuid4().hex[:8]}.tmp")
    return f"-XX:ArchiveClassesAtExit={dump}", str(dump)


def _install_archive(dump: str | None) -> None:
    """Move a finished archive into place (atomic; the first one to finish wins)."""
    if dump is None:
        return
    path = Path(dump)
    final = path.with_name(path.name.split(".jsa.")[0] + ".jsa")
    with contextlib.suppress(OSError):
        if path.is_file() and path.stat().st_size > 0 and not final.exists():
            path.replace(final)
    path.unlink(missing_ok=True)


def _metadata_answers(
    bootstrap: str, timeout: float = 2.0, *, client: Mapping[str, str] | None = None
) -> bool:
    """Whether the broker at ``bootstrap`` answers a metadata request listing itself
    (``client``: the settings to connect with, a secured broker's super user's)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {**(client or {}), "bootstrap.servers": bootstrap, "logger": _quiet}
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return bool(metadata.brokers)
