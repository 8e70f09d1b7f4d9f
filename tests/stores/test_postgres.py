"""PostgresStore: the store conformance suite on a real PostgreSQL, and what only it has."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest
from psycopg import sql

from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._postgres import AsyncPostgresStore, PostgresStore
from guardrail.stores._postgres_sql import COMPATIBLE, FUNCTION_NAME, SCHEMA_VERSION
from guardrail.stores.protocol import Change, Snapshot

from . import damage as damages
from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory, live, meta
from .conformance_processes import *  # noqa: F403  (the multi-process tests)
from .conformance_ttl import *  # noqa: F403  (the ttl tests)
from .differential import same_as_memory
from .proxy import Proxy, Silent


@pytest.fixture
def store_factory(postgres_dsn: str, postgres_schema: str) -> StoreFactory:
    """Stores with pools of their own, one schema: the same sessions, in any process."""
    return StoreFactory(functools.partial(PostgresStore, postgres_dsn, schema=postgres_schema))


@pytest.fixture
def ttl_store_factory(postgres_dsn: str, postgres_schema: str) -> StoreFactory:
    """Stores with ttl=60 on the schema store_factory uses."""
    return StoreFactory(
        functools.partial(PostgresStore, postgres_dsn, schema=postgres_schema, ttl=60)
    )


@pytest.fixture
def pg(postgres_dsn: str, postgres_schema: str) -> Iterator[PostgresStore]:
    """A PostgresStore on this test's schema."""
    store = PostgresStore(postgres_dsn, schema=postgres_schema)
    yield store
    store.close()


def admin(dsn: str) -> psycopg.Connection[Any]:
    """A connection of the test's own, to look at and tamper with the tables."""
    return psycopg.connect(dsn, autocommit=True)


# The pool's maintenance thread draws from the random module while Hypothesis generates
# data, which Hypothesis reports as a strategy using random: not so here.
pool_uses_random = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning"
)


def test_the_store_keeps_no_merge_rule_of_its_own(pg: PostgresStore, postgres_dsn: str) -> None:
    """The schema has no merge function: rows at stake come back to be merged in Python."""
    pg.load("warm-up")  # creates the schema and its function
    with admin(postgres_dsn) as conn:
        functions = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s ORDER BY p.proname",
            (pg.schema,),
        ).fetchall()
    assert [name for (name,) in functions] == [FUNCTION_NAME]


# -- the server going away, and what it holds going bad ------------------------------------------


def test_a_dropped_schema_is_an_error_not_an_empty_session(
    pg: PostgresStore, postgres_dsn: str
) -> None:
    """Dropping the schema under an open store: load raises StoreError, never reads as new."""
    pg.apply("s", Change(0, [live("W1")], meta()))
    with admin(postgres_dsn) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(pg.schema)))
    with pytest.raises(StoreError, match=r"PostgresStore at 127\.0\.0\.1:5432.*schema") as caught:
        pg.load("s")
    assert caught.value.session_id == "s"
    with pytest.raises(StoreError, match="gone"):
        pg.apply("s", Change(0, [live("W2")], meta()))


def test_a_killed_connection_is_an_error_then_the_pool_recovers(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """A backend terminated under the store: that call raises StoreError, the next one works."""
    store = PostgresStore(postgres_dsn, schema=postgres_schema, max_connections=1)
    try:
        store.apply("s", Change(0, [live("W1")], meta()))
        with store.pool.connection() as conn:
            pid = conn.info.backend_pid
        with admin(postgres_dsn) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreError, match="not reachable or the connection was lost"):
            store.load("s")
        loaded = store.load("s")
        assert loaded is not None and {r["key"] for r in loaded.records} == {"W1"}
    finally:
        store.close()


def test_a_server_that_goes_away_is_an_error_not_an_empty_session(
    postgres_schema: str, pg: PostgresStore
) -> None:
    """PostgreSQL stops answering mid-conversation: StoreError on read and write, never None."""
    with Proxy("127.0.0.1", 5432) as proxy:
        store = PostgresStore(
            f"host=127.0.0.1 port={proxy.port} dbname=test connect_timeout=1",
            schema=postgres_schema,
            timeout=1,
        )
        version = store.apply("s", Change(0, [live("W1")], meta())).version
        proxy.stop()
        with pytest.raises(StoreError, match=rf"PostgresStore at 127\.0\.0\.1:{proxy.port}/test"):
            store.changes_since("s", version)
        with pytest.raises(StoreError, match="not reachable"):
            store.load("s")
        with pytest.raises(StoreError, match="not reachable"):
            store.apply("s", Change(version, [live("W2")]))
        store.close()
    held = pg.load("s")
    assert held is not None and [r["key"] for r in held.records] == ["W1"]


def test_an_unreachable_server_is_an_error_naming_the_store() -> None:
    """A closed port: every call is a StoreError naming the store and what to check."""
    store = PostgresStore("host=127.0.0.1 port=1 dbname=test connect_timeout=1", timeout=1)
    try:
        with pytest.raises(StoreError, match=r"PostgresStore at 127\.0\.0\.1:1/test"):
            store.load("s")
    finally:
        store.close()


def test_a_garbage_row_is_an_error_naming_the_session(pg: PostgresStore, postgres_dsn: str) -> None:
    """A record or meta that is not a JSON object: StoreError naming the session, not a skip."""
    pg.apply("s", Change(0, [live("W1"), live("W2")], meta()))
    table = sql.Identifier(pg.schema, "records")
    with admin(postgres_dsn) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET record = 'not json' WHERE name LIKE '%W2%'").format(table)
        )
    with pytest.raises(StoreError, match=r"session 's' holds bad data: a record is not JSON"):
        pg.load("s")
    with admin(postgres_dsn) as conn:
        conn.execute(sql.SQL("UPDATE {} SET record = '[1]' WHERE name LIKE '%W2%'").format(table))
        conn.execute(
            sql.SQL("UPDATE {} SET meta = '\"x\"'").format(sql.Identifier(pg.schema, "sessions"))
        )
    with pytest.raises(StoreError, match="holds bad data"):
        pg.load("s")


def test_a_value_postgres_cannot_hold_writes_nothing(pg: PostgresStore) -> None:
    """A NUL in a value is stored escaped, and the change is whole or absent."""
    version = pg.apply("s", Change(0, [live("W\x001", value="W\x001")], meta())).version
    loaded = pg.load("s")
    assert loaded is not None and loaded.version == version
    assert [r["value"] for r in loaded.records] == ["W\x001"]


def test_a_change_naming_one_id_twice_is_refused(pg: PostgresStore) -> None:
    """Two records for one (kind, key) in one change is a usage error, nothing written."""
    with pytest.raises(GuardrailUsageError, match="at most one record"):
        pg.apply("s", Change(0, [live("W1"), live("W1", turn=2)], meta()))
    assert pg.load("s") is None


def test_commits_without_a_wal_flush_only_when_asked(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """synchronous_commit=False applies to the store's own commits, not to its connections."""
    for durable in (True, False):
        store = PostgresStore(
            postgres_dsn, schema=postgres_schema, synchronous_commit=durable, max_connections=1
        )
        try:
            written = store.apply(f"s{durable}", Change(0, [live("W1")], meta()))
            assert store.changes_since(f"s{durable}", written.version) is None
            with store.pool.connection() as conn:
                assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        finally:
            store.close()


def test_an_existing_pool_is_used_and_left_open(postgres_dsn: str, postgres_schema: str) -> None:
    """A store on the program's own pool (not autocommit) works, and close() leaves the pool."""
    with psycopg_pool.ConnectionPool(postgres_dsn, min_size=1, max_size=2, open=True) as pool:
        store = PostgresStore(pool, schema=postgres_schema)
        written = store.apply("s", Change(0, [live("W1")], meta()))
        assert store.changes_since("s", written.version) is None
        store.close()
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(GuardrailUsageError, match="connection string or a psycopg_pool"):
        PostgresStore(42, schema=postgres_schema)  # type: ignore[arg-type]


def test_one_statement_per_check_and_per_record(postgres_dsn: str, postgres_schema: str) -> None:
    """On autocommit connections, checking an up-to-date session and a record: a statement each."""
    statements: list[str] = []

    class Counting(psycopg.Connection[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            statements.append(str(query))
            return super().execute(query, params, **kwargs)

    with psycopg_pool.ConnectionPool(
        postgres_dsn, connection_class=Counting, kwargs={"autocommit": True}, open=True
    ) as pool:
        store = PostgresStore(pool, schema=postgres_schema)
        store.load("warm-up")
        statements.clear()
        version = store.apply("s", Change(0, [live(f"W{n}") for n in range(50)], meta())).version
        assert len(statements) == 1
        statements.clear()
        assert store.changes_since("s", version) is None
        assert len(statements) == 1


# -- asyncio ----------------------------------------------------------------------------------


def test_async_store_and_sync_store_share_sessions(postgres_dsn: str, postgres_schema: str) -> None:
    """An AsyncPostgresStore writes what a PostgresStore on the same schema reads, and back."""

    async def scenario() -> Snapshot | None:
        store = AsyncPostgresStore(postgres_dsn, schema=postgres_schema)
        try:
            written = await store.apply("s", Change(0, [live("W1")], meta()))
            assert written.alone
            sync = PostgresStore(postgres_dsn, schema=postgres_schema)
            sync.apply("s", Change(written.version, [live("W2")]))
            sync.close()
            return await store.changes_since("s", written.version)
        finally:
            await store.close()

    delta = asyncio.run(scenario())
    assert delta is not None and [r["key"] for r in delta.records] == ["W2"]


def test_the_sync_and_the_async_store_build_their_own_pool_alike(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Both stores give their own pool the same size, timeouts and connection options."""
    options: dict[str, Any] = {
        "schema": postgres_schema,
        "max_connections": 3,
        "timeout": 4,
        "connect_timeout": 7,
        "statement_timeout": 6,
        "lock_timeout": 1.5,
    }
    sync = PostgresStore(postgres_dsn, **options)
    later = AsyncPostgresStore(postgres_dsn, **options)
    try:
        for pool in (sync.pool, later.pool):
            assert (pool.min_size, pool.max_size, pool.timeout) == (1, 3, 4)
            assert pool.name == f"guardrail-{postgres_schema}"
            assert pool.kwargs == {
                "autocommit": True,
                "connect_timeout": 7,
                "options": "-c statement_timeout=6000ms -c lock_timeout=1500ms",
            }
        assert not sync.pool.closed and later.pool.closed  # the asyncio pool opens on first use
    finally:
        sync.close()


def test_without_the_extra_the_import_says_what_to_install() -> None:
    """With psycopg missing, importing PostgresStore names the extra to install."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "try:\n    from guardrail.stores import PostgresStore\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'guardrail-ids[postgres]'" in out.stdout


@pool_uses_random
def test_any_sequence_of_writes_ends_as_in_memory(pg: PostgresStore) -> None:
    """Writes from stale and fresh bases, deletes: the same rows as the memory store keeps."""
    same_as_memory(pg)


@pytest.fixture
def damage(postgres_dsn: str, postgres_schema: str) -> Callable[[Any, str, str], None]:
    """Damages a session through a connection of the test's own."""
    return lambda store, session_id, how: damages.postgres(
        postgres_dsn, postgres_schema, session_id, how
    )


# -- the schema's layout version ------------------------------------------------------------


def _proc_xmin(dsn: str, schema: str) -> list[tuple[str, str]]:
    """The schema's functions with the transaction that last (re)defined each."""
    with admin(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.xmin::text FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s"
            " ORDER BY p.proname",
            (schema,),
        ).fetchall()
    return [(name, xmin) for name, xmin in rows]


def test_a_store_starting_redefines_nothing(pg: PostgresStore, postgres_dsn: str) -> None:
    """A second store (a worker starting) finds the layout in place and leaves it untouched."""
    pg.apply("s", Change(0, [live("W1")], meta()))
    before = _proc_xmin(postgres_dsn, pg.schema)
    other = PostgresStore(postgres_dsn, schema=pg.schema)
    try:
        assert other.load("s") is not None
    finally:
        other.close()
    assert _proc_xmin(postgres_dsn, pg.schema) == before
    with admin(postgres_dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT version, compatible FROM {}").format(
                sql.Identifier(pg.schema, "schema_version")
            )
        ).fetchall()
    assert row == [(SCHEMA_VERSION, COMPATIBLE)]


def _set_version(dsn: str, schema: str, version: int, compatible: int) -> None:
    with admin(dsn) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET version = %s, compatible = %s").format(
                sql.Identifier(schema, "schema_version")
            ),
            (version, compatible),
        )


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, depth first."""
    return [plan, *(node for child in plan.get("Plans", ()) for node in _plan_nodes(child))]


def test_a_reader_that_is_up_to_date_touches_no_record_whatever_the_plan(
    pg: PostgresStore, postgres_dsn: str
) -> None:
    """The records are read only under a one-time filter on the session row's version.

    As a join condition, the planner could scan every record of the session first and
    filter after: with the statistics of a table that just grew, 8 ms a check at 10k
    entries and 80 ms at 100k, for a session nobody had changed.
    """
    pg.apply("s", Change(0, [live(f"W{i}") for i in range(50)], meta()))
    held = pg.load("s")
    assert held is not None
    with admin(postgres_dsn) as conn:
        statement = pg._sql["changes"].as_bytes(conn)
        params = {"sid": "s", "since": held.version, "ttl": 0.0, "layout": SCHEMA_VERSION}
        explained = conn.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).fetchone()
    assert explained is not None
    (plan,) = explained[0]
    nodes = _plan_nodes(plan["Plan"])
    gates = [node for node in nodes if "One-Time Filter" in node]
    assert gates, "no one-time filter: the records' scan depends on the plan"
    under = [node for gate in gates for node in _plan_nodes(gate)]
    scans = [node for node in nodes if node.get("Relation Name") == "records"]
    assert scans and all(any(scan is node for node in under) for scan in scans)
    assert all(scan.get("Actual Loops", 0) == 0 for scan in scans)
    assert pg.changes_since("s", held.version) is None


def test_a_schema_of_layout_2_is_taken_over_and_its_object_records_still_read(
    pg: PostgresStore, postgres_dsn: str
) -> None:
    """Layout 2 wrote records as JSON objects: they read the same, and the schema says 3."""
    pg.apply("s", Change(0, [live("W1"), live("W2", turn=2)], meta()))
    written = pg.load("s")
    assert written is not None
    records = sql.Identifier(pg.schema, "records")
    with admin(postgres_dsn) as conn:
        for (name,) in conn.execute(sql.SQL("SELECT name FROM {}").format(records)).fetchall():
            key = json.loads(name)[1]
            record = next(r for r in written.records if r["key"] == key)
            conn.execute(
                sql.SQL("UPDATE {} SET record = %s WHERE name = %s").format(records),
                (json.dumps(dict(record)), name),
            )
    _set_version(postgres_dsn, pg.schema, 2, 2)
    upgraded = PostgresStore(postgres_dsn, schema=pg.schema)
    try:
        read = upgraded.load("s")
        assert read is not None
        assert sorted(map(json.dumps, read.records)) == sorted(map(json.dumps, written.records))
        upgraded.apply("s", Change(read.version, [live("W3")]))  # written as a row beside them
        again = upgraded.load("s")
        assert again is not None and {r["key"] for r in again.records} == {"W1", "W2", "W3"}
    finally:
        upgraded.close()
    with admin(postgres_dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT version, compatible FROM {}").format(
                sql.Identifier(pg.schema, "schema_version")
            )
        ).fetchall()
    assert row == [(SCHEMA_VERSION, COMPATIBLE)]


def test_a_database_of_a_newer_layout_is_refused(pg: PostgresStore, postgres_dsn: str) -> None:
    """A schema a newer release set up, usable only from its layout on: a StoreError saying so."""
    pg.apply("s", Change(0, [live("W1")], meta()))
    newer = SCHEMA_VERSION + 1
    _set_version(postgres_dsn, pg.schema, newer, newer)
    older = PostgresStore(postgres_dsn, schema=pg.schema)
    try:
        with pytest.raises(
            StoreError, match=rf"newer guardrail \(layout {newer}.*knows layout {SCHEMA_VERSION}"
        ):
            older.load("s")
    finally:
        older.close()
    _set_version(postgres_dsn, pg.schema, newer, SCHEMA_VERSION)  # newer, but usable by this one
    compatible = PostgresStore(postgres_dsn, schema=pg.schema)
    try:
        assert compatible.load("s") is not None
    finally:
        compatible.close()


def test_a_running_store_stops_at_a_schema_upgraded_under_it(
    pg: PostgresStore, postgres_dsn: str
) -> None:
    """Upgraded by a newer release while in use: the next read and write say so; none written."""
    base = pg.apply("s", Change(0, [live("W1")], meta())).version
    newer = SCHEMA_VERSION + 1
    _set_version(postgres_dsn, pg.schema, newer, newer)
    for call in (
        lambda: pg.changes_since("s", base),
        lambda: pg.load("s"),
        lambda: pg.apply("s", Change(base, [live("W2")])),
    ):
        with pytest.raises(StoreError, match=rf"newer guardrail \(layout {newer}") as caught:
            call()
        assert caught.value.session_id == "s"

    async def in_asyncio() -> None:
        store = AsyncPostgresStore(postgres_dsn, schema=pg.schema)
        try:
            with pytest.raises(StoreError, match="Upgrade guardrail-ids"):
                await store.apply("s", Change(base, [live("W2")]))
        finally:
            await store.close()

    asyncio.run(in_asyncio())
    _set_version(postgres_dsn, pg.schema, SCHEMA_VERSION, COMPATIBLE)
    assert pg.changes_since("s", base) is None  # nothing was written meanwhile


def test_an_unversioned_schema_of_an_earlier_release_is_taken_over(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Tables an earlier release made (no version row): used as they are, its function left."""
    from guardrail.stores._postgres_sql import TABLES

    name = sql.Identifier(postgres_schema)
    with admin(postgres_dsn) as conn:
        conn.execute(sql.SQL(TABLES).format(schema=name))
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {}.apply_change() RETURNS int LANGUAGE sql AS 'SELECT 1'"
            ).format(name)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (session_id, version, created, meta) VALUES ('s', 5, 4, %s)"
            ).format(sql.Identifier(postgres_schema, "sessions")),
            (json.dumps(meta()),),
        )
    store = PostgresStore(postgres_dsn, schema=postgres_schema)
    try:
        assert store.load("s") is not None
        store.apply("s", Change(5, [live("W1")]))
    finally:
        store.close()
    names = [proc for proc, _ in _proc_xmin(postgres_dsn, postgres_schema)]
    assert names == ["apply_change", FUNCTION_NAME]


# -- never hanging ----------------------------------------------------------------------------


def _hold_row_lock(dsn: str, schema: str, session_id: str) -> tuple[threading.Thread, Any]:
    """Another connection locks the session's row (SELECT ... FOR UPDATE) until released.

    Returns the holding thread and the event that releases it (at the latest after 30 s:
    a store with no lock timeout would wait that long, then write, and fail the test).
    """
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE session_id = %s FOR UPDATE").format(
                    sql.Identifier(schema, "sessions")
                ),
                (session_id,),
            )
            locked.set()
            release.wait(timeout=30)
            conn.rollback()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert locked.wait(timeout=30)
    return thread, release


def test_a_row_lock_held_elsewhere_is_a_lock_timeout_not_a_hang(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """A second connection holds the session's row: apply and delete give up with lock_timeout."""
    store = PostgresStore(postgres_dsn, schema=postgres_schema, lock_timeout=0.3)
    try:
        base = store.apply("s", Change(0, [live("W1")], meta())).version
        holder, release = _hold_row_lock(postgres_dsn, postgres_schema, "s")
        try:
            with pytest.raises(StoreError, match=r"lock_timeout: it waited 0\.3s") as caught:
                store.apply("s", Change(base, [live("W2")]))
            assert caught.value.session_id == "s"
            with pytest.raises(StoreError, match="lock_timeout"):
                store.delete("s")
        finally:
            release.set()
            holder.join()
        assert store.apply("s", Change(base, [live("W2")])).alone
    finally:
        store.close()


def test_a_statement_past_its_timeout_is_cancelled_and_named(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """A read stuck behind a table lock past statement_timeout: a StoreError that says so."""
    store = PostgresStore(
        postgres_dsn, schema=postgres_schema, statement_timeout=0.3, lock_timeout=30
    )
    try:
        store.apply("s", Change(0, [live("W1")], meta()))
        with admin(postgres_dsn) as conn, conn.transaction():
            conn.execute(
                sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                    sql.Identifier(postgres_schema, "records")
                )
            )
            with pytest.raises(StoreError, match=r"statement_timeout: .*longer than 0\.3s"):
                store.load("s")
    finally:
        store.close()


def test_a_server_that_never_answers_is_a_connect_timeout(postgres_schema: str) -> None:
    """A server that accepts and stays silent: StoreError naming connect_timeout, not a hang."""
    with Silent() as silent:
        store = PostgresStore(
            f"host=127.0.0.1 port={silent.port} dbname=test",
            schema=postgres_schema,
            connect_timeout=1,
            timeout=3,
        )
        try:
            with pytest.raises(StoreError, match="connect_timeout") as caught:
                store.load("s")
            assert caught.value.session_id == "s"
        finally:
            store.close()


def test_timeouts_must_be_positive_seconds(postgres_dsn: str) -> None:
    """A timeout of zero or not a number is a usage error saying what to pass."""
    for option in ("connect_timeout", "statement_timeout", "lock_timeout", "timeout"):
        with pytest.raises(GuardrailUsageError, match=f"{option} is a number of seconds"):
            PostgresStore(postgres_dsn, **{option: 0})  # type: ignore[arg-type]


@pytest.fixture
def age(postgres_dsn: str, postgres_schema: str) -> Callable[[Any, str, float], None]:
    """Ages a session through a connection of the test's own."""
    return lambda store, session_id, seconds: damages.age_postgres(
        postgres_dsn, postgres_schema, session_id, seconds
    )
