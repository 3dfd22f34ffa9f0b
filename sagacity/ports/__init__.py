"""The ports: what the core and the services need from a store, whichever holds it.

Each port is a :class:`typing.Protocol` with the value objects it speaks in; adapters implement
them (memory in :mod:`sagacity.testing`, Kafka in ``sagacity.producer``, Postgres in
``sagacity.postgres``), and one contract suite per port (:mod:`sagacity.testing.contracts`)
runs against each.  This package imports the standard library and the core only; the core's
own port, the journal (:mod:`sagacity.journal`: the core is written against it), is
re-exported here.  One module per port; every name is exported here.

* :class:`Journal` / :class:`ConditionalJournal`: the hash-chained event log.
* :class:`SagaIndex`: where a reader finds a saga's archived prefix (:mod:`._index`,
  docs/adr/0010-saga-read-index.md).
* :class:`ClaimStore`: the compensation service's claims and saga locks (:mod:`._claims`,
  docs/adr/0007-compensation-exactly-once.md).
* :class:`ConsoleSessionTable`: the approvals console's sign-in sessions
  (:mod:`._console_sessions`).
* :class:`NoticeClaims`: the approvals console's notices, each claimed once
  (:mod:`._notice_claims`).
* :class:`SlackTables`: the approvals service's Slack messages and the signatures it has
  seen (:mod:`._slack_tables`).
* :class:`KeyStore`: the per-saga data keys, wrapped (:mod:`._keys`, docs/adr/0019-erasure.md).
* :class:`RequestStore`: the approvals service's view of requests folded from the journal,
  its rows and its unit of work for a decision (:mod:`._requests`);
  :class:`FoldingRequestStore`: the request consumer's batch (:class:`RequestFold`, what it
  folds, quarantines (:class:`Fault`) and positions, kept together: :mod:`._request_fold`).
* :class:`ArchiveBundles`: the archive's audit bundles as the approvals console reads them
  (:mod:`._archive_bundles`).
* :class:`ArchivedHeads` / :class:`ArchivedHashes` / :class:`ArchivedEvents` /
  :class:`DestroyedKeyReads` / :class:`HeadFindings` / :class:`SagaRows` /
  :class:`RetentionStreams`: the archived
  chains (and the destroyed data keys beside them) as the archive service and its tools read
  them, and the archiver's findings (:mod:`._archive_reads`).
* :class:`RetentionMonths`: the archive's months as retention exports, signs and drops them
  (:class:`ArchiveMonth`, :class:`RetentionUnit`, :class:`RecordSigning`: :mod:`._retention`).
* :class:`RoundLog`: the archive's signing rounds and checkpoints as stored
  (:class:`RoundRow`, :class:`CheckpointRow`), and as an audit walks them
  (:class:`RoundStreams`: :mod:`._rounds`).
* :class:`CheckpointSigning`: the archive's signing rounds, one transaction a round
  (:class:`SigningUnit`: :mod:`._signing`).
* :class:`ArchiveAudits`: the archive as an audit reads it, one snapshot
  (:class:`AuditSnapshot`, :class:`ChainBlocks`, :class:`RowBatches`), and the stories of what
  signing rounds signed (:class:`SignedStories`), and as ``audit watch`` reads it
  (:class:`WatchedArchive`: :mod:`._audit`).
* :class:`SagaBundleReads`: one saga's evidence as an audit bundle exports it, in one
  snapshot (:class:`BundleSnapshot`: :mod:`._bundle_reads`).
* :class:`ArchiveIngest`: the archiver's store, one transaction a batch
  (:class:`IngestBatch`, :class:`IngestRetry`: :mod:`._ingest`).
* :class:`ErasableArchive`: the archive's side of an erasure (:mod:`._erasure`).
* :class:`ServiceTables`: the services' tables as an erasure clears them
  (:mod:`._service_tables`).
* :class:`TopicJournal` / :class:`TopicJournals`: the journal on its topic as a service reads
  it, and what a read gives (:class:`SagaRead`, :func:`ownership`: :mod:`._reads`).
* :class:`Consumers`: the services' consumer runtime, running a :class:`Handler` over a
  topic's :class:`Record` s with a :class:`PositionStore` and a :class:`PoisonPolicy`
  (:mod:`._consume`, docs/adr/0023-consumer-runtime.md).
* :class:`JournalWire`: the journal's wire format as the archive's ingest checks it
  (:mod:`._wire`); :class:`Partitioner`: where the journal's partitioner puts a key
  (:mod:`._partitioner`); :class:`TopicPasses`: one pass over the topic outside any consumer
  group (:mod:`._topic_pass`); :class:`WriterLeases`: live sagas' writer leases as a sweep
  takes them over (:mod:`._leases`).
* :class:`Dependencies`: every dependency a service is handed, built by the composition root
  (:mod:`._dependencies`, :mod:`sagacity.compose`).
"""

from __future__ import annotations

from sagacity.journal import ApprovalRequest, ConditionalJournal, Journal
from sagacity.ports._archive_bundles import ArchiveBundles
from sagacity.ports._archive_reads import (
    ArchivedEvents,
    ArchivedHashes,
    ArchivedHead,
    ArchivedHeads,
    DestroyedKey,
    DestroyedKeyReads,
    DestroyedKeys,
    ErasedEvent,
    FindingsUnit,
    HeadFindings,
    RetentionStreams,
    SagaRows,
    StoredFinding,
    WriterEvent,
)
from sagacity.ports._audit import (
    ArchiveAudits,
    ArchiveSchema,
    AuditSnapshot,
    ChainBlocks,
    RowBatches,
    SignedStories,
    WatchedArchive,
)
from sagacity.ports._bundle_reads import BundleSnapshot, SagaBundleReads
from sagacity.ports._claims import Claim, ClaimStatus, ClaimStore, check_claim_key
from sagacity.ports._console_sessions import ConsoleSession, ConsoleSessionTable
from sagacity.ports._consume import (
    ConsumerLoop,
    Consumers,
    DeadLetterSender,
    Handler,
    PoisonPolicy,
    PositionStore,
    Record,
    RecordHeaders,
    Redeliver,
    RuntimeOptions,
)
from sagacity.ports._dependencies import ClaimStores, Dependencies, RequestStores
from sagacity.ports._erasure import ArchiveErasure, ErasableArchive
from sagacity.ports._index import (
    IndexedEvent,
    IndexedPartition,
    IndexedSaga,
    RefusedMessage,
    SagaIndex,
)
from sagacity.ports._ingest import (
    ArchiveIngest,
    HeadConflictError,
    IngestBatch,
    IngestRetry,
    QuarantinedMessage,
    ReadMessage,
)
from sagacity.ports._keys import KeyStore, StoredKey
from sagacity.ports._leases import LeaseState, TakenOver, WriterLeases
from sagacity.ports._notice_claims import NoticeClaims
from sagacity.ports._partitioner import Partitioner
from sagacity.ports._reads import (
    EntryDecoder,
    Ownership,
    PartitionMap,
    PartitionRead,
    Rejected,
    SagaRead,
    Skipped,
    TopicJournal,
    TopicJournals,
    ownership,
)
from sagacity.ports._request_fold import Fault, FoldingRequestStore, RequestFold
from sagacity.ports._requests import (
    OPEN_STATES,
    AttentionRow,
    GateStats,
    QuarantinedEvent,
    RequestDecision,
    RequestRow,
    RequestStore,
    RowState,
)
from sagacity.ports._retention import (
    ArchiveMonth,
    RecordSigning,
    RetentionMonths,
    RetentionUnit,
    SignedRecordFields,
    UnsignedMonth,
)
from sagacity.ports._rounds import CheckpointRow, RoundLog, RoundRow, RoundStreams
from sagacity.ports._service_tables import ServiceCopies, ServiceTables
from sagacity.ports._signing import CheckpointSigning, SignedRoundFields, SigningUnit
from sagacity.ports._slack_tables import SlackMessage, SlackTables
from sagacity.ports._topic_pass import PartitionBounds, TopicMessage, TopicPass, TopicPasses
from sagacity.ports._wire import JournalWire

__all__ = [
    "OPEN_STATES",
    "ApprovalRequest",
    "ArchiveAudits",
    "ArchiveBundles",
    "ArchiveErasure",
    "ArchiveIngest",
    "ArchiveMonth",
    "ArchiveSchema",
    "ArchivedEvents",
    "ArchivedHashes",
    "ArchivedHead",
    "ArchivedHeads",
    "AttentionRow",
    "AuditSnapshot",
    "BundleSnapshot",
    "ChainBlocks",
    "CheckpointRow",
    "CheckpointSigning",
    "Claim",
    "ClaimStatus",
    "ClaimStore",
    "ClaimStores",
    "ConditionalJournal",
    "ConsoleSession",
    "ConsoleSessionTable",
    "ConsumerLoop",
    "Consumers",
    "DeadLetterSender",
    "Dependencies",
    "DestroyedKey",
    "DestroyedKeyReads",
    "DestroyedKeys",
    "EntryDecoder",
    "ErasableArchive",
    "ErasedEvent",
    "Fault",
    "FindingsUnit",
    "FoldingRequestStore",
    "GateStats",
    "Handler",
    "HeadConflictError",
    "HeadFindings",
    "IndexedEvent",
    "IndexedPartition",
    "IndexedSaga",
    "IngestBatch",
    "IngestRetry",
    "Journal",
    "JournalWire",
    "KeyStore",
    "LeaseState",
    "NoticeClaims",
    "Ownership",
    "PartitionBounds",
    "PartitionMap",
    "PartitionRead",
    "Partitioner",
    "PoisonPolicy",
    "PositionStore",
    "QuarantinedEvent",
    "QuarantinedMessage",
    "ReadMessage",
    "Record",
    "RecordHeaders",
    "RecordSigning",
    "Redeliver",
    "RefusedMessage",
    "Rejected",
    "RequestDecision",
    "RequestFold",
    "RequestRow",
    "RequestStore",
    "RequestStores",
    "RetentionMonths",
    "RetentionStreams",
    "RetentionUnit",
    "RoundLog",
    "RoundRow",
    "RoundStreams",
    "RowBatches",
    "RowState",
    "RuntimeOptions",
    "SagaBundleReads",
    "SagaIndex",
    "SagaRead",
    "SagaRows",
    "ServiceCopies",
    "ServiceTables",
    "SignedRecordFields",
    "SignedRoundFields",
    "SignedStories",
    "SigningUnit",
    "Skipped",
    "SlackMessage",
    "SlackTables",
    "StoredFinding",
    "StoredKey",
    "TakenOver",
    "TopicJournal",
    "TopicJournals",
    "TopicMessage",
    "TopicPass",
    "TopicPasses",
    "UnsignedMonth",
    "WatchedArchive",
    "WriterEvent",
    "WriterLeases",
    "check_claim_key",
    "ownership",
]
