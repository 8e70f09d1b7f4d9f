"""What a server store adds to a guarded call: Redis and PostgreSQL against the memory store.

Run ``python benchmarks/servers.py`` (1k, 10k and 100k entries) or ``--quick``
(tiny sizes, only to check that it runs). It needs the servers the tests use,
Redis at 127.0.0.1:6379 and PostgreSQL at 127.0.0.1:5432 (database ``test``),
and writes under a prefix and a schema of its own, dropped afterwards.

Each measured operation is what a worker does per tool call when it opens
the conversation's session around it (as an agent framework's hook does):

- **allowed call**: ``with guard.session(id): guard.check(...)`` on a session
  cached in the worker and up to date with the store (the store is asked
  whether anything changed: nothing);
- **record**: ``with guard.session(id): guard.record(...)`` of a result with
  one new id (the scope's end writes that id and the session's meta).

Cases are timed in interleaved rounds (every case once per round, rotated), so
the added cost (store - memory) is taken from samples moments apart. Then 8
worker processes serve 64 conversations at once (a check and a record per
tool call) for a few seconds, and the bytes a session of 10,000 entries holds
on each server are read from the server itself.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import random
import statistics
import string
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guardrail import Guard
from guardrail._harvest import Batch
from guardrail.ledger import Source
from guardrail.ledger._ledger import state_of
from guardrail.stores import MemoryStore, Store

REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_DSN = "host=127.0.0.1 port=5432 dbname=test"
ALPHABET = string.ascii_letters + string.digits
TARGETS = {"Redis": 1.0, "PostgreSQL": 2.0}  # ms added per allowed call at 10k entries
ASYNC_COMMIT = "PostgreSQL, synchronous_commit off"


@dataclass(frozen=True)
class Sizes:
    entries: tuple[int, ...]
    rounds: int
    per_sample: int  # operations per timed sample
    workers_seconds: float
    size_entries: int  # the session whose bytes are measured


FULL = Sizes(
    (1_000, 10_000, 100_000), rounds=15, per_sample=40, workers_seconds=5.0, size_entries=10_000
)
QUICK = Sizes((200,), rounds=2, per_sample=3, workers_seconds=0.5, size_entries=200)


@dataclass
class Result:
    """One store's numbers."""

    name: str
    check_ms: dict[int, float] = field(default_factory=dict)  # entries -> added ms per call
    record_ms: dict[int, float] = field(default_factory=dict)
    ops_per_second: float = 0.0
    bytes_per_entry: float = 0.0


# -- guards and sessions ----------------------------------------------------------------------


def ids(rng: random.Random, prefix: str, count: int) -> list[str]:
    made: dict[str, None] = {}
    while len(made) < count:
        made[prefix + "".join(rng.choices(ALPHABET, k=10))] = None
    return list(made)


def make_guard(store: Store) -> Guard:
    guard = Guard(capacity=10_000_000, store=store)
    guard.add_kind("order", pattern=r"ord_[A-Za-z0-9]{10}")
    guard.declare("get_order", produces={"order_id": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"})
    return guard


def fill(guard: Guard, session_id: str, orders: Sequence[str]) -> None:
    """A session holding ``orders``, written to the guard's store as one change."""
    source = Source("list_orders", None, "orders[*]", 0)
    with guard.session(session_id) as ledger:
        state_of(ledger).admit(
            [Batch("order", "orders[*]", None, list(orders), list(orders), None)], source=source
        )


# -- the stores -------------------------------------------------------------------------------


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


# -- timing -----------------------------------------------------------------------------------


def interleaved(
    cases: dict[str, Callable[[], None]], rounds: int, per: int
) -> dict[str, list[float]]:
    """Seconds per operation, one sample per case per round, in rotated order."""
    names = list(cases)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            run = cases[name]
            start = time.perf_counter()
            for _ in range(per):
                run()
            samples[name].append((time.perf_counter() - start) / per)
    return samples


def added_ms(samples: dict[str, list[float]], name: str) -> float:
    """The median per-round difference between a store's case and memory's, in ms."""
    pairs = zip(samples[name], samples["memory"], strict=True)
    return statistics.median(a - b for a, b in pairs) * 1000


def per_call(stores: dict[str, Store], sizes: Sizes, results: dict[str, Result]) -> None:
    rng = random.Random(7)
    for entries in sizes.entries:
        orders = ids(rng, "ord_", entries)
        checks: dict[str, Callable[[], None]] = {}
        records: dict[str, Callable[[], None]] = {}
        for name, store in stores.items():
            guard = make_guard(store)
            session_id = f"bench-{entries}-{uuid.uuid4().hex[:6]}"
            fill(guard, session_id, orders)
            known = {"order_id": orders[len(orders) // 2]}
            fresh = iter(ids(random.Random(entries), "ord_", 100_000))

            def check(guard: Guard = guard, sid: str = session_id, known: Any = known) -> None:
                with guard.session(sid):
                    assert guard.check("refund", known).allowed

            def record(guard: Guard = guard, sid: str = session_id, new: Any = fresh) -> None:
                with guard.session(sid):
                    guard.record("get_order", {}, {"order_id": next(new)})

            check()  # warm: scripts loaded, statements prepared, the session cached
            checks[name], records[name] = check, record
        print(f"  {entries:,} entries ...", file=sys.stderr, flush=True)
        samples = interleaved(checks, sizes.rounds, sizes.per_sample)
        written = interleaved(records, sizes.rounds, sizes.per_sample)
        for name in stores:
            if name != "memory":
                results[name].check_ms[entries] = added_ms(samples, name)
                results[name].record_ms[entries] = added_ms(written, name)


def _worker(build: Callable[[], Store], worker: int, seconds: float, start: Any, done: Any) -> None:
    guard = make_guard(build())
    rng = random.Random(worker)
    sessions = [f"conv-{worker}-{n}" for n in range(8)]
    for sid in sessions:
        fill(guard, sid, ids(rng, "ord_", 50))
    known = {sid: guard.ledger_for(sid).entries()[0].value for sid in sessions}
    start.wait()
    count, until = 0, time.perf_counter() + seconds
    while time.perf_counter() < until:
        sid = sessions[count % len(sessions)]
        with guard.session(sid):
            assert guard.check("refund", {"order_id": known[sid]}).allowed
            guard.record("get_order", {}, {"order_id": f"ord_{worker:02d}{count:08d}"})
        count += 1
    done.put(count)


def workers(build: Callable[[], Store], seconds: float, processes: int = 8) -> float:
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
    began = time.perf_counter()
    total = sum(done.get(timeout=seconds + 120) for _ in procs)
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    return total / elapsed


# -- report -----------------------------------------------------------------------------------


def table(results: list[Result], sizes: Sizes, command: str) -> str:
    sizes_text = ", ".join(f"{n:,}" for n in sizes.entries)
    lines = [
        f"Server stores, `{command}` (added to the memory store, medians of "
        f"{sizes.rounds} interleaved rounds; ledgers of {sizes_text} entries)",
        "",
        "| store | entries | allowed call, added | record, added |",
        "|---|---:|---:|---:|",
    ]
    for result in results:
        for entries in sizes.entries:
            lines.append(
                f"| {result.name} | {entries:,} | {result.check_ms[entries]:.3f} ms "
                f"| {result.record_ms[entries]:.3f} ms |"
            )
    lines += [
        "",
        "| store | tool calls/s, 8 worker processes (a check and a record each) "
        f"| bytes per entry ({sizes.size_entries:,}-entry session) |",
        "|---|---:|---:|",
    ]
    for result in results:
        if result.name in TARGETS:
            lines.append(
                f"| {result.name} | {result.ops_per_second:,.0f} "
                f"| {result.bytes_per_entry:,.0f} B |"
            )
    lines += ["", "| target | measured | |", "|---|---|---|"]
    for result in results:
        if result.name not in TARGETS:
            continue
        limit = TARGETS[result.name]
        at = 10_000 if 10_000 in result.check_ms else max(result.check_ms)
        value = result.check_ms[at]
        met = "met" if value <= limit else "not met"
        lines.append(
            f"| {result.name}: allowed call ≤ {limit:g} ms added at {at:,} entries "
            f"| {value:.3f} ms | {met} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check that it runs")
    options = parser.parse_args(argv)
    sizes = QUICK if options.quick else FULL
    run = uuid.uuid4().hex[:10]
    prefix, schema = f"guardrail-bench-{run}", f"guardrail_bench_{run}"
    stores: dict[str, Store] = {
        "memory": MemoryStore(),
        "Redis": redis_store(prefix),
        "PostgreSQL": postgres_store(schema),
        ASYNC_COMMIT: postgres_store(f"{schema}_async", synchronous_commit=False),
    }
    results = {name: Result(name) for name in stores if name != "memory"}
    try:
        print("per call ...", file=sys.stderr, flush=True)
        per_call(stores, sizes, results)
        builders: dict[str, Callable[[], Store]] = {
            "Redis": functools.partial(redis_store, prefix),
            "PostgreSQL": functools.partial(postgres_store, schema),
        }
        for name, build in builders.items():
            print(f"8 workers, {name} ...", file=sys.stderr, flush=True)
            results[name].ops_per_second = workers(build, sizes.workers_seconds)
        orders = ids(random.Random(1), "ord_", sizes.size_entries)
        # A schema holding only the measured session: the table's size is that session's.
        sized = {
            "Redis": (redis_store, redis_bytes, prefix),
            "PostgreSQL": (postgres_store, postgres_bytes, f"{schema}_size"),
        }
        for name, (build_one, measure, where) in sized.items():
            store = build_one(where)
            fill(make_guard(store), "sized", orders)
            results[name].bytes_per_entry = measure(where, "sized") / sizes.size_entries
            store.close()
    finally:
        for store in stores.values():
            store.close()
        drop_redis(prefix)
        drop_postgres(schema)
        drop_postgres(f"{schema}_size")
        drop_postgres(f"{schema}_async")
    command = "python benchmarks/servers.py" + (" --quick" if options.quick else "")
    print(table(list(results.values()), sizes, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# -- rows for run.py's stores group -----------------------------------------------------------


class ServerStores:
    """Redis and PostgreSQL stores for ``run.py``'s stores group, where the servers answer.

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
        if self._answers("Redis"):
            self._factories["RedisStore"] = lambda: self._keep(redis_store(self.prefix))
        if self._answers("PostgreSQL"):
            self._factories["PostgresStore"] = lambda: self._keep(postgres_store(self.schema))

    def _answers(self, name: str) -> bool:
        try:
            if name == "Redis":
                import redis

                redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
            else:
                import psycopg

                psycopg.connect(POSTGRES_DSN, connect_timeout=2).close()
        except Exception as exc:  # an absent server or client: that store is left out
            self.missing.append(f"{name} ({type(exc).__name__})")
            return False
        return True

    def _keep(self, store: Store) -> Store:
        self.made.append(store)
        return store

    def factories(self) -> dict[str, Callable[[], Store]]:
        return dict(self._factories)

    def stored_bytes(self, store: Store, session_id: str) -> float | None:
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
            return total * counts[0] / max(1, counts[1])
        return None

    def close(self) -> None:
        for store in self.made:
            store.close()
        drop_redis(self.prefix)
        drop_postgres(self.schema)
