"""Contract suites, one per port: abstract pytest classes a test module subclasses per adapter.

Each suite asks its subclass for a ``create_…()`` factory (and, for the read index, the
archiver's writes); every test of the suite then runs against that adapter.  Sagacity runs
each suite against its in-memory fake and its real adapter (Kafka, Postgres).
"""

from __future__ import annotations

from sagacity.testing.contracts._archive_ingest import ArchiveIngestContract
from sagacity.testing.contracts._archive_reads import ArchiveReadsContract
from sagacity.testing.contracts._claims import JOURNAL, ClaimStoreContract
from sagacity.testing.contracts._console_sessions import ConsoleSessionTableContract
from sagacity.testing.contracts._folding import FoldingRequestStoreContract
from sagacity.testing.contracts._index import SagaIndexContract
from sagacity.testing.contracts._journal import JournalContract
from sagacity.testing.contracts._keys import KeyStoreContract
from sagacity.testing.contracts._leases import LEASE_CLOCK_SKEW_S, LEASE_TTL_S, WriterLeasesContract
from sagacity.testing.contracts._notice_claims import NoticeClaimsContract
from sagacity.testing.contracts._partitioner import PartitionerContract
from sagacity.testing.contracts._requests import RequestStoreContract
from sagacity.testing.contracts._retention import RetentionMonthsContract
from sagacity.testing.contracts._signing import CheckpointSigningContract
from sagacity.testing.contracts._slack_tables import SlackTablesContract
from sagacity.testing.contracts._topic_pass import OutgoingMessage, TopicPassesContract
from sagacity.testing.contracts._wire import JournalWireContract

__all__ = [
    "JOURNAL",
    "LEASE_CLOCK_SKEW_S",
    "LEASE_TTL_S",
    "ArchiveIngestContract",
    "ArchiveReadsContract",
    "CheckpointSigningContract",
    "ClaimStoreContract",
    "ConsoleSessionTableContract",
    "FoldingRequestStoreContract",
    "JournalContract",
    "JournalWireContract",
    "KeyStoreContract",
    "NoticeClaimsContract",
    "OutgoingMessage",
    "PartitionerContract",
    "RequestStoreContract",
    "RetentionMonthsContract",
    "SagaIndexContract",
    "SlackTablesContract",
    "TopicPassesContract",
    "WriterLeasesContract",
]
