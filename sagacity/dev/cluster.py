"""A local Apache Kafka cluster: N combined KRaft broker/controller nodes on 127.0.0.1.

Each node is a :class:`~sagacity.dev.kafka.KafkaBroker` in ``<home>/node-<id>/``; the
cluster's own ``cluster.json`` records the cluster id and every node's two ports, because a
static controller quorum names every voter's address: a node always restarts on its recorded
ports. Topics default to replication ``N`` (at most 3) with ``min.insync.replicas`` one less,
and no unclean leader election — the durable setting a journal topic is meant to run with.

Faults for tests: :meth:`KafkaCluster.kill` (SIGKILL), :meth:`KafkaCluster.restart`,
:meth:`KafkaCluster.pause` (SIGSTOP: a zombie that holds its sockets open but answers nothing)
and :meth:`KafkaCluster.resume`, and :meth:`KafkaCluster.wipe` (a node's disk lost).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagacity.dev import _proc
from sagacity.dev._jars import KAFKA_VERSION
from sagacity.dev._ports import HOST, pick_free_port, port_answers, port_is_free
from sagacity.dev._secure import Security
from sagacity.dev.kafka import KafkaBroker, random_cluster_id
from sagacity.errors import DevStackError, PortInUseError

MAX_BROKERS = 9
"""More nodes than a shared development machine should run."""


@dataclass(frozen=True, kw_only=True)
class NodeStatus:
    """One node as seen now.

    Attributes:
        node_id: its KRaft node id (1..N).
        state: ``running``, ``paused`` (SIGSTOP), or ``stopped``.
        pid: its recorded process id, if any.
        address: its client address ``127.0.0.1:<port>``.
        controller_port: its KRaft controller port.
    """

    node_id: int
    state: str
    pid: int | None
    address: str
    controller_port: int


class KafkaCluster:
    """``brokers`` Kafka nodes with their own directories, sharing one KRaft quorum.

    Args:
        home: the cluster's directory (created if missing).
        brokers: how many nodes (1..9); fixed when the cluster is first started here.
        version: Apache Kafka release.
        heap: each node's maximum Java heap.
        cache: jar cache root.
        security: every node's TLS, SCRAM users and authorizer (``None``: plaintext).

    Raises:
        DevStackError: ``brokers`` is out of range, or differs from the cluster recorded here.
    """

    def __init__(
        self,
        home: Path,
        *,
        brokers: int = 3,
        version: str = KAFKA_VERSION,
        heap: str = "512m",
        cache: Path | None = None,
        security: Security | None = None,
    ) -> None:
        if not 1 <= brokers <= MAX_BROKERS:
            raise DevStackError(f"a local cluster has 1 to {MAX_BROKERS} brokers, not {brokers}")
        self.home = Path(home).resolve()
        recorded = self._recorded()
        if recorded is not None and len(recorded["nodes"]) != brokers:
            raise DevStackError(
                f"{self.home} holds a cluster of {len(recorded['nodes'])} brokers, not "
                f"{brokers}: `sagacity dev down --purge` first to start a different one"
            )
        self.size = brokers
        self.version = version
        self.heap = heap
        self.cache = cache
        self.security = security

    # --- recorded layout -------------------------------------------------------------------
    @property
    def layout_file(self) -> Path:
        """``cluster.json``: the cluster id and each node's ports."""
        return self.home / "cluster.json"

    def _recorded(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.layout_file.read_text())
            nodes = [(int(n["port"]), int(n["controller_port"])) for n in data["nodes"]]
            return {"cluster_id": str(data["cluster_id"]), "nodes": nodes}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    @classmethod
    def recorded_size(cls, home: Path) -> int | None:
        """How many nodes the cluster recorded in ``home`` has (``None`` if none is)."""
        try:
            return len(json.loads((Path(home) / "cluster.json").read_text())["nodes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _layout(self) -> tuple[str, list[tuple[int, int]]]:
        """The cluster id and ports, picked (and recorded) the first time."""
        recorded = self._recorded()
        if recorded is not None:
            return recorded["cluster_id"], recorded["nodes"]
        taken: set[int] = set()
        nodes = []
        for _ in range(self.size):
            port = pick_free_port(avoid=frozenset(taken))
            taken.add(port)
            controller = pick_free_port(avoid=frozenset(taken))
            taken.add(controller)
            nodes.append((port, controller))
        cluster_id = random_cluster_id()
        self.home.mkdir(parents=True, exist_ok=True)
        _proc.write_state(
            self.layout_file,
            {
                "cluster_id": cluster_id,
                "nodes": [{"port": p, "controller_port": c} for p, c in nodes],
            },
        )
        return cluster_id, nodes

    def node(self, node_id: int) -> KafkaBroker:
        """Node ``node_id`` (1..N) as a broker object.

        Raises:
            DevStackError: no such node.
        """
        if not 1 <= node_id <= self.size:
            raise DevStackError(f"the cluster has nodes 1 to {self.size}, not {node_id}")
        cluster_id, nodes = self._layout()
        voters = ",".join(f"{i}@{HOST}:{c}" for i, (_p, c) in enumerate(nodes, start=1))
        port, controller = nodes[node_id - 1]
        return KafkaBroker(
            self.home / f"node-{node_id}",
            version=self.version,
            port=port,
            controller_port=controller,
            heap=self.heap,
            cache=self.cache,
            node_id=node_id,
            voters=voters,
            replication=min(3, self.size),
            cluster_id=cluster_id,
            security=self.security,
        )

    def nodes(self) -> list[KafkaBroker]:
        """Every node, in id order."""
        return [self.node(i) for i in range(1, self.size + 1)]

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma-separated (clients need only one to answer)."""
        _cluster_id, nodes = self._layout()
        return ",".join(f"{HOST}:{port}" for port, _c in nodes)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, *, timeout: float = 180.0) -> str:
        """Start every node that is not running and wait until each serves.

        All missing nodes are launched before any is waited for: a node serves only once a
        majority of the controller quorum is up. Returns the bootstrap servers.

        Raises:
            PortInUseError: a recorded port is taken by another process.
            MissingToolError / ProcessStartError: as :meth:`KafkaBroker.start`.
        """
        deadline = time.monotonic() + timeout
        launched = []
        try:
            for node in self.nodes():
                if node.is_running():
                    continue
                launched.append((node, self._spawn(node)))
            for node, proc in launched:
                node.await_ready(proc, deadline)
        except BaseException:
            for node, _started in launched:
                node.stop(timeout=10.0)
            raise
        return self.bootstrap_servers

    def _spawn(self, node: KafkaBroker) -> Any:
        port, controller = self._ports(node)
        for wanted in (port, controller):
            if not port_is_free(wanted):
                raise PortInUseError(wanted)
        return node.spawn(port, controller)

    def _ports(self, node: KafkaBroker) -> tuple[int, int]:
        _cluster_id, nodes = self._layout()
        return nodes[node.node_id - 1]

    def is_running(self) -> bool:
        """Whether every node is running (a paused node counts as running)."""
        return all(node.is_running() for node in self.nodes())

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop every node (paused ones are resumed first); return whether any was running."""
        any_running = False
        for node in reversed(self.nodes()):
            self._signal(node, signal.SIGCONT)
            any_running = node.stop(timeout=timeout) or any_running
        return any_running

    def purge(self) -> None:
        """Stop every node and delete the cluster's directory."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)

    # --- faults ----------------------------------------------------------------------------
    def _pid(self, node: KafkaBroker) -> int | None:
        state = node.state()
        if state is None or not _proc.pid_alive(state.pid, marker=str(node.config_file)):
            return None
        return state.pid

    def _signal(self, node: KafkaBroker, sig: int) -> bool:
        pid = self._pid(node)
        if pid is None:
            return False
        os.kill(pid, sig)
        return True

    def kill(self, node_id: int) -> bool:
        """SIGKILL node ``node_id`` (no clean shutdown); return whether it was running."""
        node = self.node(node_id)
        pid = self._pid(node)
        if pid is None:
            return False
        os.kill(pid, signal.SIGCONT)  # a paused process dies only once it runs again
        os.kill(pid, signal.SIGKILL)
        _proc.wait_gone(pid, 30.0)
        _proc.forget(pid)
        return True

    def restart(self, node_id: int, *, timeout: float = 120.0) -> str:
        """Stop node ``node_id`` cleanly if it runs, start it again, wait until it serves.

        Returns its client address.
        """
        node = self.node(node_id)
        self._signal(node, signal.SIGCONT)
        node.stop()
        proc = self._spawn(node)
        node.await_ready(proc, time.monotonic() + timeout)
        return f"{HOST}:{self._ports(node)[0]}"

    def pause(self, node_id: int) -> bool:
        """SIGSTOP node ``node_id``: it keeps its sockets but answers nothing (a zombie leader
        until the controllers fence it). Return whether it was running.

        Returns once the process shows as stopped (a group stop reaches every thread of the
        JVM asynchronously), so a status right after says ``paused``.
        """
        node = self.node(node_id)
        pid = self._pid(node)
        if pid is None:
            return False
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5.0
        while _proc_state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        return True

    def resume(self, node_id: int) -> bool:
        """SIGCONT a paused node ``node_id``; return whether it was running."""
        return self._signal(self.node(node_id), signal.SIGCONT)

    def wipe(self, node_id: int) -> None:
        """Delete node ``node_id``'s data (its disk lost); it must not be running.

        Its next start formats empty storage with the cluster's id.

        Raises:
            DevStackError: the node is running.
        """
        node = self.node(node_id)
        if self._pid(node) is not None:
            raise DevStackError(f"node {node_id} is running: kill it before wiping its data")
        shutil.rmtree(node.data_dir, ignore_errors=True)

    def status(self) -> list[NodeStatus]:
        """Every node's state now."""
        out = []
        for node in self.nodes():
            port, controller = self._ports(node)
            pid = self._pid(node)
            if pid is None:
                state = "stopped"
            elif _proc_state(pid) == "T":
                state = "paused"
            elif port_answers(port):
                state = "running"
            else:
                state = "starting"
            recorded = node.state()
            out.append(
                NodeStatus(
                    node_id=node.node_id,
                    state=state,
                    pid=pid if pid is not None else (recorded.pid if recorded else None),
                    address=f"{HOST}:{port}",
                    controller_port=controller,
                )
            )
        return out


def _proc_state(pid: int) -> str:
    """The one-letter state of ``pid`` in ``/proc`` (``T`` when stopped by a signal)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[-1].split()[0]
