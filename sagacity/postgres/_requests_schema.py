"""The approvals service's tables and their migrations (:mod:`sagacity.postgres._requests`
reads and writes them): requests, positions, the kept events, the attention queue, the sagas'
tails and the quarantine, and when the service first saw each request."""

from __future__ import annotations

from sagacity.postgres._attention import SCHEMA as ATTENTION_SCHEMA
from sagacity.postgres._attention import TOPIC_SCHEMA as ATTENTION_TOPIC_SCHEMA
from sagacity.postgres._migrate import key_by_topic
from sagacity.postgres._tails import SCHEMA as TAILS_SCHEMA

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS sagacity_approval_request (
    topic                   text    NOT NULL,
    saga_id                 text    NOT NULL,
    seq                     integer NOT NULL,
    tool                    text    NOT NULL,
    payload                 text    NOT NULL,
    payload_sha256          text,
    requested_at_us         bigint  NOT NULL,
    expires_at_us           bigint,
    signatures_required     integer NOT NULL,
    policy_version          text    NOT NULL,
    reversibility           text    NOT NULL,
    state                   text    NOT NULL DEFAULT 'pending',
    signed_by               text[]  NOT NULL DEFAULT '{}',
    decision                text,
    decided_by              text,
    decided_at_us           bigint,
    decision_policy_version text,
    closed_at_us            bigint,
    PRIMARY KEY (topic, saga_id, seq)
);
CREATE INDEX IF NOT EXISTS sagacity_approval_request_open
    ON sagacity_approval_request (requested_at_us) WHERE state IN ('pending', 'approved');
CREATE INDEX IF NOT EXISTS sagacity_approval_request_decided
    ON sagacity_approval_request (decided_at_us) WHERE decided_at_us IS NOT NULL;
-- Tables made before requests recorded their topic: add it, key by it.
"""
    + key_by_topic("sagacity_approval_request", "saga_id, seq")
    + """
CREATE TABLE IF NOT EXISTS sagacity_approval_offset (
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""
)


EVENTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS sagacity_approval_event (
    topic   text    NOT NULL,
    saga_id text    NOT NULL,
    seq     integer NOT NULL,
    entry   jsonb   NOT NULL,
    PRIMARY KEY (topic, saga_id, seq)
);
-- Rows folded before the events were kept are rebuilt from the topic: every stored position
-- goes back to the first offset (Kafka starts a partition whose first offsets are gone at
-- its earliest), and each request's row is upserted again as its events come by.
UPDATE sagacity_approval_offset SET next_offset = 0;
"""
"""Migration 2: the saga's request events beside the rows, and the rebuild from the topic."""

SEEN_SCHEMA = """
ALTER TABLE sagacity_approval_request ADD COLUMN IF NOT EXISTS seen_at_us bigint;
-- Rows folded before the service recorded its first sight: the earlier of their recorded time
-- and now (a request dated in the future is seen now; one in the past keeps its deadline).
UPDATE sagacity_approval_request
   SET seen_at_us = LEAST(requested_at_us, (extract(epoch FROM clock_timestamp()) * 1e6)::bigint)
 WHERE seen_at_us IS NULL;
"""
"""Migration 5: when the service first saw each request, by its own clock: its TTL runs from
the earlier of this and the time the requester wrote
(:func:`sagacity.gate._requests.deadline_us`)."""

EXTENDED_SCHEMA = """
ALTER TABLE sagacity_approval_request
    ADD COLUMN IF NOT EXISTS extended_by_us bigint NOT NULL DEFAULT 0;
"""
"""Migration 6: the operator extensions of each request's deadline the fold counted (a
schedule for the sweep, the inbox and the notices; an expiry re-derives it from the chain).
Extensions journaled before it were not kept and stay out of the rows: such a request is still
never expired early (the expiry reads the chain), only shown with its earlier deadline."""

COMPONENT = "sagacity_approvals"
"""The tables' migrations are recorded in ``sagacity_approvals_schema_version``."""

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, SCHEMA + ATTENTION_SCHEMA),
    (2, EVENTS_SCHEMA),
    (3, ATTENTION_TOPIC_SCHEMA),
    (4, TAILS_SCHEMA),
    (5, SEEN_SCHEMA),
    (6, EXTENDED_SCHEMA),
)
"""The request, offset and attention tables; the kept events; the attention queue keyed by
topic; the sagas' tails and the quarantine; when the service first saw each request; the
verified extensions of its deadline (each statement re-runnable)."""
