"""Finding sagas whose writer is presumed gone, and handing them to compensation.

The archive only *proposes* candidates: sagas whose archived head is older than a threshold and
is not an event after which no writer holds the saga (docs/adr/0011-writer-lease.md).  Each
candidate is then judged on the topic by the journal's lease
(:meth:`~sagacity.ports.WriterLeases.take_over`), on the broker's timestamp of the saga's last
accepted event and the lease its writer recorded; an archive that
lags or was tampered with can delay a takeover or propose a saga that is not abandoned, never
cause one the lease forbids.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sagacity.errors import LeaseHeldError, SagaNotLiveError, TailMovedError
from sagacity.signing._writer_roles import HANDOFF_EVENTS

if TYPE_CHECKING:
    from sagacity.ports import ArchivedHeads, WriterLeases


@dataclass(frozen=True, kw_only=True)
class QuietSaga:
    """A saga whose archived head is old and not a hand-off or an end."""

    saga_id: str
    head_seq: int
    head_event: str
    head_age_s: float


def quiet_sagas(
    heads: ArchivedHeads,
    *,
    topic: str,
    older_than_s: float,
    limit: int = 1000,
    now_s: float | None = None,
) -> list[QuietSaga]:
    """Sagas of ``topic`` whose last archived event is older than ``older_than_s`` and leaves
    the saga with its writer (not a hand-off or an end: the core's ``HANDOFF_EVENTS``), oldest
    first, at most ``limit``; ``heads`` (:class:`~sagacity.ports.ArchivedHeads`, the Postgres
    archive's ``PostgresArchiveReads``) reads them.

    Raises:
        ArchiveSchemaError: the store is not an archive.
        PersistenceError: the database failed.
    """
    now_us = int((time.time() if now_s is None else now_s) * 1_000_000)
    found = heads.quiet_heads(
        topic=topic,
        recorded_before_us=now_us - int(older_than_s * 1_000_000),
        excluding={t.value for t in HANDOFF_EVENTS},
        limit=limit,
    )
    return [
        QuietSaga(
            saga_id=h.saga_id,
            head_seq=h.seq,
            head_event=h.event_type,
            head_age_s=(now_us - h.recorded_at_us) / 1_000_000,
        )
        for h in found
    ]


class SweepOutcome(enum.StrEnum):
    """What the sweep did with one candidate."""

    TAKEN = "taken over"
    WOULD_TAKE = "would take over"
    HELD = "lease held"
    NOT_LIVE = "not live"
    MOVED = "moved on"


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """One candidate's outcome and why."""

    saga_id: str
    outcome: SweepOutcome
    detail: str


def sweep(
    journal: WriterLeases,
    candidates: Sequence[str],
    *,
    apply: bool,
    reason: str,
    actor: str | None = None,
) -> list[SweepResult]:
    """Judge each candidate's lease on the topic; with ``apply``, take over the expired ones.

    Never forces: a saga whose lease has not expired (or records none) is left to its writer.

    Raises:
        JournalUnavailableError: the topic could not be read or written.
    """
    results: list[SweepResult] = []
    for saga_id in candidates:
        try:
            if apply:
                done = journal.take_over(saga_id, reason=reason, actor=actor)
                results.append(
                    SweepResult(
                        saga_id=saga_id,
                        outcome=SweepOutcome.TAKEN,
                        detail=f"{done.entry.event_type.value} at seq {done.entry.seq} "
                        f"(writer {done.lease.writer})",
                    )
                )
                continue
            view = journal.lease(saga_id)
        except SagaNotLiveError as exc:
            results.append(
                SweepResult(saga_id=saga_id, outcome=SweepOutcome.NOT_LIVE, detail=exc.message)
            )
            continue
        except LeaseHeldError as exc:
            results.append(
                SweepResult(saga_id=saga_id, outcome=SweepOutcome.HELD, detail=exc.message)
            )
            continue
        except TailMovedError as exc:
            results.append(
                SweepResult(saga_id=saga_id, outcome=SweepOutcome.MOVED, detail=exc.message)
            )
            continue
        if view.expired:
            outcome, detail = (
                SweepOutcome.WOULD_TAKE,
                f"last event {view.last_event_age_s:.0f}s old",
            )
        elif view.expires_in_s is None:
            outcome, detail = SweepOutcome.HELD, "its SAGA_OPENED records no lease"
        else:
            outcome, detail = SweepOutcome.HELD, f"lease expires in {view.expires_in_s:.1f}s"
        results.append(
            SweepResult(saga_id=saga_id, outcome=outcome, detail=f"{detail} (writer {view.writer})")
        )
    return results
