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
import contextlib
import functools
import threading
from typing import Any, TypeVar

from guardrail.stores._deadline import Watch, Watchdog, watch_async
from guardrail.stores._postgres_base import PostgresBase, psycopg, psycopg_pool
from guardrail.stores._steps import Steps, run, run_async
from guardrail.stores.protocol import Change, Snapshot, Written

_T = TypeVar("_T")


def _rows(conn: psycopg.Connection[Any], statement: Any, params: Any) -> list[tuple[Any, ...]]:
    """What one statement returns: its rows, or none for a statement that returns nothing."""
    cursor = conn.execute(statement, params)
    return cursor.fetchall() if cursor.description is not None else []


async def _rows_async(
    conn: psycopg.AsyncConnection[Any], statement: Any, params: Any
) -> list[tuple[Any, ...]]:
    """:func:`_rows`, awaited."""
    cursor = await conn.execute(statement, params)
    return await cursor.fetchall() if cursor.description is not None else []


class PostgresStore(PostgresBase):
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
    statement, ``connect_timeout`` (3 s) for each connection attempt,
    ``timeout`` (5 s) for a connection from the pool and ``call_timeout``
    (5 s, and a second more per 10,000 records a write carries) for a call
    on an open connection, whatever the network does (past it the store
    shuts the connection's socket down); each, exceeded, is a
    :class:`~guardrail.errors.StoreError` naming it. The store's own pool
    sets the first three on its connections; on a pool passed in, the store
    sets ``lock_timeout`` for its own transactions, and the pool's
    connections bring their statement and connect timeouts.
    """

    _pool_class = psycopg_pool.ConnectionPool
    pool: psycopg_pool.ConnectionPool[Any]

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
        call_timeout: float = 5.0,
        ttl: float | None = None,
    ) -> None:
        super().__init__(
            pool,
            schema=schema,
            synchronous_commit=synchronous_commit,
            max_connections=max_connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            call_timeout=call_timeout,
            ttl=ttl,
        )
        self._ready_lock = threading.Lock()
        self._watchdog = Watchdog(f"guardrail-{schema}-deadline")

    def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        return self.changes_since(session_id, 0)

    def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows other writers wrote since ``change.base``."""
        return run(self._applying(session_id, change), self._run)

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        return run(self._reading(session_id, version), self._run)

    def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        self._sid(session_id, "deleted")
        self._setup(session_id)
        self._transaction(self._deleting(session_id), "deleted", session_id)

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        self._setup()
        return self._transaction(self._expiring(max_idle), "expired", None)

    def _transaction(self, steps: Steps[_T], action: str, session_id: str | None) -> _T:
        """``steps``' statements in one transaction; a failure says what was not ``action``."""
        watch: Watch | None = None
        try:
            with (
                self.pool.connection() as conn,
                self._watching(conn) as watch,
                conn.transaction(),
            ):
                return run(steps, functools.partial(_rows, conn))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(action, session_id, exc, watch) from exc

    def _watching(
        self, conn: psycopg.Connection[Any], records: int = 0
    ) -> contextlib.AbstractContextManager[Watch]:
        """The block using ``conn``, cut off past its bound whatever the network does."""
        return self._watchdog.watching(self._bound(records), conn.fileno, conn.close)

    def close(self) -> None:
        """Close the pool if the store opened it; a pool passed in stays open."""
        self._watchdog.stop()
        if self._owns_pool:
            self.pool.close()

    def _setup(self, session_id: str | None = None) -> None:
        """Check or create the schema's tables, version row and function, once."""
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            watch: Watch | None = None
            try:
                with (
                    self.pool.connection() as conn,
                    self._watching(conn) as watch,
                    conn.transaction(),
                ):
                    run(self._setting_up(session_id), functools.partial(_rows, conn))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise self._not_set_up(session_id, exc, watch) from exc
            self._ready = True

    def _run(
        self, action: str, session_id: str, statement: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One statement, in a transaction of its own; its rows."""
        self._setup(session_id)
        watch: Watch | None = None
        try:
            records = len(params.get("names", ()))
            with self.pool.connection() as conn, self._watching(conn, records) as watch:
                rows: list[tuple[Any, ...]]
                if conn.autocommit:
                    rows = conn.execute(self._sql[statement], params).fetchall()
                else:
                    with conn.transaction():
                        rows = conn.execute(self._sql[statement], params).fetchall()
                return rows
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(action, session_id, exc, watch) from exc

    def __repr__(self) -> str:
        return f"<{self._where()}>"


class AsyncPostgresStore(PostgresBase):
    """:class:`PostgresStore` for asyncio, on a ``psycopg_pool.AsyncConnectionPool``; same tables.

    Built from a connection string (its pool opens on first use) or an
    open ``AsyncConnectionPool``. A sync and an async store on one schema
    share their sessions.
    """

    _pool_class = psycopg_pool.AsyncConnectionPool
    pool: psycopg_pool.AsyncConnectionPool[Any]

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
        call_timeout: float = 5.0,
        ttl: float | None = None,
    ) -> None:
        super().__init__(
            pool,
            schema=schema,
            synchronous_commit=synchronous_commit,
            max_connections=max_connections,
            timeout=timeout,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            lock_timeout=lock_timeout,
            call_timeout=call_timeout,
            ttl=ttl,
        )
        self._opened = not self._owns_pool
        self._ready_lock = asyncio.Lock()  # bound to a loop at first use, not here

    async def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        return await self.changes_since(session_id, 0)

    async def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows other writers wrote since ``change.base``."""
        return await run_async(self._applying(session_id, change), self._run)

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        return await run_async(self._reading(session_id, version), self._run)

    async def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        self._sid(session_id, "deleted")
        await self._setup(session_id)
        await self._transaction(self._deleting(session_id), "deleted", session_id)

    async def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        await self._setup()
        return await self._transaction(self._expiring(max_idle), "expired", None)

    async def _transaction(self, steps: Steps[_T], action: str, session_id: str | None) -> _T:
        """:meth:`PostgresStore._transaction`, awaited."""
        watch: Watch | None = None
        try:
            async with (
                self.pool.connection() as conn,
                self._watching(conn) as watch,
                conn.transaction(),
            ):
                return await run_async(steps, functools.partial(_rows_async, conn))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise self._failed(action, session_id, exc, watch) from exc

    def _watching(
        self, conn: psycopg.AsyncConnection[Any], records: int = 0
    ) -> contextlib.AbstractAsyncContextManager[Watch]:
        """:meth:`PostgresStore._watching`: a timer on the running loop."""
        return watch_async(self._bound(records), conn.fileno, conn.close)

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
            watch: Watch | None = None
            try:
                if not self._opened:
                    self._opened = True
                    await self.pool.open()
                async with (
                    self.pool.connection() as conn,
                    self._watching(conn) as watch,
                    conn.transaction(),
                ):
                    await run_async(
                        self._setting_up(session_id), functools.partial(_rows_async, conn)
                    )
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise self._not_set_up(session_id, exc, watch) from exc
            self._ready = True

    async def _run(
        self, action: str, session_id: str, statement: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One statement, in a transaction of its own; its rows."""
        await self._setup(session_id)
        watch: Watch | None = None
        try:
            records = len(params.get("names", ()))
            async with self.pool.connection() as conn, self._watching(conn, records) as watch:
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
            raise self._failed(action, session_id, exc, watch) from exc

    def __repr__(self) -> str:
        return f"<{self._where()}>"
