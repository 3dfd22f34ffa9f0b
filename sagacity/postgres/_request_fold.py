"""The request store's fold storage (:class:`~sagacity.postgres.PostgresRequestStore`): one
accepted event of a saga kept, the saga refolded by the core and the rows that changed
upserted (docs/adr/0022-request-projection-from-the-core-fold.md).

Rows are the core's fold, never SQL's: the entries of a saga the fold reads
(:func:`sagacity.gate._requests.request_input`) are kept in ``sagacity_approval_event``; each new
one refolds the saga (:func:`sagacity.gate._requests.request_states`, approvals counted as the
resume counts them, deadline extensions as the expiry counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from sagacity.chain._acceptance import QUIET, Refusal, Tail, admit
from sagacity.entries._events import JournalEntry, now_micros
from sagacity.errors import SerializationError
from sagacity.gate._requests import (
    Counts,
    Extends,
    affects_requests,
    request_input,
    request_states,
)
from sagacity.ports import RequestRow, RowState
from sagacity.postgres._attention import apply_attention
from sagacity.postgres._tails import Tails, quarantine

_UPSERT = """
INSERT INTO sagacity_approval_request (topic, saga_id, seq, tool, payload, payload_sha256,
    requested_at_us, expires_at_us, signatures_required, policy_version, reversibility, state,
    signed_by, decision, decided_by, decided_at_us, decision_policy_version, closed_at_us,
    entry_hash, extended_by_us, seen_at_us)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (topic, saga_id, seq) DO UPDATE SET
    tool = EXCLUDED.tool, payload = EXCLUDED.payload, payload_sha256 = EXCLUDED.payload_sha256,
    requested_at_us = EXCLUDED.requested_at_us, expires_at_us = EXCLUDED.expires_at_us,
    signatures_required = EXCLUDED.signatures_required,
    policy_version = EXCLUDED.policy_version, reversibility = EXCLUDED.reversibility,
    state = EXCLUDED.state, signed_by = EXCLUDED.signed_by, decision = EXCLUDED.decision,
    decided_by = EXCLUDED.decided_by, decided_at_us = EXCLUDED.decided_at_us,
    decision_policy_version = EXCLUDED.decision_policy_version,
    closed_at_us = EXCLUDED.closed_at_us, entry_hash = EXCLUDED.entry_hash,
    extended_by_us = EXCLUDED.extended_by_us
"""
"""Write one request's row (see :func:`_values`); ``seen_at_us`` is set by the first write
only."""


def row_of(record: dict[str, Any]) -> RequestRow:
    return RequestRow(
        saga_id=record["saga_id"],
        seq=record["seq"],
        tool=record["tool"],
        payload=record["payload"],
        payload_sha256=record["payload_sha256"],
        requested_at_us=record["requested_at_us"],
        expires_at_us=record["expires_at_us"],
        signatures_required=record["signatures_required"],
        policy_version=record["policy_version"],
        reversibility=record["reversibility"],
        state=RowState(record["state"]),
        signed_by=tuple(record["signed_by"] or ()),
        decision=record["decision"],
        decided_by=record["decided_by"],
        decided_at_us=record["decided_at_us"],
        decision_policy_version=record["decision_policy_version"],
        closed_at_us=record["closed_at_us"],
        entry_hash=record.get("entry_hash"),  # absent before migration 4
        seen_at_us=record.get("seen_at_us"),  # absent before migration 5
        extended_by_us=record.get("extended_by_us") or 0,  # absent before migration 6
    )


def _kept(conn: psycopg.Connection[Any], topic: str, saga_id: str) -> list[JournalEntry]:
    with conn.cursor(row_factory=tuple_row) as cursor:
        records = cursor.execute(
            """SELECT entry FROM sagacity_approval_event
               WHERE topic = %s AND saga_id = %s ORDER BY seq""",
            (topic, saga_id),
        ).fetchall()
    try:
        return [JournalEntry.from_dict(record[0]) for record in records]
    except SerializationError as exc:
        raise SerializationError(
            f"a kept event of saga {saga_id!r} on {topic!r} does not decode ({exc.message}); "
            "rebuild the approvals' tables from the topic"
        ) from exc


def _kept_hash(conn: psycopg.Connection[Any], topic: str, saga_id: str, seq: int) -> str | None:
    with conn.cursor(row_factory=tuple_row) as cursor:
        record = cursor.execute(
            """SELECT entry->>'hash' FROM sagacity_approval_event
               WHERE topic = %s AND saga_id = %s AND seq = %s""",
            (topic, saga_id, seq),
        ).fetchone()
    return None if record is None else record[0]


def apply_entry(
    conn: psycopg.Connection[Any],
    entry: JournalEntry,
    *,
    topic: str,
    counts: Counts | None,
    tails: Tails,
    extends: Extends | None = None,
    saga_id: str | None = None,
    placed: bool = True,
    prefix: Callable[[], Tail | None] | None = None,
    position: tuple[int, int] | None = None,
    seen_at_us: int | None = None,
) -> Refusal | None:
    """Judge one journal event of ``topic`` by the acceptance rule, then fold it into the
    tables; ``None`` when it was accepted (or was already), else why it was refused.

    The event is accepted only when it is its saga's next linked event
    (:func:`sagacity.chain._acceptance.admit` against the tail ``tails`` holds): a duplicate or an
    event behind the tail is dropped, anything else is quarantined with its reason and folds
    nothing.  An accepted event moves the tail, is folded into the attention queue and, when
    the core's fold reads it (:func:`sagacity.gate._requests.request_input`), kept; then the saga's
    kept events are folded by the core (:func:`sagacity.gate._requests.request_states` with
    ``counts``, the approvals that sign, and ``extends``, the deadline extensions that count)
    and the rows whose state changed are upserted.  Rows
    are keyed by topic: two topics sharing a database never mix.

    Args:
        saga_id: the saga the message's key names (default: the one its body names).
        placed: the message is on the partition its key maps to.
        prefix: the saga's tail before this event read from the journal, for a saga first
            seen past its first event.
        position: ``(partition, offset)`` of the message, kept with a refusal.
        seen_at_us: the service's clock now: a request row written for the first time
            records it as when the service first saw the request (default: now).
    """
    saga = entry.saga_id if saga_id is None else saga_id
    refusal = admit(
        tails.get(saga),
        saga,
        entry,
        placed=placed,
        prefix=prefix,
        known_hash=lambda seq: _kept_hash(conn, topic, saga, seq),
    )
    if refusal is not None:
        if refusal.kind not in QUIET:
            quarantine(conn, topic, saga, entry, refusal, position=position)
        return refusal
    tails.advance(saga, entry)
    apply_attention(conn, entry, topic=topic)
    if not affects_requests(entry):
        return None
    held = _kept(conn, topic, saga)
    if not request_input(held, entry):
        return None
    conn.execute(
        """INSERT INTO sagacity_approval_event (topic, saga_id, seq, entry)
           VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
        (topic, saga, entry.seq, Jsonb(entry.to_dict())),
    )
    before = {
        s.request.seq: RequestRow.from_state(s)
        for s in request_states(held, counts=counts, extends=extends)
    }
    chain = sorted([*held, entry], key=lambda e: e.seq)
    seen = now_micros() if seen_at_us is None else seen_at_us
    for state in request_states(chain, counts=counts, extends=extends):
        row = RequestRow.from_state(state)
        if before.get(row.seq) == row:
            continue
        conn.execute(_UPSERT, (*_values(topic, row), seen))
    return None


def _values(topic: str, row: RequestRow) -> tuple[Any, ...]:
    return (
        topic,
        row.saga_id,
        row.seq,
        row.tool,
        row.payload,
        row.payload_sha256,
        row.requested_at_us,
        row.expires_at_us,
        row.signatures_required,
        row.policy_version,
        row.reversibility,
        row.state.value,
        list(row.signed_by),
        row.decision,
        row.decided_by,
        row.decided_at_us,
        row.decision_policy_version,
        row.closed_at_us,
        row.entry_hash,
        row.extended_by_us,
    )
