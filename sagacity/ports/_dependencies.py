"""Every dependency a service needs, as ports: built by the composition root
(:mod:`sagacity.compose`) from the settings and handed to the service by the CLI.

A service is written against this bundle and never builds an adapter itself: it takes its
journal (or journals, made on its topic), its claim store, its request store, its key
service, its key store, its read index, its decoder of the topic's messages and the consumer
runtime that hands it the topic's records from here, so
the same service runs on the in-memory fakes of :mod:`sagacity.testing` in a test.  A service
uses the fields it needs; the others stay ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sagacity.journal import Journal
from sagacity.ports._archive_bundles import ArchiveBundles
from sagacity.ports._claims import ClaimStore
from sagacity.ports._console_sessions import ConsoleSessionTable
from sagacity.ports._consume import Consumers
from sagacity.ports._erasure import ErasableArchive
from sagacity.ports._index import SagaIndex
from sagacity.ports._ingest import ArchiveIngest
from sagacity.ports._keys import KeyStore
from sagacity.ports._notice_claims import NoticeClaims
from sagacity.ports._partitioner import Partitioner
from sagacity.ports._reads import EntryDecoder, TopicJournals
from sagacity.ports._service_tables import ServiceTables
from sagacity.ports._slack_tables import SlackTables
from sagacity.ports._topic_pass import TopicPasses
from sagacity.ports._wire import JournalWire

if TYPE_CHECKING:
    from sagacity.ports._requests import RequestStore
    from sagacity.privacy._keys import KeyService
    from sagacity.signing._decision_signature import DecisionVerifier
    from sagacity.signing._operator_signature import OperatorVerifier


def _no_index() -> SagaIndex | None:
    return None


class ClaimStores(Protocol):
    """Makes the claim store of one journal (its identity, known once the journal has
    connected) for one instance of a service (recorded on its claims)."""

    def __call__(self, *, instance: str, journal: str) -> ClaimStore:
        """The store; its schema is ensured by the caller."""
        ...


class RequestStores(Protocol):
    """Makes the request store of the approvals service, counting the approvals ``verifier``
    verifies on the journal named ``journal`` and the deadline extensions ``operator``
    verifies (all known once the service's core is made)."""

    def __call__(
        self,
        *,
        verifier: DecisionVerifier | None,
        journal: str | None,
        operator: OperatorVerifier | None = None,
    ) -> RequestStore:
        """The store; its tables are migrated by the receiver."""
        ...


@dataclass(frozen=True, kw_only=True)
class Dependencies:
    """What a service is handed.

    Attributes:
        journal: the shared journal (its reader included); the receiver closes it.
        claims: makes the claim store of a journal (:class:`ClaimStores`).
        requests: makes the approvals service's request store (:class:`RequestStores`).
        keys: the key service that seals and opens the journal's fields (``None``: the data
            travels in clear, as the composition root allowed); the approvals server closes
            the one it is handed, the compensation and archive services leave it to the
            command that made it.
        read_index: makes the read index a new journal reads archived prefixes through
            (``None``: the journal scans its topic).
        client: settings of the journal's transport (librdkafka's, from
            ``SAGACITY_KAFKA_*``) for a service's own consumers of the topic.
        journals: makes new journals on the topic (:class:`~sagacity.ports.TopicJournals`:
            the compensation service's worker journals, the erasure's journal); the receiver
            closes each.
        decode: the entry of one message value of the topic
            (:class:`~sagacity.ports.EntryDecoder`; the receiver opens sealed fields with
            :attr:`keys`).
        key_store: the store of the wrapped data keys (an erasure); the receiver closes it.
        service_tables: the services' tables as an erasure clears them.
        archive: the archive as an erasure clears it.
        console_sessions: the approvals console's sign-in sessions.
        notice_claims: the approvals console's notifier's claims.
        slack_tables: the approvals service's Slack messages and seen signatures.
        archive_bundles: the archive's audit bundles, for the approvals console's verdict
            and download (``None``: the console shows no archive).
        archive_store: makes the archiver's store from the archive's database URL
            (:class:`~sagacity.ports.ArchiveIngest`).
        consumers: the consumer runtime on the topic's transport (:class:`~sagacity.ports.
            Consumers`): runs a service's handler over the topic's records and publishes to
            its dead-letter topic.
        wire: the journal's wire format as the archive's ingest checks it
            (:class:`~sagacity.ports.JournalWire`).
        partitioner: where the journal's partitioner puts a key: the archive quarantines a
            message that is not there (:class:`~sagacity.ports.Partitioner`).
        topic_passes: opens a pass over the topic outside any consumer group (the archive's
            partition count, catch-up and replay: :class:`~sagacity.ports.TopicPasses`).
    """

    journal: Journal | None = None
    claims: ClaimStores | None = None
    requests: RequestStores | None = None
    keys: KeyService | None = None
    read_index: Callable[[], SagaIndex | None] = _no_index
    client: Mapping[str, str] = field(default_factory=dict)
    journals: TopicJournals | None = None
    decode: EntryDecoder | None = None
    key_store: KeyStore | None = None
    service_tables: ServiceTables | None = None
    archive: ErasableArchive | None = None
    console_sessions: ConsoleSessionTable | None = None
    notice_claims: NoticeClaims | None = None
    slack_tables: SlackTables | None = None
    archive_bundles: ArchiveBundles | None = None
    archive_store: Callable[[str], ArchiveIngest] | None = None
    consumers: Consumers | None = None
    wire: JournalWire | None = None
    partitioner: Partitioner | None = None
    topic_passes: TopicPasses | None = None
