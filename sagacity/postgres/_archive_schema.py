"""The archive's database schema: plain SQL migrations applied idempotently at start.

Every object is created unqualified, in the first schema of the connection's ``search_path``,
so one database can hold several archives (and each test its own).  The design is explained in
docs/adr/0006-archive-and-checkpoints.md.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        r"""
-- Microseconds since the epoch as timestamptz.  Adding a microsecond interval never depends on
-- the session time zone, so the function really is immutable (a generated column needs that).
CREATE OR REPLACE FUNCTION sgc_us_to_timestamptz(us bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT timestamptz '1970-01-01 00:00:00+00' + us * interval '1 microsecond' $$;

CREATE OR REPLACE FUNCTION sgc_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sagacity archive: % on % refused: the table is append-only',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'SGC01',
              HINT = 'expired months are removed whole by "sagacity archive retention"';
END
$$;

CREATE SEQUENCE IF NOT EXISTS side_effect_journal_archive_id_seq CACHE 1000;

-- The evidence.  Partitioned by event time, month by month; the partition key must be part of
-- every unique constraint, hence (saga_id, seq, recorded_at_us).  Per-saga uniqueness of seq is
-- enforced by archive_saga_head (see the ADR).
CREATE TABLE IF NOT EXISTS side_effect_journal (
    saga_id         text        NOT NULL,
    seq             bigint      NOT NULL CHECK (seq >= 1),
    event_type      text        NOT NULL,
    tool            text,
    payload         text,
    result          text,
    error           text,
    actor           text,
    attributes      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at_us  bigint      NOT NULL,
    recorded_at     timestamptz GENERATED ALWAYS AS (sgc_us_to_timestamptz(recorded_at_us)) STORED,
    hash            text        NOT NULL,
    prev_hash       text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    archive_id      bigint      NOT NULL DEFAULT nextval('side_effect_journal_archive_id_seq'),
    archived_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, seq, recorded_at_us)
) PARTITION BY RANGE (recorded_at_us);

DROP TRIGGER IF EXISTS sgc_append_only ON side_effect_journal;
CREATE TRIGGER sgc_append_only BEFORE UPDATE OR DELETE ON side_effect_journal
    FOR EACH ROW EXECUTE FUNCTION sgc_refuse_change();
DROP TRIGGER IF EXISTS sgc_append_only_truncate ON side_effect_journal;
CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON side_effect_journal
    FOR EACH STATEMENT EXECUTE FUNCTION sgc_refuse_change();

-- One row per saga: the last archived link.  The archiver extends a chain only from here,
-- with a compare-and-set on head_seq, which is what makes (saga_id, seq) unique across
-- partitions.  Not evidence itself (it is rebuilt from the journal), so it may be updated.
CREATE TABLE IF NOT EXISTS archive_saga_head (
    saga_id          text        PRIMARY KEY,
    head_seq         bigint      NOT NULL,
    head_hash        text        NOT NULL,
    checkpointed_seq bigint      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS archive_saga_head_unsigned
    ON archive_saga_head (saga_id) WHERE head_seq > checkpointed_seq;

-- Events refused on ingest, with the bytes exactly as read from Kafka.
CREATE TABLE IF NOT EXISTS archive_quarantine (
    id              bigserial   PRIMARY KEY,
    quarantined_at  timestamptz NOT NULL DEFAULT now(),
    reason          text        NOT NULL,
    detail          text        NOT NULL,
    saga_id         text,
    seq             bigint,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    raw_key         bytea,
    raw_value       bytea
);
DROP TRIGGER IF EXISTS sgc_append_only ON archive_quarantine;
CREATE TRIGGER sgc_append_only BEFORE UPDATE OR DELETE ON archive_quarantine
    FOR EACH ROW EXECUTE FUNCTION sgc_refuse_change();
DROP TRIGGER IF EXISTS sgc_append_only_truncate ON archive_quarantine;
CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON archive_quarantine
    FOR EACH STATEMENT EXECUTE FUNCTION sgc_refuse_change();

-- The consumer's position, written in the same transaction as the rows it covers.
CREATE TABLE IF NOT EXISTS archive_consumer_offset (
    consumer_group  text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    next_offset     bigint      NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, kafka_partition)
);

-- Signed heads: an Ed25519 signature over (saga_id, seq, hash, signed_at_us, key_id).
CREATE TABLE IF NOT EXISTS archive_checkpoint (
    saga_id       text        NOT NULL,
    seq           bigint      NOT NULL,
    hash          text        NOT NULL,
    signed_at_us  bigint      NOT NULL,
    key_id        text        NOT NULL,
    signature     text        NOT NULL,
    PRIMARY KEY (saga_id, seq, key_id)
);
DROP TRIGGER IF EXISTS sgc_append_only ON archive_checkpoint;
CREATE TRIGGER sgc_append_only BEFORE UPDATE OR DELETE ON archive_checkpoint
    FOR EACH ROW EXECUTE FUNCTION sgc_refuse_change();
DROP TRIGGER IF EXISTS sgc_append_only_truncate ON archive_checkpoint;
CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON archive_checkpoint
    FOR EACH STATEMENT EXECUTE FUNCTION sgc_refuse_change();

-- Public keys seen by the archiver (a convenience: auditors should pin the key themselves).
CREATE TABLE IF NOT EXISTS archive_signing_key (
    key_id      text        PRIMARY KEY,
    public_key  text        NOT NULL,
    first_used  timestamptz NOT NULL DEFAULT now()
);

-- What retention removed: one row per dropped month, and per saga the last link dropped so
-- that the remaining part of a chain that crossed the boundary still verifies.
CREATE TABLE IF NOT EXISTS archive_retention (
    partition_name  text        PRIMARY KEY,
    range_from_us   bigint      NOT NULL,
    range_to_us     bigint      NOT NULL,
    row_count       bigint      NOT NULL,
    export_file     text        NOT NULL,
    export_sha256   text        NOT NULL,
    dropped_at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS archive_retention_anchor (
    saga_id         text        NOT NULL,
    seq             bigint      NOT NULL,
    hash            text        NOT NULL,
    partition_name  text        NOT NULL REFERENCES archive_retention (partition_name),
    PRIMARY KEY (saga_id, seq)
);

-- Creates the month partition holding ``at_us`` if missing.  SECURITY DEFINER: only the
-- table's owner may attach partitions, and the archiver role is not the owner.
CREATE OR REPLACE FUNCTION sgc_ensure_month(at_us bigint) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    month_start timestamptz := date_trunc('month', @schema@.sgc_us_to_timestamptz(at_us), 'UTC');
    lo bigint := (extract(epoch FROM month_start) * 1000000)::bigint;
    hi bigint := (extract(epoch FROM (month_start AT TIME ZONE 'UTC' + interval '1 month')
                  AT TIME ZONE 'UTC') * 1000000)::bigint;
    name text := 'side_effect_journal_p' || to_char(month_start AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF to_regclass('@schema@.' || quote_ident(name)) IS NULL THEN
        EXECUTE format('CREATE TABLE @schema@.%I PARTITION OF @schema@.side_effect_journal '
                       'FOR VALUES FROM (%s) TO (%s)', name, lo, hi);
        EXECUTE format('CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON @schema@.%I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION @schema@.sgc_refuse_change()', name);
    END IF;
    RETURN name;
END
$$;
""",
    ),
    (
        2,
        r"""
-- Two archivers reaching a new month together: the second waits for the first to commit,
-- then finds the partition instead of failing to create it again.
CREATE OR REPLACE FUNCTION sgc_ensure_month(at_us bigint) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    month_start timestamptz := date_trunc('month', @schema@.sgc_us_to_timestamptz(at_us), 'UTC');
    lo bigint := (extract(epoch FROM month_start) * 1000000)::bigint;
    hi bigint := (extract(epoch FROM (month_start AT TIME ZONE 'UTC' + interval '1 month')
                  AT TIME ZONE 'UTC') * 1000000)::bigint;
    name text := 'side_effect_journal_p' || to_char(month_start AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
    IF to_regclass('@schema@.' || quote_ident(name)) IS NULL THEN
        -- A relation lock (unlike an advisory lock) also refreshes the catalog we read next.
        LOCK TABLE @schema@.side_effect_journal IN SHARE ROW EXCLUSIVE MODE;
        IF to_regclass('@schema@.' || quote_ident(name)) IS NULL THEN
            EXECUTE format('CREATE TABLE @schema@.%I PARTITION OF @schema@.side_effect_journal '
                           'FOR VALUES FROM (%s) TO (%s)', name, lo, hi);
            EXECUTE format('CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON '
                           '@schema@.%I FOR EACH STATEMENT EXECUTE FUNCTION '
                           '@schema@.sgc_refuse_change()', name);
        END IF;
    END IF;
    RETURN name;
END
$$;
""",
    ),
    (
        3,
        r"""
-- Readers use the archive as a per-saga index (docs/adr/0010-saga-read-index.md).  Rows of a
-- partition below keys_checked_from were archived by a release that did not compare the
-- message key with the saga the body names: readers do not take those from the index.
ALTER TABLE archive_consumer_offset ADD COLUMN IF NOT EXISTS keys_checked_from bigint;
UPDATE archive_consumer_offset SET keys_checked_from = next_offset
    WHERE keys_checked_from IS NULL;
-- A saga's refused messages, by key (hash: a key of any length can be indexed).
CREATE INDEX IF NOT EXISTS archive_quarantine_raw_key
    ON archive_quarantine USING hash (raw_key);
-- Approval requests per partition (pending approvals without a saga id).
CREATE INDEX IF NOT EXISTS side_effect_journal_requests
    ON side_effect_journal (topic, kafka_partition, saga_id)
    WHERE event_type = 'AWAITING_APPROVAL';
""",
    ),
    (
        4,
        r"""
-- Signing rounds (docs/adr/0012-checkpoint-rounds.md): one Ed25519 signature over the Merkle
-- root of the heads signed together (and the previous round's root: the rounds are a chain);
-- each head's checkpoint row names its round and leaf.
CREATE SEQUENCE IF NOT EXISTS archive_checkpoint_round_id_seq;
CREATE TABLE IF NOT EXISTS archive_checkpoint_round (
    round_id      bigint      PRIMARY KEY,
    leaf_count    bigint      NOT NULL,
    root          text        NOT NULL,
    prev_root     text        NOT NULL,
    signed_at_us  bigint      NOT NULL,
    key_id        text        NOT NULL,
    signature     text        NOT NULL
);
DROP TRIGGER IF EXISTS sgc_append_only ON archive_checkpoint_round;
CREATE TRIGGER sgc_append_only BEFORE UPDATE OR DELETE ON archive_checkpoint_round
    FOR EACH ROW EXECUTE FUNCTION sgc_refuse_change();
DROP TRIGGER IF EXISTS sgc_append_only_truncate ON archive_checkpoint_round;
CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON archive_checkpoint_round
    FOR EACH STATEMENT EXECUTE FUNCTION sgc_refuse_change();
-- Per-head signatures (rows signed before rounds) keep theirs; leaves of a round have none.
ALTER TABLE archive_checkpoint ALTER COLUMN signature DROP NOT NULL;
ALTER TABLE archive_checkpoint ADD COLUMN IF NOT EXISTS round_id bigint;
ALTER TABLE archive_checkpoint ADD COLUMN IF NOT EXISTS leaf_index bigint;
CREATE INDEX IF NOT EXISTS archive_checkpoint_leaf
    ON archive_checkpoint (round_id, leaf_index) WHERE round_id IS NOT NULL;
""",
    ),
    (
        5,
        r"""
-- The log of signing rounds (docs/adr/0015-round-log.md): a round of format 2 (SGCR2) signs
-- the root over every head signed so far (tree_size leaves); its frontier (the roots of the
-- perfect subtrees tiling those leaves, hex, largest first) lets the next round and proofs
-- start there.  The frontier is not signed: a wrong one only makes proofs fail.
ALTER TABLE archive_checkpoint_round ADD COLUMN IF NOT EXISTS format smallint NOT NULL DEFAULT 1;
ALTER TABLE archive_checkpoint_round ADD COLUMN IF NOT EXISTS tree_size bigint;
ALTER TABLE archive_checkpoint_round ADD COLUMN IF NOT EXISTS frontier text;
-- Signed retention records: one signature per dropped month over its export's digest and the
-- Merkle root of its anchors (leaf_index: the anchor's place in that tree).
ALTER TABLE archive_retention ADD COLUMN IF NOT EXISTS anchor_count bigint;
ALTER TABLE archive_retention ADD COLUMN IF NOT EXISTS anchors_root text;
ALTER TABLE archive_retention ADD COLUMN IF NOT EXISTS signed_at_us bigint;
ALTER TABLE archive_retention ADD COLUMN IF NOT EXISTS key_id text;
ALTER TABLE archive_retention ADD COLUMN IF NOT EXISTS signature text;
ALTER TABLE archive_retention_anchor ADD COLUMN IF NOT EXISTS leaf_index bigint;
CREATE INDEX IF NOT EXISTS archive_retention_anchor_leaf
    ON archive_retention_anchor (partition_name, leaf_index);
""",
    ),
    (
        6,
        r"""
-- Chain form 2 (docs/adr/0019-erasure.md): the form an entry is hashed in, its commitments and
-- the salts of the values present (hex, by field name; empty for form 1).  With them a form-2
-- entry's hash is recomputed from its commitments once its values and salts are erased.
ALTER TABLE side_effect_journal ADD COLUMN IF NOT EXISTS form smallint NOT NULL DEFAULT 1;
ALTER TABLE side_effect_journal ADD COLUMN IF NOT EXISTS commitments jsonb NOT NULL DEFAULT '{}';
ALTER TABLE side_effect_journal ADD COLUMN IF NOT EXISTS salts jsonb NOT NULL DEFAULT '{}';
""",
    ),
    (
        7,
        r"""
-- Erasure (docs/adr/0019-erasure.md §4).  The log of erasures: one row per erasure that
-- cleared something (or the first of a saga), append-only like the evidence.  ``erased``
-- names, by seq, the data fields whose openings the erasure cleared; ``quarantined`` counts
-- the quarantined messages of the saga whose bytes it cleared.
CREATE TABLE IF NOT EXISTS archive_erasure (
    id          bigserial   PRIMARY KEY,
    saga_id     text        NOT NULL,
    actor       text        NOT NULL,
    reason      text        NOT NULL,
    key_id      text,
    erased      jsonb       NOT NULL DEFAULT '{}',
    quarantined bigint      NOT NULL DEFAULT 0,
    erased_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS archive_erasure_saga ON archive_erasure (saga_id);
DROP TRIGGER IF EXISTS sgc_append_only ON archive_erasure;
CREATE TRIGGER sgc_append_only BEFORE UPDATE OR DELETE ON archive_erasure
    FOR EACH ROW EXECUTE FUNCTION sgc_refuse_change();
DROP TRIGGER IF EXISTS sgc_append_only_truncate ON archive_erasure;
CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON archive_erasure
    FOR EACH STATEMENT EXECUTE FUNCTION sgc_refuse_change();

-- The append-only rule, with its one exception: inside sgc_erase_saga (which sets
-- sagacity.erasing to the saga's id for the statement), an UPDATE of one of that saga's rows
-- is admitted when it only clears openings.  A journal row (form 2 only) may lose its data
-- values that have a commitment, its data attributes (the attributes named in commitments)
-- and its salts; every other column, the hash and the commitments included, stays as it
-- was.  A quarantined message may lose its raw bytes (raw_value), nothing else.  Whoever sets
-- the variable by hand gains nothing more: only such clearing is admitted, and it leaves
-- every hash recomputable from the commitments.
CREATE OR REPLACE FUNCTION sgc_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    erasing text := current_setting('sagacity.erasing', true);
    data_keys text[];
BEGIN
    IF TG_OP = 'UPDATE' AND coalesce(erasing, '') <> '' THEN
        IF TG_TABLE_NAME = 'archive_quarantine' THEN
            IF (OLD.saga_id = erasing OR OLD.raw_key = convert_to(erasing, 'UTF8'))
               AND NEW.raw_value IS NULL
               AND to_jsonb(NEW) - 'raw_value' = to_jsonb(OLD) - 'raw_value' THEN
                RETURN NEW;
            END IF;
        ELSIF TG_TABLE_NAME = 'side_effect_journal'
              OR TG_TABLE_NAME LIKE 'side\_effect\_journal\_p%' THEN
            data_keys := ARRAY(SELECT k FROM jsonb_object_keys(OLD.commitments) k
                               WHERE k NOT IN ('payload', 'result', 'error'));
            -- A value without a commitment stays: clearing it would lose its hash.
            IF OLD.saga_id = erasing AND OLD.form = 2
               AND ((OLD.commitments ? 'payload' AND NEW.payload IS NULL)
                    OR (NOT OLD.commitments ? 'payload'
                        AND NEW.payload IS NOT DISTINCT FROM OLD.payload))
               AND ((OLD.commitments ? 'result' AND NEW.result IS NULL)
                    OR (NOT OLD.commitments ? 'result'
                        AND NEW.result IS NOT DISTINCT FROM OLD.result))
               AND ((OLD.commitments ? 'error' AND NEW.error IS NULL)
                    OR (NOT OLD.commitments ? 'error'
                        AND NEW.error IS NOT DISTINCT FROM OLD.error))
               AND NEW.attributes = OLD.attributes - data_keys
               AND NEW.salts = '{}'::jsonb
               AND to_jsonb(NEW) - ARRAY['payload', 'result', 'error', 'attributes', 'salts',
                                         'recorded_at']
                   = to_jsonb(OLD) - ARRAY['payload', 'result', 'error', 'attributes', 'salts',
                                           'recorded_at'] THEN
                RETURN NEW;
            END IF;
        END IF;
    END IF;
    RAISE EXCEPTION 'sagacity archive: % on % refused: the table is append-only',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'SGC01',
              HINT = 'expired months are removed whole by "sagacity archive retention"; '
                     'a saga''s data is erased by "sagacity erase"';
END
$$;

-- The one path of an erasure in the archive: clears the openings of a form-2 saga's rows
-- (values with a commitment, data attributes, salts) and its quarantined bytes, and logs it.
-- Serialised per saga (two erasures at once: the second finds nothing left and logs nothing).
-- A saga with form-1 rows is refused whole (SGC02): their hashes are over the data itself.
-- Returns {"erased": {seq: [field, ...]}, "quarantined": n, "logged": bool, "rows": n}.
CREATE OR REPLACE FUNCTION sgc_erase_saga(
    saga text, actor text, reason text, key_id text DEFAULT NULL
) RETURNS jsonb
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v1 bigint;
    total bigint;
    erased jsonb;
    cleared bigint;
    logged boolean := false;
BEGIN
    IF coalesce(saga, '') = '' OR coalesce(actor, '') = '' OR coalesce(reason, '') = '' THEN
        RAISE EXCEPTION 'sagacity archive: an erasure needs a saga id, an actor and a reason'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('sgc_erase_saga'), hashtext(saga));
    SELECT count(*), count(*) FILTER (WHERE j.form = 1) INTO total, v1
        FROM @schema@.side_effect_journal j WHERE j.saga_id = saga;
    IF v1 > 0 THEN
        RAISE EXCEPTION 'sagacity archive: saga % is in chain form 1 (% events hash their data '
            'in clear): its data cannot be erased without breaking its chain', saga, v1
            USING ERRCODE = 'SGC02';
    END IF;
    SELECT coalesce(jsonb_object_agg(s.seq::text, s.fields), '{}'::jsonb) INTO erased FROM (
        SELECT j.seq, jsonb_agg(k ORDER BY k) AS fields
        FROM @schema@.side_effect_journal j, jsonb_object_keys(j.commitments) k
        WHERE j.saga_id = saga
          AND CASE k WHEN 'payload' THEN j.payload IS NOT NULL
                     WHEN 'result' THEN j.result IS NOT NULL
                     WHEN 'error' THEN j.error IS NOT NULL
                     ELSE j.attributes ? k END
        GROUP BY j.seq) s;
    PERFORM set_config('sagacity.erasing', saga, true);
    UPDATE @schema@.side_effect_journal j SET
        payload = CASE WHEN j.commitments ? 'payload' THEN NULL ELSE j.payload END,
        result = CASE WHEN j.commitments ? 'result' THEN NULL ELSE j.result END,
        error = CASE WHEN j.commitments ? 'error' THEN NULL ELSE j.error END,
        attributes = j.attributes - ARRAY(SELECT k FROM jsonb_object_keys(j.commitments) k
                                          WHERE k NOT IN ('payload', 'result', 'error')),
        salts = '{}'::jsonb
    WHERE j.saga_id = saga
      AND (j.salts <> '{}'::jsonb
           OR (j.payload IS NOT NULL AND j.commitments ? 'payload')
           OR (j.result IS NOT NULL AND j.commitments ? 'result')
           OR (j.error IS NOT NULL AND j.commitments ? 'error')
           OR j.attributes ?| ARRAY(SELECT k FROM jsonb_object_keys(j.commitments) k
                                    WHERE k NOT IN ('payload', 'result', 'error')));
    UPDATE @schema@.archive_quarantine q SET raw_value = NULL
        WHERE (q.saga_id = saga OR q.raw_key = convert_to(saga, 'UTF8'))
          AND q.raw_value IS NOT NULL;
    GET DIAGNOSTICS cleared = ROW_COUNT;
    PERFORM set_config('sagacity.erasing', '', true);
    IF erased <> '{}'::jsonb OR cleared > 0
       OR NOT EXISTS (SELECT 1 FROM @schema@.archive_erasure e WHERE e.saga_id = saga) THEN
        INSERT INTO @schema@.archive_erasure (saga_id, actor, reason, key_id, erased, quarantined)
            VALUES (saga, actor, reason, key_id, erased, cleared);
        logged := true;
    END IF;
    RETURN jsonb_build_object('erased', erased, 'quarantined', cleared, 'logged', logged,
                              'rows', total);
END
$$;
REVOKE ALL ON FUNCTION sgc_erase_saga(text, text, text, text) FROM PUBLIC;
""",
    ),
    (
        8,
        r"""
-- What the archiver signs comes from its own ingest (docs/adr/0012-checkpoint-rounds.md,
-- "The signer's input").  signed_offset: per partition, the offset below which everything
-- this consumer group ingested was signed; a restarted archiver re-reads the topic from there
-- (not from next_offset) to re-verify what it archived but had not signed yet.  A partition
-- first archived starts it at its first offset; partitions archived before this version start
-- it at next_offset (an archiver stopped cleanly signed everything it had ingested).
ALTER TABLE archive_consumer_offset ADD COLUMN IF NOT EXISTS signed_offset bigint;
UPDATE archive_consumer_offset SET signed_offset = next_offset WHERE signed_offset IS NULL;
-- What the archiver found the database to hold that it did not write: a saga's head moved
-- by something else, or archived rows past what it ingested or verified under its key.  Never
-- signed; reported by the service (log, metric) and by verify --saga.
CREATE TABLE IF NOT EXISTS archive_finding (
    id              bigserial   PRIMARY KEY,
    found_at        timestamptz NOT NULL DEFAULT now(),
    reason          text        NOT NULL,
    detail          text        NOT NULL,
    saga_id         text        NOT NULL,
    ingested_seq    bigint,
    ingested_hash   text,
    table_seq       bigint,
    table_hash      text
);
CREATE INDEX IF NOT EXISTS archive_finding_saga ON archive_finding (saga_id);
DROP TRIGGER IF EXISTS sgc_append_only ON archive_finding;
CREATE TRIGGER sgc_append_only BEFORE UPDATE OR DELETE ON archive_finding
    FOR EACH ROW EXECUTE FUNCTION sgc_refuse_change();
DROP TRIGGER IF EXISTS sgc_append_only_truncate ON archive_finding;
CREATE TRIGGER sgc_append_only_truncate BEFORE TRUNCATE ON archive_finding
    FOR EACH STATEMENT EXECUTE FUNCTION sgc_refuse_change();
""",
    ),
)
"""(version, SQL) pairs, applied in order; each is re-runnable.  ``@schema@`` stands for the
quoted name of the archive's schema (SECURITY DEFINER code names every object it uses)."""

ARCHIVE_TABLES: tuple[str, ...] = (
    "side_effect_journal",
    "archive_saga_head",
    "archive_quarantine",
    "archive_consumer_offset",
    "archive_checkpoint",
    "archive_checkpoint_round",
    "archive_signing_key",
    "archive_retention",
    "archive_retention_anchor",
    "archive_erasure",
    "archive_finding",
)
"""Every table the archive owns (privileges are granted on these)."""

TABLES_ADDED_IN: dict[str, int] = {
    "archive_checkpoint_round": 4,
    "archive_erasure": 7,
    "archive_finding": 8,
}
"""Tables of later schema versions: an archive at an older version is read without them."""

ROUNDS_VERSION = 4
"""The schema version from which heads are signed in rounds (docs/adr/0012)."""

LOG_VERSION = 5
"""The schema version from which rounds form a log and retention records are signed
(docs/adr/0015-round-log.md)."""

FORMS_VERSION = 6
"""The schema version from which the journal table holds each entry's chain form, commitments
and salts (docs/adr/0019-erasure.md)."""

ERASURE_VERSION = 7
"""The schema version from which a saga's openings can be erased (``sgc_erase_saga``) and
erasures are logged (``archive_erasure``; docs/adr/0019-erasure.md §4)."""

INGEST_VERSION = 8
"""The schema version from which the archiver records, per partition, up to where what it
ingested is signed (``signed_offset``) and what it found it did not write
(``archive_finding``; docs/adr/0012-checkpoint-rounds.md, "The signer's input")."""


def checkpoint_round_columns(version: int) -> str:
    """``round_id, leaf_index`` of ``archive_checkpoint`` as a select list, or two NULLs for an
    archive at a schema version before rounds (it is read without migrating it)."""
    return "round_id, leaf_index" if version >= ROUNDS_VERSION else "NULL, NULL"


APPEND_ONLY_TABLES: tuple[str, ...] = (
    "side_effect_journal",
    "archive_quarantine",
    "archive_checkpoint",
    "archive_checkpoint_round",
    "archive_erasure",
    "archive_finding",
)
"""Tables whose rows are never updated or deleted (triggers refuse it)."""
