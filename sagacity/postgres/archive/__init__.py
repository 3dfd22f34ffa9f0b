"""The Postgres archive: the archive's tables as the archive service and the operators' commands
reach them (docs/adr/0006-archive-and-checkpoints.md).

Connections, the schema check and migrations, the archiver's role (:mod:`._db`); the SQL of one
archived batch (:mod:`._ingestsql`); the rows a verifier streams by binary ``COPY``
(:mod:`._chainstream`) on a second connection sharing the audit's snapshot (:mod:`._snapshots`);
the archiver's findings and a saga's refusals (:mod:`._findings`); the reads of the archive's
tools behind the ports :class:`~sagacity.ports.ArchivedHeads`,
:class:`~sagacity.ports.ArchivedHashes`, :class:`~sagacity.ports.ArchivedEvents`,
:class:`~sagacity.ports.DestroyedKeyReads`, :class:`~sagacity.ports.HeadFindings`,
:class:`~sagacity.ports.SagaRows` and :class:`~sagacity.ports.RetentionStreams`
(:class:`PostgresArchiveReads`, :mod:`._reads`).
The schema itself (:mod:`sagacity.postgres._archive_schema`), archived rows read back as
entries (:mod:`sagacity.postgres._rows`) and the archive's side of an erasure
(:mod:`sagacity.postgres._archive_erasure`, the ``ErasableArchive`` port) are the Postgres
adapter's, exported here with the rest.  The rules on what the rows say are the archive
service's and the chain's (``sagacity.consumers.archive``, :mod:`sagacity.chain`), never this
package's.
"""

from __future__ import annotations

from sagacity.postgres._archive_erasure import (
    ArchiveEraser,
    ErasureRecord,
    erase_in_archive,
    erasure_records,
)
from sagacity.postgres._archive_schema import (
    APPEND_ONLY_TABLES,
    ARCHIVE_TABLES,
    ERASURE_VERSION,
    FORMS_VERSION,
    INGEST_VERSION,
    LOG_VERSION,
    MIGRATIONS,
    ROUNDS_VERSION,
    TABLES_ADDED_IN,
    checkpoint_round_columns,
)
from sagacity.postgres._rows import FORM_COLUMNS, ROW_COLUMNS, entry_of_row
from sagacity.postgres.archive._audits import PostgresArchiveAudits
from sagacity.postgres.archive._bundles import PostgresSagaBundles
from sagacity.postgres.archive._chainstream import (
    CHAIN_ORDER,
    chain_rows,
    copy_blocks,
    copy_messages,
    decoded_rows,
)
from sagacity.postgres.archive._db import (
    ARCHIVER_ROLE,
    check_schema,
    connect,
    current_schema,
    ensure_schema,
    grant_archiver,
    mapped_errors,
    migrate,
)
from sagacity.postgres.archive._findings import SagaRefusals, saga_refusals, write_findings
from sagacity.postgres.archive._ingest import PostgresArchiveIngest
from sagacity.postgres.archive._ingestsql import (
    archived_hashes,
    copy_quarantine,
    make_months,
    move_heads,
    read_heads,
    store_offsets,
)
from sagacity.postgres.archive._reads import RECORD_COLUMNS, PostgresArchiveReads
from sagacity.postgres.archive._retention import PostgresRetention
from sagacity.postgres.archive._rounds import PostgresRoundLog
from sagacity.postgres.archive._signing import PostgresCheckpointSigning
from sagacity.postgres.archive._snapshots import reader_of, shared_snapshot
from sagacity.postgres.archive._stories import PostgresSignedStories, story_query
from sagacity.postgres.archive._watched import PostgresWatchedArchive

__all__ = [
    "APPEND_ONLY_TABLES",
    "ARCHIVER_ROLE",
    "ARCHIVE_TABLES",
    "CHAIN_ORDER",
    "ERASURE_VERSION",
    "FORMS_VERSION",
    "FORM_COLUMNS",
    "INGEST_VERSION",
    "LOG_VERSION",
    "MIGRATIONS",
    "RECORD_COLUMNS",
    "ROUNDS_VERSION",
    "ROW_COLUMNS",
    "TABLES_ADDED_IN",
    "ArchiveEraser",
    "ErasureRecord",
    "PostgresArchiveAudits",
    "PostgresArchiveIngest",
    "PostgresArchiveReads",
    "PostgresCheckpointSigning",
    "PostgresRetention",
    "PostgresRoundLog",
    "PostgresSagaBundles",
    "PostgresSignedStories",
    "PostgresWatchedArchive",
    "SagaRefusals",
    "archived_hashes",
    "chain_rows",
    "check_schema",
    "checkpoint_round_columns",
    "connect",
    "copy_blocks",
    "copy_messages",
    "copy_quarantine",
    "current_schema",
    "decoded_rows",
    "ensure_schema",
    "entry_of_row",
    "erase_in_archive",
    "erasure_records",
    "grant_archiver",
    "make_months",
    "mapped_errors",
    "migrate",
    "move_heads",
    "read_heads",
    "reader_of",
    "saga_refusals",
    "shared_snapshot",
    "store_offsets",
    "story_query",
    "write_findings",
]
