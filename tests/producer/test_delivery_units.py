"""Delivery tracking without a broker: a delivery report racing its waiters, and the saga's
list of unsettled events (``sagacity.producer._delivery``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from sagacity import EntryDraft, EventType, JournalEntry
from sagacity.chain import link
from sagacity.errors import JournalUnavailableError
from sagacity.producer._delivery import Deliveries, Delivery, earlier_unsettled
from sagacity.producer._ownership import SagaState


class _IdleProducer:
    """A producer whose poll serves nothing (the tests settle deliveries themselves)."""

    def poll(self, timeout: float) -> int:
        time.sleep(timeout)
        return 0


@pytest.fixture
def deliveries() -> Iterator[Deliveries]:
    lost: list[str] = []
    out = Deliveries(_IdleProducer(), ack_timeout=2.0, on_lost=lost.append)  # type: ignore[arg-type]
    yield out
    out.stop()


def _entry(seq: int) -> JournalEntry:
    draft = EntryDraft(saga_id="s", event_type=EventType.EXECUTED, result="r")
    return link(draft, seq=seq, prev_hash="ab" * 32)


def test_an_acknowledged_event_leaves_the_unsettled_list_a_refused_one_stays(
    deliveries: Deliveries,
) -> None:
    state = SagaState()
    first, second, third = (Delivery(_entry(n), deliveries) for n in (2, 3, 4))
    first.settle(None, None)  # acknowledged before it was tracked
    for delivery in (first, second, third):
        delivery.track(state.pending)
    assert state.pending == [second, third]
    second.settle(KafkaError(KafkaError._MSG_TIMED_OUT), None)
    third.settle(None, None)
    assert state.pending == [second]
    assert earlier_unsettled(state, third) == [second]
    with pytest.raises(JournalUnavailableError, match="earlier EXECUTED seq 3 was refused"):
        deliveries.check_earlier(state, third)
    assert state.poisoned


def test_a_durable_event_with_nothing_unsettled_before_it_passes(deliveries: Deliveries) -> None:
    state = SagaState()
    earlier, durable, later = (Delivery(_entry(n), deliveries) for n in (2, 3, 4))
    for delivery in (earlier, durable, later):
        delivery.track(state.pending)
    earlier.settle(None, None)
    durable.settle(None, None)
    assert state.pending == [later]
    deliveries.check_earlier(state, durable)  # a later event does not count
    assert not state.poisoned


def test_an_earlier_event_still_unsettled_is_waited_for(deliveries: Deliveries) -> None:
    state = SagaState()
    earlier, durable = (Delivery(_entry(n), deliveries) for n in (2, 3))
    earlier.track(state.pending)
    durable.track(state.pending)
    durable.settle(None, None)
    threading.Timer(0.05, earlier.settle, (None, None)).start()
    deliveries.check_earlier(state, durable)
    assert earlier.done
    assert state.pending == []


@pytest.mark.parametrize("rounds", [3000])
def test_a_report_racing_a_blocking_waiter_always_wakes_it(
    deliveries: Deliveries, rounds: int
) -> None:
    """settle takes no lock: the waiter publishes its gate then reads ``done``, settle writes
    ``done`` then reads the gate; whichever comes second sees the other."""
    for n in range(rounds):
        delivery = Delivery(_entry(2), deliveries)
        settler = threading.Thread(target=delivery.settle, args=(None, None))
        if n % 2:
            settler.start()
            assert delivery.wait(5.0)
        else:
            waiters = [threading.Thread(target=delivery.wait, args=(5.0,)) for _ in range(2)]
            for waiter in waiters:
                waiter.start()
            settler.start()
            for waiter in waiters:
                waiter.join(6.0)
                assert not waiter.is_alive()
        settler.join()
        assert delivery.done


def test_a_report_racing_an_asyncio_waiter_always_resolves_it(deliveries: Deliveries) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(2000):
            delivery = Delivery(_entry(2), deliveries)
            settler = threading.Thread(target=delivery.settle, args=(None, None))
            settler.start()
            await asyncio.wait_for(deliveries.wait_async(delivery, loop), 5.0)
            settler.join()

    asyncio.run(main())


def test_a_free_threaded_interpreter_without_the_gil_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The handshake above relies on the interpreter lock: without it the journal refuses to
    start (before it connects to anything) rather than race."""
    import sys

    from sagacity.errors import ConfigurationError
    from sagacity.producer import KafkaJournal

    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    with pytest.raises(ConfigurationError, match="needs the GIL"):
        KafkaJournal("127.0.0.1:1", topic="never-reached")
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    from sagacity.producer._delivery import require_gil

    require_gil()  # with it: nothing to say
