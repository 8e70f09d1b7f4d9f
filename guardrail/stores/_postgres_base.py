"""What the PostgreSQL stores share: options, the SQL they run, arguments, replies, errors.

:mod:`guardrail.stores._postgres` has the two stores, sync and asyncio, on
top of :class:`PostgresBase`; :mod:`guardrail.stores._postgres_sql` the SQL.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar

from guardrail._data.rows import from_row, is_row
from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._deadline import Watch
from guardrail.stores._json import decode_rows, encode_record, has_surrogates
from guardrail.stores._postgres_sql import (
    APPLY,
    CHANGES,
    COMPATIBLE,
    DELETE_RECORDS,
    DELETE_SESSIONS,
    EXPIRE_ONE,
    FUNCTION_NAME,
    FUNCTIONS,
    HAS_FUNCTION,
    IDLE,
    INSPECT,
    LOAD,
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
from guardrail.stores._steps import Steps
from guardrail.stores.protocol import (
    Change,
    Meta,
    Record,
    Snapshot,
    Written,
    checked_ttl,
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

# The client is re-exported: the stores' module imports it from here, after the check above.
__all__ = ["PostgresBase", "milliseconds", "psycopg", "psycopg_pool"]

#: How many records a write may carry per second allowed past ``call_timeout``.
RECORDS_PER_SECOND = 10_000

#: Rounds of merge-and-retry before a write gives up (each one progresses).
MAX_ATTEMPTS = 100


#: What _snapshot answers for a session past its ttl, for the caller to delete it.
EXPIRED = Snapshot(-1)


def milliseconds(seconds: float) -> str:
    """A timeout as PostgreSQL settings take it: whole milliseconds, at least one."""
    return f"{max(1, round(seconds * 1000))}ms"


class PostgresBase:
    """What the sync and the asyncio store share: options, the SQL, arguments, parsing, errors."""

    #: The pool a store of this class takes, and builds from a connection string.
    _pool_class: ClassVar[type[Any]]
    pool: Any

    def __init__(
        self,
        pool: object,
        *,
        schema: str,
        synchronous_commit: bool,
        max_connections: int,
        timeout: float,
        connect_timeout: float,
        statement_timeout: float,
        lock_timeout: float,
        call_timeout: float,
        ttl: float | None,
    ) -> None:
        self.ttl = checked_ttl(ttl)
        timeouts = {
            "timeout": timeout,
            "connect_timeout": connect_timeout,
            "statement_timeout": statement_timeout,
            "lock_timeout": lock_timeout,
            "call_timeout": call_timeout,
        }
        for option, seconds in timeouts.items():
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
                raise GuardrailUsageError(
                    f"{option} is a number of seconds > 0 (the call fails with a StoreError "
                    f"past it), not {seconds!r}"
                )
        self.connect_timeout = float(connect_timeout)
        self.statement_timeout = float(statement_timeout)
        self.lock_timeout = float(lock_timeout)
        self.call_timeout = float(call_timeout)
        self.pool_timeout = float(timeout)
        if not isinstance(schema, str) or not schema:
            raise GuardrailUsageError(f"schema must be a non-empty name, not {schema!r}")
        if not isinstance(pool, (str, self._pool_class)):
            raise GuardrailUsageError(
                f"{type(self).__name__} takes a connection string or a "
                f"psycopg_pool.{self._pool_class.__name__}, not {type(pool).__name__}"
            )
        self.schema = schema
        self.synchronous_commit = bool(synchronous_commit)
        self._conninfo = pool if isinstance(pool, str) else str(getattr(pool, "conninfo", ""))
        name = sql.Identifier(schema)
        self._sql = {
            key: sql.SQL(text).format(
                schema=name, now=sql.SQL(NOW), function=sql.Identifier(FUNCTION_NAME)
            )
            for key, text in (
                ("tables", TABLES),
                ("written_index", WRITTEN_INDEX),
                ("functions", FUNCTIONS),
                ("version_row", VERSION_ROW),
                ("version_table", VERSION_TABLE),
                ("set_version", SET_VERSION),
                ("apply", APPLY),
                ("changes", CHANGES),
                ("load", LOAD),
                ("lock", LOCK),
                ("lock_wait", LOCK_WAIT),
                ("delete_records", DELETE_RECORDS),
                ("delete_sessions", DELETE_SESSIONS),
                ("expire_one", EXPIRE_ONE),
                ("idle", IDLE),
            )
        }
        self._lock_key = f"guardrail:{schema}"
        #: Whether the store built its pool from a connection string (and closes it).
        self._owns_pool = isinstance(pool, str)
        self.pool = pool
        if isinstance(pool, str):
            self.pool = self._pool_class(
                pool,
                min_size=1,
                max_size=max_connections,
                kwargs=self._connection_options(),
                timeout=timeout,
                # An asyncio pool opens on first use, in the loop that uses it.
                open=not issubclass(self._pool_class, psycopg_pool.AsyncConnectionPool),
                name=f"guardrail-{schema}",
            )
        self._ready = False

    def _bound(self, records: int) -> float:
        """How long one call may use a connection: ``call_timeout``, and more for a big write.

        A write carries its records in the call: the client encodes them and the
        server writes them while the call runs, one second per 10,000 of them allowed.
        """
        return self.call_timeout + records / RECORDS_PER_SECOND

    def _connection_options(self) -> dict[str, Any]:
        """What each connection of the store's own pool is opened with: autocommit, timeouts."""
        return {
            "autocommit": True,
            # libpq counts whole seconds, and at least 2.
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
            "options": (
                f"-c statement_timeout={milliseconds(self.statement_timeout)} "
                f"-c lock_timeout={milliseconds(self.lock_timeout)}"
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
            "layout": SCHEMA_VERSION,
            "ttl": self.ttl or 0.0,
            "pruned": pruned,
            "prune_base": 0 if change is None else change.base,
            "sid": session_id,
            "durable": self.synchronous_commit,
            "lock_wait": milliseconds(self.lock_timeout),
            "base": base,
            "meta": None if meta is None else json.dumps(meta, separators=(",", ":")),
            "names": list(records),
            "records": [encode_record(record) for record in records.values()],
        }

    def _applying(self, session_id: str, change: Change) -> Steps[Written]:
        """apply, for both stores: yields each statement's arguments for ``_run``, gets its rows.

        A row another writer wrote since the base is merged here by the
        protocol's rule and the change sent again, based on the version seen.
        """
        originals = self._encode(session_id, change)
        records, meta, base = originals, change.meta, change.base
        for attempt in range(MAX_ATTEMPTS):
            params = self._params(session_id, base, records, meta, change)
            row = (yield "written", session_id, "apply", params)[0]
            if row[5] > SCHEMA_VERSION:  # nothing was written
                raise self._newer(session_id, row[6], row[5])
            if row[0] == 0:
                raise deleted(self._where(), session_id)
            if row[2] is None and row[4] is None:  # written; a merge means someone else wrote
                return Written(int(row[0]), attempt == 0 and bool(row[1]))
            records, meta = self._merged(session_id, change, originals, (records, meta), row[2:5])
            base = int(row[0])
        raise self._busy(session_id)

    def _reading(self, session_id: str, version: int) -> Steps[Snapshot | None]:
        """changes_since (and load, from 0), for both stores: as :meth:`_applying`."""
        sid = self._sid(session_id, "read")
        params = {"sid": sid, "since": version, "ttl": self.ttl or 0.0, "layout": SCHEMA_VERSION}
        rows = yield "read", session_id, "load" if version == 0 else "changes", params
        snapshot = self._snapshot(session_id, rows, version)
        if snapshot is EXPIRED:
            yield "deleted", session_id, "expire_one", params
            return None if version == 0 else Snapshot(0)
        return snapshot

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
            held = self._parse(session_id, row, f"record {name}", record=True)
            records[name] = merge_record(held, originals[name], concurrent=True)
        if meta_text is not None and change.meta is not None:
            held_meta = self._parse(session_id, meta_text, "the meta")
            meta = merge_meta(held_meta, change.meta, concurrent=True)
        return records, meta

    def _snapshot(
        self, session_id: str, rows: Sequence[tuple[Any, ...]], since: int
    ) -> Snapshot | None:
        """The changes statement's rows as the protocol's answer to changes_since(since)."""
        for row in rows:
            if row[0] == 2:  # the schema's version row asks for newer code
                raise self._newer(session_id, row[2], row[1])
        head = [row for row in rows if row[0] == 0]
        if not head:
            return None if since == 0 else Snapshot(0)
        _, version, created, meta_text, expired = head[0]
        if expired:  # past its ttl: gone (the caller deletes it)
            return EXPIRED
        if version == since:
            return None
        texts = [row[3] for row in rows if row[0] == 1]
        try:  # each row alone, by the fast parser
            records: Sequence[Record] = decode_rows(texts)
        except ValueError:  # the row at fault, named
            records = [self._parse(session_id, text, "a record", record=True) for text in texts]
        meta: Meta | None = None
        if meta_text is not None:
            meta = self._parse(session_id, meta_text, "the meta")
        return Snapshot(version, records, meta, created >= since)

    def _parse(
        self, session_id: str, text: str, what: str, *, record: bool = False
    ) -> dict[str, Any]:
        """A stored JSON object (or row, for a ``record``); else a StoreError naming the session."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise self._corrupt(session_id, f"{what} is not JSON ({exc})") from None
        if record and is_row(value):
            return from_row(value)  # type: ignore[no-any-return]
        if not isinstance(value, dict):
            raise self._corrupt(session_id, f"{what} is {type(value).__name__}, not an object")
        return value

    def _deleting(self, session_id: str) -> Steps[None]:
        """The statements of delete, for both stores: they wait for a write in progress to end."""
        yield self._sql["lock_wait"], {"lock_wait": milliseconds(self.lock_timeout)}
        yield self._sql["lock"], {"sid": session_id}
        yield self._sql["delete_records"], {"sids": [session_id]}
        yield self._sql["delete_sessions"], {"sids": [session_id]}

    def _expiring(self, max_idle: float) -> Steps[list[str]]:
        """The statements of expire, for both stores; the ids of the sessions they deleted."""
        idle = [row[0] for row in (yield self._sql["idle"], {"idle": max_idle})]
        if idle:
            yield self._sql["delete_records"], {"sids": idle}
            yield self._sql["delete_sessions"], {"sids": idle}
        return idle

    def _setting_up(self, session_id: str | None) -> Steps[None]:
        """The schema checked or created, for both stores: yields each statement, gets its rows.

        Concurrent stores take turns on an advisory lock. Nothing is redefined
        that exists: a function is named by its layout, so workers of two
        releases running at once each call their own.
        """
        yield "SELECT pg_advisory_xact_lock(hashtext(%s))", (self._lock_key,)
        tables = {name for (name,) in (yield INSPECT, {"schema": self.schema})}
        row = None
        if "schema_version" in tables:
            found = yield self._sql["version_row"], None
            row = found[0] if found else None
        write_version = self._layout(session_id, tables, row)
        if not tables & {"sessions", "records"}:
            yield self._sql["tables"], None
        elif "sessions_by_written" not in tables:
            yield self._sql["written_index"], None
        if not (yield HAS_FUNCTION, {"schema": self.schema, "name": FUNCTION_NAME}):
            yield self._sql["functions"], None
        if write_version:
            yield self._sql["version_table"], None
            yield self._sql["set_version"], self._version_params(row)

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
            raise self._newer(session_id, row[0], row[1])
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

    def _newer(self, session_id: str | None, layout: int, compatible: int) -> StoreError:
        """The error of a schema a newer release set up (or upgraded while this code ran)."""
        what = "sessions" if session_id is None else f"session {session_id!r}"
        return StoreError(
            f"{self._where()}: {what} cannot be used: the schema {self.schema!r} was set up "
            f"by a newer guardrail (layout {layout}, usable from layout {compatible} on; this "
            f"code knows layout {SCHEMA_VERSION}); nothing was written. Upgrade guardrail-ids "
            "in this program",
            session_id=session_id,
        )

    def _not_set_up(
        self, session_id: str | None, exc: Exception, watch: Watch | None = None
    ) -> StoreError:
        """The error of a schema that could not be checked or created."""
        if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout)):
            return self._failed("read", session_id, exc, watch)
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

    def _failed(
        self, action: str, session_id: str | None, exc: Exception, watch: Watch | None = None
    ) -> StoreError:
        """A database error as a StoreError that names the store, the session and what to do."""
        what = "sessions" if session_id is None else f"session {session_id!r}"
        if watch is not None and watch.fired:
            advice = (
                f"call_timeout: no answer within {self.call_timeout:g}s on an open connection "
                "(the server stalled, or the network between drops packets; the server's own "
                "timeouts cannot fire for a query it never received), so the store closed the "
                "connection"
            )
            if action == "written":
                advice += (
                    ". The write may have been applied or not: the ledger in memory keeps the "
                    "change and sends it again, and the next read of the session settles it"
                )
            advice += "; check the server and the network, then retry"
        elif isinstance(exc, pg_errors.LockNotAvailable):
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
            f"it {MAX_ATTEMPTS} times while this change was merged; retry",
            session_id=session_id,
        )
