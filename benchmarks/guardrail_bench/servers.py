"""The server stores: what Redis and PostgreSQL add to a guarded call, against the memory store.

It needs the servers the tests use, Redis at 127.0.0.1:6379 and PostgreSQL at
127.0.0.1:5432 (database ``test``), and writes under a prefix and schemas of its own,
dropped afterwards; a server that does not answer is named in the table instead.

Each measured operation is what a worker does per tool call when it opens the
conversation's session around it (as an agent framework's hook does):

- **allowed call**: ``with guard.session(id): guard.check(...)`` on a session
  cached in the worker and up to date with the store (the store is asked
  whether anything changed: nothing);
- **record**: ``with guard.session(id): guard.record(...)`` of a result with
  one new id (the scope's end writes that id and the session's meta).

The added cost (store - memory) is the median of per-round differences. Then 8
worker processes (2 in quick mode), 8 conversations each, serve them at once (a check
and a record per tool call) for a few seconds, and the bytes a session of 10,000
entries holds on each server are read from the server itself.
"""

from __future__ import annotations

import functools
import multiprocessing
import random
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from guardrail import Guard
from guardrail.stores import MemoryStore, Store

from ._internals import admit, batch
from .common import Run, ids
from .report import Row, Section, Target
from .timing import Runner, calls, interleaved, paired_difference, stopwatch

REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_DSN = "host=127.0.0.1 port=5432 dbname=test"
TARGETS = {"Redis": 1.0, "PostgreSQL": 2.0}  # ms added per allowed call at 10k entries
ASYNC_COMMIT = "PostgreSQL, synchronous_commit off"


@dataclass(frozen=True)
class Sizes:
    entries: tuple[int, ...]
    rounds: int
    per_sample: int  # operations per timed sample
    workers: int  # worker processes serving conversations at once
    workers_seconds: float
    size_entries: int  # the session whose bytes are measured


FULL = Sizes(
    (1_000, 10_000, 100_000),
    rounds=15,
    per_sample=40,
    workers=8,
    workers_seconds=5.0,
    size_entries=10_000,
)
QUICK = Sizes((200,), rounds=2, per_sample=3, workers=2, workers_seconds=0.5, size_entries=200)


# -- guards and sessions ------------------------------------------------------------------------


def make_guard(store: Store) -> Guard:
    guard = Guard(capacity=10_000_000, store=store)
    guard.add_kind("order", pattern=r"ord_[A-Za-z0-9]{10}")
    guard.declare("get_order", produces={"order_id": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"})
    return guard


def fill(guard: Guard, session_id: str, orders: Sequence[str]) -> None:
    """A session holding ``orders``, written to the guard's store as one change."""
    with guard.session(session_id) as ledger:
        admit(ledger, [batch("order", orders)])


# -- the stores ---------------------------------------------------------------------------------


def redis_store(prefix: str) -> Store:
    from guardrail.stores import RedisStore

    return RedisStore.from_url(REDIS_URL, prefix=prefix)


def postgres_store(schema: str, synchronous_commit: bool = True) -> Store:
    from guardrail.stores import PostgresStore

    return PostgresStore(POSTGRES_DSN, schema=schema, synchronous_commit=synchronous_commit)


def drop_redis(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{{{prefix}:*", count=1000))
    for start in range(0, len(keys), 1000):
        client.delete(*keys[start : start + 1000])
    client.close()


def drop_postgres(schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def redis_bytes(prefix: str, session_id: str) -> int:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    tag = f"{{{prefix}:{session_id}}}"
    used = sum(client.memory_usage(f"{tag}:{part}", samples=0) or 0 for part in "srz")
    client.close()
    return used


def postgres_bytes(schema: str, session_id: str) -> int:
    """The records table and its indexes, per the rows of the one session it holds."""
    import psycopg

    with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
        conn.execute(f'VACUUM ANALYZE "{schema}".records')
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass)", (f'"{schema}".records',)
        ).fetchone()
    assert row is not None
    return int(row[0])


def answers(name: str) -> str | None:
    """None when the server ``name`` (Redis or PostgreSQL) answers, else why not."""
    try:
        if name == "Redis":
            import redis

            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
        else:
            import psycopg

            psycopg.connect(POSTGRES_DSN, connect_timeout=2).close()
    except Exception as exc:  # an absent server or client: that store is left out
        return f"{name} ({type(exc).__name__})"
    return None


class ServerStores:
    """Redis and PostgreSQL stores for the ``stores`` group, where the servers answer.

    Each on a prefix or schema of this run's own, dropped by :meth:`close`
    with every store made. A server that does not answer is left out, named in
    :attr:`missing`.
    """

    def __init__(self) -> None:
        run = uuid.uuid4().hex[:10]
        self.prefix, self.schema = f"guardrail-bench-{run}", f"guardrail_bench_{run}"
        self.made: list[Store] = []
        self.missing: list[str] = []
        self._factories: dict[str, Callable[[], Store]] = {}
        for server, store in (("Redis", "RedisStore"), ("PostgreSQL", "PostgresStore")):
            why = answers(server)
            if why is not None:
                self.missing.append(why)
            elif server == "Redis":
                self._factories[store] = lambda: self._keep(redis_store(self.prefix))
            else:
                self._factories[store] = lambda: self._keep(postgres_store(self.schema))

    def _keep(self, store: Store) -> Store:
        self.made.append(store)
        return store

    def factories(self) -> dict[str, Callable[[], Store]]:
        return dict(self._factories)

    def stored_bytes(self, store: object, session_id: str) -> float | None:
        """What the server holds for one session, or None for a store not made here.

        Redis: ``MEMORY USAGE`` of the session's keys. PostgreSQL: the session's share
        (by rows) of the records table with its indexes, after a vacuum.
        """
        from guardrail.stores import PostgresStore, RedisStore

        if isinstance(store, RedisStore):
            return float(redis_bytes(self.prefix, session_id))
        if isinstance(store, PostgresStore):
            import psycopg

            total = postgres_bytes(self.schema, session_id)
            with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
                counts = conn.execute(
                    f"SELECT count(*) FILTER (WHERE session_id = %s), count(*) "
                    f'FROM "{self.schema}".records',
                    (session_id,),
                ).fetchone()
            assert counts is not None
            return float(total * counts[0] / max(1, counts[1]))
        return None

    def close(self) -> None:
        for store in self.made:
            store.close()
        if "RedisStore" in self._factories:
            drop_redis(self.prefix)
        if "PostgresStore" in self._factories:
            drop_postgres(self.schema)


# -- the group ----------------------------------------------------------------------------------


def per_call(
    stores: dict[str, Store], sizes: Sizes, entries: int, rng: random.Random
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per-round seconds a check and a record take on each store, at ``entries`` entries."""
    orders = ids(rng, "ord_", 10, entries)
    checks: dict[str, Runner] = {}
    records: dict[str, Runner] = {}
    for name, store in stores.items():
        guard = make_guard(store)
        session_id = f"bench-{entries}-{uuid.uuid4().hex[:6]}"
        fill(guard, session_id, orders)
        known = {"order_id": orders[len(orders) // 2]}
        fresh = iter(ids(random.Random(entries), "ord_", 10, 100_000))

        def check(guard: Guard = guard, sid: str = session_id, known: Any = known) -> None:
            with guard.session(sid):
                assert guard.check("refund", known).allowed

        def record(guard: Guard = guard, sid: str = session_id, new: Any = fresh) -> None:
            with guard.session(sid):
                guard.record("get_order", {}, {"order_id": next(new)})

        check()  # warm: scripts loaded, statements prepared, the session cached
        checks[name], records[name] = calls(check), calls(record)
    print(f"  {entries:,} entries ...", file=sys.stderr, flush=True)
    checked = interleaved(checks, rounds=sizes.rounds, number=sizes.per_sample)
    written = interleaved(records, rounds=sizes.rounds, number=sizes.per_sample)
    return checked, written


def _worker(build: Callable[[], Store], worker: int, seconds: float, start: Any, done: Any) -> None:
    guard = make_guard(build())
    rng = random.Random(worker)
    sessions = [f"conv-{worker}-{n}" for n in range(8)]
    for sid in sessions:
        fill(guard, sid, ids(rng, "ord_", 10, 50))
    known = {sid: guard.ledger_for(sid).entries()[0].value for sid in sessions}
    start.wait()
    count, took = 0, stopwatch()
    while took() < seconds:
        sid = sessions[count % len(sessions)]
        with guard.session(sid):
            assert guard.check("refund", {"order_id": known[sid]}).allowed
            guard.record("get_order", {}, {"order_id": f"ord_{worker:02d}{count:08d}"})
        count += 1
    done.put(count)


def workers(build: Callable[[], Store], seconds: float, processes: int) -> float:
    """Tool calls per second (a check and a record each) of ``processes`` workers at once."""
    context = multiprocessing.get_context("spawn")
    start, done = context.Barrier(processes + 1), context.Queue()
    procs = [
        context.Process(target=_worker, args=(build, n, seconds, start, done))
        for n in range(processes)
    ]
    for proc in procs:
        proc.start()
    start.wait()
    took = stopwatch()
    total = sum(done.get(timeout=seconds + 120) for _ in procs)
    elapsed = took()
    for proc in procs:
        proc.join()
    return float(total / elapsed)


def bench_servers(run: Run) -> None:
    """Redis and PostgreSQL against the memory store: per call, 8 workers, bytes held."""
    sizes: Sizes = run.pick(FULL, QUICK)
    entries = run.store_entries or sizes.entries
    title = "Server stores: added to the memory store per tool call, session opened around it"
    section = Section(title)
    missing = [why for why in (answers("Redis"), answers("PostgreSQL")) if why is not None]
    if missing:
        why = f"the server did not answer: {', '.join(missing)}"
        section.rows = [Row("Redis and PostgreSQL stores", skipped=why)]
        run.report.sections.append(section)
        return
    tag = uuid.uuid4().hex[:10]
    prefix, schema = f"guardrail-bench-{tag}", f"guardrail_bench_{tag}"
    stores: dict[str, Store] = {
        "memory": MemoryStore(),
        "Redis": redis_store(prefix),
        "PostgreSQL": postgres_store(schema),
        ASYNC_COMMIT: postgres_store(f"{schema}_async", synchronous_commit=False),
    }
    load = Section(
        f"Server stores: {sizes.workers} worker processes, and the bytes a session holds"
    )
    added: dict[tuple[str, int], float] = {}
    try:
        print("per call ...", file=sys.stderr, flush=True)
        rng = random.Random(7)
        for count in entries:
            checked, written = per_call(stores, sizes, count, rng)
            for name in stores:
                if name == "memory":
                    continue
                label = f"{name}, {count:,} entries"
                for what, samples in (("allowed call", checked), ("record", written)):
                    pairs = zip(samples[name], samples["memory"], strict=True)
                    difference = [a - b for a, b in pairs]
                    section.rows.append(Row(f"{label}: {what}, added", difference, unit="ms"))
                added[name, count] = paired_difference(checked[name], checked["memory"])
        builders: dict[str, Callable[[], Store]] = {
            "Redis": functools.partial(redis_store, prefix),
            "PostgreSQL": functools.partial(postgres_store, schema),
        }
        for name, build in builders.items():
            print(f"{sizes.workers} workers, {name} ...", file=sys.stderr, flush=True)
            rate = workers(build, sizes.workers_seconds, sizes.workers)
            what = f"{name}: tool calls/s, {sizes.workers} worker processes"
            load.ratios.append((f"{what} (a check and a record each)", f"{rate:,.0f}"))
        orders = ids(random.Random(1), "ord_", 10, sizes.size_entries)
        # A schema holding only the measured session: the table's size is that session's.
        sized: dict[str, tuple[Callable[[str], Store], Callable[[str, str], int], str]] = {
            "Redis": (redis_store, redis_bytes, prefix),
            "PostgreSQL": (postgres_store, postgres_bytes, f"{schema}_size"),
        }
        for name, (build_one, measure, where) in sized.items():
            store = build_one(where)
            fill(make_guard(store), "sized", orders)
            per_entry = measure(where, "sized") / sizes.size_entries
            load.rows.append(
                Row(f"{name}: bytes per entry, a {sizes.size_entries:,}-entry session",
                    [per_entry], unit="B")
            )  # fmt: skip
            store.close()
    finally:
        for store in stores.values():
            store.close()
        drop_redis(prefix)
        drop_postgres(schema)
        drop_postgres(f"{schema}_size")
        drop_postgres(f"{schema}_async")
    section.notes.append(
        f"Medians of {sizes.rounds} interleaved rounds of {sizes.per_sample} operations a "
        "sample; each row is the per-round difference from the memory store's same case. "
        "The allowed call finds the session cached and the store unchanged; the record "
        "writes one new id."
    )
    run.report.sections += [section, load]
    for name, limit in TARGETS.items():
        at = 10_000 if (name, 10_000) in added else max(n for store, n in added if store == name)
        value = added[name, at] * 1e3
        run.report.targets.append(
            Target(
                f"{name}: allowed call, added at {at:,} entries",
                f"≤ {limit:g} ms",
                f"{value:.3f} ms",
                value <= limit,
            )
        )
