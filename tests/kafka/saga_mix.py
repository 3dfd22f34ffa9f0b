"""A journal topic written behind the journal: many sagas interleaved at random, with forks,
duplicates, edited, foreign and undecodable messages (shared by the read-path tests)."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from confluent_kafka import Producer

from sagacity.chain import link
from sagacity.entries._events import GENESIS_HASH, EntryDraft, EventType, JournalEntry
from sagacity.producer import SagaRead, partition_for
from sagacity.schemas import encode_entry


@dataclass
class _Saga:
    saga_id: str
    chain: list[JournalEntry] = field(default_factory=list)

    @property
    def tail(self) -> tuple[int, str]:
        return (self.chain[-1].seq, self.chain[-1].hash) if self.chain else (0, GENESIS_HASH)


def _draft(saga_id: str, seq: int, rng: random.Random) -> EntryDraft:
    if seq == 1:
        return EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED, actor="mix-writer")
    return EntryDraft(
        saga_id=saga_id,
        event_type=EventType.INTENT if seq % 2 else EventType.EXECUTED,
        tool="refund",
        payload=f'{{"n":{rng.randrange(1_000_000)}}}',
        result="ok" if seq % 2 == 0 else None,
    )


def write_mix(
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    sagas: int,
    events: int,
    seed: int,
    wrong_partition: bool = False,
) -> list[str]:
    """Publish ``events`` messages for ``sagas`` sagas; returns the saga ids.

    Most messages extend their saga's chain; the rest are duplicates, forks (a second event at
    a taken seq), links to nothing, edited events, foreign events (the body names another
    saga), undecodable bytes and tombstones, all under the saga's key.  With
    ``wrong_partition`` a few valid-looking events go to a partition the key does not map to.
    """
    rng = random.Random(seed)
    ids = [f"mix-{seed}-{i:04d}" for i in range(sagas)]
    state = {s: _Saga(s) for s in ids}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})

    def send(key: str, value: bytes | None, partition: int | None = None) -> None:
        target = partition_for(key.encode(), partitions) if partition is None else partition
        producer.produce(topic, key=key.encode(), value=value, partition=target)

    for _ in range(events):
        saga = state[rng.choice(ids)]
        roll = rng.random()
        seq, prev = saga.tail
        if roll < 0.70 or not saga.chain:
            entry = link(_draft(saga.saga_id, seq + 1, rng), seq=seq + 1, prev_hash=prev)
            saga.chain.append(entry)
            send(saga.saga_id, encode_entry(entry))
        elif roll < 0.76:
            send(saga.saga_id, encode_entry(rng.choice(saga.chain)))  # duplicate
        elif roll < 0.82:
            at = rng.randrange(1, seq + 1)  # a rival at a taken seq
            before = saga.chain[at - 2].hash if at > 1 else GENESIS_HASH
            send(
                saga.saga_id,
                encode_entry(link(_draft(saga.saga_id, at, rng), seq=at, prev_hash=before)),
            )
        elif roll < 0.85:
            stray = link(_draft(saga.saga_id, seq + 2, rng), seq=seq + 2, prev_hash=prev)
            send(saga.saga_id, encode_entry(stray))  # does not extend the tail
        elif roll < 0.88:
            honest = link(_draft(saga.saga_id, seq + 1, rng), seq=seq + 1, prev_hash=prev)
            send(saga.saga_id, encode_entry(dataclasses.replace(honest, payload='{"n":-1}')))
        elif roll < 0.91:
            other = state[rng.choice(ids)]
            if other is not saga:
                oseq, oprev = other.tail
                body = link(_draft(other.saga_id, oseq + 1, rng), seq=oseq + 1, prev_hash=oprev)
                send(saga.saga_id, encode_entry(body))  # foreign: extends the other saga
        elif roll < 0.95:
            send(saga.saga_id, b"\x00not avro" + bytes([rng.randrange(256)]))
        elif roll < 0.97:
            send(saga.saga_id, None)
        elif wrong_partition and partitions > 1:
            entry = link(_draft(saga.saga_id, seq + 1, rng), seq=seq + 1, prev_hash=prev)
            right = partition_for(saga.saga_id.encode(), partitions)
            send(saga.saga_id, encode_entry(entry), partition=(right + 1) % partitions)
        else:
            entry = link(_draft(saga.saga_id, seq + 1, rng), seq=seq + 1, prev_hash=prev)
            saga.chain.append(entry)
            send(saga.saga_id, encode_entry(entry))
    assert producer.flush(30) == 0
    return ids


def accepted(read: SagaRead) -> tuple[object, ...]:
    """What the acceptance rule decided: the chain, its offsets, where it starts."""
    return (
        [e.hash for e in read.entries],
        list(read.offsets),
        read.tail,
        read.ownership,
        (read.base_seq, read.base_hash),
    )


def reported(read: SagaRead, *, duplicates: bool = True) -> tuple[object, ...]:
    """What was reported: rejects (offset, kind) and skipped offsets."""
    return (
        sorted(
            (r.offset, r.kind.value)
            for r in read.rejected
            if duplicates or r.kind.value != "duplicate"
        ),
        sorted(s.offset for s in read.skipped),
    )
