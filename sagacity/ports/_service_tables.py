"""The services' tables as an erasure uses them (docs/adr/0019-erasure.md §4): what they hold
of a saga, clearing it, and the saga's erasure lock.  ``sagacity erase`` composes it with the
journal, the key store and the archive."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True)
class ServiceCopies:
    """What the services' tables hold (or held) of one saga.

    Attributes:
        pending_requests: approval requests still pending.
        pending_seqs: their seqs.
        claims_in_flight: compensation claims whose undo may be in flight (``CLAIMED``).
        requests: approval requests whose payload this call cleared.
        events: kept approval events whose data this call cleared.
        claims: compensation claims whose result or error this call cleared.
        attention: attention rows whose detail this call replaced.
    """

    pending_requests: int = 0
    pending_seqs: tuple[int, ...] = ()
    claims_in_flight: int = 0
    requests: int = 0
    events: int = 0
    claims: int = 0
    attention: int = 0


@runtime_checkable
class ServiceTables(Protocol):
    """The copies of a saga's data the services keep beside the archive (the approvals
    service's requests and kept events, the compensation service's claims, the console's
    attention queue); a table a service never made is skipped."""

    def copies(self, saga_id: str) -> ServiceCopies:
        """What the tables say about the saga's liveness: its pending approval requests and
        its compensation claims in flight.

        Raises:
            PersistenceError: the store could not be reached or refused.
        """
        ...

    def clear(self, saga_id: str) -> ServiceCopies:
        """Clear the saga's data from the tables (idempotent), then re-sample the statistics
        of the columns cleared (no sample of the values stays); what this call cleared.

        Raises:
            PersistenceError: the store could not be reached or refused.
        """
        ...

    def erasure_lock(self, saga_id: str) -> AbstractContextManager[None]:
        """Hold the saga's erasure lock for the block: a second erasure of the saga waits,
        then finds the first one's work done.

        Raises:
            PersistenceError: the store could not be reached.
        """
        ...
