"""The services' side of the one consumer runtime (docs/adr/0023-consumer-runtime.md), in one
place to import from.

A service is a :class:`Handler` of :class:`Record` s with a position store
(:class:`KafkaCommits` or :class:`TablePositions`, :mod:`._positions`) and a poison policy
(:class:`DeadLetterTopic`, :class:`QuarantineTable` or :class:`SkipAndCount`, :mod:`._poison`):
those rules are the services' and live here.  The loop that runs them (the client, its fixed
settings, polling, commits, rebalances, the dead-letter topic's publisher) is the transport's:
the service is handed it as :class:`~sagacity.ports.Consumers` (``Dependencies.consumers``,
Kafka's built by the composition root) and never creates a client itself.
"""

from __future__ import annotations

from sagacity.consumers._poison import DeadLetterTopic, QuarantineTable, SkipAndCount
from sagacity.consumers._positions import KafkaCommits, Ledger, StoredOffsets, TablePositions
from sagacity.ports import (
    ConsumerLoop,
    Consumers,
    DeadLetterSender,
    Handler,
    PoisonPolicy,
    PositionStore,
    Record,
    Redeliver,
    RuntimeOptions,
)

__all__ = [
    "ConsumerLoop",
    "Consumers",
    "DeadLetterSender",
    "DeadLetterTopic",
    "Handler",
    "KafkaCommits",
    "Ledger",
    "PoisonPolicy",
    "PositionStore",
    "QuarantineTable",
    "Record",
    "Redeliver",
    "RuntimeOptions",
    "SkipAndCount",
    "StoredOffsets",
    "TablePositions",
]
