"""The services' consumer runtime on a real broker (and Postgres for table positions): a
rebalance between two members, poison under each policy, lost partitions, close on failure."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sagacity.consumers._runtime import (
    DeadLetterTopic,
    Handler,
    KafkaCommits,
    Ledger,
    PoisonPolicy,
    QuarantineTable,
    Record,
    Redeliver,
    RuntimeOptions,
    SkipAndCount,
    TablePositions,
)
from sagacity.errors import PersistenceError
from sagacity.producer import (
    FIXED_SETTINGS,
    REASON_HEADER,
    ConsumerRuntime,
    DeadLetters,
    client_config,
    ensure_topic,
)

pytestmark = [pytest.mark.kafka]

SESSION_MS = 6000  # the broker's group.min.session.timeout.ms


def _until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _produce(bootstrap: str, topic: str, values: Sequence[bytes], *, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=i % partitions)
    assert producer.flush(30) == 0


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


class Recorder(Handler[Record]):
    """Keeps what it is given; offsets are done once handled (or parked)."""

    def __init__(self, *, poison_prefix: bytes = b"bad") -> None:
        self.runtime: ConsumerRuntime | None = None
        self.lock = threading.Lock()
        self.ledgers: dict[int, Ledger] = {}
        self.handled: list[tuple[int, int, bytes]] = []
        self.events: list[tuple[str, tuple[int, ...]]] = []
        self.poison_prefix = poison_prefix
        self.fail_with: BaseException | None = None
        self.block_s = 0.0
        self.redeliver = 0
        self.closed = False

    def handle(self, messages: Sequence[Record]) -> None:
        assert self.runtime is not None
        if self.fail_with is not None:
            failure, self.fail_with = self.fail_with, None
            raise failure
        if self.redeliver:
            self.redeliver -= 1
            raise Redeliver("not now", retry_s=0.1)
        if self.block_s:
            delay, self.block_s = self.block_s, 0.0
            time.sleep(delay)
        for m in messages:
            p, o, value = m.partition() or 0, m.offset() or 0, m.value() or b""
            with self.lock:
                ledger = self.ledgers.get(p)
                if ledger is None:
                    continue
                ledger.add(o)
            if value.startswith(self.poison_prefix):
                if not self.runtime.poison(m, reason="bad", detail=f"poison at {o}"):
                    continue
            else:
                with self.lock:
                    self.handled.append((p, o, value))
            with self.lock:
                ledger.done(o)

    def on_assigned(self, partitions: Sequence[int]) -> None:
        with self.lock:
            for p in partitions:
                self.ledgers[p] = Ledger()
            self.events.append(("assigned", tuple(partitions)))

    def on_revoking(self, partitions: Sequence[int], *, lost: bool) -> None:
        with self.lock:
            self.events.append(("lost" if lost else "revoking", tuple(partitions)))

    def on_released(self, partitions: Sequence[int]) -> None:
        with self.lock:
            for p in partitions:
                self.ledgers.pop(p, None)
            self.events.append(("released", tuple(partitions)))

    def closing(self) -> None:
        self.closed = True

    # KafkaCommits' side
    def ready(self, only: Collection[int] | None) -> dict[int, int]:
        out: dict[int, int] = {}
        with self.lock:
            for p, ledger in self.ledgers.items():
                if only is not None and p not in only:
                    continue
                if ledger.commit_at is not None and ledger.commit_at != ledger.committed:
                    out[p] = ledger.commit_at
                    ledger.committed = ledger.commit_at
        return out

    def values(self) -> list[bytes]:
        with self.lock:
            return [v for _p, _o, v in self.handled]


class Member:
    """One runtime on its own thread."""

    def __init__(self, runtime: ConsumerRuntime, recorder: Recorder) -> None:
        self.runtime = runtime
        self.recorder = recorder
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.runtime.run()
        except BaseException as exc:
            self.failure = exc

    def stop(self) -> None:
        self.runtime.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def members(kafka_bootstrap: str) -> Iterator[Callable[..., Member]]:
    started: list[Member] = []

    def start(
        topic: str,
        group: str,
        *,
        recorder: Recorder | None = None,
        positions: Any = None,
        poison: PoisonPolicy | None = None,
        cooperative: bool = True,
        batch_size: int = 10,
        rejoin_on: tuple[type[BaseException], ...] = (),
        session_ms: int = SESSION_MS,
    ) -> Member:
        rec = recorder if recorder is not None else Recorder()
        tuning: dict[str, Any] = {
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": session_ms,
        }
        if cooperative:
            tuning["partition.assignment.strategy"] = "cooperative-sticky"
        runtime = ConsumerRuntime(
            RuntimeOptions(
                topic=topic,
                config=client_config(
                    bootstrap_servers=kafka_bootstrap,
                    group_id=group,
                    client={"enable.auto.commit": True},  # ignored: the fixed settings win
                    tuning=tuning,
                ),
                batch_size=batch_size,
                poll_timeout_s=0.1,
                rejoin_on=rejoin_on,
                rejoin_s=0.2,
            ),
            rec,
            positions=positions if positions is not None else KafkaCommits(rec.ready),
            poison=poison if poison is not None else SkipAndCount(),
            stop=threading.Event(),
        )
        rec.runtime = runtime
        member = Member(runtime, rec)
        started.append(member)
        return member

    yield start
    for member in started:
        member.runtime.stop.set()
    for member in started:
        member.thread.join(30)


def test_fixed_settings_win_and_a_config_without_them_is_refused() -> None:
    config = client_config(
        bootstrap_servers="k",
        group_id="g",
        client={"enable.auto.commit": True, "isolation.level": "read_uncommitted"},
        tuning={"auto.offset.reset": "latest"},
    )
    for key, value in FIXED_SETTINGS.items():
        assert config[key] == value
    with pytest.raises(ValueError, match=r"enable\.auto\.commit"):
        ConsumerRuntime(
            RuntimeOptions(topic="t", config={**config, "enable.auto.commit": True}),
            Recorder(),
            positions=KafkaCommits(lambda only: {}),
            poison=SkipAndCount(),
            stop=threading.Event(),
        )


@pytest.mark.slow
def test_two_members_share_the_partitions_and_every_message_is_handled_once(
    kafka_bootstrap: str, make_topic: Callable[..., str], members: Callable[..., Member]
) -> None:
    topic = make_topic(partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = members(topic, group)
    _until(lambda: first.runtime.assigned == (0, 1, 2, 3), "the first member got nothing")
    _produce(kafka_bootstrap, topic, [f"a{i}".encode() for i in range(40)], partitions=4)
    _until(lambda: len(first.recorder.values()) == 40, "the first member did not read all")
    second = members(topic, group)
    _until(
        lambda: len(first.runtime.assigned) == 2 and len(second.runtime.assigned) == 2,
        "the partitions were not shared",
    )
    assert set(first.runtime.assigned) | set(second.runtime.assigned) == {0, 1, 2, 3}
    # The first member was told before its partitions went, committed, then forgot them.
    kinds = [kind for kind, _ in first.recorder.events]
    assert kinds[:3] == ["assigned", "revoking", "released"], first.recorder.events
    assert "lost" not in kinds
    _produce(kafka_bootstrap, topic, [f"b{i}".encode() for i in range(40)], partitions=4)
    _until(
        lambda: len(first.recorder.values()) + len(second.recorder.values()) == 80,
        "not every message was handled",
    )
    time.sleep(0.5)
    every = first.recorder.values() + second.recorder.values()
    # Positions were committed on revoke: the second member re-read none of the first's.
    expected = [f"a{i}".encode() for i in range(40)] + [f"b{i}".encode() for i in range(40)]
    assert sorted(every) == sorted(expected)
    assert len(every) == len(set(every)) == 80
    first.stop()
    second.stop()
    assert first.recorder.closed
    assert second.recorder.closed
    assert _committed(kafka_bootstrap, group, topic, 4) == dict.fromkeys(range(4), 20)


@pytest.mark.postgres
@pytest.mark.slow
def test_table_positions_archive_each_message_exactly_once_across_a_rebalance(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    members: Callable[..., Member],
    pg_dsn: str,
) -> None:
    topic = make_topic(partitions=4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE effect (p int, o bigint, v bytea, PRIMARY KEY (p, o))")
        conn.execute("CREATE TABLE position (p int PRIMARY KEY, next bigint)")
        # A stale Kafka commit the table knows nothing of: the table wins (from the beginning).
    stale = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    stale.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    stale.close()

    class Archiver(Recorder):
        def handle(self, messages: Sequence[Record]) -> None:
            with psycopg.connect(pg_dsn) as conn, conn.transaction():
                for m in messages:
                    conn.execute(
                        "INSERT INTO effect VALUES (%s, %s, %s)",
                        (m.partition(), m.offset(), m.value()),
                    )
                    conn.execute(
                        "INSERT INTO position VALUES (%s, %s)"
                        " ON CONFLICT (p) DO UPDATE SET next = excluded.next",
                        (m.partition(), (m.offset() or 0) + 1),
                    )

    def stored(topic: str) -> Mapping[int, int]:
        with psycopg.connect(pg_dsn) as conn:
            return {int(p): int(n) for p, n in conn.execute("SELECT p, next FROM position")}

    def member() -> Member:
        return members(
            topic,
            group,
            recorder=Archiver(),
            positions=TablePositions(stored, from_beginning=True),
            cooperative=False,
        )

    _produce(kafka_bootstrap, topic, [f"a{i}".encode() for i in range(200)], partitions=4)
    first = member()
    _until(lambda: first.runtime.assigned == (0, 1, 2, 3), "the first member got nothing")
    second = member()
    _produce(kafka_bootstrap, topic, [f"b{i}".encode() for i in range(200)], partitions=4)

    def archived() -> int:
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT count(*) FROM effect").fetchone()
            return int(row[0]) if row else 0

    _until(lambda: archived() == 400, "not every message was archived")
    _until(lambda: bool(second.runtime.assigned), "the second member got nothing")
    first.stop()  # its partitions move to the second, which seeks to the table's positions
    _until(lambda: second.runtime.assigned == (0, 1, 2, 3), "the partitions did not move")
    _produce(kafka_bootstrap, topic, [f"c{i}".encode() for i in range(40)], partitions=4)
    _until(lambda: archived() == 440, "the last messages were not archived")
    second.stop()
    # A duplicate would have failed on the primary key; nothing failed.
    assert first.failure is None
    assert second.failure is None
    assert stored(topic) == dict.fromkeys(range(4), 110)


def _poison_values() -> list[bytes]:
    return [b"ok0", b"bad1", b"ok2", b"ok3"]


@pytest.mark.slow
def test_poison_goes_to_a_dead_letter_topic_with_its_bytes_and_counts_as_done(
    kafka_bootstrap: str, make_topic: Callable[..., str], members: Callable[..., Member]
) -> None:
    topic = make_topic(partitions=1)
    dlq = f"{topic}.dlq"
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": kafka_bootstrap}
    ensure_topic(AdminClient(config), dlq, partitions=1, timeout=15)
    parked: list[str] = []
    sender = DeadLetters(config, dlq)
    group = f"g-{uuid.uuid4().hex[:8]}"
    try:
        member = members(topic, group, poison=DeadLetterTopic(sender, on_parked=parked.append))
        _produce(kafka_bootstrap, topic, _poison_values(), partitions=1)
        _until(lambda: len(member.recorder.values()) == 3, "the good messages were not handled")
        member.stop()
    finally:
        sender.close()
        AdminClient(config).delete_topics([dlq])
    assert parked == ["bad"]
    assert _committed(kafka_bootstrap, group, topic, 1) == {0: 4}
    reader = Consumer(
        {**config, "group.id": f"r-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"}
    )
    try:
        reader.assign([TopicPartition(dlq, 0, 0)])
        message = reader.poll(20)
    finally:
        reader.close()
    assert message is not None
    assert message.error() is None
    assert message.value() == b"bad1"
    assert dict(message.headers() or [])[REASON_HEADER] == b"bad"


@pytest.mark.postgres
@pytest.mark.slow
def test_poison_goes_to_a_quarantine_table_and_a_refusal_stops_the_member(
    kafka_bootstrap: str,
    make_topic: Callable[..., str],
    members: Callable[..., Member],
    pg_dsn: str,
) -> None:
    topic = make_topic(partitions=1)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE quarantine (p int, o bigint, reason text, detail text, raw bytea)"
        )

    def write(message: Record, reason: str, detail: str) -> None:
        try:
            with psycopg.connect(pg_dsn) as conn:
                conn.execute(
                    "INSERT INTO quarantine VALUES (%s, %s, %s, %s, %s)",
                    (message.partition(), message.offset(), reason, detail, message.value()),
                )
        except psycopg.Error as exc:
            raise PersistenceError(str(exc)) from exc

    group = f"g-{uuid.uuid4().hex[:8]}"
    member = members(topic, group, poison=QuarantineTable(write))
    _produce(kafka_bootstrap, topic, _poison_values(), partitions=1)
    _until(lambda: len(member.recorder.values()) == 3, "the good messages were not handled")
    member.stop()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT p, o, reason, detail, raw FROM quarantine").fetchall()
    assert rows == [(0, 1, "bad", "poison at 1", b"bad1")]
    assert _committed(kafka_bootstrap, group, topic, 1) == {0: 4}

    # A table that refuses for good (not a lost connection) is not retried: the member stops
    # with the error, its consumer closed, the message's offset not committed.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE quarantine")
    again = members(topic, group, poison=QuarantineTable(write))
    _produce(kafka_bootstrap, topic, [b"bad4"], partitions=1)
    _until(lambda: not again.thread.is_alive(), "the member did not stop")
    assert isinstance(again.failure, PersistenceError)
    assert again.recorder.closed
    assert again.runtime.consumer is None
    assert _committed(kafka_bootstrap, group, topic, 1) == {0: 4}


@pytest.mark.slow
def test_poison_is_skipped_and_counted(
    kafka_bootstrap: str, make_topic: Callable[..., str], members: Callable[..., Member]
) -> None:
    topic = make_topic(partitions=1)
    skips = SkipAndCount()
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = members(topic, group, poison=skips)
    _produce(kafka_bootstrap, topic, _poison_values(), partitions=1)
    _until(lambda: len(member.recorder.values()) == 3, "the good messages were not handled")
    member.stop()
    assert skips.skipped == 1
    assert member.recorder.values() == [b"ok0", b"ok2", b"ok3"]
    assert _committed(kafka_bootstrap, group, topic, 1) == {0: 4}


@pytest.mark.slow
def test_a_member_stalled_past_the_poll_interval_loses_its_partitions_without_committing(
    kafka_bootstrap: str, make_topic: Callable[..., str], members: Callable[..., Member]
) -> None:
    topic = make_topic(partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    recorder = Recorder()
    member = members(topic, group, recorder=recorder, batch_size=1)
    _until(lambda: member.runtime.assigned == (0, 1), "the member got nothing")
    _produce(kafka_bootstrap, topic, [b"ok0", b"ok1"], partitions=2)
    _until(lambda: len(recorder.values()) == 2, "the first messages were not handled")
    _until(lambda: _committed(kafka_bootstrap, group, topic, 2) == {0: 1, 1: 1}, "no commit")
    recorder.block_s = SESSION_MS / 1000 + 4  # the next batch outlasts max.poll.interval.ms
    commits: list[Collection[int] | None] = []
    ready = recorder.ready

    def watched(only: Collection[int] | None) -> dict[int, int]:
        commits.append(only)
        return ready(only)

    assert isinstance(member.runtime.positions, KafkaCommits)
    member.runtime.positions.ready = watched
    _produce(kafka_bootstrap, topic, [b"ok2", b"ok3"], partitions=2)
    _until(lambda: any(kind == "lost" for kind, _ in recorder.events), "on_lost never came", 60)
    lost_at = next(i for i, (kind, _) in enumerate(recorder.events) if kind == "lost")
    assert recorder.events[lost_at + 1][0] == "released"
    # No commit named the lost partitions: another member may own them already.
    assert all(only is None for only in commits), commits
    # The member joins again and goes on; the stalled batch's message is read again.
    _until(lambda: member.runtime.assigned == (0, 1), "the member did not rejoin")
    _until(lambda: len(recorder.values()) >= 4, "the member did not go on")
    member.stop()
    assert member.failure is None
    assert set(recorder.values()) == {b"ok0", b"ok1", b"ok2", b"ok3"}


@pytest.mark.slow
def test_a_failing_handler_closes_the_consumer_and_the_group_moves_on_at_once(
    kafka_bootstrap: str, make_topic: Callable[..., str], members: Callable[..., Member]
) -> None:
    topic = make_topic(partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    recorder = Recorder()
    recorder.fail_with = RuntimeError("the handler broke")
    # A long session: a member that failed without leaving would hold the partition for 60 s.
    failing = members(topic, group, recorder=recorder, session_ms=60_000, cooperative=False)
    _until(lambda: failing.runtime.assigned == (0,), "the member got nothing")
    _produce(kafka_bootstrap, topic, [b"ok0"], partitions=1)
    _until(lambda: not failing.thread.is_alive(), "the failure did not end the run")
    assert isinstance(failing.failure, RuntimeError)
    assert recorder.closed
    assert failing.runtime.consumer is None
    started = time.monotonic()
    successor = members(topic, group, session_ms=60_000, cooperative=False)
    _until(lambda: successor.recorder.values() == [b"ok0"], "the successor did not read")
    assert time.monotonic() - started < 20  # the failed member had left the group
    successor.stop()


@pytest.mark.slow
def test_a_retryable_failure_rejoins_and_a_redelivered_batch_is_read_again(
    kafka_bootstrap: str, make_topic: Callable[..., str], members: Callable[..., Member]
) -> None:
    topic = make_topic(partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    recorder = Recorder()
    recorder.fail_with = KafkaException("the broker went away")
    recorder.redeliver = 2
    member = members(topic, group, recorder=recorder, rejoin_on=(KafkaException,))
    _produce(kafka_bootstrap, topic, [b"ok0", b"ok1"], partitions=1)
    _until(lambda: len(recorder.values()) == 2, "the batch was never handled")
    assert member.runtime.error is None
    assert member.thread.is_alive()
    assert recorder.values() == [b"ok0", b"ok1"]
    member.stop()
    assert member.failure is None
    assert _committed(kafka_bootstrap, group, topic, 1) == {0: 2}
