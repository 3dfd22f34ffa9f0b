"""Where a message a service cannot act on goes: a dead-letter topic with its original bytes, a
quarantine table, or a warning naming its position and a count.

A poison message is never retried forever and never dropped silently; once parked its offset
counts as done.  These are the services' rules, written against the consumer runtime's port
(:class:`~sagacity.ports.PoisonPolicy`, :class:`~sagacity.ports.Record`; the runtime itself is
the transport's, handed as :class:`~sagacity.ports.Consumers`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sagacity.errors import JournalError, PersistenceUnavailableError
from sagacity.ports import DeadLetterSender, PoisonPolicy, Record

__all__ = ["DeadLetterSender", "DeadLetterTopic", "PoisonPolicy", "QuarantineTable", "SkipAndCount"]

log = logging.getLogger("sagacity.consumer")


class DeadLetterTopic:
    """Poison goes to a dead-letter topic with its original bytes; retried until acknowledged.

    Args:
        sender: the topic's publisher (``Consumers.dead_letters``).
        on_parked: told the reason of each message parked (a metric).
        retry_s: seconds between attempts while the broker does not acknowledge.
    """

    def __init__(
        self,
        sender: DeadLetterSender,
        *,
        on_parked: Callable[[str], None] | None = None,
        retry_s: float = 1.0,
    ) -> None:
        self.sender = sender
        self._on_parked = on_parked
        self._retry_s = retry_s

    def park(self, message: Record, *, reason: str, detail: str, go_on: Callable[[], bool]) -> bool:
        """Publish ``message`` to the dead-letter topic (see ``PoisonPolicy.park``)."""
        while go_on():
            try:
                self.sender.send(message, reason=reason, detail=detail)
            except JournalError as exc:
                log.error("dead-letter publication failed, retrying: %s", exc)
                time.sleep(self._retry_s)
                continue
            if self._on_parked is not None:
                self._on_parked(reason)
            return True
        return False


class QuarantineTable:
    """Poison goes to a table the service owns, with its position, reason and original bytes.

    Args:
        write: writes one row (its own transaction); raises PersistenceError on failure.
        on_parked: told the reason of each message parked (a metric).
        retry_s: seconds between attempts while the database refuses.
    """

    def __init__(
        self,
        write: Callable[[Record, str, str], None],
        *,
        on_parked: Callable[[str], None] | None = None,
        retry_s: float = 1.0,
        retry_on: tuple[type[Exception], ...] = (PersistenceUnavailableError,),
    ) -> None:
        self._write = write
        self._on_parked = on_parked
        self._retry_s = retry_s
        self._retry_on = retry_on

    def park(self, message: Record, *, reason: str, detail: str, go_on: Callable[[], bool]) -> bool:
        """Write ``message``'s quarantine row (see ``PoisonPolicy.park``).

        Raises:
            PersistenceError: the table refused the row for a reason retrying cannot fix.
        """
        while go_on():
            try:
                self._write(message, reason, detail)
            except self._retry_on as exc:
                log.error("quarantine write failed, retrying: %s", exc)
                time.sleep(self._retry_s)
                continue
            log.warning(
                "quarantined %s[%s]@%s: %s: %s",
                message.topic(),
                message.partition(),
                message.offset(),
                reason,
                detail,
            )
            if self._on_parked is not None:
                self._on_parked(reason)
            return True
        return False


class SkipAndCount:
    """Poison is logged with its position and counted, then skipped.

    For messages that can never matter (an undecodable message is no event of any chain).
    """

    def __init__(self) -> None:
        self.skipped = 0
        self._lock = threading.Lock()

    def park(self, message: Record, *, reason: str, detail: str, go_on: Callable[[], bool]) -> bool:
        """Log and count ``message`` (see ``PoisonPolicy.park``)."""
        del go_on
        log.warning(
            "skipping %s message at %s[%s]@%s: %s",
            reason,
            message.topic(),
            message.partition(),
            message.offset(),
            detail,
        )
        with self._lock:
            self.skipped += 1
        return True
