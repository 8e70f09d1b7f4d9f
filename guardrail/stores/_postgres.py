"""PostgreSQL stores: sessions in two tables, one row per session and one per identifier.

In a schema of the store's own (``guardrail`` unless told), created on
first use with ``CREATE ... IF NOT EXISTS``:

- ``sessions``: ``session_id``, ``version``, ``created``, ``written`` (the
  time of the last write), ``meta`` (JSON text) and ``meta_version``;
- ``records``: ``(session_id, name)`` -> ``version`` and ``record`` (JSON text), where
  ``name`` is ``[kind, key]`` as JSON;
- ``merge_record(held, new)`` and ``merge_meta(held, new)``: the protocol's merge
  rule (:func:`~guardrail.stores.merge_record`, :func:`~guardrail.stores.merge_meta`)
  in SQL.

A change is one statement: an upsert of the session row (which locks it,
so writers of one session take turns) and ``INSERT ... ON CONFLICT`` of
its records, merging a held row in SQL when it was written after the
writer's base version. Reading what changed since a version is one
statement too. Both are one round trip on an autocommit connection.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._json import has_surrogates
from guardrail.stores._protocol import USER_TEXTS_KEPT, Change, Meta, Snapshot, Written, damaged

try:
    import psycopg
    import psycopg_pool
    from psycopg import errors as pg_errors
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - exercised by a test with psycopg hidden
    raise ImportError(
        f"PostgresStore needs psycopg 3 and psycopg-pool ({exc}): "
        "pip install 'guardrail-ids[postgres]'"
    ) from exc

# The merge rule of guardrail.stores.merge_record / merge_meta, statement for statement; a
# property test holds the two to the same answers. Names compare by code point (COLLATE "C").
_SCHEMA = """
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
CREATE OR REPLACE FUNCTION {schema}.merge_record(held_text text, new_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    held jsonb := held_text::jsonb;
    new jsonb := new_text::jsonb;
    merged jsonb;
    live jsonb;
    mark jsonb;
    names jsonb;
    extra jsonb;
BEGIN
    IF held->>'state' = 'live' AND new->>'state' = 'live' THEN
        merged := held;
        IF (new->>'verified')::boolean AND NOT (held->>'verified')::boolean THEN
            merged := merged || jsonb_build_object(
                'verified', true, 'value', new->'value', 'source', new->'source');
        END IF;
        merged := merged || jsonb_build_object(
            'first_seen', least((held->'first_seen')::numeric, (new->'first_seen')::numeric));
        IF ROW((new->'turn')::numeric, coalesce(jsonb_typeof(new->'status'), 'null') <> 'null',
               coalesce(new->>'status', '') COLLATE "C")
           > ROW((held->'turn')::numeric, coalesce(jsonb_typeof(held->'status'), 'null') <> 'null',
                 coalesce(held->>'status', '') COLLATE "C") THEN
            merged := merged || jsonb_build_object('status', new->'status');
        END IF;
        merged := merged || jsonb_build_object(
            'last_used', greatest((held->'turn')::numeric, (new->'turn')::numeric),
            'turn', greatest((held->'turn')::numeric, (new->'turn')::numeric),
            'epoch', greatest((held->'epoch')::numeric, (new->'epoch')::numeric),
            'pinned', (held->>'pinned')::boolean OR (new->>'pinned')::boolean);
        names := jsonb_build_array(held->'role') || (held->'aliases');
        SELECT coalesce(jsonb_agg(name ORDER BY position), '[]'::jsonb) INTO extra
        FROM jsonb_array_elements(jsonb_build_array(new->'role') || (new->'aliases'))
            WITH ORDINALITY AS named(name, position)
        WHERE NOT names @> jsonb_build_array(name);
        RETURN (merged || jsonb_build_object('aliases', (held->'aliases') || extra))::text;
    END IF;
    IF held->>'state' = 'live' OR new->>'state' = 'live' THEN
        IF held->>'state' = 'live' THEN
            live := held;
            mark := new;
        ELSE
            live := new;
            mark := held;
        END IF;
        IF mark->>'state' <> 'dropped' AND (mark->'turn')::numeric >= (live->'turn')::numeric THEN
            live := mark;
        END IF;
        RETURN CASE WHEN live = held THEN held_text ELSE new_text END;
    END IF;
    IF ROW((new->'turn')::numeric, CASE new->>'state' WHEN 'evicted' THEN 2 WHEN 'gone' THEN 1
                                   ELSE 0 END)
       > ROW((held->'turn')::numeric, CASE held->>'state' WHEN 'evicted' THEN 2 WHEN 'gone' THEN 1
                                      ELSE 0 END) THEN
        RETURN new_text;
    END IF;
    RETURN held_text;
END
$$;
CREATE OR REPLACE FUNCTION {schema}.merge_meta(held_text text, new_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    held jsonb := held_text::jsonb;
    new jsonb := new_text::jsonb;
    counters jsonb;
    texts jsonb;
    kinds jsonb;
BEGIN
    SELECT coalesce(jsonb_object_agg(name, number), '{{}}'::jsonb) INTO counters FROM (
        SELECT coalesce(h.key, n.key) AS name,
               CASE WHEN n.key IS NULL THEN h.value
                    ELSE to_jsonb(greatest(n.value::numeric, coalesce(h.value::numeric, 0))) END
                   AS number
        FROM jsonb_each(held->'counters') AS h
        FULL JOIN jsonb_each(new->'counters') AS n ON h.key = n.key) AS joined;
    SELECT (held->'user_texts') || coalesce(jsonb_agg(text ORDER BY position), '[]'::jsonb)
        INTO texts
    FROM jsonb_array_elements(new->'user_texts') WITH ORDINALITY AS typed(text, position)
    WHERE NOT (held->'user_texts') @> jsonb_build_array(text);
    SELECT coalesce(jsonb_agg(text ORDER BY position), '[]'::jsonb) INTO texts
    FROM jsonb_array_elements(texts) WITH ORDINALITY AS typed(text, position)
    WHERE position > jsonb_array_length(texts) - {kept};
    SELECT coalesce(jsonb_agg(kind ORDER BY first), '[]'::jsonb) INTO kinds FROM (
        SELECT kind, min(position) AS first
        FROM jsonb_array_elements((held->'kinds') || (new->'kinds'))
            WITH ORDINALITY AS named(kind, position)
        GROUP BY kind) AS firsts;
    RETURN (held || jsonb_build_object(
        'turn', greatest((held->'turn')::numeric, (new->'turn')::numeric),
        'epoch', greatest((held->'epoch')::numeric, (new->'epoch')::numeric),
        'counters', counters,
        'user_texts', texts,
        'kinds', kinds,
        -- Re-prompt counts start again each turn: the later turn's, else the larger of each.
        'refusals', CASE
            WHEN (new->'turn')::numeric > (held->'turn')::numeric THEN new->'refusals'
            WHEN (new->'turn')::numeric < (held->'turn')::numeric THEN held->'refusals'
            ELSE (SELECT coalesce(jsonb_object_agg(tool, count), '{{}}'::jsonb) FROM (
                SELECT coalesce(h.key, n.key) AS tool,
                       CASE WHEN n.key IS NULL THEN h.value
                            WHEN h.key IS NULL THEN n.value
                            ELSE to_jsonb(greatest(n.value::numeric, h.value::numeric)) END
                           AS count
                FROM jsonb_each(held->'refusals') AS h
                FULL JOIN jsonb_each(new->'refusals') AS n ON h.key = n.key) AS joined)
            END))::text;
END
$$;
"""

# Microseconds since 1970 by the server's clock: a new session's first version.
_NOW = "floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

_APPLY = """
WITH clock AS (SELECT {now} AS now), durability AS (
    -- For this transaction only: whether its commit waits for the WAL to reach the disk.
    SELECT set_config('synchronous_commit', %(synchronous_commit)s, true)
), session AS (
    INSERT INTO {schema}.sessions AS held
        (session_id, version, created, meta, meta_version)
    SELECT %(sid)s, now, now - 1, %(meta)s::text,
           CASE WHEN %(meta)s::text IS NULL THEN 0 ELSE now END
    FROM clock
    ON CONFLICT (session_id) DO UPDATE SET
        version = held.version + 1,
        written = clock_timestamp(),
        meta = CASE WHEN excluded.meta IS NULL THEN held.meta
                    WHEN held.meta_version > %(base)s
                        THEN {schema}.merge_meta(held.meta, excluded.meta)
                    ELSE excluded.meta END,
        meta_version = CASE WHEN excluded.meta IS NULL THEN held.meta_version
                            ELSE held.version + 1 END
    RETURNING version, xmax = 0 AS inserted
), written AS (
    INSERT INTO {schema}.records AS held (session_id, name, version, record)
    SELECT %(sid)s, name, (SELECT version FROM session), record
    FROM unnest(%(names)s::text[], %(records)s::text[]) AS t(name, record)
    ON CONFLICT (session_id, name) DO UPDATE SET
        record = CASE WHEN held.version > %(base)s
                      THEN {schema}.merge_record(held.record, excluded.record)
                      ELSE excluded.record END,
        version = excluded.version
)
SELECT version, inserted OR version = %(base)s + 1 FROM session, durability
"""

# One snapshot of the session row and, unless the reader is up to date, the rows written
# since its version (all of them when the session started after that version).
_CHANGES = """
SELECT 0, version, created,
       CASE WHEN version <> %(since)s AND (created >= %(since)s OR meta_version > %(since)s)
            THEN meta END
FROM {schema}.sessions WHERE session_id = %(sid)s
UNION ALL
SELECT 1, r.version, NULL, r.record
FROM {schema}.records AS r JOIN {schema}.sessions AS s ON s.session_id = r.session_id
WHERE r.session_id = %(sid)s AND s.version <> %(since)s
  AND r.version > CASE WHEN s.created >= %(since)s THEN 0 ELSE %(since)s END
"""

_LOCK = "SELECT 1 FROM {schema}.sessions WHERE session_id = %(sid)s FOR UPDATE"
_DELETE_RECORDS = "DELETE FROM {schema}.records WHERE session_id = ANY(%(sids)s)"
_DELETE_SESSIONS = "DELETE FROM {schema}.sessions WHERE session_id = ANY(%(sids)s)"
_IDLE = """
SELECT session_id FROM {schema}.sessions
WHERE written <= clock_timestamp() - make_interval(secs => %(idle)s)
ORDER BY session_id FOR UPDATE SKIP LOCKED
"""


class _PostgresBase:
    """What the sync and the asyncio store share: the SQL, arguments, parsing, errors."""

    def __init__(self, target: object, schema: str, pool_class: type) -> None:
        if not isinstance(schema, str) or not schema:
            raise GuardrailUsageError(f"schema must be a non-empty name, not {schema!r}")
        if not isinstance(target, (str, pool_class)):
            raise GuardrailUsageError(
                f"{type(self).__name__} takes a connection string or a "
                f"psycopg_pool.{pool_class.__name__}, not {type(target).__name__}"
            )
        self.schema = schema
        self.synchronous_commit = True
        self._conninfo = target if isinstance(target, str) else str(getattr(target, "conninfo", ""))
        name = sql.Identifier(schema)
        self._sql = {
            key: sql.SQL(text).format(
                schema=name, now=sql.SQL(_NOW), kept=sql.Literal(USER_TEXTS_KEPT)
            )
            for key, text in (
                ("schema", _SCHEMA),
                ("apply", _APPLY),
                ("changes", _CHANGES),
                ("lock", _LOCK),
                ("delete_records", _DELETE_RECORDS),
                ("delete_sessions", _DELETE_SESSIONS),
                ("idle", _IDLE),
            )
        }
        self._lock_key = f"guardrail:{schema}"

    synchronous_commit: bool

    def _sid(self, session_id: str, action: str) -> str:
        """``session_id`` as a parameter; one PostgreSQL text cannot hold is a StoreError.

        Record names and JSON are written in ASCII, so a lone surrogate (half a
        character, which a JSON request may carry) in an id, a status or a text
        reads back as it was; in a session id it has no place.
        """
        if has_surrogates(session_id):
            raise StoreError(
                f"{self._where()}: session {session_id!r} was not {action}: its id holds a "
                "lone surrogate (half of a character), which PostgreSQL text cannot hold; "
                "give the session an id of whole characters",
                session_id=session_id,
            )
        return session_id

    def _params(self, session_id: str, change: Change) -> dict[str, Any]:
        """The apply statement's parameters: every record as JSON before anything is sent."""
        if not isinstance(session_id, str):
            raise GuardrailUsageError(f"a session id is a string, not {session_id!r}")
        self._sid(session_id, "written")
        names, texts = [], []
        for record in change.records:
            # [kind, key] as JSON: one name per id, in ASCII (a text column holds no NUL).
            names.append(json.dumps([record["kind"], record["key"]]))
            texts.append(json.dumps(record, separators=(",", ":")))
        if len(set(names)) != len(names):
            raise GuardrailUsageError(
                "a change holds at most one record per (kind, key); merge them before applying"
            )
        meta = None if change.meta is None else json.dumps(change.meta, separators=(",", ":"))
        return {
            "sid": session_id,
            "synchronous_commit": "on" if self.synchronous_commit else "off",
            "base": change.base,
            "meta": meta,
            "names": names,
            "records": texts,
        }

    def _snapshot(
        self, session_id: str, rows: Sequence[tuple[Any, ...]], since: int
    ) -> Snapshot | None:
        """The changes statement's rows as the protocol's answer to changes_since(since)."""
        head = [row for row in rows if row[0] == 0]
        if not head:
            return None if since == 0 else Snapshot(0)
        _, version, created, meta_text = head[0]
        if version == since:
            return None
        records = [self._parse(session_id, row[3], "a record") for row in rows if row[0] == 1]
        meta: Meta | None = None
        if meta_text is not None:
            meta = self._parse(session_id, meta_text, "the meta")
        return Snapshot(version, records, meta, created >= since)

    def _parse(self, session_id: str, text: str, what: str) -> dict[str, Any]:
        """A stored JSON object; anything else is a StoreError naming the session."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise self._corrupt(session_id, f"{what} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise self._corrupt(session_id, f"{what} is {type(value).__name__}, not an object")
        return value

    def _where(self) -> str:
        """The store as a message names it: its class, server, database and schema."""
        try:
            options = psycopg.conninfo.conninfo_to_dict(self._conninfo)
        except psycopg.Error:
            options = {}
        server = f"{options.get('host', 'localhost')}:{options.get('port', 5432)}"
        return (
            f"{type(self).__name__} at {server}/{options.get('dbname', '')} "
            f"(schema {self.schema!r})"
        )

    def _failed(self, action: str, session_id: str | None, exc: Exception) -> StoreError:
        """A database error as a StoreError that names the store, the session and what to do."""
        what = "sessions" if session_id is None else f"session {session_id!r}"
        if isinstance(
            exc,
            (pg_errors.UndefinedTable, pg_errors.InvalidSchemaName, pg_errors.UndefinedFunction),
        ):
            advice = (
                f"the schema {self.schema!r} or its tables are gone ({exc}): someone dropped "
                "them while the store was open, and the sessions they held are lost. Restore "
                "them from a backup, or build a new store to create them empty"
            )
        elif isinstance(
            exc,
            (
                pg_errors.UntranslatableCharacter,
                pg_errors.InvalidTextRepresentation,
                psycopg.DataError,
                pg_errors.DataException,
            ),
        ):
            advice = f"PostgreSQL refused the data ({exc}); nothing of the change was written"
        elif isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
            advice = (
                f"PostgreSQL is not reachable or the connection was lost ({exc}); check that "
                "the server is running and reachable, then retry (the ledger in memory is intact)"
            )
        else:
            advice = f"PostgreSQL failed: {exc}; retry, and check the server's log"
        return StoreError(
            f"{self._where()}: {what} was not {action}: {advice}", session_id=session_id
        )

    def _corrupt(self, session_id: str, problem: str) -> StoreError:
        return damaged(self._where(), session_id, problem)


class PostgresStore(_PostgresBase):
    """Sessions in PostgreSQL, one row per identifier, shared by every worker that reaches it.

    Built from a connection string (the store opens a small
    ``psycopg_pool.ConnectionPool`` of its own, closed by :meth:`close`) or
    an existing pool (left open). Tables go in ``schema``, created on first
    use. A pool whose connections are autocommit (``kwargs={"autocommit":
    True}``, as the store's own are) makes a check of a cached session and a
    record one round trip each. Two writers of one session take turns on its
    row, and rows another writer wrote meanwhile are merged in SQL by the
    protocol's rule, never overwritten. A server that cannot be reached, a
    schema dropped under the store, or a row holding something the store
    did not write is a :class:`~guardrail.errors.StoreError`.

    Each write commits durably (PostgreSQL's ``synchronous_commit``), which
    costs a WAL flush per record. ``synchronous_commit=False`` lets this
    store's commits return before the flush: a crash of the server may then
    lose the last fraction of a second of writes (never half of one), as
    Redis's default persistence would, and the ids they held are refused
    until looked up again.
    """

    def __init__(
        self,
        pool: str | psycopg_pool.ConnectionPool[Any],
        *,
        schema: str = "guardrail",
        synchronous_commit: bool = True,
        max_connections: int = 4,
        timeout: float = 10.0,
    ) -> None:
        super().__init__(pool, schema, psycopg_pool.ConnectionPool)
        self.synchronous_commit = bool(synchronous_commit)
        self._owns_pool = isinstance(pool, str)
        if isinstance(pool, str):
            pool = psycopg_pool.ConnectionPool(
                pool,
                min_size=1,
                max_size=max_connections,
                kwargs={"autocommit": True},
                timeout=timeout,
                open=True,
                name=f"guardrail-{schema}",
            )
        self.pool = pool
        self._ready = False
        self._ready_lock = threading.Lock()

    def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        return self.changes_since(session_id, 0)

    def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows other writers wrote since ``change.base``."""
        try:
            params = self._params(session_id, change)
        except GuardrailUsageError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise StoreError(
                f"{self._where()}: session {session_id!r} was not written: a record or the meta "
                f"cannot be stored as JSON ({exc}); nothing of the change was written",
                session_id=session_id,
            ) from exc
        rows = self._run("written", session_id, "apply", params)
        return Written(int(rows[0][0]), bool(rows[0][1]))

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        sid = self._sid(session_id, "read")
        rows = self._run("read", session_id, "changes", {"sid": sid, "since": version})
        return self._snapshot(session_id, rows, version)

    def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        self._sid(session_id, "deleted")
        self._setup()
        try:
            with self.pool.connection() as conn, conn.transaction():
                conn.execute(self._sql["lock"], {"sid": session_id})
                conn.execute(self._sql["delete_records"], {"sids": [session_id]})
                conn.execute(self._sql["delete_sessions"], {"sids": [session_id]})
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed("deleted", session_id, exc) from exc

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        self._setup()
        try:
            with self.pool.connection() as conn, conn.transaction():
                idle = [row[0] for row in conn.execute(self._sql["idle"], {"idle": max_idle})]
                if idle:
                    conn.execute(self._sql["delete_records"], {"sids": idle})
                    conn.execute(self._sql["delete_sessions"], {"sids": idle})
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed("expired", None, exc) from exc
        return idle

    def close(self) -> None:
        """Close the pool if the store opened it; a pool passed in stays open."""
        if self._owns_pool:
            self.pool.close()

    def _setup(self) -> None:
        """Create the schema, tables and functions once (concurrent stores take turns)."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            try:
                with self.pool.connection() as conn, conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,))
                    conn.execute(self._sql["schema"])
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise StoreError(
                    f"{self._where()}: cannot create the schema {self.schema!r} and its tables: "
                    f"{exc}; check the connection string and that the user may create them"
                ) from exc
            self._ready = True

    def _run(
        self, action: str, session_id: str, statement: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One statement, in a transaction of its own; its rows."""
        self._setup()
        try:
            with self.pool.connection() as conn:
                rows: list[tuple[Any, ...]]
                if conn.autocommit:
                    rows = conn.execute(self._sql[statement], params).fetchall()
                else:
                    with conn.transaction():
                        rows = conn.execute(self._sql[statement], params).fetchall()
                return rows
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(action, session_id, exc) from exc

    def __repr__(self) -> str:
        return f"<{self._where()}>"


class AsyncPostgresStore(_PostgresBase):
    """:class:`PostgresStore` for asyncio, on a ``psycopg_pool.AsyncConnectionPool``; same tables.

    Built from a connection string (its pool opens on first use) or an
    open ``AsyncConnectionPool``. A sync and an async store on one schema
    share their sessions.
    """

    def __init__(
        self,
        pool: str | psycopg_pool.AsyncConnectionPool[Any],
        *,
        schema: str = "guardrail",
        synchronous_commit: bool = True,
        max_connections: int = 4,
        timeout: float = 10.0,
    ) -> None:
        super().__init__(pool, schema, psycopg_pool.AsyncConnectionPool)
        self.synchronous_commit = bool(synchronous_commit)
        self._owns_pool = isinstance(pool, str)
        if isinstance(pool, str):
            pool = psycopg_pool.AsyncConnectionPool(
                pool,
                min_size=1,
                max_size=max_connections,
                kwargs={"autocommit": True},
                timeout=timeout,
                open=False,
                name=f"guardrail-{schema}",
            )
        self.pool = pool
        self._ready = False
        self._opened = not self._owns_pool
        self._ready_lock = asyncio.Lock()  # bound to a loop at first use, not here

    async def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        return await self.changes_since(session_id, 0)

    async def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows other writers wrote since ``change.base``."""
        try:
            params = self._params(session_id, change)
        except GuardrailUsageError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise StoreError(
                f"{self._where()}: session {session_id!r} was not written: a record or the meta "
                f"cannot be stored as JSON ({exc}); nothing of the change was written",
                session_id=session_id,
            ) from exc
        rows = await self._run("written", session_id, "apply", params)
        return Written(int(rows[0][0]), bool(rows[0][1]))

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        sid = self._sid(session_id, "read")
        rows = await self._run("read", session_id, "changes", {"sid": sid, "since": version})
        return self._snapshot(session_id, rows, version)

    async def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        self._sid(session_id, "deleted")
        await self._setup()
        try:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(self._sql["lock"], {"sid": session_id})
                await conn.execute(self._sql["delete_records"], {"sids": [session_id]})
                await conn.execute(self._sql["delete_sessions"], {"sids": [session_id]})
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed("deleted", session_id, exc) from exc

    async def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        await self._setup()
        try:
            async with self.pool.connection() as conn, conn.transaction():
                cursor = await conn.execute(self._sql["idle"], {"idle": max_idle})
                idle = [row[0] for row in await cursor.fetchall()]
                if idle:
                    await conn.execute(self._sql["delete_records"], {"sids": idle})
                    await conn.execute(self._sql["delete_sessions"], {"sids": idle})
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed("expired", None, exc) from exc
        return idle

    async def close(self) -> None:
        """Close the pool if the store opened it; a pool passed in stays open."""
        if self._owns_pool and self._opened:
            await self.pool.close()

    async def _setup(self) -> None:
        """Open the store's own pool and create the schema, tables and functions, once."""
        if self._ready:
            return
        async with self._ready_lock:  # tasks starting at once: one opens, the others wait
            if self._ready:
                return
            try:
                if not self._opened:
                    self._opened = True
                    await self.pool.open()
                async with self.pool.connection() as conn, conn.transaction():
                    await conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,)
                    )
                    await conn.execute(self._sql["schema"])
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise StoreError(
                    f"{self._where()}: cannot create the schema {self.schema!r} and its tables: "
                    f"{exc}; check the connection string and that the user may create them"
                ) from exc
            self._ready = True

    async def _run(
        self, action: str, session_id: str, statement: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One statement, in a transaction of its own; its rows."""
        await self._setup()
        try:
            async with self.pool.connection() as conn:
                rows: list[tuple[Any, ...]]
                if conn.autocommit:
                    cursor = await conn.execute(self._sql[statement], params)
                    rows = await cursor.fetchall()
                else:
                    async with conn.transaction():
                        cursor = await conn.execute(self._sql[statement], params)
                        rows = await cursor.fetchall()
                return rows
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(action, session_id, exc) from exc

    def __repr__(self) -> str:
        return f"<{self._where()}>"
