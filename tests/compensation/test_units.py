"""Pure parts of the compensation service: request state, offset bookkeeping, results, tools."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from sagacity import EntryDraft, EventType, Sagacity
from sagacity.chain import link
from sagacity.cli import main
from sagacity.consumers.compensation import pending_request, register_tools, sanitize_result
from sagacity.consumers.compensation._service import _Partition
from sagacity.errors import ToolLoadError
from tests.compensation.svc_tools import Unrepresentable

E = EventType


def _chain(*events: tuple[EventType, str | None]) -> list[object]:
    out = []
    prev = "0" * 64
    for seq, (event, result) in enumerate(events, start=1):
        entry = link(
            EntryDraft(saga_id="s", event_type=event, result=result), seq=seq, prev_hash=prev
        )
        prev = entry.hash
        out.append(entry)
    return out


def test_pending_request_is_the_last_request_without_a_final_end() -> None:
    handed_off = _chain(
        (E.SAGA_OPENED, None),
        (E.COMPENSATION_REQUESTED, None),
        (E.SAGA_ENDED, "COMPENSATION_PENDING"),
    )
    assert pending_request(handed_off) is handed_off[1]  # type: ignore[arg-type]
    ended = [*handed_off, *_chain((E.SAGA_ENDED, "COMPENSATED"))]
    assert pending_request(ended) is None  # type: ignore[arg-type]
    assert pending_request(_chain((E.SAGA_OPENED, None), (E.SAGA_ENDED, "COMPLETED"))) is None  # type: ignore[arg-type]


def test_offsets_commit_only_past_finished_work_in_order() -> None:
    part = _Partition(number=0)
    for offset in (10, 11, 12, 13):
        part.add(offset)
    part.done(11)
    part.done(13)
    assert part.commit_at is None  # 10 is still being compensated
    part.done(10)
    assert part.commit_at == 12
    part.done(12)
    assert part.commit_at == 14
    assert not part.pending


def test_garbage_results_become_descriptions() -> None:
    assert sanitize_result({"ok": 1}) == {"ok": 1}
    described = sanitize_result(Unrepresentable())
    assert isinstance(described, str)
    assert described.startswith("<unrepresentable result of type Unrepresentable")
    huge = sanitize_result("x" * 200_000)
    assert isinstance(huge, str)
    assert huge.startswith("<result of type str truncated>")
    assert len(huge) < 70_000


def test_register_tools_names_a_target_that_declares_nothing() -> None:
    target = "tests.compensation.svc_tools:SCHEMA"  # a str, not a tool
    with pytest.raises(ToolLoadError, match=re.escape(repr(target))):
        register_tools(Sagacity(), [target])
    with pytest.raises(ToolLoadError, match="no tools given"):
        register_tools(Sagacity(), [])
    names = register_tools(Sagacity(), ["tests.compensation.svc_tools:shop"])
    assert {"charge", "reserve", "ship", "lookup"} <= set(names)


def test_cli_requires_tools_and_names_a_bad_target() -> None:
    runner = CliRunner()
    missing = runner.invoke(
        main,
        ["serve", "compensation"],
        env={"SAGACITY_BOOTSTRAP_SERVERS": "x:1", "SAGACITY_DATABASE_URL": "postgresql://x"},
    )
    assert missing.exit_code == 2
    assert "--tools" in missing.output
    bad = runner.invoke(
        main,
        ["serve", "compensation", "--tools", "nowhere.at_all:x"],
        env={"SAGACITY_BOOTSTRAP_SERVERS": "x:1", "SAGACITY_DATABASE_URL": "postgresql://x"},
    )
    assert bad.exit_code == 2  # a configuration error, as in every command
    assert "nowhere.at_all:x" in bad.output
    short = runner.invoke(
        main,
        ["serve", "compensation", "--tools", "x:y", "--session-timeout-ms", "10"],
        env={"SAGACITY_BOOTSTRAP_SERVERS": "x:1", "SAGACITY_DATABASE_URL": "postgresql://x"},
    )
    assert short.exit_code == 2
    assert "--session-timeout-ms" in short.output
    unreadable = runner.invoke(
        main,
        ["serve", "compensation", "--tools", "tests.compensation.svc_tools:shop"],
        env={
            "SAGACITY_BOOTSTRAP_SERVERS": "x:1",
            "SAGACITY_DATABASE_URL": "postgresql://x",
            "SAGACITY_WRITER_KEY": "/nonexistent/writer.key",
            # No key store to reach first (in clear, said so): the writer key is the subject.
            "SAGACITY_KEY_ENCRYPTION_KEY_FILE": None,
            "SAGACITY_ALLOW_CLEAR_DATA": "1",
        },
    )
    assert unreadable.exit_code == 2  # a configuration error, as in every command
    assert "cannot read writer key /nonexistent/writer.key" in unreadable.output


class _OneRead:
    """Stands for a worker thread's journal: returns one prepared read."""

    def __init__(self, read: object) -> None:
        self._read = read

    def read(self, saga_id: str) -> object:
        return self._read


def test_a_redelivered_request_the_read_index_did_not_report_is_a_duplicate() -> None:
    import dataclasses

    from sagacity.consumers.compensation._job import Duplicate, Poison, read_request
    from sagacity.producer import SagaRead

    chain = _chain((E.SAGA_OPENED, None), (E.COMPENSATION_REQUESTED, None))
    # As read through the archive: the redelivered copy at offset 9 was dropped on ingest,
    # so the read reports nothing at that offset.
    read = SagaRead(saga_id="s", partition=0, entries=list(chain), offsets=[3, 5])
    with pytest.raises(Duplicate) as duplicate:
        read_request(_OneRead(read), chain[1], 9)  # type: ignore[arg-type]
    # The job acts on the chain as read: the copy may have taken its original's place.
    assert duplicate.value.read is read
    rival = dataclasses.replace(chain[1], hash="f" * 64)
    with pytest.raises(Poison, match="not part of the accepted chain"):
        read_request(_OneRead(read), rival, 9)  # type: ignore[arg-type]


def test_a_sagas_lock_is_one_lock_while_any_job_holds_or_waits_for_it() -> None:
    """A holds; B waits; A leaves and B holds; C, arriving now, must wait for B (with a lock
    dropped on A's exit, C would have found a fresh one and run beside B)."""
    import threading

    from sagacity.consumers.compensation._locks import SagaLocks

    locks = SagaLocks()
    inside: list[str] = []
    overlap: list[tuple[str, ...]] = []
    b_waiting, b_in, c_started, release_b = (threading.Event() for _ in range(4))

    def job(name: str, entered: threading.Event | None, leave: threading.Event | None) -> None:
        with locks.hold("s"):
            if inside:
                overlap.append((name, *inside))
            inside.append(name)
            if entered is not None:
                entered.set()
            if leave is not None:
                leave.wait(5)
            inside.remove(name)

    with locks.hold("s"):  # A
        b = threading.Thread(target=job, args=("B", b_in, release_b))
        b.start()
        b_waiting.wait(0.2)  # B is blocked on the lock A holds
        assert len(locks) == 1
    assert b_in.wait(5)
    c = threading.Thread(target=lambda: (c_started.set(), job("C", None, None)))
    c.start()
    assert c_started.wait(5)
    c.join(0.3)
    assert c.is_alive()  # C waits for B
    release_b.set()
    b.join(5)
    c.join(5)
    assert not b.is_alive()
    assert not c.is_alive()
    assert overlap == []
    assert len(locks) == 0


def test_the_service_loads_a_tool_that_redacts_when_it_holds_a_key_service() -> None:
    """A redacting tool needs a journal that seals: the service given a key service has one
    (its Kafka journals seal), so it loads the tool; without keys it refuses it, naming the
    setting."""
    import os

    from sagacity.consumers.compensation import CompensationService, CompensationSettings
    from sagacity.errors import ConfigurationError
    from sagacity.ports import Dependencies
    from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
    from sagacity.privacy._keys import KeyService
    from sagacity.testing import InMemoryKeyStore

    settings = CompensationSettings(
        bootstrap_servers="127.0.0.1:9",
        database_url="postgresql://nobody@127.0.0.1:9/none",
        tools=("tests.compensation.svc_tools:CardShop",),
    )
    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    service = CompensationService(settings, dependencies=Dependencies(keys=keys))
    assert {"check_card", "pay_by_card"} <= set(service.tool_names)
    with pytest.raises(ConfigurationError, match="SAGACITY_KEY_ENCRYPTION_KEY_FILE"):
        CompensationService(settings)


def test_the_service_takes_its_journals_from_what_it_is_handed() -> None:
    """The service builds no Kafka journal itself: it asks the journals it is handed
    (``Dependencies.journals``) for one writing as its writer id; handed none, its start
    refuses, naming the composition root."""
    import os
    from dataclasses import replace

    from sagacity.consumers.compensation import CompensationService, CompensationSettings
    from sagacity.consumers.compensation._job import WRITER_PREFIX
    from sagacity.errors import ConfigurationError
    from sagacity.ports import Dependencies, TopicJournal
    from sagacity.privacy._envelope import KeyEncryptionKey, KeyRing
    from sagacity.privacy._keys import KeyService
    from sagacity.producer import KafkaConsumers
    from sagacity.schemas import decode_entry
    from sagacity.testing import InMemoryClaimStore, InMemoryKeyStore

    class NoBrokerError(Exception):
        pass

    asked: list[str | None] = []

    def journals(*, writer_id: str | None = None, **_: object) -> TopicJournal:
        asked.append(writer_id)
        raise NoBrokerError

    settings = CompensationSettings(
        bootstrap_servers="127.0.0.1:9",
        database_url="postgresql://nobody@127.0.0.1:9/none",
        tools=("tests.compensation.svc_tools:CardShop",),
        group_id="units",
    )
    keys = KeyService(InMemoryKeyStore(), KeyRing((KeyEncryptionKey.of(os.urandom(32)),)))
    handed = Dependencies(
        keys=keys,
        claims=lambda *, instance, journal: InMemoryClaimStore(instance=instance),
        decode=decode_entry,
        consumers=KafkaConsumers(),
    )
    service = CompensationService(settings, dependencies=replace(handed, journals=journals))
    with pytest.raises(NoBrokerError):
        service.start()
    assert asked == [f"{WRITER_PREFIX}units"]
    with pytest.raises(ConfigurationError, match="no journals handed"):
        CompensationService(settings, dependencies=handed).start()
    # Nor does it make its own Kafka consumer: handed no consumer runtime, it refuses to start
    # before it makes a journal, naming the composition root.
    asked.clear()
    bare = replace(handed, journals=journals, consumers=None)
    with pytest.raises(ConfigurationError, match=r"no consumer runtime handed .*compose"):
        CompensationService(settings, dependencies=bare).start()
    assert asked == []
