"""The PostgreSQL stores' SQL: the tables, the ``apply_change_v3`` function and the statements.

Kept apart from :mod:`guardrail.stores._postgres` (the stores' Python) so each
reads as one thing. The statements name ``{schema}``, filled in with the
store's schema as a quoted identifier, and the schema names ``{now}``,
filled in with :data:`NOW`.
"""

from __future__ import annotations

#: The layout of the tables and functions this code uses. 1: the same tables, unversioned,
#: with an ``apply_change`` each start redefined; 2: a version row, functions named by version;
#: 3: records written as rows (:mod:`guardrail._data.rows`), which code of layout 2 cannot read.
SCHEMA_VERSION = 3
#: The oldest layout whose code may still use a database of this one (its functions kept).
COMPATIBLE = 3

# What the schema holds now: its tables, its version row if any, this layout's function.
INSPECT = """
SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'i')
  AND c.relname IN ('sessions', 'records', 'schema_version', 'sessions_by_written')
"""
# What layout 1 lacked: created once, when a store of layout 2 first finds it missing.
WRITTEN_INDEX = "CREATE INDEX IF NOT EXISTS sessions_by_written ON {schema}.sessions (written)"
VERSION_ROW = "SELECT version, compatible FROM {schema}.schema_version"
HAS_FUNCTION = """
SELECT 1 FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s AND p.proname = %(name)s
"""
VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.schema_version (
    version integer NOT NULL, compatible integer NOT NULL,
    installed timestamptz NOT NULL DEFAULT clock_timestamp()
);
DELETE FROM {schema}.schema_version;
"""
SET_VERSION = (
    "INSERT INTO {schema}.schema_version (version, compatible) VALUES (%(version)s, %(compatible)s)"
)
TABLES = """
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.sessions (
    session_id text PRIMARY KEY,
    version bigint NOT NULL,
    created bigint NOT NULL,
    written timestamptz NOT NULL DEFAULT clock_timestamp(),
    meta text,
    meta_version bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS {schema}.records (
    session_id text NOT NULL,
    name text NOT NULL,
    version bigint NOT NULL,
    record text NOT NULL,
    PRIMARY KEY (session_id, name)
);
CREATE INDEX IF NOT EXISTS records_by_version ON {schema}.records (session_id, version);
CREATE INDEX IF NOT EXISTS sessions_by_written ON {schema}.sessions (written);
"""
FUNCTION_NAME = f"apply_change_v{SCHEMA_VERSION}"
# The merge rule is not here: apply_change refuses a change that would replace a row (or the
# meta) written after the writer's base, and returns those rows for the store to merge in Python.
FUNCTIONS = """
CREATE OR REPLACE FUNCTION {schema}.{function}(
    sid text, base bigint, new_meta text, names text[], texts text[], durable boolean,
    lock_wait text, pruned text[], prune_base bigint, ttl double precision
) RETURNS TABLE (
    version bigint, alone boolean, stake_names text[], stake_records text[], stake_meta text
) LANGUAGE plpgsql AS $$
DECLARE
    now bigint := {now};
    held {schema}.sessions%ROWTYPE;
    next bigint;
    idle text;
BEGIN
    -- For this transaction only: whether its commit waits for the WAL to reach the disk.
    PERFORM set_config('synchronous_commit', CASE WHEN durable THEN 'on' ELSE 'off' END, true);
    -- How long to wait for the session row's lock before giving up (lock_timeout).
    PERFORM set_config('lock_timeout', lock_wait, true);
    IF ttl > 0 THEN
        -- Sessions no one wrote for ttl seconds are gone: this one if it is (before the base
        -- is checked, so a writer that read it is refused), and a few of the oldest others.
        FOR idle IN
            SELECT s.session_id FROM {schema}.sessions AS s
            WHERE s.written <= clock_timestamp() - make_interval(secs => ttl)
              AND (s.session_id = sid OR s.session_id IN (
                  SELECT o.session_id FROM {schema}.sessions AS o
                  WHERE o.written <= clock_timestamp() - make_interval(secs => ttl)
                  ORDER BY o.written LIMIT 8))
            FOR UPDATE SKIP LOCKED
        LOOP
            DELETE FROM {schema}.records AS r WHERE r.session_id = idle;
            DELETE FROM {schema}.sessions AS s WHERE s.session_id = idle;
        END LOOP;
    END IF;
    IF base > 0 THEN
        -- The writer read a session: gone, or started again since, it was deleted after the
        -- read, and the change is refused (version 0) rather than bringing it back.
        SELECT * INTO held FROM {schema}.sessions AS s WHERE s.session_id = sid FOR UPDATE;
        IF NOT FOUND OR held.created >= base THEN
            version := 0;
            alone := false;
            RETURN NEXT;
            RETURN;
        END IF;
    ELSE
        INSERT INTO {schema}.sessions AS s (session_id, version, created, meta, meta_version)
        VALUES (sid, now, now - 1, new_meta, CASE WHEN new_meta IS NULL THEN 0 ELSE now END)
        ON CONFLICT (session_id) DO NOTHING;
    END IF;
    IF base = 0 AND FOUND THEN  -- a new session: written alone
        next := now;
        alone := true;
    ELSE
        IF base = 0 THEN
            SELECT * INTO held FROM {schema}.sessions AS s WHERE s.session_id = sid FOR UPDATE;
        END IF;
        IF held.version > base THEN
            SELECT array_agg(r.name), array_agg(r.record) INTO stake_names, stake_records
            FROM {schema}.records AS r
            WHERE r.session_id = sid AND r.name = ANY(names) AND r.version > base;
            IF new_meta IS NOT NULL AND held.meta_version > base THEN
                stake_meta := held.meta;
            END IF;
            IF stake_names IS NOT NULL OR stake_meta IS NOT NULL THEN
                version := held.version;
                alone := false;
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
        next := held.version + 1;
        alone := held.version = base;
        UPDATE {schema}.sessions AS s SET
            version = next,
            written = clock_timestamp(),
            meta = coalesce(new_meta, s.meta),
            meta_version = CASE WHEN new_meta IS NULL THEN s.meta_version ELSE next END
        WHERE s.session_id = sid;
    END IF;
    -- Marks past the writer's bound: their rows go, unless written after the change's base.
    IF cardinality(pruned) > 0 THEN
        DELETE FROM {schema}.records AS r
        WHERE r.session_id = sid AND r.name = ANY(pruned) AND r.version <= prune_base;
    END IF;
    INSERT INTO {schema}.records AS r (session_id, name, version, record)
    SELECT sid, u.name, next, u.record FROM unnest(names, texts) AS u(name, record)
    ON CONFLICT (session_id, name) DO UPDATE SET record = excluded.record, version = next;
    version := next;
    stake_names := NULL;
    stake_records := NULL;
    stake_meta := NULL;
    RETURN NEXT;
END
$$;
"""

# Microseconds since 1970 by the server's clock: a new session's first version.
NOW = "floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

# The layout the schema's version row asks for is read with every statement (a read adds a
# row tagged 2 when it asks for newer code than %(layout)s, this code's): a release that
# upgrades the schema while this code runs stops it at its next call (the write's function
# is not called: a one-time filter on the version row), rather than writing on beside it.
APPLY = """
SELECT f.version, f.alone, f.stake_names, f.stake_records, f.stake_meta, v.compatible, v.version
FROM (
    SELECT coalesce(max(compatible), 0) AS compatible, max(version) AS version
    FROM {schema}.schema_version
) AS v
LEFT JOIN LATERAL (
    SELECT * FROM {schema}.{function}(
        %(sid)s, %(base)s, %(meta)s, %(names)s::text[], %(records)s::text[], %(durable)s,
        %(lock_wait)s, %(pruned)s::text[], %(prune_base)s, %(ttl)s
    ) WHERE v.compatible <= %(layout)s OFFSET 0
) AS f ON true
"""

# One snapshot of the session row and, unless the reader is up to date, the rows written
# since its version (all of them when the session started after that version). Whether to
# read records at all, and from which version, are scalar subqueries on the session row: one-
# time filters evaluated before any record is touched, whatever plan the statistics of the
# moment pick (a join could scan every record of a session first: 8 ms a check at 10k).
CHANGES = """
WITH s AS (
    SELECT version, created, meta, meta_version, written FROM {schema}.sessions
    WHERE session_id = %(sid)s
)
SELECT 0, version, created,
       CASE WHEN version <> %(since)s AND (created >= %(since)s OR meta_version > %(since)s)
            THEN meta END,
       %(ttl)s > 0 AND written <= clock_timestamp() - make_interval(secs => %(ttl)s)
FROM s
UNION ALL
SELECT 1, r.version, NULL, r.record, NULL
FROM {schema}.records AS r
WHERE r.session_id = %(sid)s
  AND (SELECT version FROM s) <> %(since)s
  AND r.version > (SELECT CASE WHEN created >= %(since)s THEN 0 ELSE %(since)s END FROM s)
UNION ALL
SELECT 2, compatible, version, NULL, NULL FROM {schema}.schema_version
WHERE compatible > %(layout)s
"""

# CHANGES for a reader that holds nothing (since 0): the session row and every record row,
# along the records' primary key, with no join and no version test to make per row (a fifth
# less time at 10,000 records). Records without a session row come back without a head row,
# which reads as no session, as CHANGES's join makes it.
LOAD = """
SELECT 0, version, created, meta,
       %(ttl)s > 0 AND written <= clock_timestamp() - make_interval(secs => %(ttl)s)
FROM {schema}.sessions WHERE session_id = %(sid)s
UNION ALL
SELECT 1, NULL, NULL, record, NULL FROM {schema}.records WHERE session_id = %(sid)s
UNION ALL
SELECT 2, compatible, version, NULL, NULL FROM {schema}.schema_version
WHERE compatible > %(layout)s
"""

# A session past its ttl, deleted with its records, unless written since it was found so.
EXPIRE_ONE = """
WITH gone AS (
    DELETE FROM {schema}.sessions
    WHERE session_id = %(sid)s AND written <= clock_timestamp() - make_interval(secs => %(ttl)s)
    RETURNING session_id
)
DELETE FROM {schema}.records WHERE session_id IN (SELECT session_id FROM gone) RETURNING 1
"""
LOCK_WAIT = "SELECT set_config('lock_timeout', %(lock_wait)s, true)"
LOCK = "SELECT 1 FROM {schema}.sessions WHERE session_id = %(sid)s FOR UPDATE"
DELETE_RECORDS = "DELETE FROM {schema}.records WHERE session_id = ANY(%(sids)s)"
DELETE_SESSIONS = "DELETE FROM {schema}.sessions WHERE session_id = ANY(%(sids)s)"
IDLE = """
SELECT session_id FROM {schema}.sessions
WHERE written <= clock_timestamp() - make_interval(secs => %(idle)s)
ORDER BY session_id FOR UPDATE SKIP LOCKED
"""
