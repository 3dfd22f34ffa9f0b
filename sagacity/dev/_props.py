"""Java ``.properties`` rendering and the broker's test-suited configuration."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sagacity.dev._ports import HOST


def _escape(text: str, *, key: bool) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif char in "=:#!" and (key or index == 0):
            out.append("\\" + char)
        elif char == " " and (key or index == 0):
            out.append("\\ ")
        elif ord(char) > 0x7E or ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def render_properties(props: Mapping[str, str]) -> str:
    """Render ``props`` as a Java properties file, keys sorted, values escaped.

    Raises:
        ValueError: a key is empty.
    """
    lines: list[str] = []
    for key in sorted(props):
        if not key:
            raise ValueError("a properties key must not be empty")
        lines.append(f"{_escape(key, key=True)}={_escape(props[key], key=False)}")
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """Parse the simple ``key=value`` form :func:`render_properties` writes (for checks/tests)."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key_chars: list[str] = []
        index = 0
        while index < len(line):
            char = line[index]
            if char == "\\" and index + 1 < len(line):
                key_chars.append(line[index : index + 2])
                index += 2
                continue
            if char in "=:":
                break
            key_chars.append(char)
            index += 1
        key = _unescape("".join(key_chars))
        result[key] = _unescape(line[index + 1 :])
    return result


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "u":
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            index += 2
    return "".join(out)


def broker_properties(
    *,
    port: int,
    controller_port: int,
    log_dir: Path,
    node_id: int = 1,
    voters: str | None = None,
    replication: int = 1,
) -> dict[str, str]:
    """Configuration of a combined broker/controller on 127.0.0.1, for tests.

    Alone (the default) it is a single node: replication factors and minimum ISR are 1. As
    node ``node_id`` of a cluster whose static quorum is ``voters`` (``id@host:port,...``),
    internal topics and new topics are replicated ``replication`` times with a minimum ISR
    of ``replication - 1`` (the durable setting: ``acks=all`` survives one node down), and no
    unclean leader election. Transactions are enabled, the first consumer-group rebalance is
    not delayed, and thread counts and the log cleaner's buffer are small so the broker fits
    a shared 2-core machine.
    """
    if port == controller_port:
        raise ValueError("the broker and controller ports must differ")
    if replication < 1:
        raise ValueError("the replication factor must be at least 1")
    copies = str(replication)
    min_isr = str(max(1, replication - 1))
    return {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "default.replication.factor": copies,
        "min.insync.replicas": min_isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": copies,
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": copies,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": copies,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "delete.topic.enable": "true",
        "log.cleaner.dedupe.buffer.size": "2097152",
        "log.cleaner.threads": "1",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.replica.fetchers": "1",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "2",
        "log.segment.bytes": "16777216",
    }


def log4j_properties(log_file: Path) -> str:
    """A log4j 2 configuration writing INFO and above to ``log_file``."""
    return f"""status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
"""
