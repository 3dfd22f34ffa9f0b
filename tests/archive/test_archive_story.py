"""What a chain says, on real Kafka and PostgreSQL: an impossible story told by a writer is
reported by ``verify``, ``replay``, ``audit watch`` and the standalone bundle verifier, naming
the writer; data stripped from an archived saga without an erasure is reported ``withheld``;
the flows the product journals pass every one of them (docs/adr/0017-audit-coverage.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from archive_helpers import BASE_US, as_raw, make_chain, rows
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity import (
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
from sagacity.chain import committing, link
from sagacity.cli import main
from sagacity.consumers.archive import BatchArchiver, Signer, generate_key, sign_pending
from sagacity.consumers.archive._export import export_bundle
from sagacity.consumers.archive._service import ArchiveService, ArchiveSettings
from sagacity.entries import _attributes as attr
from sagacity.errors import ApprovalError
from sagacity.postgres.archive import (
    PostgresArchiveIngest,
    PostgresCheckpointSigning,
    PostgresSagaBundles,
)
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal
from sagacity.schemas import JOURNAL_WIRE
from sagacity.signing._operator_signature import OperatorSigner
from sagacity.signing._writer_signature import WriterKey

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]
E = EventType
GRANT = '{"role":"admin","user":"mallory"}'


class Ops:
    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        return f"reserved {sku}"

    @compensation
    def release(self, context: object) -> None:
        return None

    @compensable(by="release")
    def order(self, sku: str) -> str:
        raise RuntimeError("order service down")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def send_wire_transfer(self, amount: str, to: str) -> str:
        return "transfer-ok"

    @compensable(reversibility=Reversibility.PRIVILEGED)
    def grant(self, role: str, user: str) -> str:
        return f"granted {role} to {user}"


def _hmac_key(tmp_path: Path, writer: str) -> WriterKey:
    path = tmp_path / f"{writer}.key"
    path.write_text(f"hmac-sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}\n")
    return WriterKey.from_file(path, writer)


def _archive(
    kafka_bootstrap: str, archive_dsn: str, topic: str, total: int, **settings: Any
) -> None:
    """Run the archive service on ``topic`` until it archived ``total`` events, then stop it
    (it signs what it archived on the way out when given a signing key)."""
    service = ArchiveService(
        ArchiveSettings(
            bootstrap_servers=kafka_bootstrap,
            database_url=archive_dsn,
            topic=topic,
            group_id=f"g-{uuid.uuid4().hex[:6]}",
            poll_timeout=0.2,
            checkpoint_interval=3600,
            **settings,
        ),
        dependencies=compose.archive(),
    )
    runner = threading.Thread(target=service.run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if rows(archive_dsn, "SELECT count(*) FROM side_effect_journal")[0][0] >= total:
                break
            time.sleep(0.2)
    finally:
        service.stop()
        runner.join(30)
    assert rows(archive_dsn, "SELECT count(*) FROM archive_quarantine") == [(0,)]


def _verify(dsn: str, *flags: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["verify", "--database-url", dsn, "--json", *flags])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def _replay(dsn: str, bootstrap: str, topic: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        ["replay", "--database-url", dsn, "--bootstrap-servers", bootstrap, "--topic", topic],
    )
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, result.stdout


def _watch(dsn: str, state: Path, public_hex: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        [
            "audit",
            "watch",
            "--database-url",
            dsn,
            "--state",
            str(state),
            "--once",
            "--public-key",
            public_hex,
        ],
    )
    return result.exit_code, result.stdout + result.stderr


def _standalone(bundle: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(bundle / "verify_bundle.py"), str(bundle), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_forged_executed_without_intent_is_reported_by_every_auditor_tool(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    tmp_path: Path,
    approvals_key: Any,
) -> None:
    """The saga's own registered writer, from a second process, appends a correctly linked
    EXECUTED of a PRIVILEGED tool whose request never got its signatures (no INTENT).  The
    archive admits it (the saga's writer may write its saga; another writer's forgery is
    quarantined ``writer_not_owner``, docs/adr/0014 §5) and signs it; every auditor's tool
    names the impossible event and the writer that wrote it, and the honest saga beside it
    passes."""
    topic = make_topic(partitions=2)
    agent_key, other_key = _hmac_key(tmp_path, "agent-1"), _hmac_key(tmp_path, "agent-2")
    registry = tmp_path / "writers.toml"
    registry.write_text(agent_key.registry_entry() + other_key.registry_entry())
    journal = KafkaJournal(kafka_bootstrap, topic=topic, writer_key=agent_key)
    rogue = KafkaJournal(kafka_bootstrap, topic=topic, writer_key=agent_key)
    try:
        agent = Sagacity(journal, decision_signer=approvals_key)
        ops = agent.wrap(Ops())
        gated = agent.saga("grant-1", lambda: (ops.reserve("SKU-9"), ops.grant("admin", "mallory")))
        assert gated.status is SagaStatus.AWAITING_APPROVAL
        assert agent.saga("honest-1", lambda: ops.reserve("SKU-1")).status is (SagaStatus.COMPLETED)
        # The request is pending: no approval at all.  The rogue writer says it ran anyway.
        forged = rogue.append(
            EntryDraft(
                saga_id="grant-1",
                event_type=E.EXECUTED,
                tool="grant",
                result="granted admin to mallory",
                actor=rogue.writer_id,
                attributes={attr.REVERSIBILITY: Reversibility.PRIVILEGED.value},
            ),
            durable=True,
        )
        rogue.append(
            EntryDraft(saga_id="grant-1", event_type=E.SAGA_ENDED, result="COMPLETED"),
            durable=True,
        )
        rogue.flush()
        total = len(journal.entries("grant-1")) + len(journal.entries("honest-1"))
    finally:
        journal.close()
        rogue.close()
    key = tmp_path / "archive.pem"
    signer = generate_key(key)
    _archive(kafka_bootstrap, archive_dsn, topic, total, signing_key=key, writer_registry=registry)

    code, report = _verify(archive_dsn, "--public-key", signer.public_hex, "--require-signed")
    assert code == 1
    (failure,) = report["failures"]
    assert failure["saga_id"] == "grant-1"
    assert failure["reason"] == "grammar:executed_without_intent"
    assert failure["seq"] == forged.seq
    assert failure["writer"] == "agent-1"
    assert "agent-1" in failure["detail"]
    assert report["sagas_ok"] == 1  # the honest saga

    code, shown = _replay(archive_dsn, kafka_bootstrap, topic)
    assert code == 1
    assert f"grammar:executed_without_intent at seq {forged.seq}" in shown

    with psycopg.connect(archive_dsn) as conn:
        export_bundle(
            PostgresSagaBundles(conn),
            "grant-1",
            tmp_path / "bundle",
            pinned_keys=[signer.public_raw],
        )
    checked = _standalone(tmp_path / "bundle", "--public-key", signer.public_hex)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.startswith(
        f"FAILED: grammar:executed_without_intent at seq {forged.seq}: "
    )
    assert "written by writer agent-1" in checked.stdout

    code, shown = _watch(archive_dsn, tmp_path / "auditor.jsonl", signer.public_hex)
    assert code == 1
    assert "ALERT grammar:executed_without_intent" in shown
    assert "'grant-1'" in shown


def _flows(agent: Sagacity, ops: Any, approver: Sagacity) -> list[str]:
    """Sagas of the flows the product journals, each ended as its flow ends it."""
    assert agent.saga("plain", lambda: ops.reserve("A")).status is SagaStatus.COMPLETED

    def failing() -> None:
        ops.reserve("B")
        ops.order("B")

    assert agent.saga("failed", failing).status is SagaStatus.COMPENSATED
    wire = '{"amount":"100","to":"alice"}'
    for saga in ("approved", "rejected", "refused"):
        gated = agent.saga(saga, lambda: (ops.reserve("C"), ops.send_wire_transfer("100", "alice")))
        assert gated.status is SagaStatus.AWAITING_APPROVAL
        seq = gated.awaiting_seq
        assert seq is not None
        if saga == "approved":
            approver.approve(saga, seq, "manager@example.com")
            assert approver.resume_saga(saga, seq, wire).status is SagaStatus.COMPLETED
        elif saga == "rejected":
            assert approver.reject(saga, seq, "cfo@example.com").status is SagaStatus.REJECTED
        else:
            approver.approve(saga, seq, "manager@example.com")
            with pytest.raises(ApprovalError):
                approver.resume_saga(saga, seq, '{"amount":"900","to":"eve"}')
    privileged = agent.saga("privileged", lambda: ops.grant("admin", "mallory"))
    seq = privileged.awaiting_seq
    assert seq is not None
    approver.approve("privileged", seq, "alice@example.com")
    approver.approve("privileged", seq, "bob@example.com")
    assert approver.resume_saga("privileged", seq, GRANT).status is SagaStatus.COMPLETED
    return ["plain", "failed", "approved", "rejected", "refused", "privileged"]


def test_the_flows_the_product_journals_pass_every_auditor_tool(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    archive_dsn: str,
    tmp_path: Path,
    approvals_key: Any,
) -> None:
    topic = make_topic(partitions=2)
    journal = KafkaJournal(kafka_bootstrap, topic=topic)
    try:
        agent = Sagacity(journal, decision_signer=approvals_key)
        ops = agent.wrap(Ops())
        sagas = _flows(agent, ops, agent)
        journal.flush()
        total = sum(len(journal.entries(s)) for s in sagas)
    finally:
        journal.close()
    key = tmp_path / "archive.pem"
    signer = generate_key(key)
    _archive(kafka_bootstrap, archive_dsn, topic, total, signing_key=key)
    code, report = _verify(archive_dsn, "--public-key", signer.public_hex, "--require-signed")
    assert (code, report["failures"]) == (0, [])
    assert report["sagas_ok"] == len(sagas)
    code, shown = _replay(archive_dsn, kafka_bootstrap, topic)
    assert code == 0, shown
    with psycopg.connect(archive_dsn) as conn:
        for saga in sagas:
            export_bundle(
                PostgresSagaBundles(conn), saga, tmp_path / saga, pinned_keys=[signer.public_raw]
            )
    for saga in sagas:
        checked = _standalone(tmp_path / saga, "--public-key", signer.public_hex)
        assert checked.returncode == 0, (saga, checked.stdout + checked.stderr)
    code, shown = _watch(archive_dsn, tmp_path / "auditor.jsonl", signer.public_hex)
    assert code == 0, shown


# --- data withheld ------------------------------------------------------------------------------


@pytest.fixture
def archiver(archive_dsn: str) -> Iterator[BatchArchiver]:
    a = BatchArchiver(
        PostgresArchiveIngest(archive_dsn),
        consumer_group="g",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    yield a
    a.close()


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return generate_key(tmp_path / "archive.key")


OPERATOR = OperatorSigner(Ed25519PrivateKey.generate())
"""The operator key the erasures of this module are signed with (docs/adr/0027)."""


def _erased_saga(saga_id: str, *, sign: OperatorSigner | None = OPERATOR) -> list[JournalEntry]:
    """A form-2 saga erased by ``sagacity erase``: its ERASED on the chain, after its end,
    signed with ``sign`` (``None``: unsigned, as any writer may append one)."""
    drafts = [
        EntryDraft(
            saga_id=saga_id, event_type=E.SAGA_OPENED, attributes={"compensation": "inline"}
        ),
        EntryDraft(saga_id=saga_id, event_type=E.INTENT, tool="mail", payload='{"to":"ada"}'),
        EntryDraft(
            saga_id=saga_id,
            event_type=E.EXECUTED,
            tool="mail",
            result="sent",
            attributes={attr.REF_SEQ: "2"},
        ),
        EntryDraft(saga_id=saga_id, event_type=E.SAGA_ENDED, result="COMPLETED"),
        EntryDraft(
            saga_id=saga_id,
            event_type=E.ERASED,
            actor="operator:ana",
            attributes={
                attr.REASON: "art. 17",
                attr.ERASED_FIELDS: '{"2":["payload"],"3":["result"],"4":["result"]}',
                attr.ERASED_KEY: "none",
            },
        ),
    ]
    chain: list[JournalEntry] = []
    prev = "0" * 64
    for seq, draft in enumerate(drafts, start=1):
        made = committing(
            EntryDraft(
                saga_id=draft.saga_id,
                event_type=draft.event_type,
                tool=draft.tool,
                payload=draft.payload,
                result=draft.result,
                actor=draft.actor,
                attributes=draft.attributes,
                recorded_at_us=BASE_US + seq,
            )
        )
        if made.event_type is E.ERASED and sign is not None:
            made = sign.sign(made, seq=seq, prev_hash=prev)
        entry = link(made, seq=seq, prev_hash=prev)
        chain.append(entry)
        prev = entry.hash
    return chain


def test_openings_stripped_without_an_erasure_are_withheld_and_a_forged_log_row_counts_nothing(
    archiver: BatchArchiver, archive_dsn: str, signer: Signer
) -> None:
    """An operator clears a saga's openings through the erasure function (which logs a row in
    ``archive_erasure``) or with the triggers off, without ``sagacity erase``: no ERASED on
    the chain, every hash still checks.  ``verify`` reports both sagas ``withheld`` and counts
    no erasure; a saga erased on the record passes and is counted from its ERASED."""
    stripped, bypassed = make_chain("stripped", 5, form=2), make_chain("bypassed", 5, form=2)
    erased = _erased_saga("erased")
    archiver.archive(as_raw(stripped + bypassed + erased))
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
        conn.execute("SELECT sgc_erase_saga('stripped', 'operator:eve', 'tidy up', NULL)")
        conn.execute("SELECT sgc_erase_saga('erased', 'operator:ana', 'art. 17', NULL)")
        conn.execute("SET session_replication_role = replica")
        conn.execute(
            "UPDATE side_effect_journal SET payload = NULL, result = NULL, salts = '{}'"
            " WHERE saga_id = 'bypassed'"
        )
    code, report = _verify(archive_dsn, "--public-key", signer.public_hex)
    assert code == 1
    failed = {f["saga_id"]: (f["reason"], f["seq"]) for f in report["failures"]}
    assert failed == {"stripped": ("withheld", 2), "bypassed": ("withheld", 2)}
    assert (report["erased_sagas"], report["erased_fields"]) == (1, 3)
    # An archive that ingests without the key-encryption key holds commitments only: the
    # auditor who knows it says so, and nothing is reported withheld.
    code, report = _verify(archive_dsn, "--public-key", signer.public_hex, "--allow-unopened")
    assert (code, report["failures"]) == (0, [])


@pytest.mark.parametrize("forgery", ["unsigned", "another key"])
def test_a_forged_erased_counts_in_no_auditors_tool_and_the_data_is_withheld(
    archiver: BatchArchiver, archive_dsn: str, signer: Signer, tmp_path: Path, forgery: str
) -> None:
    """Any writer can append ERASED; an operator with database access can then clear the
    openings.  With the operator key pinned, verify, the bundle verifier and audit watch
    count only the operator's erasure: the forged one is reported and the data it claims
    erased is withheld (docs/adr/0027-operator-signatures.md)."""
    from sagacity.postgres import PostgresKeyStore
    from sagacity.signing._operator_signature import OperatorVerifier

    other = OperatorSigner(Ed25519PrivateKey.generate())
    forged = _erased_saga("forged", sign=None if forgery == "unsigned" else other)
    archiver.archive(as_raw(forged + _erased_saga("honest")))
    with psycopg.connect(archive_dsn, autocommit=True) as conn:
        sign_pending(PostgresCheckpointSigning(conn), signer, archiver.ledger)
        for saga in ("forged", "honest"):
            conn.execute("SELECT sgc_erase_saga(%s, 'operator:eve', 'art. 17', NULL)", (saga,))
    store = PostgresKeyStore(archive_dsn)
    store.ensure_schema()
    for saga in ("forged", "honest"):
        store.destroy(saga, actor="operator:eve", reason="art. 17")
    store.close()
    pinned = ("--operator-public-key", OPERATOR.public_hex)
    why = "unsigned_operator_event" if forgery == "unsigned" else "unknown_operator_key"

    code, report = _verify(archive_dsn, "--public-key", signer.public_hex, *pinned)
    assert code == 1
    [failure] = report["failures"]
    assert (failure["saga_id"], failure["reason"], failure["seq"]) == ("forged", "withheld", 2)
    assert f"(the ERASED at seq 5 does not count: {why})" in failure["detail"]
    assert (report["erased_sagas"], report["erasures_unverified"]) == (1, 0)
    assert [u["saga_id"] for u in report["erasure_unrecorded"]] == ["forged"]

    # Without a key: a signed-looking ERASED counts unverified, and verify says so.
    result = CliRunner().invoke(
        main, ["verify", "--database-url", archive_dsn, "--public-key", signer.public_hex]
    )
    if forgery == "unsigned":
        assert result.exit_code == 1, result.output
        assert "withheld" in result.stdout
    else:
        assert result.exit_code == 0, result.output
        assert "note: 2 erasure(s) counted unverified" in result.stdout

    with psycopg.connect(archive_dsn) as conn:
        verdict = export_bundle(
            PostgresSagaBundles(conn),
            "forged",
            tmp_path / "bundle",
            pinned_keys=(signer.public_raw,),
            operator=OperatorVerifier([OPERATOR.public_raw]),
        )
    assert (verdict.ok, verdict.reason) == (False, "withheld")
    checked = _standalone(
        tmp_path / "bundle", "--public-key", signer.public_hex, *pinned, "--allow-unsigned"
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.startswith("FAILED: withheld at seq 2: "), checked.stdout
    assert f"(the ERASED at seq 5 does not: {why})" in checked.stdout
    # With --allow-unopened (an archive without keys) the forgery itself is still reported.
    checked = _standalone(
        tmp_path / "bundle",
        "--public-key",
        signer.public_hex,
        *pinned,
        "--allow-unsigned",
        "--allow-unopened",
    )
    assert checked.stdout.startswith("FAILED: forged_erasure at seq 5: "), checked.stdout

    result = CliRunner().invoke(
        main,
        [
            "audit",
            "watch",
            "--database-url",
            archive_dsn,
            "--state",
            str(tmp_path / "auditor.jsonl"),
            "--once",
            "--public-key",
            signer.public_hex,
            "--erasure-grace",
            "0",
            *pinned,
        ],
    )
    shown = result.stdout + result.stderr
    assert result.exit_code == 1, shown
    assert "ALERT forged_erasure: saga 'forged'" in shown
    assert f"not an operator's ({why})" in shown
    assert "ALERT erasure_unrecorded: saga 'forged'" in shown
    assert "'honest'" not in shown
