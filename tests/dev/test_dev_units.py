"""Pure parts of the dev stack: properties, ports, tool lookup, state handling."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagacity.dev import _ports
from sagacity.dev._jars import KAFKA_VERSION, ensure_kafka_jars, render_pom
from sagacity.dev._props import broker_properties, parse_properties, render_properties
from sagacity.dev._tools import find_java, find_maven, find_postgres_bin
from sagacity.dev.kafka import BrokerState, KafkaBroker, random_cluster_id
from sagacity.dev.stack import Endpoints
from sagacity.errors import DevStackError, MissingToolError, PortInUseError


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something listens on for the duration of the test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


# --- properties ----------------------------------------------------------------------------
def test_properties_round_trip_with_characters_that_need_escaping() -> None:
    props = {"a.b": "x=y:z", "path": "C:\\dir\\file", "lead": " spaced", "uni": "é", "k:1": "v"}
    text = render_properties(props)
    assert parse_properties(text) == props
    assert text.splitlines() == sorted(text.splitlines())


def test_properties_refuse_an_empty_key() -> None:
    with pytest.raises(ValueError, match="empty"):
        render_properties({"": "x"})


def test_broker_properties_are_single_node_and_test_suited(tmp_path: Path) -> None:
    props = broker_properties(port=19092, controller_port=19093, log_dir=tmp_path)
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert "127.0.0.1:19092" in props["listeners"]
    assert props["log.dirs"] == str(tmp_path)
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert int(props["log.cleaner.dedupe.buffer.size"]) <= 4 * 1024 * 1024


def test_broker_properties_refuse_one_port_for_both_listeners(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="differ"):
        broker_properties(port=19092, controller_port=19092, log_dir=tmp_path)


def test_pom_pins_the_broker_and_the_slf4j_1_binding() -> None:
    pom = render_pom(KAFKA_VERSION)
    assert f"<version>{KAFKA_VERSION}</version>" in pom
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<artifactId>log4j-slf4j-impl</artifactId>" in pom
    assert "log4j-slf4j2-impl" not in pom


def test_cluster_ids_are_22_url_safe_characters() -> None:
    ids = {random_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22
        assert not cid.startswith("-")
        assert set(cid) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


# --- ports ---------------------------------------------------------------------------------
def test_picked_ports_are_free_and_never_handed_out_twice() -> None:
    picked = [_ports.pick_free_port() for _ in range(30)]
    assert len(set(picked)) == len(picked)
    assert all(_ports.port_is_free(p) for p in picked)


def test_a_port_someone_listens_on_is_never_picked_or_claimed(listening: int) -> None:
    assert not _ports.port_is_free(listening)
    with pytest.raises(PortInUseError) as info:
        _ports.claim_port(listening)
    assert info.value.port == listening
    assert str(listening) in str(info.value)
    assert listening not in {_ports.pick_free_port() for _ in range(30)}


def test_a_broker_asked_for_a_taken_port_refuses_to_start(tmp_path: Path, listening: int) -> None:
    broker = KafkaBroker(tmp_path / "b", port=listening)
    with pytest.raises(PortInUseError):
        broker.start()
    assert not (tmp_path / "b" / "state.json").exists()


def test_a_recorded_port_now_taken_by_another_process_is_not_reused(
    tmp_path: Path, listening: int
) -> None:
    broker = KafkaBroker(tmp_path / "b")
    free = _ports.pick_free_port()
    previous = BrokerState(
        pid=1, port=listening, controller_port=free, version=KAFKA_VERSION, cluster_id="x"
    )
    port, controller_port = broker._choose_ports(previous)
    assert port != listening
    assert controller_port == free  # still free, so kept
    assert port != controller_port


# --- tools ---------------------------------------------------------------------------------
def test_missing_java_names_it_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(MissingToolError) as info:
        find_java()
    assert info.value.tool == "java"
    assert "openjdk-17-jre-headless" in str(info.value)


def test_missing_maven_names_it_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingToolError, match=r"apt-get install maven"):
        find_maven()


def test_missing_postgres_names_it_and_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("SAGACITY_PG_BIN", raising=False)
    with pytest.raises(MissingToolError) as info:
        find_postgres_bin(search_root=tmp_path)
    assert info.value.tool == "postgres"
    assert "apt-get install postgresql" in str(info.value)


def test_postgres_bin_prefers_the_newest_debian_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SAGACITY_PG_BIN", raising=False)
    for version in ("9.6", "15", "16"):
        bindir = tmp_path / version / "bin"
        bindir.mkdir(parents=True)
        for name in ("initdb", "pg_ctl", "postgres"):
            (bindir / name).write_text("")
    assert find_postgres_bin(search_root=tmp_path) == tmp_path / "16" / "bin"


def test_uncached_jars_without_maven_say_maven_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MissingToolError, match="mvn"):
        ensure_kafka_jars(cache=tmp_path)


def test_a_broker_without_java_says_java_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(MissingToolError, match="java"):
        KafkaBroker(tmp_path / "b").start()


# --- state ---------------------------------------------------------------------------------
def test_a_stale_state_file_never_adopts_or_stops_an_unrelated_process(tmp_path: Path) -> None:
    home = tmp_path / "b"
    home.mkdir()
    state = BrokerState(
        pid=os.getpid(), port=1, controller_port=2, version=KAFKA_VERSION, cluster_id="x"
    )
    (home / "state.json").write_text(json.dumps(state.to_dict()))
    broker = KafkaBroker(home)
    assert not broker.is_running()
    assert broker.stop() is False  # we are still alive to assert it


def test_an_unreadable_state_file_counts_as_no_state(tmp_path: Path) -> None:
    home = tmp_path / "b"
    home.mkdir()
    (home / "state.json").write_text("{not json")
    broker = KafkaBroker(home)
    assert broker.state() is None
    with pytest.raises(DevStackError, match="no broker"):
        _ = broker.bootstrap_servers


def test_export_lines_are_shell_quoted() -> None:
    endpoints = Endpoints(bootstrap_servers="127.0.0.1:1", database_url="postgresql://u@h:2/d")
    assert endpoints.export_lines() == [
        "export SAGACITY_BOOTSTRAP_SERVERS=127.0.0.1:1",
        "export SAGACITY_DATABASE_URL=postgresql://u@h:2/d",
    ]
    odd = Endpoints(database_url="postgresql://u@h:2/d?options=-c x")
    assert odd.export_lines() == [
        "export SAGACITY_DATABASE_URL='postgresql://u@h:2/d?options=-c x'"
    ]


@pytest.mark.kafka
def test_a_broker_that_fails_to_start_shows_the_tail_of_its_log(tmp_path: Path) -> None:
    from sagacity.errors import ProcessStartError

    home = tmp_path / "b"
    (home / "data").mkdir(parents=True)
    # Storage that claims another node id: the broker must refuse it and exit.
    (home / "data" / "meta.properties").write_text(
        "version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=7\n"
    )
    broker = KafkaBroker(home)
    with pytest.raises(ProcessStartError) as info:
        broker.start(timeout=60)
    assert "exited" in str(info.value)
    assert "last lines of the log" in str(info.value)
    assert info.value.log_tail
    assert "Stored node id 7" in info.value.log_tail
    assert not broker.is_running()


def test_compose_and_k8s_pin_the_same_kafka_release_as_the_local_stack() -> None:
    import re

    compose = (Path(__file__).parents[2] / "deploy" / "compose.yaml").read_text()
    images = re.findall(r"^\s+image:\s*(\S+)\s*$", compose, flags=re.MULTILINE)
    assert f"apache/kafka:{KAFKA_VERSION}" in images
    assert "postgres:16" in images
    k8s = (Path(__file__).parents[2] / "deploy" / "k8s" / "kafka.yaml").read_text()
    assert f"image: apache/kafka:{KAFKA_VERSION}" in k8s


def test_class_data_sharing_writes_once_then_reuses_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sagacity.dev.kafka import _class_data_sharing, _install_archive

    monkeypatch.delenv("SAGACITY_DEV_CDS", raising=False)
    lib = tmp_path / "4.4.0" / "lib"
    lib.mkdir(parents=True)
    java = find_java()
    flag, dump = _class_data_sharing(java, lib)
    assert flag is not None
    assert dump is not None
    assert flag == f"-XX:ArchiveClassesAtExit={dump}"
    Path(dump).write_bytes(b"archive")
    _install_archive(dump)
    assert not Path(dump).exists()
    flag_again, dump_again = _class_data_sharing(java, lib)
    assert dump_again is None
    assert flag_again is not None
    archive = Path(flag_again.split("=", 1)[1])
    assert archive.read_bytes() == b"archive"
    assert archive.parent == lib.parent

    monkeypatch.setenv("SAGACITY_DEV_CDS", "0")
    assert _class_data_sharing(java, lib) == (None, None)


def test_an_empty_or_missing_archive_is_never_installed(tmp_path: Path) -> None:
    from sagacity.dev.kafka import _install_archive

    dump = tmp_path / "classes-x.jsa.1234abcd.tmp"
    dump.write_bytes(b"")
    _install_archive(str(dump))
    _install_archive(str(tmp_path / "classes-y.jsa.0000.tmp"))
    _install_archive(None)
    assert list(tmp_path.iterdir()) == []


def test_up_makes_a_key_encryption_key_once_and_exports_it(tmp_path: Path) -> None:
    """The stack's journal runs sealed (docs/operations/keys.md): its key-encryption key is
    made once in the state directory and exported with the other variables."""
    from click.testing import CliRunner

    from sagacity.cli import main
    from sagacity.dev import Stack
    from sagacity.privacy._envelope import KEK_SETTING, KeyEncryptionKey

    stack = Stack(tmp_path / "dev")
    first = stack.up(kafka=False, postgres=False)
    kek = first.key_encryption_key
    assert kek is not None
    assert kek.parent == stack.home
    assert kek.stat().st_mode & 0o777 == 0o600
    key_id = KeyEncryptionKey.from_file(kek).key_id
    again = stack.up(kafka=False, postgres=False)
    assert again.key_encryption_key == kek
    assert KeyEncryptionKey.from_file(kek).key_id == key_id  # never replaced
    assert f"export {KEK_SETTING}={kek}" in first.export_lines()

    env = {"SAGACITY_DEV_HOME": str(stack.home)}
    result = CliRunner().invoke(main, ["dev", "up", "--no-kafka", "--no-postgres"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"export {KEK_SETTING}={kek}"]
