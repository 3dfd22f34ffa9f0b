"""Who may write the evidence, on real Kafka and PostgreSQL: the archive quarantines decisions
the approvals service did not sign, and (with per-writer signing) events from unregistered
writers or with a bad signature, produced straight to the topic."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from archive_helpers import rows
from confluent_kafka import Producer

from sagacity import (
    GENESIS_HASH,
    EntryDraft,
    EventType,
    JournalEntry,
    Reversibility,
    Sagacity,
    SagaStatus,
    compensable,
    compensation,
    compose,
)
from sagacity.chain import link
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.entries import _attributes as attr
from sagacity.producer import KafkaJournal
from sagacity.schemas import encode_entry
from sagacity.signing._decision_signature import generate_key
from sagacity.signing._writer_roles import WriterRole
from sagacity.signing._writer_signature import HEADER, WriterKey, writer_message

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
ALICE = '{"amount":"100","to":"alice"}'


class Bank:
    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return sku

    @compensation
    def release(self, context: object) -> None:
        return None

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        return "ok"


def _produce(bootstrap: str, topic: str, entry: JournalEntry, headers: Any = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    producer.produce(
        topic, key=entry.saga_id.encode(), value=encode_entry(entry), headers=headers or []
    )
    assert producer.flush(10) == 0


def _wait(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.fixture
def archive_of(kafka_bootstrap: str, archive_dsn: str) -> Iterator[Callable[..., ArchiveService]]:
    services: list[tuple[ArchiveService, threading.Thread]] = []

    def start(topic: str, **settings: Any) -> ArchiveService:
        service = ArchiveService(
            ArchiveSettings(
                bootstrap_servers=kafka_bootstrap,
                database_url=archive_dsn,
                topic=topic,
                group_id=f"g-{uuid.uuid4().hex[:6]}",
                batch_size=50,
                poll_timeout=0.2,
                **settings,
            ),
            dependencies=compose.archive(),
        )
        runner = threading.Thread(target=service.run)
        runner.start()
        services.append((service, runner))
        return service

    yield start
    for service, runner in services:
        service.stop()
        runner.join(30)


def _archived(dsn: str, saga_id: str) -> list[str]:
    found = rows(
        dsn,
        "SELECT event_type FROM side_effect_journal WHERE saga_id = %s ORDER BY seq",
        (saga_id,),
    )
    return [str(r[0]) for r in found]


def _quarantined(dsn: str, saga_id: str) -> list[tuple[str, int]]:
    found = rows(
        dsn,
        "SELECT reason, seq FROM archive_quarantine WHERE saga_id = %s ORDER BY kafka_offset",
        (saga_id,),
    )
    return [(str(r[0]), int(r[1])) for r in found]


def test_the_archive_quarantines_decisions_the_approvals_service_did_not_sign(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    key = generate_key(tmp_path / "approvals.pem")
    agent_journal = KafkaJournal(kafka_bootstrap, topic=topic)
    service_journal = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        agent = Sagacity(
            agent_journal, compensation="delegated", approvals_public_key=key.public_hex
        )
        service = Sagacity(service_journal, compensation="delegated", decision_signer=key)
        bank = agent.wrap(Bank())
        service.wrap(Bank())

        def gate(saga_id: str) -> int:
            result = agent.saga(
                saga_id,
                lambda: (bank.reserve("SKU"), bank.send_wire_transfer("100", "alice")),
            )
            assert result.awaiting_seq is not None
            return result.awaiting_seq

        good, forged, moved = gate("good"), gate("forged"), gate("moved")
        service.approve("good", good, "alice@example.com")
        assert agent.resume_saga("good", good, ALICE).status is SagaStatus.COMPLETED
        # An unsigned APPROVED produced straight to the topic.
        request = agent_journal.entries("forged")[forged - 1]
        head = agent_journal.entries("forged")[-1]
        approval = EntryDraft(
            saga_id="forged",
            event_type=E.APPROVED,
            tool=request.tool,
            actor="alice@example.com",
            attributes={
                attr.REF_SEQ: str(forged),
                attr.POLICY_VERSION: "1",
                attr.PAYLOAD_SHA256: request.attributes[attr.PAYLOAD_SHA256],
            },
        )
        _produce(kafka_bootstrap, topic, link(approval, seq=head.seq + 1, prev_hash=head.hash))
        # A genuine signature, moved onto another principal's approval.
        head = agent_journal.entries("moved")[-1]
        signed = key.sign(
            EntryDraft(
                saga_id="moved",
                event_type=E.APPROVED,
                tool=request.tool,
                actor="alice@example.com",
                attributes={**approval.attributes, attr.REF_SEQ: str(moved)},
            )
        )
        altered = EntryDraft(
            saga_id="moved",
            event_type=E.APPROVED,
            tool=request.tool,
            actor="mallory@example.com",
            attributes=signed.attributes,
            recorded_at_us=signed.recorded_at_us,
        )
        _produce(kafka_bootstrap, topic, link(altered, seq=head.seq + 1, prev_hash=head.hash))
        agent_journal.flush()
        service_journal.flush()
    finally:
        agent_journal.close()
        service_journal.close()
    archive_of(topic, approvals_public_key=key.public_hex)
    _wait(lambda: _quarantined(archive_dsn, "moved") and _archived(archive_dsn, "good")[-1:])
    _wait(lambda: _archived(archive_dsn, "good")[-1] == "SAGA_ENDED")
    assert "APPROVED" in _archived(archive_dsn, "good")
    assert _quarantined(archive_dsn, "good") == []
    assert _quarantined(archive_dsn, "forged") == [("unsigned_decision", forged + 2)]
    assert "APPROVED" not in _archived(archive_dsn, "forged")
    assert _quarantined(archive_dsn, "moved") == [("bad_decision_signature", moved + 2)]
    [detail] = rows(archive_dsn, "SELECT detail FROM archive_quarantine WHERE saga_id = 'forged'")
    assert "not signed by a pinned approvals key" in str(detail[0])


def _hmac_key(tmp_path: Path, writer: str, secret: bytes) -> WriterKey:
    path = tmp_path / f"{writer}.key"
    path.write_text(f"hmac-sha256:{secret.hex()}\n")
    return WriterKey.from_file(path, writer)


def test_per_writer_signing_quarantines_forged_appends_and_forged_sagas(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
    tmp_path: Path,
) -> None:
    topic = make_topic(partitions=2)
    secret = b"agent-1 secret, 32 bytes long!!!"
    agent_key = _hmac_key(tmp_path, "agent-1", secret)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "svc.pem").write_bytes(pem)
    service_key = WriterKey.from_file(tmp_path / "svc.pem", "compensation-1")
    registry = tmp_path / "writers.toml"
    registry.write_text(agent_key.registry_entry() + service_key.registry_entry())
    agent_journal = KafkaJournal(kafka_bootstrap, topic=topic, writer_key=agent_key)
    service_journal = KafkaJournal(kafka_bootstrap, topic=topic, writer_key=service_key)
    try:
        for journal, saga in ((agent_journal, "signed-hmac"), (service_journal, "signed-ed")):
            s = Sagacity(journal)
            bank = s.wrap(Bank())
            assert s.saga(saga, lambda bank=bank: bank.reserve("SKU")).status is (
                SagaStatus.COMPLETED
            )
        chain = agent_journal.entries("signed-hmac")
        assert {e.attributes[attr.WRITER] for e in chain} == {"agent-1"}
        head = chain[-1]
    finally:
        agent_journal.close()
        service_journal.close()

    def forged(saga_id: str, seq: int, prev: str, writer: str | None) -> JournalEntry:
        attributes = {} if writer is None else {attr.WRITER: writer}
        return link(
            EntryDraft(
                saga_id=saga_id,
                event_type=E.SAGA_ENDED if seq > 1 else E.SAGA_OPENED,
                result="COMPLETED" if seq > 1 else None,
                actor=writer,
                attributes=attributes,
            ),
            seq=seq,
            prev_hash=prev,
        )

    # A forged append to a signed saga, naming its writer, without a signature ...
    append = forged("signed-hmac", head.seq + 1, head.hash, "agent-1")
    _produce(kafka_bootstrap, topic, append)
    # ... and with a signature made with a guessed secret.
    guessed = hmac.new(
        b"not the secret!!",
        writer_message(writer="agent-1", saga_id=append.saga_id, seq=append.seq, hash=append.hash),
        hashlib.sha256,
    ).hexdigest()
    _produce(kafka_bootstrap, topic, append, headers=[(HEADER, guessed.encode())])
    # A wholly forged saga from a writer nobody registered, and one naming no writer.
    opened = forged("invented", 1, GENESIS_HASH, "mallory")
    _produce(kafka_bootstrap, topic, opened)
    _produce(kafka_bootstrap, topic, forged("invented", 2, opened.hash, "mallory"))
    _produce(kafka_bootstrap, topic, forged("anonymous", 1, GENESIS_HASH, None))

    archive_of(topic, writer_registry=registry)
    _wait(lambda: _quarantined(archive_dsn, "anonymous"))
    _wait(lambda: len(_quarantined(archive_dsn, "signed-hmac")) == 2)
    assert _archived(archive_dsn, "signed-hmac") == [e.event_type.value for e in chain]
    assert _archived(archive_dsn, "signed-ed")[-1] == "SAGA_ENDED"
    assert _quarantined(archive_dsn, "signed-ed") == []
    assert _quarantined(archive_dsn, "signed-hmac") == [
        ("unsigned_writer", head.seq + 1),
        ("bad_writer_signature", head.seq + 1),
    ]
    assert _archived(archive_dsn, "invented") == []
    assert _quarantined(archive_dsn, "invented") == [
        ("unregistered_writer", 1),
        ("unregistered_writer", 2),
    ]
    assert _quarantined(archive_dsn, "anonymous") == [("unregistered_writer", 1)]


def _registered(tmp_path: Path, writer: str, role: WriterRole = WriterRole.AGENT) -> WriterKey:
    key = _hmac_key(tmp_path, writer, hashlib.sha256(writer.encode()).digest())
    registry = tmp_path / "writers.toml"
    with registry.open("a", encoding="utf-8") as file:
        file.write(key.registry_entry(role))
    return key


def test_a_registered_writer_cannot_write_into_another_writers_saga(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
    tmp_path: Path,
) -> None:
    """Agent-2, registered and signing correctly, appends an EXECUTED and a COMPENSATED naming
    the compensation service as actor into agent-1's saga: both are its own, validly signed
    events, and neither is archived (``writer_not_owner``, then ``gap``)."""
    topic = make_topic(partitions=2)
    owner = _registered(tmp_path, "agent-1")
    intruder = _registered(tmp_path, "agent-2")
    journal = KafkaJournal(kafka_bootstrap, topic=topic, writer_key=owner)
    try:
        s = Sagacity(journal)
        bank = s.wrap(Bank())
        assert s.saga("victim", lambda: bank.reserve("SKU")).status is SagaStatus.COMPLETED
        chain = journal.entries("victim")
    finally:
        journal.close()
    tail = chain[-1]
    forged = []
    for draft in (
        EntryDraft(
            saga_id="victim",
            event_type=E.EXECUTED,
            tool="send_wire_transfer",
            result="ok",
            attributes={attr.WRITER: "agent-2", attr.REF_SEQ: str(tail.seq)},
        ),
        EntryDraft(
            saga_id="victim",
            event_type=E.COMPENSATED,
            tool="reserve",
            actor="compensation-service",
            attributes={attr.WRITER: "agent-2", attr.REF_SEQ: "2"},
        ),
    ):
        tail = link(draft, seq=tail.seq + 1, prev_hash=tail.hash)
        forged.append(tail)
        signature = intruder.sign(saga_id=tail.saga_id, seq=tail.seq, hash=tail.hash)
        _produce(kafka_bootstrap, topic, tail, headers=[(HEADER, signature)])
    archive_of(topic, writer_registry=tmp_path / "writers.toml")
    _wait(lambda: len(_quarantined(archive_dsn, "victim")) == 2)
    assert _archived(archive_dsn, "victim") == [e.event_type.value for e in chain]
    assert _quarantined(archive_dsn, "victim") == [
        ("writer_not_owner", forged[0].seq),
        ("gap", forged[1].seq),
    ]
    [detail] = rows(
        archive_dsn,
        "SELECT detail FROM archive_quarantine WHERE saga_id = 'victim' AND reason = %s",
        ("writer_not_owner",),
    )
    assert "'agent-2'" in str(detail[0])
    assert "opened by writer 'agent-1'" in str(detail[0])


def test_every_legitimate_flow_archives_with_a_writer_registry(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
    tmp_path: Path,
) -> None:
    """With roles in the registry, what the product itself writes is archived whole: an agent's
    saga; a gate approved and resumed by the agent, and one resumed by the approvals service;
    a rejection compensated by the compensation service; and a dead writer's saga taken over
    by an operator, then compensated."""
    topic = make_topic(partitions=2)
    approvals_key = generate_key(tmp_path / "approvals.pem")
    keys = {
        "agent": _registered(tmp_path, "agent-1"),
        "approvals": _registered(tmp_path, "approvals-1", WriterRole.APPROVALS),
        "compensation": _registered(tmp_path, "compensation-1", WriterRole.COMPENSATION),
        "operator": _registered(tmp_path, "operator-1", WriterRole.OPERATOR),
    }
    journals = {
        name: KafkaJournal(kafka_bootstrap, topic=topic, writer_key=key)
        for name, key in keys.items()
    }
    try:
        agent = Sagacity(
            journals["agent"],
            compensation="delegated",
            approvals_public_key=approvals_key.public_hex,
        )
        desk = Sagacity(
            journals["approvals"],
            compensation="delegated",
            decision_signer=approvals_key,
            approvals_public_key=approvals_key.public_hex,
        )
        undoer = Sagacity(journals["compensation"], compensation="delegated")
        bank, _, _ = agent.wrap(Bank()), desk.wrap(Bank()), undoer.wrap(Bank())

        def gate(saga_id: str) -> int:
            result = agent.saga(
                saga_id, lambda: (bank.reserve("SKU"), bank.send_wire_transfer("100", "alice"))
            )
            assert result.awaiting_seq is not None
            return result.awaiting_seq

        def compensate(saga_id: str, reason: EventType) -> None:
            # As the compensation service's job does: own the saga, then undo and end it.
            journals["compensation"].append(
                EntryDraft(saga_id=saga_id, event_type=E.SAGA_OPENED, attributes={})
            )
            undoer.compensate(saga_id, reason=reason)

        assert agent.saga("plain", lambda: bank.reserve("SKU")).status is SagaStatus.COMPLETED
        seq = gate("by-agent")
        desk.approve("by-agent", seq, "alice@example.com")
        assert agent.resume_saga("by-agent", seq, ALICE).status is SagaStatus.COMPLETED
        seq = gate("by-desk")
        desk.approve("by-desk", seq, "alice@example.com")
        assert desk.resume_saga("by-desk", seq, ALICE).status is SagaStatus.COMPLETED
        seq = gate("rejected")
        desk.reject("rejected", seq, "bob@example.com", reason="no")
        compensate("rejected", E.REJECTED)
        journals["agent"].append(
            EntryDraft(saga_id="abandoned", event_type=E.SAGA_OPENED, attributes={})
        )
        journals["operator"].take_over("abandoned", reason="its writer died", force=True)
        compensate("abandoned", E.FAILED)
    finally:
        for journal in journals.values():
            journal.close()
    reader = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        sagas = ("plain", "by-agent", "by-desk", "rejected", "abandoned")
        expected = {s: reader.entries(s) for s in sagas}
    finally:
        reader.close()
    writers = {e.attributes[attr.WRITER] for chain in expected.values() for e in chain}
    assert writers == {"agent-1", "approvals-1", "compensation-1", "operator-1"}
    archive_of(
        topic,
        writer_registry=tmp_path / "writers.toml",
        approvals_public_key=approvals_key.public_hex,
    )
    for saga_id, chain in expected.items():
        _wait(lambda s=saga_id, c=chain: len(_archived(archive_dsn, s)) == len(c))
    for saga_id, chain in expected.items():
        assert _archived(archive_dsn, saga_id) == [e.event_type.value for e in chain], saga_id
        assert _quarantined(archive_dsn, saga_id) == [], saga_id
    assert expected["rejected"][-1].event_type is E.SAGA_ENDED
    assert expected["abandoned"][-1].event_type is E.SAGA_ENDED


def test_the_archive_quarantines_grants_the_approvals_service_did_not_sign(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    archive_of: Callable[..., ArchiveService],
    tmp_path: Path,
) -> None:
    """A standing grant (docs/operations/grants.md) is archived when the approvals key signed
    it; one a writer produced unsigned, or with a signature moved from another saga, is
    quarantined like a forged decision."""
    topic = make_topic(partitions=2)
    key = generate_key(tmp_path / "approvals.pem")
    agent_journal = KafkaJournal(kafka_bootstrap, topic=topic)
    service_journal = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        agent = Sagacity(
            agent_journal, compensation="delegated", approvals_public_key=key.public_hex
        )
        service = Sagacity(service_journal, compensation="delegated", decision_signer=key)
        bank = agent.wrap(Bank())
        service.wrap(Bank())
        for saga_id in ("granted", "unsigned", "moved"):
            talk = agent.conversation(saga_id)
            talk.call(lambda: bank.send_wire_transfer("100", "alice"))
        agent_journal.flush()
        genuine = service.grant(
            "granted",
            "send_wire_transfer",
            ['to == "alice"'],
            expires_at_us=service.now_us() + 600_000_000,
            grantor="alice@example.com",
        ).grant.entry
        for saga_id, attributes in (
            (
                "unsigned",
                {k: v for k, v in genuine.attributes.items() if k != attr.GRANT_SIGNATURE},
            ),
            ("moved", dict(genuine.attributes)),
        ):
            head = agent_journal.entries(saga_id)[-1]
            copy = EntryDraft(
                saga_id=saga_id,
                event_type=E.GRANTED,
                tool=genuine.tool,
                actor=genuine.actor,
                attributes=attributes,
                recorded_at_us=genuine.recorded_at_us,
            )
            _produce(kafka_bootstrap, topic, link(copy, seq=head.seq + 1, prev_hash=head.hash))
        service_journal.flush()
    finally:
        agent_journal.close()
        service_journal.close()
    archive_of(topic, approvals_public_key=key.public_hex)
    _wait(lambda: _quarantined(archive_dsn, "moved") and _quarantined(archive_dsn, "unsigned"))
    _wait(lambda: "GRANTED" in _archived(archive_dsn, "granted"))
    assert _quarantined(archive_dsn, "granted") == []
    assert _quarantined(archive_dsn, "unsigned") == [("unsigned_grant", 3)]
    assert _quarantined(archive_dsn, "moved") == [("bad_grant_signature", 3)]
