"""The contract every :class:`~sagacity.ports.WriterLeases` meets; subclass it per adapter.

A subclass provides, on one store of the test's (docs/adr/0011-writer-lease.md):

- :meth:`WriterLeasesContract.create_writer`: a writer (a :class:`~sagacity.ports.Journal`)
  whose sagas record a lease of :data:`LEASE_TTL_S`;
- :meth:`WriterLeasesContract.create_leases`: the leases under test, judging on a wall clock
  ``ahead_s`` seconds ahead of the real one and allowing :data:`LEASE_CLOCK_SKEW_S` of skew.

Writers and leases it creates are closed by the subclass.
"""

from __future__ import annotations

import abc
import uuid

import pytest

from sagacity import EntryDraft, EventType
from sagacity.errors import LeaseHeldError, SagaNotLiveError, SerializationError
from sagacity.ports import Journal, WriterLeases

E = EventType

LEASE_TTL_S = 30.0
"""The lease a writer's sagas record."""

LEASE_CLOCK_SKEW_S = 2.0
"""The skew between wall clocks a taker allows for."""

LATER_S = LEASE_TTL_S + LEASE_CLOCK_SKEW_S + 5.0
"""How far ahead a taker's clock is when the lease has expired."""


def _open(writer: Journal) -> str:
    saga = f"contract-lease-{uuid.uuid4().hex}"
    writer.append(EntryDraft(saga_id=saga, event_type=E.SAGA_OPENED))
    writer.append(EntryDraft(saga_id=saga, event_type=E.INTENT, tool="t", payload="{}"))
    return saga


class WriterLeasesContract(abc.ABC):
    """A live saga's lease is judged on the taker's clock; it is taken over only once expired
    (or forced), once, and handed to compensation."""

    @abc.abstractmethod
    def create_writer(self) -> Journal:
        """A writer on the test's store, recording :data:`LEASE_TTL_S`."""

    @abc.abstractmethod
    def create_leases(self, *, ahead_s: float = 0.0) -> WriterLeases:
        """The leases on the same store, judged ``ahead_s`` seconds ahead."""

    def test_a_saga_no_writer_holds_has_no_lease(self) -> None:
        leases = self.create_leases(ahead_s=LATER_S)
        unknown = f"contract-lease-{uuid.uuid4().hex}"
        with pytest.raises(SagaNotLiveError):
            leases.lease(unknown)
        with pytest.raises(SagaNotLiveError):
            leases.take_over(unknown, reason="gone", force=True)

    def test_a_fresh_lease_is_held(self) -> None:
        saga = _open(self.create_writer())
        lease = self.create_leases().lease(saga)
        assert lease.writer
        assert not lease.expired
        assert lease.expires_in_s is not None
        assert 0 < lease.expires_in_s <= LEASE_TTL_S + LEASE_CLOCK_SKEW_S
        assert 0 <= lease.last_event_age_s < LEASE_TTL_S

    def test_a_held_lease_is_not_taken_over(self) -> None:
        writer = self.create_writer()
        saga = _open(writer)
        with pytest.raises(LeaseHeldError):
            self.create_leases().take_over(saga, reason="writer gone")
        assert [e.event_type for e in writer.entries(saga)] == [E.SAGA_OPENED, E.INTENT]

    def test_an_expired_lease_is_taken_over_once(self) -> None:
        writer = self.create_writer()
        saga = _open(writer)
        leases = self.create_leases(ahead_s=LATER_S)
        judged = leases.lease(saga)
        assert judged.expired
        assert judged.expires_in_s is not None
        assert judged.expires_in_s <= 0
        assert judged.last_event_age_s >= LEASE_TTL_S + LEASE_CLOCK_SKEW_S
        taken = leases.take_over(saga, reason="writer gone", actor="operator:contract")
        assert taken.lease.expired
        assert taken.lease.writer == judged.writer
        assert taken.entry.saga_id == saga
        assert taken.entry.event_type is E.COMPENSATION_REQUESTED
        assert taken.entry.seq == 3
        assert list(self.create_writer().entries(saga))[-1] == taken.entry
        with pytest.raises(SagaNotLiveError):
            leases.lease(saga)
        with pytest.raises(SagaNotLiveError):
            leases.take_over(saga, reason="again", force=True)

    def test_a_held_lease_is_taken_over_when_forced(self) -> None:
        saga = _open(self.create_writer())
        taken = self.create_leases().take_over(saga, reason="operator says so", force=True)
        assert not taken.lease.expired
        assert taken.entry.event_type is E.COMPENSATION_REQUESTED
        with pytest.raises(SagaNotLiveError):
            self.create_leases().lease(saga)

    @pytest.mark.parametrize("reason", ["", "  \n"])
    def test_a_takeover_needs_a_reason(self, reason: str) -> None:
        writer = self.create_writer()
        saga = _open(writer)
        with pytest.raises(SerializationError):
            self.create_leases(ahead_s=LATER_S).take_over(saga, reason=reason, force=True)
        assert [e.event_type for e in writer.entries(saga)] == [E.SAGA_OPENED, E.INTENT]
