"""The consumer-group side: fold journal events from the topic into the working table.

Replicas share one consumer group, so each partition is folded by one replica at a time.  The
position is stored in PostgreSQL in the same transaction as the rows a batch produced
(``sagacity_approval_offset``) and read back on assignment, so a restart or rebalance neither
loses nor double-applies an event (and folding is idempotent anyway).  An undecodable message
is counted, logged with its position and skipped: it can never be part of a chain.  An event
whose sealed fields cannot be opened, or whose values the database refuses, is quarantined
with its reason; the position moves on (docs/reliability.md, "Hostile inputs").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from sagacity.chain._acceptance import QUIET, Tail
from sagacity.config._defaults import DEFAULT_APPROVALS_GROUP as DEFAULT_GROUP
from sagacity.consumers._runtime import (
    Consumers,
    Handler,
    Record,
    RuntimeOptions,
    SkipAndCount,
    TablePositions,
)
from sagacity.entries._events import EventType, JournalEntry
from sagacity.errors import (
    KafkaAccessDeniedError,
    SagacityError,
    SerializationError,
    UnopenableError,
)
from sagacity.ports import EntryDecoder, Fault, FoldingRequestStore
from sagacity.privacy._keys import KeyService

log = logging.getLogger("sagacity.approvals")

RETRY_S = 2.0
"""Seconds between a failed batch and rejoining the group."""


class RequestConsumer(Handler[Record]):
    """Folds the journal topic into ``sagacity_approval_request`` on a background thread.

    Runs on the services' consumer runtime: positions in the table, poison skipped and counted,
    a failed batch (database or broker away) closes the consumer and rejoins after
    :data:`RETRY_S`.

    Args:
        store: the working table.
        consumers: the consumer runtime on the topic's transport (``Dependencies.consumers``).
        bootstrap_servers / topic / group_id: where to read and as which group.
        client: extra librdkafka settings (TLS/SASL).
        keys: the key service opening sealed events (docs/adr/0019-erasure.md §3); an event
            whose sealed field cannot be opened (it does not authenticate, or its saga's data
            key is missing or wrapped under a key-encryption key not held) is quarantined
            with the reason (``authentication failed``, ``data key not found``,
            ``key-encryption key not held``).
        decode: the entry of a message value (the journal's wire format:
            :func:`sagacity.schemas.decode_entry`, handed by the composition root).
        placed: whether a message's key maps to the partition it is on (default: every
            message is taken as placed; the server passes the journal's partitioner).
        prefix: a saga's accepted tail before an offset, read from the journal (for a saga
            first seen past its first event); ``None`` when it cannot be read.
        on_erased: told the saga of every ``ERASED`` read, as soon as it is read: the service
            drops what it keeps of the saga's opened data (``KafkaJournal.forget``,
            docs/operations/erasure.md).

    Every event passes the core's acceptance rule before it is folded
    (:meth:`PostgresRequestStore.apply_in`): one that does not extend its saga's tail is
    quarantined with its reason, never shown as a request (docs/adr/0025-trust-model.md).
    """

    def __init__(
        self,
        store: FoldingRequestStore,
        *,
        consumers: Consumers,
        bootstrap_servers: str,
        topic: str,
        group_id: str = DEFAULT_GROUP,
        client: Mapping[str, str] | None = None,
        keys: KeyService | None = None,
        decode: EntryDecoder,
        placed: Callable[[bytes | None, int], bool] | None = None,
        prefix: Callable[[str, int], Tail | None] | None = None,
        on_erased: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._on_erased = on_erased
        self._placed = placed
        self._prefix = prefix
        self.quarantined = 0
        """Events quarantined: refused by the acceptance rule, or set aside for a fault of
        their own (a sealed field that cannot be opened, values the database refused)."""
        self._keys = keys
        self._decode = decode
        self._topic = topic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._skips = SkipAndCount()
        self.refused: KafkaAccessDeniedError | None = None
        """Why the consumer stopped, when Kafka refused its principal."""
        self.on_refused: Callable[[], None] | None = None
        """Told (from the consumer's thread) when Kafka refused the principal."""
        self.applied = 0
        self.runtime = consumers.runtime(
            RuntimeOptions(
                topic=topic,
                config=consumers.client_config(
                    bootstrap_servers=bootstrap_servers, group_id=group_id, client=client
                ),
                batch_size=500,
                poll_timeout_s=0.2,
                rejoin_on=(*consumers.transport_errors, SagacityError),
                rejoin_s=RETRY_S,
                name="approvals consumer",
            ),
            self,
            positions=TablePositions(store.offsets, from_beginning=False, wait_on=()),
            poison=self._skips,
            stop=self._stop,
        )

    @property
    def skipped(self) -> int:
        """Undecodable messages skipped."""
        return self._skips.skipped

    @property
    def error(self) -> str | None:
        """Why the last batch failed, while the consumer is retrying; ``None`` when folding."""
        return self.runtime.error

    @property
    def alive(self) -> bool:
        """The folding thread is running."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def assigned(self) -> tuple[int, ...]:
        """Partitions this replica folds now."""
        return self.runtime.assigned

    def start(self) -> None:
        """Start folding on a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="sagacity-approvals-consumer")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        try:
            self.runtime.run()
        except KafkaAccessDeniedError as exc:
            # Kafka refused the principal: only an operator can fix it, so it is reported once
            # and the service is told (``serve approvals`` then exits with this error).
            self.refused = exc
            log.error("the approvals consumer stopped: %s", exc.message)
            if self.on_refused is not None:
                self.on_refused()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop folding and leave the group."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def handle(self, messages: Sequence[Record]) -> None:
        """Judge and fold ``messages`` and store their positions in one transaction.

        Whatever one message causes is that message's fate, never the batch's: undecodable
        bytes are skipped and counted; a sealed field that cannot be opened (altered, its
        saga's data key missing or under a key-encryption key not held) and values the
        database refuses are quarantined with their reason; the position moves past them.
        """
        positions: dict[int, int] = {}
        poison: list[tuple[Record, str, str]] = []
        applied = quarantined = 0
        with self._store.folding() as batch:
            for message in messages:
                partition = message.partition() or 0
                offset = message.offset() or 0
                positions[partition] = offset + 1
                key = message.key()
                saga_id = key.decode("utf-8", "replace") if key is not None else ""
                position = (partition, offset)
                try:
                    entry = self._decode(message.value() or b"", keys=self._keys)
                except SerializationError as exc:
                    poison.append((message, "undecodable", exc.message))
                    continue
                except UnopenableError as exc:
                    try:  # what can be read without the key, for the quarantine's row
                        sealed = self._decode(message.value() or b"")
                    except SerializationError as bad:
                        poison.append((message, "undecodable", bad.message))
                        continue
                    fault = Fault(kind=exc.reason, detail=exc.message)
                    if batch.quarantine(sealed, fault, saga_id=saga_id, position=position):
                        quarantined += 1
                        _log_quarantined(sealed, saga_id, position, fault.kind, fault.detail)
                    else:
                        poison.append((message, exc.reason, exc.message))
                    continue
                if entry.event_type is EventType.ERASED:
                    self._erased(saga_id, entry.saga_id)
                outcome = batch.fold(
                    entry,
                    saga_id=saga_id,
                    placed=self._placed is None or self._placed(key, partition),
                    prefix=self._prefix_of(saga_id, offset),
                    position=position,
                )
                if outcome is None:
                    applied += 1
                elif outcome.kind not in QUIET:
                    quarantined += 1
                    _log_quarantined(entry, saga_id, position, str(outcome.kind), outcome.detail)
            for partition, next_offset in positions.items():
                batch.store_offset(self._topic, partition, next_offset)
        # Counted once the transaction committed: a failed batch is folded again later.
        self.applied += applied
        self.quarantined += quarantined
        for message, reason, detail in poison:
            self.runtime.poison(message, reason=reason, detail=detail)

    def _erased(self, *saga_ids: str) -> None:
        """Forget the saga an ``ERASED`` names (its key and its body's saga id, when they
        differ): whatever it is folded as, what the service keeps opened of it goes now."""
        if self._on_erased is not None:
            for saga_id in dict.fromkeys(saga_ids):
                self._on_erased(saga_id)

    def _prefix_of(self, saga_id: str, offset: int) -> Callable[[], Tail | None] | None:
        read = self._prefix
        if read is None:
            return None
        return lambda: read(saga_id, offset)


def _log_quarantined(
    entry: JournalEntry, saga_id: str, position: tuple[int, int], kind: str, detail: str
) -> None:
    log.warning(
        "quarantined %s seq %d of saga %r (partition %d offset %d): %s: %s",
        entry.event_type.value,
        entry.seq,
        saga_id,
        *position,
        kind,
        detail,
    )
