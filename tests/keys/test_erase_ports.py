"""``sagacity erase`` is a composition of ports: the erasure runs on whatever journal on a
topic, key store, services' tables and archive it is handed (here in-memory ones), and
imports no adapter (tests/architecture/test_layers.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from sagacity.chain import committing
from sagacity.entries._events import EntryDraft, EventType, JournalEntry
from sagacity.entries._memory import InMemoryJournal
from sagacity.errors import ErasureRefusedError
from sagacity.journal import ApprovalRequest
from sagacity.ports import (
    ArchiveErasure,
    ErasableArchive,
    KeyStore,
    SagaRead,
    ServiceCopies,
    ServiceTables,
    TopicJournal,
)
from sagacity.saga._result import SagaStatus
from sagacity.signing._operator_signature import generate_key
from sagacity.testing import InMemoryKeyStore

SAGA = "erase-on-ports"


class Topic:
    """A :class:`TopicJournal` over the in-memory journal (one partition, data in clear)."""

    identity = "memory:erase"
    topic = "erase"
    max_event_bytes = 1 << 20
    seals = False

    def __init__(self) -> None:
        self.inner = InMemoryJournal()
        self.reader = self

    def partition_of(self, saga_id: str) -> int:
        return 0

    def placed(self, key: bytes | None, partition: int) -> bool:
        return partition == 0

    def read(self, saga_id: str) -> SagaRead:
        return SagaRead(saga_id=saga_id, partition=0, entries=list(self.inner.entries(saga_id)))

    def forget(self, saga_id: str) -> None:
        """Nothing opened is kept."""

    def append(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return self.inner.append(draft, durable=durable)

    def append_after(
        self, draft: EntryDraft, *, after_seq: int, durable: bool = True
    ) -> JournalEntry:
        return self.inner.append_after(draft, after_seq=after_seq, durable=durable)

    async def append_async(self, draft: EntryDraft, *, durable: bool = True) -> JournalEntry:
        return self.inner.append(draft, durable=durable)

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def entries(self, saga_id: str) -> Sequence[JournalEntry]:
        return self.inner.entries(saga_id)

    def pending_approvals(self, saga_id: str | None = None) -> Sequence[ApprovalRequest]:
        return self.inner.pending_approvals(saga_id)

    def close(self) -> None:
        self.inner.close()


class Tables:
    """The services' tables: nothing pending, and a record of what was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def copies(self, saga_id: str) -> ServiceCopies:
        self.calls.append("copies")
        return ServiceCopies()

    def clear(self, saga_id: str) -> ServiceCopies:
        self.calls.append("clear")
        return ServiceCopies(requests=1)

    @contextmanager
    def erasure_lock(self, saga_id: str) -> Iterator[None]:
        self.calls.append("lock")
        yield
        self.calls.append("unlock")


class Archive:
    """An archive holding the saga's events."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.erased: list[tuple[str, str]] = []

    def archived(self, saga_id: str) -> int:
        return self.rows

    def recorded_key_id(self, saga_id: str) -> str | None:
        return None

    def erase(self, saga_id: str, *, actor: str, reason: str, key_id: str) -> ArchiveErasure:
        self.erased.append((saga_id, key_id))
        return ArchiveErasure(saga_id=saga_id, erased={2: ("result",)}, logged=True, rows=2)


def _ended(topic: Topic) -> None:
    for draft in (
        EntryDraft(saga_id=SAGA, event_type=EventType.SAGA_OPENED, actor="agent"),
        EntryDraft(
            saga_id=SAGA,
            event_type=EventType.SAGA_ENDED,
            actor="agent",
            result=SagaStatus.COMPLETED.value,
        ),
    ):
        topic.append(committing(draft))


def test_the_ports_are_what_the_erasure_is_written_against() -> None:
    assert isinstance(Tables(), ServiceTables)
    assert isinstance(Archive(0), ErasableArchive)
    assert isinstance(InMemoryKeyStore(), KeyStore)
    topic: TopicJournal = Topic()  # mypy holds the fake to the port
    assert topic.reader.partition_of(SAGA) == 0


def test_an_erasure_composed_of_in_memory_ports_erases_and_records_once(tmp_path: Path) -> None:
    from sagacity.consumers.erasure import apply_erasure, plan_erasure

    topic, keys, tables, archive = Topic(), InMemoryKeyStore(), Tables(), Archive(2)
    signer = generate_key(tmp_path / "operator.pem")
    _ended(topic)
    plan = plan_erasure(topic, SAGA, key_store=keys, services=tables, archive=archive)
    assert (plan.events, plan.key, plan.recorded, plan.archived) == (2, "none", False, 2)
    assert not keys.exists()  # a dry run makes nothing
    done = apply_erasure(
        topic,
        SAGA,
        actor="dpo",
        reason="request 7",
        keys=None,
        key_store=keys,
        services=tables,
        archive=archive,
        signer=signer,
    )
    assert done.key_destroyed
    assert done.erased_event is not None
    assert done.erased_event.event_type is EventType.ERASED
    assert archive.erased == [(SAGA, "none")]
    assert tables.calls == ["copies", "lock", "copies", "clear", "unlock"]
    again = apply_erasure(
        topic,
        SAGA,
        actor="dpo",
        reason="request 7",
        keys=None,
        key_store=keys,
        services=tables,
        archive=archive,
        signer=signer,
    )
    assert again.erased_event is None  # the signed ERASED on the chain counts: not appended again
    assert not again.key_destroyed


def test_an_unknown_saga_is_refused_before_any_port_is_changed(tmp_path: Path) -> None:
    from sagacity.consumers.erasure import apply_erasure

    topic, keys, tables, archive = Topic(), InMemoryKeyStore(), Tables(), Archive(0)
    with pytest.raises(ErasureRefusedError, match="unknown"):
        apply_erasure(
            topic,
            SAGA,
            actor="dpo",
            reason="request 7",
            keys=None,
            key_store=keys,
            services=tables,
            archive=archive,
            signer=generate_key(tmp_path / "operator.pem"),
        )
    assert archive.erased == []
    assert keys.load(SAGA) is None
