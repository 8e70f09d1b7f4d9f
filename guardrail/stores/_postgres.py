"""PostgreSQL stores: sessions in two tables, one row per session and one per identifier.

In a schema of the store's own (``guardrail`` unless told), created on
first use with ``CREATE ... IF NOT EXISTS``:

- ``sessions``: ``session_id``, ``version``, ``created``, ``written`` (the
  time of the last write), ``meta`` (JSON text) and ``meta_version``;
- ``records``: ``(session_id, name)`` -> ``version`` and ``record`` (JSON text), where
  ``name`` is ``[kind, key]`` as JSON;
- ``apply_change(...)``: writes one change, unless a row it would replace (or
  the meta) was written after the writer's base version.

A change is one call of ``apply_change``, which locks the session row (so
writers of one session take turns) and writes the change only if none of
its rows is at stake; else it writes nothing and returns the rows at stake,
which the store merges in Python by the one merge rule
(:func:`~guardrail.stores.protocol.merge_record`,
:func:`~guardrail.stores.protocol.merge_meta`) and sends again, based on the
version it just saw. Reading what changed since a version is one
statement. So a record costs one round trip on an autocommit connection,
and two when it meets a concurrent writer, as in the Redis store.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Sequence
from typing import Any

from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._json import has_surrogates
from guardrail.stores._postgres_sql import (
    APPLY,
    CHANGES,
    COMPATIBLE,
    DELETE_RECORDS,
    DELETE_SESSIONS,
    FUNCTION_NAME,
    FUNCTIONS,
    HAS_FUNCTION,
    IDLE,
    INSPECT,
    LOCK,
    LOCK_WAIT,
    NOW,
    SCHEMA_VERSION,
    SET_VERSION,
    TABLES,
    VERSION_ROW,
    VERSION_TABLE,
    WRITTEN_INDEX,
)
from guardrail.stores.protocol import (
    Change,
    Meta,
    Record,
    Snapshot,
    Written,
    damaged,
    deleted,
    merge_meta,
    merge_record,
)

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

#: Rounds of merge-and-retry before a write gives up (each one progresses).
_MAX_ATTEMPTS = 100


#: What _snapshot answers for a session past its ttl, for the caller to delete it.
_EXPIRED = Snapshot(-1)


def _ms(seconds: float) -> str:
    """A timeout as PostgreSQL settings take it: whole milliseconds, at least one."""
    return f"{max(1, round(seconds * 1000))}ms"


class _PostgresBase:
    """What the sync and the asyncio store share: the SQL, arguments, parsing, errors."""

    def __init__(
        self,
        target: object,
        schema: str,
        pool_class: type,
        timeouts: dict[str, float],
        ttl: float | None,
    ) -> None:
        if ttl is not None and (
            isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0
        ):
            raise GuardrailUsageError(
                f"ttl is how many seconds a session no one wrote is kept (> 0), or None, "
                f"not {ttl!r}"
            )
        self.ttl = None if ttl is None else float(ttl)
        for option, seconds in timeouts.items():
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
                raise GuardrailUsageError(
                    f"{option} is a number of seconds > 0 (the call fails with a StoreError "
                    f"past it), not {seconds!r}"
                )
        self.connect_timeout = float(timeouts["connect_timeout"])
        self.statement_timeout = float(timeouts["statement_timeout"])
        self.lock_timeout = float(timeouts["lock_timeout"])
        self.pool_timeout = float(timeouts["timeout"])
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
            key: sql.SQL(text).format(schema=name, now=sql.SQL(NOW))
            for key, text in (
                ("tables", TABLES),
                ("written_index", WRITTEN_INDEX),
                ("functions", FUNCTIONS),
                ("version_row", VERSION_ROW),
                ("version_table", VERSION_TABLE),
                ("set_version", SET_VERSION),
                ("apply", APPLY),
                ("changes", CHANGES),
                ("lock", LOCK),
                ("lock_wait", LOCK_WAIT),
                ("delete_records", DELETE_RECORDS),
                ("delete_sessions", DELETE_SESSIONS),
                ("idle", IDLE),
            )
        }
        self._lock_key = f"guardrail:{schema}"

    synchronous_commit: bool

    def _connection_options(self) -> dict[str, Any]:
        """What each connection of the store's own pool is opened with: autocommit, timeouts."""
        return {
            "autocommit": True,
            # libpq counts whole seconds, and at least 2.
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
            "options": (
                f"-c statement_timeout={_ms(self.statement_timeout)} "
                f"-c lock_timeout={_ms(self.lock_timeout)}"
            ),
        }

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

    def _encode(self, session_id: str, change: Change) -> dict[str, Record]:
        """The change's records by name (``[kind, key]`` as JSON); nothing is sent if one is bad."""
        if not isinstance(session_id, str):
            raise GuardrailUsageError(f"a session id is a string, not {session_id!r}")
        self._sid(session_id, "written")
        try:
            # [kind, key] as JSON: one name per id, in ASCII (a text column holds no NUL).
            records = {json.dumps([r["kind"], r["key"]]): r for r in change.records}
            self._params(session_id, change.base, records, change.meta)
        except (TypeError, ValueError, KeyError) as exc:
            raise StoreError(
                f"{self._where()}: session {session_id!r} was not written: a record or the meta "
                f"cannot be stored as JSON ({exc}); nothing of the change was written",
                session_id=session_id,
            ) from exc
        if len(records) != len(change.records):
            raise GuardrailUsageError(
                "a change holds at most one record per (kind, key); merge them before applying"
            )
        return records

    def _params(
        self,
        session_id: str,
        base: int,
        records: dict[str, Record],
        meta: Meta | None,
        change: Change | None = None,
    ) -> dict[str, Any]:
        """The apply statement's parameters: every record as JSON, the names to prune."""
        pruned = [] if change is None else [json.dumps([k, key]) for k, key in change.pruned]
        return {
            "ttl": self.ttl or 0.0,
            "pruned": pruned,
            "prune_base": 0 if change is None else change.base,
            "sid": session_id,
            "durable": self.synchronous_commit,
            "lock_wait": _ms(self.lock_timeout),
            "base": base,
            "meta": None if meta is None else json.dumps(meta, separators=(",", ":")),
            "names": list(records),
            "records": [json.dumps(record, separators=(",", ":")) for record in records.values()],
        }

    def _merged(
        self,
        session_id: str,
        change: Change,
        originals: dict[str, Record],
        sending: tuple[dict[str, Record], Meta | None],
        stake: tuple[Any, ...],
    ) -> tuple[dict[str, Record], Meta | None]:
        """What to send again: rows at stake merged anew with the change's own, the rest kept.

        A row at stake is merged with the record the change brought, not with what
        an earlier attempt merged: the held row already holds what should survive of
        the rows before it (a writer that replaced one had seen it).
        """
        names, rows, meta_text = stake
        records, meta = dict(sending[0]), sending[1]
        for name, row in zip(names or (), rows or (), strict=True):
            held = self._parse(session_id, row, f"record {name}")
            records[name] = merge_record(held, originals[name], concurrent=True)
        if meta_text is not None and change.meta is not None:
            held_meta = self._parse(session_id, meta_text, "the meta")
            meta = merge_meta(held_meta, change.meta, concurrent=True)
        return records, meta

    def _snapshot(
        self, session_id: str, rows: Sequence[tuple[Any, ...]], since: int
    ) -> Snapshot | None:
        """The changes statement's rows as the protocol's answer to changes_since(since)."""
        head = [row for row in rows if row[0] == 0]
        if not head:
            return None if since == 0 else Snapshot(0)
        _, version, created, meta_text, expired = head[0]
        if expired:  # past its ttl: gone (the caller deletes it)
            return _EXPIRED
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

    def _layout(
        self, session_id: str | None, tables: set[str], row: tuple[int, int] | None
    ) -> bool:
        """Check what the schema holds before using it; whether to write this layout's version.

        A database whose version row says code of this layout may not use it is
        refused; a used schema missing a table is damage (creating it anew, empty,
        would open every session as new), never repaired here.
        """
        what = "sessions" if session_id is None else f"session {session_id!r}"
        if row is not None and row[1] > SCHEMA_VERSION:
            raise StoreError(
                f"{self._where()}: {what} cannot be used: the schema {self.schema!r} was set up "
                f"by a newer guardrail (layout {row[0]}, usable from layout {row[1]} on; this "
                f"code knows layout {SCHEMA_VERSION}). Upgrade guardrail-ids in this program",
                session_id=session_id,
            )
        used = row is not None or bool(tables & {"sessions", "records"})
        missing = sorted({"sessions", "records"} - tables)
        if used and missing:
            raise StoreError(
                f"{self._where()}: {what} cannot be read: the table {', '.join(missing)} is "
                f"missing from the schema {self.schema!r} (dropped), and the sessions it held "
                "are lost. Restore it from a backup, or drop the schema to start with no "
                "sessions",
                session_id=session_id,
            )
        return row is None or row[0] < SCHEMA_VERSION

    def _not_set_up(self, session_id: str | None, exc: Exception) -> StoreError:
        """The error of a schema that could not be checked or created."""
        if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
            return self._failed("read", session_id, exc)
        return StoreError(
            f"{self._where()}: cannot create the schema {self.schema!r} and its tables: "
            f"{exc}; check the connection string and that the user may create them",
            session_id=session_id,
        )

    def _version_params(self, row: tuple[int, int] | None) -> dict[str, int]:
        compatible = COMPATIBLE if row is None else max(row[1], COMPATIBLE)
        return {"version": SCHEMA_VERSION, "compatible": compatible}

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
        if isinstance(exc, pg_errors.LockNotAvailable):
            advice = (
                f"lock_timeout: it waited {self.lock_timeout:g}s for the session's row, which "
                "another transaction holds locked (a long transaction, or a stuck worker); "
                "retry, or give the store a longer lock_timeout="
            )
        elif isinstance(exc, pg_errors.QueryCanceled):
            advice = (
                f"statement_timeout: a statement ran longer than {self.statement_timeout:g}s "
                f"and was cancelled ({exc}); retry, check the server's load, or give the store "
                "a longer statement_timeout="
            )
        elif isinstance(exc, psycopg_pool.PoolTimeout) or "timeout expired" in str(exc):
            advice = (
                f"connect_timeout: no connection within {self.pool_timeout:g}s (each attempt "
                f"gives up after connect_timeout={self.connect_timeout:g}s): the server is not "
                "reachable, does not answer, or every connection is busy; check the server, "
                "then retry (the ledger in memory is intact)"
            )
        elif isinstance(
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

    def _busy(self, session_id: str) -> StoreError:
        """The error of a change other writers kept putting at stake while it was merged."""
        return StoreError(
            f"{self._where()}: session {session_id!r} was not written: other writers changed "
            f"it {_MAX_ATTEMPTS} times while this change was merged; retry",
            session_id=session_id,
        )


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

    No call waits without bound: ``lock_timeout`` (2 s) for a session row
    another transaction holds locked, ``statement_timeout`` (5 s) for a
    statement, ``connect_timeout`` (3 s) for each connection attempt and
    ``timeout`` (5 s) for a connection from the pool; each, exceeded, is a
    :class:`~guardrail.errors.StoreError` naming it. The store's own pool
    sets all of them on its connections; on a pool passed in, the store sets
    ``lock_timeout`` for its own transactions, and the pool's connections
    bring their statement and connect timeouts.
    """

    def __init__(
        self,
        pool: str | psycopg_pool.ConnectionPool[Any],
        *,
        schema: str = "guardrail",
        synchronous_commit: bool = True,
        max_connections: int = 4,
        timeout: float = 5.0,
        connect_timeout: float = 3.0,
        statement_timeout: float = 5.0,
        lock_timeout: float = 2.0,
        ttl: float | None = None,
    ) -> None:
        timeouts = {
            "timeout": timeout,
            "connect_timeout": connect_timeout,
            "statement_timeout": statement_timeout,
            "lock_timeout": lock_timeout,
        }
        super().__init__(pool, schema, psycopg_pool.ConnectionPool, timeouts, ttl)
        self.synchronous_commit = bool(synchronous_commit)
        self._owns_pool = isinstance(pool, str)
        if isinstance(pool, str):
            pool = psycopg_pool.ConnectionPool(
                pool,
                min_size=1,
                max_size=max_connections,
                kwargs=self._connection_options(),
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
        originals = self._encode(session_id, change)
        records, meta, base = originals, change.meta, change.base
        for attempt in range(_MAX_ATTEMPTS):
            params = self._params(session_id, base, records, meta, change)
            row = self._run("written", session_id, "apply", params)[0]
            if row[0] == 0:
                raise deleted(self._where(), session_id)
            if row[2] is None and row[4] is None:  # written; a merge means someone else wrote
                return Written(int(row[0]), attempt == 0 and bool(row[1]))
            records, meta = self._merged(session_id, change, originals, (records, meta), row[2:])
            base = int(row[0])
        raise self._busy(session_id)

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        sid = self._sid(session_id, "read")
        params = {"sid": sid, "since": version, "ttl": self.ttl or 0.0}
        snapshot = self._snapshot(
            session_id, self._run("read", session_id, "changes", params), version
        )
        if snapshot is _EXPIRED:
            self.delete(session_id)
            return None if version == 0 else Snapshot(0)
        return snapshot

    def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        self._sid(session_id, "deleted")
        self._setup(session_id)
        try:
            with self.pool.connection() as conn, conn.transaction():
                conn.execute(self._sql["lock_wait"], {"lock_wait": _ms(self.lock_timeout)})
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

    def _setup(self, session_id: str | None = None) -> None:
        """Check or create the schema's tables, version row and function, once.

        Concurrent stores take turns on an advisory lock. Nothing is redefined
        that exists: a function is named by its layout, so workers of two
        releases running at once each call their own.
        """
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            try:
                with self.pool.connection() as conn, conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,))
                    found = conn.execute(INSPECT, {"schema": self.schema}).fetchall()
                    tables = {name for (name,) in found}
                    row = None
                    if "schema_version" in tables:
                        row = conn.execute(self._sql["version_row"]).fetchone()
                    write_version = self._layout(session_id, tables, row)
                    if not tables & {"sessions", "records"}:
                        conn.execute(self._sql["tables"])
                    elif "sessions_by_written" not in tables:
                        conn.execute(self._sql["written_index"])
                    name = {"schema": self.schema, "name": FUNCTION_NAME}
                    if conn.execute(HAS_FUNCTION, name).fetchone() is None:
                        conn.execute(self._sql["functions"])
                    if write_version:
                        conn.execute(self._sql["version_table"])
                        conn.execute(self._sql["set_version"], self._version_params(row))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise self._not_set_up(session_id, exc) from exc
            self._ready = True

    def _run(
        self, action: str, session_id: str, statement: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One statement, in a transaction of its own; its rows."""
        self._setup(session_id)
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
        timeout: float = 5.0,
        connect_timeout: float = 3.0,
        statement_timeout: float = 5.0,
        lock_timeout: float = 2.0,
        ttl: float | None = None,
    ) -> None:
        timeouts = {
            "timeout": timeout,
            "connect_timeout": connect_timeout,
            "statement_timeout": statement_timeout,
            "lock_timeout": lock_timeout,
        }
        super().__init__(pool, schema, psycopg_pool.AsyncConnectionPool, timeouts, ttl)
        self.synchronous_commit = bool(synchronous_commit)
        self._owns_pool = isinstance(pool, str)
        if isinstance(pool, str):
            pool = psycopg_pool.AsyncConnectionPool(
                pool,
                min_size=1,
                max_size=max_connections,
                kwargs=self._connection_options(),
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
        originals = self._encode(session_id, change)
        records, meta, base = originals, change.meta, change.base
        for attempt in range(_MAX_ATTEMPTS):
            params = self._params(session_id, base, records, meta, change)
            row = (await self._run("written", session_id, "apply", params))[0]
            if row[0] == 0:
                raise deleted(self._where(), session_id)
            if row[2] is None and row[4] is None:
                return Written(int(row[0]), attempt == 0 and bool(row[1]))
            records, meta = self._merged(session_id, change, originals, (records, meta), row[2:])
            base = int(row[0])
        raise self._busy(session_id)

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        sid = self._sid(session_id, "read")
        params = {"sid": sid, "since": version, "ttl": self.ttl or 0.0}
        rows = await self._run("read", session_id, "changes", params)
        snapshot = self._snapshot(session_id, rows, version)
        if snapshot is _EXPIRED:
            await self.delete(session_id)
            return None if version == 0 else Snapshot(0)
        return snapshot

    async def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        self._sid(session_id, "deleted")
        await self._setup(session_id)
        try:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(self._sql["lock_wait"], {"lock_wait": _ms(self.lock_timeout)})
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

    async def _setup(self, session_id: str | None = None) -> None:
        """Open the store's own pool, then check or create what the schema holds, once."""
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
                    cursor = await conn.execute(INSPECT, {"schema": self.schema})
                    tables = {name for (name,) in await cursor.fetchall()}
                    row = None
                    if "schema_version" in tables:
                        cursor = await conn.execute(self._sql["version_row"])
                        row = await cursor.fetchone()
                    write_version = self._layout(session_id, tables, row)
                    if not tables & {"sessions", "records"}:
                        await conn.execute(self._sql["tables"])
                    elif "sessions_by_written" not in tables:
                        await conn.execute(self._sql["written_index"])
                    name = {"schema": self.schema, "name": FUNCTION_NAME}
                    cursor = await conn.execute(HAS_FUNCTION, name)
                    if await cursor.fetchone() is None:
                        await conn.execute(self._sql["functions"])
                    if write_version:
                        await conn.execute(self._sql["version_table"])
                        await conn.execute(self._sql["set_version"], self._version_params(row))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise self._not_set_up(session_id, exc) from exc
            self._ready = True

    async def _run(
        self, action: str, session_id: str, statement: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One statement, in a transaction of its own; its rows."""
        await self._setup(session_id)
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
