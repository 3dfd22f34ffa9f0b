"""The approvals server runs on the in-memory fakes, with no broker and no database: its request
store is ``sagacity.testing``'s, and its request consumer runs on the consumer runtime it is
handed (here one the test drives by hand, handing it records as the transport would)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sagacity.chain import payload_sha256
from sagacity.consumers.approvals import ApprovalsServer, ApprovalsSettings
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.entries._memory import InMemoryJournal
from sagacity.ports import (
    ConsumerLoop,
    DeadLetterSender,
    Dependencies,
    Handler,
    PoisonPolicy,
    PositionStore,
    Record,
    RecordHeaders,
    RuntimeOptions,
)
from sagacity.schemas import decode_entry, encode_entry
from sagacity.testing import InMemoryConsoleSessions, InMemoryNoticeClaims, InMemoryRequestStore

TOPIC = "journal-on-fakes"


@dataclass(frozen=True)
class _Record:
    """One record of the topic as a transport hands it (:class:`sagacity.ports.Record`)."""

    at: tuple[int, int]
    data: bytes
    saga: str

    def key(self) -> bytes | None:
        return self.saga.encode()

    def value(self) -> bytes | None:
        return self.data

    def headers(self) -> RecordHeaders | None:
        return None

    def topic(self) -> str | None:
        return TOPIC

    def partition(self) -> int | None:
        return self.at[0]

    def offset(self) -> int | None:
        return self.at[1]


class _Loop:
    """A member the test drives: it remembers what it runs and never polls."""

    def __init__(self, handler: Handler[Any], positions: PositionStore) -> None:
        self.handler = handler
        self.positions = positions
        self.assigned: tuple[int, ...] = ()
        self.alive_at = 0.0
        self.joined = False
        self.error: str | None = None
        self.parked: list[tuple[Record, str]] = []

    def run(self) -> None:
        """Nothing to poll: the test hands the records."""

    def poison(
        self,
        message: Record,
        *,
        reason: str,
        detail: str,
        go_on: Callable[[], bool] | None = None,
    ) -> bool:
        self.parked.append((message, reason))
        return True

    def hold(self, busy: bool) -> None:
        """Nothing to pause."""


class _Consumers:
    """A consumer runtime the test drives (:class:`sagacity.ports.Consumers`)."""

    transport_errors: tuple[type[BaseException], ...] = (ConnectionError,)

    def __init__(self) -> None:
        self.loops: list[_Loop] = []
        self.options: list[RuntimeOptions] = []

    def client_config(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        client: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        tuning: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {"group": group_id}

    def runtime(
        self,
        options: RuntimeOptions,
        handler: Handler[Any],
        *,
        positions: PositionStore,
        poison: PoisonPolicy,
        stop: threading.Event,
        lag: Callable[[int, int], None] | None = None,
        lag_gone: Callable[[int], None] | None = None,
    ) -> ConsumerLoop:
        loop = _Loop(handler, positions)
        self.loops.append(loop)
        self.options.append(options)
        return loop

    def dead_letters(
        self, config: Mapping[str, Any], topic: str, *, timeout_s: float = 15.0
    ) -> DeadLetterSender:
        raise AssertionError("the approvals service parks nothing on a dead-letter topic")


def _chain(saga_id: str) -> list[JournalEntry]:
    journal = InMemoryJournal()
    opened = journal.append(
        EntryDraft(saga_id=saga_id, event_type=EventType.SAGA_OPENED, recorded_at_us=1)
    )
    payload = '{"amount":"100"}'
    request = journal.append(
        EntryDraft(
            saga_id=saga_id,
            event_type=EventType.AWAITING_APPROVAL,
            tool="wire",
            payload=payload,
            attributes={
                "payload_sha256": payload_sha256(payload),
                "signatures_required": "1",
                "policy_version": "1",
                "reversibility": "IRREVERSIBLE",
            },
            recorded_at_us=2,
        )
    )
    return [opened, request]


def test_the_server_folds_the_topic_into_the_in_memory_store_through_the_runtime_handed() -> None:
    consumers = _Consumers()
    stores: list[InMemoryRequestStore] = []

    def requests(**given: Any) -> InMemoryRequestStore:
        stores.append(InMemoryRequestStore(topic=TOPIC, **given))
        return stores[-1]

    handed = Dependencies(
        journal=InMemoryJournal(),
        requests=requests,
        console_sessions=InMemoryConsoleSessions(),
        notice_claims=InMemoryNoticeClaims(),
        decode=decode_entry,
        consumers=consumers,
    )
    settings = ApprovalsSettings(
        database_url="postgresql://nobody@127.0.0.1:9/none",
        bootstrap_servers="127.0.0.1:9",
        topic=TOPIC,
        insecure_dev=True,
    )
    server = ApprovalsServer(settings, dependencies=handed)
    assert server.consumer is not None
    [store] = stores
    assert server.store is store
    [loop] = consumers.loops
    assert loop.handler is server.consumer
    assert consumers.options[0].topic == TOPIC
    assert consumers.options[0].rejoin_on[0] is ConnectionError  # the transport's failures

    saga = "saga-on-fakes"
    records: Sequence[Record] = [
        _Record((0, offset), encode_entry(entry), saga)
        for offset, entry in enumerate(_chain(saga), start=5)
    ]
    records = [*records, _Record((0, 7), b"not an entry", saga)]
    server.consumer.handle(records)

    row = store.get(saga, 2)
    assert row is not None
    assert row.open
    assert [r.seq for r in store.requests()] == [2]
    # The batch's position is stored with it; its undecodable record is parked, not lost.
    assert loop.positions.starting(TOPIC, threading.Event()) == {0: 8}
    assert [(r.offset(), reason) for r, reason in loop.parked] == [(7, "undecodable")]
    assert (server.consumer.applied, server.consumer.quarantined) == (2, 0)
    server.stop()
