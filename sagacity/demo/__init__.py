"""The end-to-end demonstration: one saga's journal through real Kafka into real PostgreSQL.

Each stage does the real thing and reports it: a topic is created, a hash-chained saga
(``SAGA_OPENED``, ``INTENT``, ``EXECUTED``, ``SAGA_ENDED``) is published with an idempotent
``acks=all`` producer, read back by a consumer group, verified, stored in a table, read back
from the table and verified again. Any stage that fails raises :class:`DemoError`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sagacity._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.chain import link, payload_sha256, verify
from sagacity.errors import SagacityError

DEFAULT_TOPIC = "sagacity.journal"
TABLE = "demo_journal"


class DemoError(SagacityError):
    """A stage of the demonstration failed.

    Attributes:
        stage: the stage's name (``topic``, ``publish``, ``consume``, ``verify``, ``store``,
            ``readback``).
    """

    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """Where the demonstration runs."""

    bootstrap_servers: str
    database_url: str
    topic: str = DEFAULT_TOPIC


@dataclass(frozen=True, kw_only=True)
class DemoReport:
    """What the demonstration did."""

    saga_id: str
    entries: tuple[JournalEntry, ...]
    partition: int
    offsets: tuple[int, ...]
    consumer_group: str


def topic_from_env() -> str:
    """``SAGACITY_TOPIC`` or the default journal topic."""
    return os.environ.get("SAGACITY_TOPIC") or DEFAULT_TOPIC


# The one place the demonstration turns entries into message bytes and back.
def encode(entry: JournalEntry) -> bytes:
    """The Kafka message value of ``entry`` (the journal's Avro wire format)."""
    from sagacity.schemas import encode_entry

    return encode_entry(entry)


def decode(value: bytes) -> JournalEntry:
    """The entry of a Kafka message value (inverse of :func:`encode`)."""
    from sagacity.schemas import decode_entry

    return decode_entry(value)


def build_saga(saga_id: str) -> tuple[JournalEntry, ...]:
    """A small hash-chained saga: opened, one refund intended and executed, ended."""
    payload = json.dumps(
        {"order_id": "A-1001", "amount_cents": 2500}, separators=(",", ":"), ensure_ascii=False
    )
    drafts = [
        EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED, actor="sagacity-demo"),
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.INTENT,
            tool="refund",
            payload=payload,
            attributes={
                "payload_sha256": payload_sha256(payload),
                "reversibility": "COMPENSATABLE",
            },
        ),
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.EXECUTED,
            tool="refund",
            result='{"refund_id":"R-77"}',
            attributes={"ref_seq": "2"},
        ),
        EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_ENDED, result="COMPLETED"),
    ]
    entries: list[JournalEntry] = []
    prev = GENESIS_HASH
    for seq, draft in enumerate(drafts, start=1):
        entry = link(draft, seq=seq, prev_hash=prev)
        entries.append(entry)
        prev = entry.hash
    return tuple(entries)


def run(settings: DemoSettings, *, echo: Callable[[str], None] = print) -> DemoReport:
    """Run every stage against the broker and database of ``settings``, reporting each.

    Raises:
        DemoError: a stage failed; ``stage`` names it.
    """
    echo(f"[stack]    kafka {settings.bootstrap_servers} | postgres {settings.database_url}")
    partitions, created = _ensure_topic(settings)
    verb = "created with the journal's settings" if created else "exists"
    echo(f"[topic]    {settings.topic} {verb} ({partitions} partitions)")

    saga_id = f"demo-{uuid.uuid4().hex[:12]}"
    entries = build_saga(saga_id)
    echo(f"[chain]    saga {saga_id}: {len(entries)} entries linked, head {entries[-1].hash[:16]}")

    partition, offsets = _publish(settings, entries, partitions)
    echo(
        f"[publish]  {len(entries)} entries to {settings.topic} partition {partition} "
        f"offsets {offsets[0]}-{offsets[-1]} (idempotent, acks=all)"
    )

    group = f"sagacity-demo-{uuid.uuid4().hex[:8]}"
    consumed = _consume(settings, saga_id, group, partition, offsets[0], len(entries))
    echo(f"[consume]  consumer group {group} read {len(consumed)} entries back")

    _check(consumed, entries, "verify")
    echo(f"[verify]   chain intact: {len(consumed)} entries, head {consumed[-1].hash[:16]}")

    _store(settings, consumed)
    echo(f"[store]    {len(consumed)} rows written to table {TABLE}")

    stored = _read_back(settings, saga_id)
    _check(stored, entries, "readback")
    echo(f"[readback] {len(stored)} rows read back from {TABLE}: chain intact, identical")
    return DemoReport(
        saga_id=saga_id,
        entries=entries,
        partition=partition,
        offsets=tuple(offsets),
        consumer_group=group,
    )


def _check(got: Sequence[JournalEntry], expected: Sequence[JournalEntry], stage: str) -> None:
    verdict = verify(got)
    if not verdict.ok:
        raise DemoError(stage, f"chain broken at seq {verdict.bad_seq}: {verdict.detail}")
    if tuple(got) != tuple(expected):
        raise DemoError(stage, "entries differ from those published")


def _ensure_topic(settings: DemoSettings) -> tuple[int, bool]:
    """The topic's partition count, creating it with the journal's settings if missing."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from sagacity.errors import JournalError, TopicConfigError
    from sagacity.producer._topic import TopicSpec, check, create, describe

    bootstrap = settings.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    refusal: Exception | None = None
    try:
        created = settings.topic not in admin.list_topics(timeout=30).topics
        info = None
        if created:
            try:
                info = create(admin, settings.topic, TopicSpec(), bootstrap=bootstrap, timeout=30)
            except TopicConfigError as exc:
                # Created meanwhile, or not yet in the metadata we listed: use it if it exists.
                refusal = exc
                created = False
        if info is None:
            try:
                info = describe(admin, settings.topic, bootstrap=bootstrap, timeout=30)
            except JournalError as exc:
                raise DemoError("topic", str(refusal or exc)) from exc
    except (KafkaException, JournalError) as exc:
        raise DemoError("topic", str(exc)) from exc
    fatal = [f.detail for f in check(info) if f.fatal]
    if fatal:
        raise DemoError("topic", "; ".join(fatal))
    return info.partitions, created


def _publish(
    settings: DemoSettings, entries: Sequence[JournalEntry], partitions: int
) -> tuple[int, list[int]]:
    from confluent_kafka import KafkaError, Message, Producer

    from sagacity.producer import partition_for

    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
        }
    )
    delivered: list[tuple[int, int]] = []
    failures: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered.append((msg.partition() or 0, msg.offset() or 0))

    for entry in entries:
        key = entry.saga_id.encode()
        producer.produce(
            settings.topic,
            key=key,
            value=encode(entry),
            # The partition the journal's readers look in for this saga (murmur2 of the key).
            partition=partition_for(key, partitions),
            on_delivery=on_delivery,
        )
    if producer.flush(30) != 0 or failures or len(delivered) != len(entries):
        raise DemoError("publish", f"not every entry was acknowledged: {failures or 'timeout'}")
    landed = {p for p, _ in delivered}
    if len(landed) != 1:
        raise DemoError("publish", f"one saga's entries landed on partitions {landed}")
    return landed.pop(), [offset for _, offset in delivered]


def _consume(
    settings: DemoSettings,
    saga_id: str,
    group: str,
    partition: int,
    first_offset: int,
    count: int,
    timeout_s: float = 60.0,
) -> list[JournalEntry]:
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )

    def on_assign(c: Any, assigned: list[TopicPartition]) -> None:
        # A new group on a shared topic: start where this saga's entries begin.
        for tp in assigned:
            if tp.partition == partition:
                tp.offset = first_offset
        c.assign(assigned)

    got: list[JournalEntry] = []
    try:
        consumer.subscribe([settings.topic], on_assign=on_assign)
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise DemoError("consume", str(msg.error()))
            if msg.key() == saga_id.encode():
                got.append(decode(msg.value() or b""))
        if len(got) < count:
            raise DemoError("consume", f"read {len(got)} of {count} entries in {timeout_s:.0f}s")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def _store(settings: DemoSettings, entries: Sequence[JournalEntry]) -> None:
    import psycopg

    try:
        with psycopg.connect(settings.database_url) as conn:
            conn.execute(
                f"""CREATE TABLE IF NOT EXISTS {TABLE} (
                    saga_id text NOT NULL,
                    seq bigint NOT NULL,
                    event_type text NOT NULL,
                    entry_hash text NOT NULL,
                    body bytea NOT NULL,
                    PRIMARY KEY (saga_id, seq))"""
            )
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {TABLE} VALUES (%s, %s, %s, %s, %s)"  # noqa: S608 - constant
                    " ON CONFLICT DO NOTHING",
                    [(e.saga_id, e.seq, e.event_type.value, e.hash, encode(e)) for e in entries],
                )
    except psycopg.Error as exc:
        raise DemoError("store", str(exc)) from exc


def _read_back(settings: DemoSettings, saga_id: str) -> list[JournalEntry]:
    import psycopg

    try:
        with psycopg.connect(settings.database_url) as conn:
            rows = conn.execute(
                f"SELECT body FROM {TABLE} WHERE saga_id = %s ORDER BY seq",  # noqa: S608
                (saga_id,),
            ).fetchall()
    except psycopg.Error as exc:
        raise DemoError("readback", str(exc)) from exc
    return [decode(bytes(body)) for (body,) in rows]
