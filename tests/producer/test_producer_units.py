"""Parts of the Kafka journal that need no broker: partitioner, settings, chain acceptance."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sagacity import EntryDraft, EventType, JournalEntry
from sagacity._env import kafka_settings_from_env, read_index
from sagacity.chain import link
from sagacity.cli import main
from sagacity.errors import ConfigurationError, SerializationError
from sagacity.producer import (
    ForkKind,
    SagaRead,
    check_json_payload,
    misplaced,
    murmur2,
    ownership,
    partition_for,
    traced,
    valid_traceparent,
)
from sagacity.producer._topic import DAY_MS, TopicInfo, check, parse_retention
from sagacity.producer._trace import current_traceparent

GENESIS = "0" * 64


@pytest.mark.parametrize(
    ("key", "expected"),
    [  # Kafka's own test vectors for Utils.murmur2
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_partition_is_in_range_and_stable() -> None:
    for i in range(200):
        key = f"saga-{i}".encode()
        assert 0 <= partition_for(key, 12) < 12
        assert partition_for(key, 12) == partition_for(key, 12)
    with pytest.raises(ValueError):
        partition_for(b"x", 0)


def test_a_message_off_its_keys_partition_is_misplaced() -> None:
    """The one placement rule every consumer applies (``wrong_partition``)."""
    for i in range(50):
        key = f"saga-{i}".encode()
        home = partition_for(key, 4)
        assert misplaced(key, home, 4) is None
        for other in set(range(4)) - {home}:
            detail = misplaced(key, other, 4)
            assert detail is not None
            assert f"belongs on partition {home} of 4" in detail
    assert misplaced(None, 3, 4) is None  # no key: no saga; left to the other checks
    assert misplaced(b"anything", 0, 1) is None


def test_settings_from_env_map_client_keys() -> None:
    settings = kafka_settings_from_env(
        {
            "SAGACITY_BOOTSTRAP_SERVERS": "k1:9092,k2:9092",
            "SAGACITY_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "SAGACITY_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "SAGACITY_ACK_TIMEOUT_S": "2.5",
            "UNRELATED": "x",
        }
    )
    assert settings.topic == "sagacity.journal"
    assert settings.ack_timeout_s == 2.5
    assert settings.client == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}


def test_settings_require_bootstrap() -> None:
    with pytest.raises(ConfigurationError, match="SAGACITY_BOOTSTRAP_SERVERS"):
        kafka_settings_from_env({})


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("SAGACITY_KAFKA_ACKS", "1", "acks cannot be set"),
        ("SAGACITY_KAFKA_ENABLE_IDEMPOTENCE", "false", "enable.idempotence cannot be set"),
        ("SAGACITY_TOPIC", "bad topic!", "topic"),
        ("SAGACITY_ACK_TIMEOUT_S", "-1", "ack_timeout_s"),
        ("SAGACITY_ACK_TIMEOUT_S", "soon", "ack_timeout_s"),
    ],
)
def test_settings_refuse_unsafe_or_invalid_values(var: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        kafka_settings_from_env({"SAGACITY_BOOTSTRAP_SERVERS": "k:9092", var: value})


def test_traceparent_validation() -> None:
    good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert valid_traceparent(good) == good
    assert valid_traceparent(good.upper()) == good
    for bad in (
        None,
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
    ):
        assert valid_traceparent(bad) is None
    with traced(good):
        assert current_traceparent.get() == good
    assert current_traceparent.get() is None


@pytest.mark.parametrize("payload", ["not json", '{"a":', "NaN", '{"a": Infinity}', ""])
def test_non_json_tool_payload_is_refused(payload: str) -> None:
    draft = EntryDraft(saga_id="s", event_type=EventType.INTENT, tool="t", payload=payload)
    with pytest.raises(SerializationError, match="not JSON"):
        check_json_payload(draft)


def test_json_payload_and_non_tool_events_pass() -> None:
    check_json_payload(EntryDraft(saga_id="s", event_type=EventType.INTENT, payload='{"a":1}'))
    check_json_payload(EntryDraft(saga_id="s", event_type=EventType.EXECUTED, result="plain text"))


def _chain(n: int, saga: str = "s") -> list[JournalEntry]:
    out: list[JournalEntry] = []
    prev = GENESIS
    for seq in range(1, n + 1):
        entry = link(
            EntryDraft(saga_id=saga, event_type=EventType.INTENT, recorded_at_us=seq),
            seq=seq,
            prev_hash=prev,
        )
        out.append(entry)
        prev = entry.hash
    return out


def test_reader_accepts_only_the_first_event_at_each_seq() -> None:
    chain = _chain(3)
    rival = link(
        EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED, actor="other"),
        seq=2,
        prev_hash=chain[0].hash,
    )
    read = SagaRead(saga_id="s", partition=0)
    read.feed(0, 10, chain[0])
    read.feed(0, 11, chain[1])
    read.feed(0, 12, rival)  # same seq, extends the same tail: a fork, never accepted
    read.feed(0, 13, chain[1])  # the same event again: a duplicate
    read.feed(0, 14, chain[2])
    assert [e.seq for e in read.entries] == [1, 2, 3]
    assert read.entries[1] == chain[1]
    assert read.offsets == [10, 11, 14]
    assert [(r.offset, r.kind) for r in read.rejected] == [
        (12, ForkKind.FORK),
        (13, ForkKind.DUPLICATE),
    ]
    assert read.tail == (3, chain[2].hash)
    assert [r.offset for r in read.forks] == [12]


def test_reader_rejects_gaps_edits_and_foreign_bodies() -> None:
    chain = _chain(3)
    edited = JournalEntry(**{**chain[1].to_dict(), "event_type": EventType.FAILED})
    foreign = _chain(1, saga="other")[0]
    read = SagaRead(saga_id="s", partition=0)
    read.feed(0, 0, chain[0])
    read.feed(0, 1, chain[2])  # seq 3 before seq 2: does not extend
    read.feed(0, 2, edited)
    read.feed(0, 3, foreign)
    read.feed(0, 4, chain[1])
    read.feed(0, 5, chain[2])
    assert [e.seq for e in read.entries] == [1, 2, 3]
    assert [r.kind for r in read.rejected] == [ForkKind.FORK, ForkKind.EDITED, ForkKind.FOREIGN]


def test_empty_saga_tail_is_genesis() -> None:
    assert SagaRead(saga_id="s", partition=0).tail == (0, GENESIS)


def test_ownership_follows_lifecycle_and_handoffs() -> None:
    def entry(kind: EventType, actor: str | None = None) -> JournalEntry:
        return JournalEntry(
            saga_id="s", event_type=kind, actor=actor, seq=1, prev_hash=GENESIS, hash=GENESIS
        )

    assert not ownership([]).live
    opened = ownership([entry(EventType.SAGA_OPENED, "w1"), entry(EventType.INTENT)])
    assert opened.live
    assert opened.writer == "w1"
    for handoff in (
        EventType.AWAITING_APPROVAL,
        EventType.COMPENSATION_REQUESTED,
        EventType.REJECTED,
        EventType.EXPIRED,
        EventType.SAGA_ENDED,
    ):
        assert not ownership([entry(EventType.SAGA_OPENED, "w1"), entry(handoff)]).live
    reopened = ownership(
        [
            entry(EventType.SAGA_OPENED, "w1"),
            entry(EventType.AWAITING_APPROVAL),
            entry(EventType.SAGA_OPENED, "w2"),
        ]
    )
    assert reopened.writer == "w2"


@pytest.mark.parametrize(
    ("text", "ms"),
    [("400d", 400 * DAY_MS), ("13mo", 390 * DAY_MS), ("2y", 730 * DAY_MS), ("infinite", -1)],
)
def test_parse_retention(text: str, ms: int) -> None:
    assert parse_retention(text) == ms


def test_parse_retention_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="not a retention"):
        parse_retention("soon")


def _info(**config: str) -> TopicInfo:
    return TopicInfo(name="t", partitions=3, replication_factor=1, config=config, brokers=1)


def test_check_flags_compaction_as_fatal() -> None:
    findings = {f.setting: f for f in check(_info(**{"cleanup.policy": "compact,delete"}))}
    assert findings["cleanup.policy"].fatal
    assert "erase" in findings["cleanup.policy"].detail
    assert _info(**{"cleanup.policy": "delete,compact"}).compacted


def test_check_flags_short_retention_and_size_limits() -> None:
    findings = {
        f.setting: f
        for f in check(
            _info(
                **{
                    "cleanup.policy": "delete",
                    "retention.ms": str(7 * DAY_MS),
                    "retention.bytes": "1000",
                }
            )
        )
    }
    assert not findings["retention.ms"].ok
    assert not findings["retention.bytes"].ok
    assert not findings["cleanup.policy"].fatal


def test_check_passes_a_safe_topic() -> None:
    findings = check(
        _info(
            **{"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
        )
    )
    assert all(f.ok for f in findings)


def test_cli_create_refuses_short_retention_before_connecting() -> None:
    result = CliRunner().invoke(
        main, ["topic", "create", "--bootstrap-servers", "127.0.0.1:1", "--retention", "30d"]
    )
    assert result.exit_code == 2
    assert "shorter than six months" in result.output


def test_cli_needs_bootstrap_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAGACITY_BOOTSTRAP_SERVERS", raising=False)
    result = CliRunner().invoke(main, ["topic", "check"])
    assert result.exit_code == 2
    assert "SAGACITY_BOOTSTRAP_SERVERS" in result.output


def test_client_settings_map_variables_and_ignore_the_bare_prefix() -> None:
    from sagacity._env import client_settings

    env = {
        "SAGACITY_KAFKA_SECURITY_PROTOCOL": "SSL",
        "SAGACITY_KAFKA_SSL_CA_LOCATION": "/etc/ca.pem",
        "SAGACITY_KAFKA_": "names no setting",
        "SAGACITY_TOPIC": "not a client setting",
    }
    assert client_settings(env) == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/ca.pem",
    }


def test_lease_settings_from_env_and_a_lease_shorter_than_its_margin_is_refused() -> None:
    from sagacity.errors import ConfigurationError

    settings = kafka_settings_from_env(
        {
            "SAGACITY_BOOTSTRAP_SERVERS": "k:9092",
            "SAGACITY_LEASE_TTL_S": "90",
            "SAGACITY_MAX_CLOCK_SKEW_S": "2",
            "SAGACITY_ACK_TIMEOUT_S": "5",
        }
    )
    assert (settings.lease_ttl_s, settings.max_clock_skew_s) == (90.0, 2.0)
    assert settings.lease_margin_s == 11.0
    with pytest.raises(ConfigurationError, match="lease_ttl_s"):
        kafka_settings_from_env(
            {"SAGACITY_BOOTSTRAP_SERVERS": "k:9092", "SAGACITY_LEASE_TTL_S": "11"}
        )


def test_a_lease_view_expires_after_the_lease_plus_the_skew() -> None:
    from sagacity import EntryDraft, EventType
    from sagacity.chain import link
    from sagacity.producer._lease import lease_view

    opened = link(
        EntryDraft(
            saga_id="s",
            event_type=EventType.SAGA_OPENED,
            actor="w",
            attributes={"lease_ttl_s": "60"},
        ),
        seq=1,
        prev_hash="0" * 64,
    )
    at = 1_000_000.0

    def view(now: float, entry=opened):  # type: ignore[no-untyped-def]
        return lease_view(
            opened=entry,
            last=opened,
            last_timestamp_ms=int(at * 1000),
            now_s=now,
            max_clock_skew_s=5,
        )

    assert not view(at + 64.9).expired
    assert view(at + 65.1).expired
    assert view(at + 10).expires_in_s == pytest.approx(55)
    unleased = link(
        EntryDraft(saga_id="s", event_type=EventType.SAGA_OPENED, actor="w"),
        seq=1,
        prev_hash="0" * 64,
    )
    assert view(at + 10_000, unleased).expires_in_s is None
    assert not view(at + 10_000, unleased).expired


def test_settings_name_the_read_index_from_the_database_url() -> None:
    base = {"SAGACITY_BOOTSTRAP_SERVERS": "k:9092"}
    assert kafka_settings_from_env(base).read_index.database_url is None
    assert read_index(kafka_settings_from_env(base).read_index) is None
    shared = kafka_settings_from_env({**base, "SAGACITY_DATABASE_URL": "postgresql://h/d"})
    assert shared.read_index.database_url == "postgresql://h/d"
    assert shared.read_index.archive_group == "sagacity-archive"
    own = kafka_settings_from_env(
        {
            **base,
            "SAGACITY_DATABASE_URL": "postgresql://h/d",
            "SAGACITY_ARCHIVE_DATABASE_URL": "postgresql://a/archive",
            "SAGACITY_ARCHIVE_SCHEMA": "evidence",
            "SAGACITY_ARCHIVE_GROUP": "archive-eu",
        }
    ).read_index
    assert (own.database_url, own.archive_schema, own.archive_group) == (
        "postgresql://a/archive",
        "evidence",
        "archive-eu",
    )
    index = read_index(own)
    assert index is not None
    assert index.consumer_group == "archive-eu"  # type: ignore[attr-defined]
    index.close()  # never connected
    off = kafka_settings_from_env(
        {**base, "SAGACITY_DATABASE_URL": "postgresql://h/d", "SAGACITY_READ_INDEX": "off"}
    )
    assert read_index(off.read_index) is None


def test_importing_sagacity_and_its_producer_does_not_import_the_database_driver() -> None:
    import subprocess
    import sys

    code = "import sys, sagacity, sagacity.producer; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _FlakyWatermarks:
    """A consumer whose watermark query fails as during a leader change, then answers."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)

    def get_watermark_offsets(self, tp: object, timeout: float, cached: bool) -> tuple[int, int]:
        from confluent_kafka import KafkaError, KafkaException

        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 7

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    "code",
    [
        # Seen when a broker of a three-node cluster was killed or paused (bench.faults).
        "_DESTROY_BROKER",
        "OFFSET_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "NOT_LEADER_FOR_PARTITION",
    ],
)
def test_a_watermark_query_rides_through_a_leader_change(code: str) -> None:
    import time

    from confluent_kafka import KafkaError, TopicPartition

    from sagacity.producer._reader import SagaReader

    reader = SagaReader({"bootstrap.servers": "127.0.0.1:9"}, "t", partitions=1)
    real = reader._scanner._consumer
    reader._scanner._consumer = _FlakyWatermarks([getattr(KafkaError, code)] * 3)  # type: ignore[assignment]
    try:
        got = reader._scanner.watermarks(TopicPartition("t", 0), time.monotonic() + 10)
    finally:
        reader._scanner._consumer = real
        reader.close()
    assert got == (0, 7)


def test_a_watermark_query_gives_up_on_a_lasting_error() -> None:
    import time

    from confluent_kafka import KafkaError, TopicPartition

    from sagacity.errors import JournalUnavailableError
    from sagacity.producer._reader import SagaReader

    reader = SagaReader({"bootstrap.servers": "127.0.0.1:9"}, "t", partitions=1)
    real = reader._scanner._consumer
    reader._scanner._consumer = _FlakyWatermarks([KafkaError.TOPIC_AUTHORIZATION_FAILED])  # type: ignore[assignment]
    try:
        with pytest.raises(JournalUnavailableError, match="cannot read topic"):
            reader._scanner.watermarks(TopicPartition("t", 0), time.monotonic() + 10)
    finally:
        reader._scanner._consumer = real
        reader.close()
