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
from sagacity.testing._console_sessions import InMemoryConsoleSessions
from sagacity.testing._index import BAD_TIME, InMemorySagaIndex
from sagacity.testing._keys import InMemoryKeyStore
from sagacity.testing._notice_claims import InMemoryNoticeClaims
from sagacity.testing._requests import InMemoryRequestStore, request_row
from sagacity.testing._slack_tables import InMemorySlackTables

__all__ = [
    "BAD_TIME",
    "InMemoryClaimStore",
    "InMemoryConsoleSessions",
    "InMemoryJournal",
    "InMemoryKeyStore",
    "InMemoryNoticeClaims",
    "InMemoryRequestStore",
    "InMemorySagaIndex",
    "InMemorySlackTables",
    "request_row",
]
