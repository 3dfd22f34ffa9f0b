"""Sign now, outside the service: read the topic up to its end as the archiver does, then sign
what was read (``sagacity archive checkpoint``).

A signer signs only heads its own process read from the topic (docs/adr/0012-checkpoint-rounds.md,
"The signer's input"), so signing "what the archive holds" is not possible from the database
alone.  This reads each partition from its ``signed_offset`` (what was archived since the last
complete signing pass is read again and re-verified; anything newer is archived as the service
would), up to the high watermark it found on start, and signs.  It takes no part in the
service's consumer group (partitions are assigned, not subscribed), so a running archiver keeps
its partitions; both may archive the same new messages (the heads' compare-and-set makes one a
duplicate).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sagacity.consumers.archive._checkpoints import SignedRound, Signer, sign_pending
from sagacity.consumers.archive._ingest import BatchArchiver, RawEvent
from sagacity.consumers.archive._service import ArchiveSettings, archiver_of
from sagacity.errors import ConfigurationError, JournalUnavailableError, TopicNotFoundError
from sagacity.ports import Dependencies, PartitionBounds, TopicMessage, TopicPasses


@dataclass(frozen=True, kw_only=True)
class CatchUp:
    """What a catch-up did: messages read (of which read again), heads signed."""

    read: int
    again: int
    archived: int
    signed: int


def _from_signed(
    archiver: BatchArchiver, topic: str, bounds: list[PartitionBounds]
) -> tuple[dict[int, int | None], dict[int, int]]:
    """Where each partition holding messages past the archiver's signed offset starts (its
    beginning when none is stored), and where it ends."""
    stored = archiver.start_offsets(topic)
    starts: dict[int, int | None] = {}
    ends: dict[int, int] = {}
    for b in bounds:
        start = max(stored.get(b.partition, b.low), b.low)
        if start < b.high:
            starts[b.partition] = start if b.partition in stored else None
            ends[b.partition] = b.high
    return starts, ends


def _raw(topic: str, messages: list[TopicMessage]) -> list[RawEvent]:
    return [
        RawEvent(
            topic=topic,
            partition=m.partition,
            offset=m.offset,
            key=m.key,
            value=m.value,
            headers=dict(m.headers),
        )
        for m in messages
    ]


def catch_up_and_sign(
    settings: ArchiveSettings,
    *,
    signer: Signer,
    dependencies: Dependencies,
    on_round: Callable[[SignedRound], None] | None = None,
    timeout_s: float = 300.0,
) -> CatchUp:
    """Read ``settings.topic`` from each partition's signed offset to its end into an
    archiver as the service's (``settings``, ``dependencies``: :func:`archiver_of`), then sign
    every head read with ``signer`` (see the module), the topic read through
    ``dependencies.topic_passes``.

    Raises:
        JournalUnavailableError: the topic could not be read to its end within ``timeout_s``.
        ConfigurationError: ``dependencies`` lack the passes over the topic or the consumer
            runtime (its client settings), or what :func:`archiver_of` needs.
    """
    if dependencies.topic_passes is None or dependencies.consumers is None:
        raise ConfigurationError("the catch-up is handed its passes over the topic")
    config = dependencies.consumers.client_config(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=settings.group_id,
        client=settings.kafka_config,
    )
    archiver = archiver_of(settings, signer=signer, dependencies=dependencies)
    try:
        done = _catch_up(archiver, settings.topic, (dependencies.topic_passes, config), timeout_s)
        signed = sign_pending(
            archiver.signing(),
            signer,
            archiver.ledger,
            on_round=on_round,
            consumer_group=settings.group_id,
        )
    finally:
        archiver.close()
    return dataclasses.replace(done, signed=signed)


def _catch_up(
    archiver: BatchArchiver,
    topic: str,
    reading: tuple[TopicPasses, Mapping[str, Any]],
    timeout_s: float,
) -> CatchUp:
    """Read ``topic`` to its end into ``archiver`` (nothing signed yet) with a pass opened on
    the client settings given."""
    passes, config = reading
    read = again = archived = 0
    with passes(topic, config=config, timeout_s=min(timeout_s, 30.0)) as scan:
        try:
            bounds = scan.bounds()
        except TopicNotFoundError as exc:
            raise JournalUnavailableError(
                f"topic {topic!r} does not exist or cannot be read"
            ) from exc
        archiver.partitions[topic] = len(bounds)
        starts, ends = _from_signed(archiver, topic, bounds)
        try:
            for messages in scan.read(starts, ends, within_s=timeout_s):
                report = archiver.archive(_raw(topic, messages))
                read += len(messages)
                again += report.again
                archived += report.archived
        except JournalUnavailableError as exc:
            if type(exc) is not JournalUnavailableError:  # a refusal says it itself
                raise
            raise JournalUnavailableError(f"{exc.message}; nothing was signed") from exc
    return CatchUp(read=read, again=again, archived=archived, signed=0)
