"""``sagacity erase`` on real Kafka and PostgreSQL with a KEK (docs/adr/0019-erasure.md §4): a
saga whose data holds a marker string is erased; the marker is then nowhere Sagacity keeps
data — not on the topic (sealed from the start), not in any archive or service table, not in
an export bundle — while the saga still verifies and the erasure is on the record."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql

from sagacity import EntryDraft, EventType, JournalEntry
from sagacity.cli import main
from sagacity.consumers.archive import BatchArchiver, RawEvent
from sagacity.postgres import (
    PostgresClaimStore,
    PostgresKeyStore,
    PostgresRequestStore,
    PostgresServiceTables,
)
from sagacity.postgres.archive import ArchiveEraser, PostgresArchiveIngest, migrate
from sagacity.privacy._envelope import KEK_SETTING, KeyRing, write_key_encryption_key
from sagacity.privacy._keys import KeyService
from sagacity.producer import KAFKA_PARTITIONER, KafkaJournal
from sagacity.schemas import JOURNAL_WIRE, decode_entry
from sagacity.signing._operator_signature import OperatorSigner
from sagacity.signing._operator_signature import generate_key as generate_operator_key

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

MARKER = "marker-erase-91c4@example.org"
SAGA = "erase-me"
LIVE = "still-running"


def _raw(bootstrap: str, topic: str) -> list[RawEvent]:
    """Every message of the topic's one partition, as the archiver reads them."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[RawEvent] = []
        while len(out) < high - low:
            message = consumer.poll(15)
            assert message is not None, "the topic did not deliver every message"
            assert message.error() is None
            out.append(
                RawEvent(
                    topic=topic,
                    partition=0,
                    offset=message.offset() or 0,
                    key=message.key(),
                    value=message.value(),
                )
            )
        return out
    finally:
        consumer.close()


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _dump(dsn: str) -> str:
    """Every value of every row of every table of the test's schema, as text (bytes decoded
    as UTF-8, JSON unescaped)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
            )
        ]
        assert "side_effect_journal" in tables
        assert "sagacity_data_keys" in tables
        return "\n".join(
            " ".join(_text(value) for value in row)
            for table in tables
            for row in conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
        )


class Stack:
    """A journal with a KEK on a fresh topic, an archive and the services' tables in one
    schema, and the environment the ``sagacity`` commands read."""

    def __init__(self, bootstrap: str, topic: str, dsn: str, kek: Path, operator: Path) -> None:
        self.bootstrap, self.topic, self.dsn, self.kek = bootstrap, topic, dsn, kek
        self.operator = OperatorSigner.from_file(operator)
        self.env = {
            **os.environ,
            KEK_SETTING: str(kek),
            "SAGACITY_DATABASE_URL": dsn,
            "SAGACITY_BOOTSTRAP_SERVERS": bootstrap,
            "SAGACITY_TOPIC": topic,
            # `erase --apply` signs its ERASED with the operator key (ADR 0027).
            "SAGACITY_OPERATOR_SIGNING_KEY": str(operator),
        }
        self.env.pop("SAGACITY_ARCHIVE_DATABASE_URL", None)
        self.env.pop("SAGACITY_ARCHIVE_SCHEMA", None)

    def keys(self) -> KeyService:
        return KeyService(PostgresKeyStore(self.dsn), KeyRing.from_setting(str(self.kek)))

    def archive_topic(self) -> None:
        """Archive every message of the topic (again: the archiver skips what it has)."""
        keys = self.keys()
        archiver = BatchArchiver(
            PostgresArchiveIngest(self.dsn),
            consumer_group="g",
            keys=keys,
            retry_delay=0.05,
            partitioner=KAFKA_PARTITIONER,
            wire=JOURNAL_WIRE,
        )
        try:
            archiver.archive(_raw(self.bootstrap, self.topic))
        finally:
            archiver.close()
            keys.close()

    def cli(self, *args: str) -> tuple[int, str]:
        # Exactly self.env: a variable popped from it is unset, not the runner's.
        env: dict[str, str | None] = {k: None for k in os.environ if k not in self.env}
        result = CliRunner().invoke(main, list(args), env={**env, **self.env})
        return result.exit_code, result.stdout + result.stderr

    def erase_process(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", "from sagacity.cli import main; main()", "erase", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def chain(self) -> list[JournalEntry]:
        keys = self.keys()
        try:
            return [
                decode_entry(m.value or b"", keys=keys)
                for m in _raw(self.bootstrap, self.topic)
                if m.key == SAGA.encode()
            ]
        finally:
            keys.close()


@pytest.fixture
def stack(
    kafka_bootstrap: str, make_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> Stack:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate(conn)
    topic = make_topic(partitions=1)
    kek = tmp_path / "journal.kek"
    write_key_encryption_key(kek)
    operator = tmp_path / "operator.pem"
    generate_operator_key(operator)
    s = Stack(kafka_bootstrap, topic, pg_dsn, kek, operator)
    keys = s.keys()
    journal = KafkaJournal(kafka_bootstrap, topic=topic, keys=keys)
    try:
        journal.append(EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_OPENED))
        intent = journal.append(
            EntryDraft(
                saga_id=SAGA,
                event_type=EventType.INTENT,
                tool="mail",
                payload=json.dumps({"to": MARKER}),
                attributes={"note": f"for {MARKER}"},
            )
        )
        journal.append(
            EntryDraft(
                saga_id=SAGA,
                event_type=EventType.EXECUTED,
                tool="mail",
                result=f"sent to {MARKER}",
                attributes={"ref_seq": str(intent.seq)},
            )
        )
        journal.append(
            EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_ENDED, result="COMPLETED")
        )
        journal.append(EntryDraft(saga_id=LIVE, event_type=EventType.SAGA_OPENED))
        journal.append(
            EntryDraft(saga_id=LIVE, event_type=EventType.INTENT, tool="mail", payload="{}")
        )
        journal.flush()
    finally:
        journal.close()
        keys.close()
    s.archive_topic()
    # The services' copies: an approval request and a kept event of the saga, a claim with a
    # result, and a message of the saga the archive quarantined.
    PostgresRequestStore(pg_dsn, topic=topic).migrate()
    claims = PostgresClaimStore(pg_dsn, instance="test", journal=f"kafka:cluster/{topic}")
    claims.ensure_schema()
    claims.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sagacity_approval_request (topic, saga_id, seq, tool, payload,"
            " requested_at_us, signatures_required, policy_version, reversibility, state)"
            " VALUES (%s, %s, 2, 'mail', %s, 1, 1, 'v1', 'IRREVERSIBLE', 'approved')",
            (topic, SAGA, json.dumps({"to": MARKER})),
        )
        conn.execute(
            "INSERT INTO sagacity_approval_event (topic, saga_id, seq, entry)"
            " VALUES (%s, %s, 2, %s)",
            (topic, SAGA, json.dumps(intent.to_dict())),
        )
        conn.execute(  # a failed saga's error, as the console's queue shows it
            "INSERT INTO sagacity_attention (topic, saga_id, status, detail, since_us, ended_seq)"
            " VALUES (%s, %s, 'COMPENSATION_FAILED', %s, 1, 4)",
            (topic, SAGA, f"smtp refused {MARKER}"),
        )
        conn.execute(
            "INSERT INTO sagacity_compensation_claims (journal, saga_id, step_seq, step_hash,"
            " target, idempotency_key, instance, status, result)"
            " VALUES (%s, %s, 3, %s, 'unsend', 'k', 'test', 'COMPENSATED', %s)",
            (claims.journal, SAGA, "0" * 64, f"unsent {MARKER}"),
        )
    archiver = BatchArchiver(
        PostgresArchiveIngest(pg_dsn),
        consumer_group="quarantine",
        retry_delay=0.05,
        partitioner=KAFKA_PARTITIONER,
        wire=JOURNAL_WIRE,
    )
    try:
        bad = f"not an event: {MARKER}".encode()
        archiver.archive(
            [RawEvent(topic="other", partition=0, offset=0, key=SAGA.encode(), value=bad)]
        )
    finally:
        archiver.close()
    return s


def test_the_marker_is_sealed_on_the_topic_and_archived_in_clear_before_erasure(
    stack: Stack,
) -> None:
    assert all(MARKER.encode() not in (m.value or b"") for m in _raw(stack.bootstrap, stack.topic))
    dump = _dump(stack.dsn)
    assert dump.count(MARKER) >= 8  # archived values, approvals, claim, quarantined bytes
    assert f"not an event: {MARKER}" in dump
    assert any(MARKER in (e.payload or "") for e in stack.chain())


def test_a_dry_run_says_what_would_be_erased_and_changes_nothing(stack: Stack) -> None:
    before = _dump(stack.dsn)
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17 request")
    assert code == 0, out
    assert "data fields to erase: 4 (seqs 2..4)" in out
    assert "data key: live" in out
    assert "dry run: nothing was changed" in out
    # It speaks of what would happen, never as if it had.
    plan = out.split("dry run:")[0]
    assert not re.search(r"(?<!would be )\b(destroyed|cleared|appended)\b", plan), out
    assert "erased:" not in plan
    assert "would be destroyed" in plan
    assert "would be cleared" in plan
    assert "would be appended" in plan
    assert _dump(stack.dsn) == before


def test_a_dry_run_creates_no_key_table_where_there_is_none(stack: Stack) -> None:
    """Pointed at a database without the key table, a dry run says the saga has no key there
    and leaves the database as it was."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from sagacity.consumers.erasure import plan_erasure

    schema = f"nokeys_{os.urandom(4).hex()}"
    with psycopg.connect(stack.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    params = conninfo_to_dict(stack.dsn)
    params["options"] = f"-c search_path={schema}"
    elsewhere = make_conninfo(**params)
    store = PostgresKeyStore(elsewhere)
    keys = stack.keys()
    journal = KafkaJournal(stack.bootstrap, topic=stack.topic, keys=keys)
    try:
        assert not store.exists()
        plan = plan_erasure(
            journal,
            SAGA,
            key_store=store,
            services=PostgresServiceTables(elsewhere),
            archive=ArchiveEraser(stack.dsn),
        )
        assert plan.key == "none"
        assert not store.exists()
    finally:
        journal.close()
        keys.close()
        store.close()
        with psycopg.connect(stack.dsn, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchone()
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    assert tables == (0,)


def test_a_live_or_unknown_saga_is_refused(stack: Stack) -> None:
    before = _dump(stack.dsn)
    code, out = stack.cli("erase", "--saga", LIVE, "--reason", "r", "--apply")
    assert code == 1, out
    assert "Refused" in out
    assert "it is live" in out
    code, out = stack.cli("erase", "--saga", "no-such-saga", "--reason", "r", "--apply")
    assert code == 1, out
    assert "unknown" in out
    assert _dump(stack.dsn) == before


def test_erase_leaves_the_marker_nowhere_and_the_saga_verifiable(
    stack: Stack, tmp_path: Path
) -> None:
    # Two erasures at once: both succeed, the saga is erased once.
    runs = [stack.erase_process("--saga", SAGA, "--reason", "art. 17", "--apply") for _ in "ab"]
    outputs = [p.communicate(timeout=120)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
    assert sum("ERASED appended" in o for o in outputs) == 1, outputs
    chain = stack.chain()
    erased = [e for e in chain if e.event_type is EventType.ERASED]
    assert len(erased) == 1
    event = erased[0]
    assert event.attributes["reason"] == "art. 17"
    assert json.loads(event.attributes["erased"]) == {
        "2": ["note", "payload"],
        "3": ["result"],
        "4": ["result"],
    }
    assert len(event.attributes["erased_key"]) == 16
    # No message opens to the marker any more; none ever held it in clear.
    assert all(MARKER not in json.dumps(e.to_dict()) for e in chain)
    assert all(MARKER.encode() not in (m.value or b"") for m in _raw(stack.bootstrap, stack.topic))
    stack.archive_topic()  # the ERASED event reaches the archive
    dump = _dump(stack.dsn)
    assert MARKER not in dump
    with psycopg.connect(stack.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM archive_erasure").fetchone() == (1,)
    # verify passes and reports the erasure.
    code, out = stack.cli("verify", "--database-url", stack.dsn)
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("sagas erased"))
    assert line.split()[-1] == "1"
    # The export bundle holds no marker and verifies, listing the erased fields.
    bundle = tmp_path / "bundle"
    code, out = stack.cli(
        "export", "--database-url", stack.dsn, "--saga", SAGA, "--out", str(bundle)
    )
    assert code == 0, out
    for path in bundle.iterdir():
        assert MARKER.encode() not in path.read_bytes(), path
    checked = subprocess.run(
        [sys.executable, "-I", str(bundle / "verify_bundle.py"), str(bundle), "--allow-unsigned"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "erased (verified by their commitments" in checked.stdout
    assert "seq 2: note, payload" in checked.stdout
    # replay reads the topic (sealed, its key gone) and finds it agrees with the archive.
    code, out = stack.cli(
        "replay",
        "--database-url",
        stack.dsn,
        "--bootstrap-servers",
        stack.bootstrap,
        "--topic",
        stack.topic,
        "--saga",
        SAGA,
    )
    assert code == 0, out
    assert MARKER not in out
    # Again: nothing left to erase, nothing appended.
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    assert "ERASED was on it already" in out
    assert len([e for e in stack.chain() if e.event_type is EventType.ERASED]) == 1


def test_a_forged_erased_neither_stops_the_erasure_nor_counts_as_one(stack: Stack) -> None:
    """Any writer can append ERASED; the real erasure ignores one no operator key signed,
    proceeds, and signs its own: the chain's counted ERASED is the operator's."""
    from sagacity.signing._operator_signature import OperatorVerifier, erasure_counts

    keys = stack.keys()
    journal = KafkaJournal(stack.bootstrap, topic=stack.topic, keys=keys, writer_id="mallory")
    try:
        forged = journal.append(
            EntryDraft(
                saga_id=SAGA,
                event_type=EventType.ERASED,
                actor="dpo@example.org",
                attributes={"reason": "art. 17", "erased": "{}", "erased_key": "none"},
            )
        )
        journal.flush()
    finally:
        journal.close()
        keys.close()
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17")
    assert code == 0, out
    ignored = f"ERASED at seq {forged.seq} is not signed by a pinned operator key: ignored"
    assert ignored in out
    assert "signed with the operator key" in out  # the dry run would append its own
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    assert "data key: destroyed" in out
    assert f"ERASED appended at seq {forged.seq + 1}, signed with the operator key" in out
    assert ignored in out
    erased = [e for e in stack.chain() if e.event_type is EventType.ERASED]
    verifier = OperatorVerifier([stack.operator.public_raw])
    assert [(e.seq, erasure_counts(e, verifier)) for e in erased] == [
        (forged.seq, False),
        (forged.seq + 1, True),
    ]
    counted = erased[1]
    assert counted.attributes["operator_signature"].startswith(f"SGCO1:{stack.operator.key_id}:")
    assert counted.actor != "dpo@example.org"
    assert counted.prev_hash == forged.hash
    # The erasure took everything, as without the forgery.
    stack.archive_topic()
    assert MARKER not in _dump(stack.dsn)
    # Run again: the operator's ERASED is on the chain, nothing more is appended.
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    assert "ERASED was on it already" in out
    assert len([e for e in stack.chain() if e.event_type is EventType.ERASED]) == 2


def test_a_crash_after_the_key_was_destroyed_is_completed_by_a_second_run(stack: Stack) -> None:
    keys = stack.keys()
    try:
        keys.destroy(SAGA, actor="dpo", reason="art. 17")
    finally:
        keys.close()
    code, out = stack.cli("verify", "--database-url", stack.dsn)
    assert code == 1
    assert "erasure_unrecorded" in out
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    assert "destroyed already" in out
    assert "ERASED appended" in out
    stack.archive_topic()
    assert MARKER not in _dump(stack.dsn)
    code, out = stack.cli("verify", "--database-url", stack.dsn)
    assert code == 0, out
    assert "erasure_unrecorded" not in out


def test_a_form_one_saga_is_refused_and_nothing_changes(stack: Stack) -> None:
    journal = KafkaJournal(stack.bootstrap, topic=stack.topic)  # no keys: chain form 1
    try:
        journal.append(EntryDraft(saga_id="clear", event_type=EventType.SAGA_OPENED))
        journal.append(
            EntryDraft(saga_id="clear", event_type=EventType.SAGA_ENDED, result="COMPLETED")
        )
    finally:
        journal.close()
    stack.archive_topic()
    before = _dump(stack.dsn)
    code, out = stack.cli("erase", "--saga", "clear", "--reason", "r", "--apply")
    assert code == 1, out
    assert "chain form 1" in out
    assert "nothing was changed" in out
    assert _dump(stack.dsn) == before


def test_without_the_kek_a_sealed_saga_cannot_be_judged_ended_and_is_refused(
    stack: Stack,
) -> None:
    before = _dump(stack.dsn)
    stack.env.pop(KEK_SETTING)
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "r", "--apply")
    assert code == 1, out
    assert "its final status is sealed" in out
    assert KEK_SETTING in out
    assert _dump(stack.dsn) == before


def test_an_empty_reason_is_a_usage_error(stack: Stack) -> None:
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "  ", "--apply")
    assert code == 2, out
    assert "--reason must not be empty" in out


def test_an_unreachable_database_is_exit_3(stack: Stack) -> None:
    stack.env.pop(KEK_SETTING)
    code, out = stack.cli(
        "erase", "--saga", SAGA, "--reason", "r", "--database-url", "postgresql://127.0.0.1:1/x"
    )
    assert code == 3, out
    assert out.startswith("error: ")
    assert "unavailable" in out
    assert "Traceback" not in out


def test_the_erased_event_carries_the_operators_writer_signature(
    stack: Stack, tmp_path: Path
) -> None:
    """Like any append, ERASED names its writer and is signed with the writer key of the
    environment it runs in (docs/adr/0014-signed-decisions-and-writers.md)."""
    from sagacity.signing._writer_signature import HEADER, HMAC, HMAC_PREFIX, WriterRegistry

    secret = os.urandom(32)
    key = tmp_path / "operator.key"
    key.write_text(HMAC_PREFIX + secret.hex(), encoding="ascii")
    stack.env.update(SAGACITY_WRITER_ID="operator-erasure", SAGACITY_WRITER_KEY=str(key))
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    consumer = Consumer(
        {"bootstrap.servers": stack.bootstrap, "group.id": "sig", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(stack.topic, 0), timeout=15)
        consumer.assign([TopicPartition(stack.topic, 0, low)])
        messages = []
        while len(messages) < high - low:
            message = consumer.poll(15)
            assert message is not None
            assert message.error() is None
            messages.append(message)
    finally:
        consumer.close()
    keys = stack.keys()
    try:
        erased = [
            (decode_entry(m.value() or b"", keys=keys), dict(m.headers() or []))
            for m in messages
            if m.key() == SAGA.encode()
        ][-1]
    finally:
        keys.close()
    entry, headers = erased
    assert entry.event_type is EventType.ERASED
    assert entry.attributes["writer"] == "operator-erasure"
    signature = headers.get(HEADER)
    assert signature is not None
    for verifier, verifies in ((secret, True), (os.urandom(32), False)):
        found = WriterRegistry({"operator-erasure": (HMAC, verifier)}).check(
            writer=entry.attributes["writer"],
            saga_id=SAGA,
            seq=entry.seq,
            hash=entry.hash,
            signature=signature,
        )
        assert (found is None) is verifies, found


def test_an_erased_event_the_topic_could_not_take_is_refused_before_anything_changes(
    stack: Stack,
) -> None:
    """The ERASED event lists the erased fields by seq; when the topic could not take it, the
    erasure is refused before the key is destroyed (which would leave it unrecorded)."""
    import re

    from sagacity.consumers.erasure import apply_erasure, plan_erasure
    from sagacity.errors import ErasureRefusedError

    before = _dump(stack.dsn)  # the key table included
    keys = stack.keys()
    store = PostgresKeyStore(stack.dsn)
    journal = KafkaJournal(stack.bootstrap, topic=stack.topic, keys=keys)

    def erase(reason: str) -> None:
        apply_erasure(
            journal,
            SAGA,
            actor="dpo",
            reason=reason,
            keys=keys,
            key_store=store,
            services=PostgresServiceTables(stack.dsn),
            archive=ArchiveEraser(stack.dsn),
            signer=stack.operator,
        )

    try:
        plan = plan_erasure(
            journal,
            SAGA,
            key_store=store,
            services=PostgresServiceTables(stack.dsn),
            archive=ArchiveEraser(stack.dsn),
        )
        assert plan.field_count == 4
        journal.max_event_bytes = 4096  # as a topic whose max.message.bytes is this small
        with pytest.raises(ErasureRefusedError, match=re.escape("raise the topic's max.message")):
            erase("art. 17")
        journal.max_event_bytes = 1_000_000
        with pytest.raises(ErasureRefusedError, match="keep it short"):
            erase("r" * 3000)
    finally:
        journal.close()
        keys.close()
        store.close()
    assert _dump(stack.dsn) == before


FORGERIES = {
    "an unsigned request to undo it": EntryDraft(
        saga_id=SAGA,
        event_type=EventType.COMPENSATION_REQUESTED,
        actor="operator:root@ops",
        error="please undo",
        attributes={"reason": "FAILED"},
    ),
    "a call": EntryDraft(saga_id=SAGA, event_type=EventType.INTENT, tool="mail", payload="{}"),
    "a request for approval": EntryDraft(
        saga_id=SAGA,
        event_type=EventType.AWAITING_APPROVAL,
        tool="mail",
        payload="{}",
        attributes={"payload_sha256": "0" * 64, "reversibility": "IRREVERSIBLE"},
    ),
    "an end saying compensation is pending": EntryDraft(
        saga_id=SAGA, event_type=EventType.SAGA_ENDED, result="COMPENSATION_PENDING"
    ),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_event_after_the_end_does_not_keep_the_erasure_refused(
    stack: Stack, forgery: str
) -> None:
    """Any writer can append to an ended saga.  What it appends without an operator's signed
    request (or a settlement) before it starts no work, so erase judges the saga without it,
    names it, and erases (docs/adr/0027-operator-signatures.md)."""
    keys = stack.keys()
    journal = KafkaJournal(stack.bootstrap, topic=stack.topic, keys=keys, writer_id="mallory")
    try:
        forged = journal.append(FORGERIES[forgery])
        journal.flush()
    finally:
        journal.close()
        keys.close()
    if forged.event_type is EventType.AWAITING_APPROVAL:
        # The approvals service folds it as a pending request: that starts no work either.
        with psycopg.connect(stack.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO sagacity_approval_request (topic, saga_id, seq, tool, payload,"
                " requested_at_us, signatures_required, policy_version, reversibility, state)"
                " VALUES (%s, %s, %s, 'mail', '{}', 1, 1, 'v1', 'IRREVERSIBLE', 'pending')",
                (stack.topic, SAGA, forged.seq),
            )
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 0, out
    assert f"seq {forged.seq} ({forged.event_type.value}) after the saga's end: ignored" in out
    assert f"ERASED appended at seq {forged.seq + 1}" in out
    chain = stack.chain()
    assert chain[-1].event_type is EventType.ERASED
    assert chain[-1].prev_hash == forged.hash
    stack.archive_topic()
    assert MARKER not in _dump(stack.dsn)


def test_an_operators_signed_request_after_the_end_keeps_the_saga_live(stack: Stack) -> None:
    """What reopens an ended saga is a person's word: the operator's signed request to undo
    it.  Until the compensation service ends it again, erase refuses."""
    from sagacity.signing._operator_signature import append_signed

    keys = stack.keys()
    journal = KafkaJournal(stack.bootstrap, topic=stack.topic, keys=keys)
    try:
        append_signed(
            journal,
            EntryDraft(
                saga_id=SAGA,
                event_type=EventType.COMPENSATION_REQUESTED,
                actor="operator:ana@ops",
                attributes={"reason": "refund"},
            ),
            stack.operator,
        )
    finally:
        journal.close()
        keys.close()
    before = _dump(stack.dsn)
    code, out = stack.cli("erase", "--saga", SAGA, "--reason", "art. 17", "--apply")
    assert code == 1, out
    assert "it is live: seq 5 (COMPENSATION_REQUESTED) follows its last SAGA_ENDED" in out
    assert _dump(stack.dsn) == before
