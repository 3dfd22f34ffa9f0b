"""The secured stack's material, its broker settings, and the ACL table the docs give."""

from __future__ import annotations

import re
import shlex
import stat
from pathlib import Path

import pytest

from sagacity.dev import Stack
from sagacity.dev._acls import acl_bindings, acl_commands
from sagacity.dev._props import broker_properties
from sagacity.dev._secure import ADMIN, PRINCIPALS, load_or_create
from sagacity.errors import DevStackError

ROOT = Path(__file__).resolve().parents[2]


def _acl_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("$ACL ")]


def test_the_checklist_gives_the_acls_the_secured_stack_makes() -> None:
    made = [line for line in acl_commands() if line.startswith("$ACL ")]
    checklist = (ROOT / "docs" / "production-checklist.md").read_text()
    assert _acl_lines(checklist) == made


def test_the_security_page_names_every_grant() -> None:
    page = (ROOT / "docs" / "operations" / "kafka-security.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", page, flags=re.M)}
    assert set(rows) == set(PRINCIPALS)
    for line in acl_commands():
        if not line.startswith("$ACL "):
            continue
        principal = line.split("User:")[1].split()[0]
        for operation in re.findall(r"--operation (\w+)", line):
            assert operation in rows[principal], (principal, operation)


def test_every_grant_becomes_bindings_for_the_topic() -> None:
    bindings = acl_bindings("journal.x")
    names = {b.name for b in bindings}
    assert {"journal.x", "journal.x.dlq", "sagacity-archive", "sagacity-reader-"} <= names
    assert all(b.principal.startswith("User:") for b in bindings)


def test_the_material_is_private_and_kept(tmp_path: Path) -> None:
    first = load_or_create(tmp_path / "secure")
    again = load_or_create(tmp_path / "secure")
    assert again.passwords == first.passwords
    assert set(first.passwords) == {ADMIN, *PRINCIPALS}
    for path in (first.broker_pem, first.controller_pem, first.credentials_file("agents")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"BEGIN CERTIFICATE" in first.ca_file.read_bytes()
    settings = {}
    for line in first.credentials_file("auditors").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            [settings[key]] = shlex.split(value)
    assert settings == {
        "SAGACITY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "SAGACITY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "SAGACITY_KAFKA_SASL_USERNAME": "auditors",
        "SAGACITY_KAFKA_SASL_PASSWORD": first.passwords["auditors"],
        "SAGACITY_KAFKA_SSL_CA_LOCATION": str(first.ca_file),
    }
    with pytest.raises(DevStackError, match="no principal 'root'"):
        first.client_settings("root")


def test_a_secured_broker_authorises_every_request(tmp_path: Path) -> None:
    security = load_or_create(tmp_path / "secure")
    props = broker_properties(port=9092, controller_port=9093, log_dir=tmp_path)
    props.update(security.broker_properties(port=9092, controller_port=9093))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "SASL_SSL://127.0.0.1:9092"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert "PLAINTEXT" not in props["listener.security.protocol.map"]
    assert len(security.format_arguments()) == 2 * (1 + len(PRINCIPALS))


def test_a_stack_never_mixes_plaintext_and_secured_kafka(tmp_path: Path) -> None:
    plain = Stack(tmp_path / "plain")
    plain.kafka.data_dir.mkdir(parents=True)
    (plain.kafka.data_dir / "meta.properties").write_text("node.id=1\n")
    with pytest.raises(DevStackError, match="plaintext broker with data"):
        plain.up(kafka=True, postgres=False, secure=True)
    assert not plain.secured
    secured = Stack(tmp_path / "secured")
    secured.security(create=True)
    with pytest.raises(DevStackError, match="is secured: pass --secure"):
        secured.up(kafka=True, postgres=False)
