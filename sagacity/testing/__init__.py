"""In-memory fakes of every port, for users' tests and the core's.

Each fake meets its port's contract suite, as the Kafka and Postgres adapters do; the suites
are in :mod:`sagacity.testing.contracts` (they need pytest)::

    from sagacity.testing import InMemoryClaimStore
    from sagacity.testing.contracts import ClaimStoreContract

    class TestMyClaimStore(ClaimStoreContract):
        def create_store(self):
            return MyClaimStore(...)
"""

from __future__ import annotations

from sagacity.entries._memory import InMemoryJournal
from sagacity.testing._claims import InMemoryClaimStore
from sagacity.testing._index import BAD_TIME, InMemorySagaIndex
from sagacity.testing._keys import InMemoryKeyStore
from sagacity.testing._requests import InMemoryRequestStore, request_row

__all__ = [
    "BAD_TIME",
    "InMemoryClaimStore",
    "InMemoryJournal",
    "InMemoryKeyStore",
    "InMemoryRequestStore",
    "InMemorySagaIndex",
    "request_row",
]
