"""Stores: what opening the session per tool call costs, per store and ledger size.

The memory and SQLite stores always; Redis and PostgreSQL where their servers answer
(the ``servers`` group measures those two against the memory store in more detail).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from guardrail import Guard

from ._internals import encoded_size
from .allowed import guarded_tools
from .common import Run, ids, make_guard, scope
from .memory import traced
from .report import Row, Section, Target
from .servers import ServerStores
from .timing import interleaved, once, statement


def _stores(folder: Path) -> dict[str, Callable[[], Any]]:
    """The stores to measure, each a factory of a store over one shared place."""
    from guardrail.stores import MemoryStore, SQLiteStore

    shared = MemoryStore()
    return {
        "MemoryStore": lambda: shared,
        "SQLiteStore (file)": lambda: SQLiteStore(folder / "sessions.sqlite3"),
    }


def _stored_bytes(store: Any, session_id: str) -> float:
    """The bytes a store holds for one session: its file for SQLite, its JSON text in memory."""
    if hasattr(store, "stored_bytes"):
        return float(store.stored_bytes())
    return float(encoded_size(store.load(session_id).records))


def bench_stores(run: Run) -> None:
    """Added latency per tool call when each call opens its session, per store and ledger size."""
    sizes, report, rng = run.sizes, run.report, run.rng
    section = Section("Stores: a session opened per tool call (cached), per store and ledger size")
    added: dict[tuple[str, int], float] = {}
    servers = ServerStores()
    with tempfile.TemporaryDirectory() as tmp, contextlib.closing(servers):
        for store_name, factory in {**_stores(Path(tmp)), **servers.factories()}.items():
            for size in run.store_entries or sizes.store_ledgers:
                session = f"bench-{size}"
                guard = make_guard(store=factory(), max_ids_per_call=size)
                guarded_tools(guard)
                customers = ids(rng, "cus_", 8, 10)
                orders = ids(rng, "ord_", 10, size)
                result = {
                    "orders": [
                        {"order_id": order, "customer_id": customers[i % 10]}
                        for i, order in enumerate(orders)
                    ]
                }
                guard.record("list_orders", {}, result, session=session)
                args = {"customer_id": customers[0], "order_id": orders[size // 2]}
                fresh = iter(ids(rng, "ord_", 11, 1_000_000 if size > 200 else 20_000))

                def record(
                    guard: Guard = guard,
                    session: str = session,
                    fresh: Iterator[str] = fresh,
                    customer: str = customers[0],
                ) -> None:
                    one = {"orders": [{"order_id": next(fresh), "customer_id": customer}]}
                    guard.record("list_orders", {}, one, session=session)

                env = {"guard": guard, "args": args, "session": session, "record": record}
                opened = scope(guard, guard.ledger_for(session))
                cases = {
                    "per call": statement("guard.check('refund', args, session=session)", env),
                    "in one scope": statement("guard.check('refund', args)", env, opened),
                    "record per call": statement("record()", env),
                }
                times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
                label = f"{store_name}, ledger {size:,}"
                per_call = Row(f"{label}: allowed call, session opened per call", times["per call"])
                base = Row(f"{label}: allowed call in one open scope", times["in one scope"])
                rec = Row(
                    f"{label}: record of 1 new id, session per call", times["record per call"]
                )
                section.rows += [per_call, base, rec]
                added[store_name, size] = per_call.median - base.median
                section.ratios.append(
                    (
                        f"{label}: added per allowed call",
                        f"{(per_call.median - base.median) * 1e6:.1f} µs",
                    )
                )
                fresh_guard = make_guard(store=factory())
                cold = once(
                    functools.partial(fresh_guard.ledger_for, session),
                    rounds=sizes.slow_rounds,
                    setup=functools.partial(fresh_guard.end_session, session),
                )
                section.rows.append(
                    Row(f"{label}: first open of the stored session", cold, unit="ms")
                )
                held = servers.stored_bytes(guard.store, session)
                if held is None:
                    held = _stored_bytes(guard.store, session)
                used = held / len(guard.ledger_for(session))
                section.rows.append(Row(f"{label}: stored bytes per entry", [used], unit="B"))
    count = sizes.finished_sessions
    chunks = [ids(rng, "ord_", 10, 5) for _ in range(count)]

    def finished() -> Guard:
        many = make_guard()
        for i, chunk in enumerate(chunks):
            found = {"orders": [{"order_id": o, "customer_id": "cus_00000000"} for o in chunk]}
            many.record("list_orders", {}, found, session=f"conversation-{i}")
        return many

    used, _ = traced(finished)
    section.rows.append(
        Row(
            f"{count:,} finished sessions × 5 ids, MemoryStore + cache of 1,024",
            [float(used)],
            unit="MB",
        )
    )
    section.notes.append(
        "Added latency = allowed call with the session opened per call (guard.check(..., "
        "session=id): the cached ledger, the store asked only whether anything changed) − the "
        "same check inside one open scope. A record writes one Change (the new id) per call. "
        "First open: a guard that has not cached the session reads and checks every record."
    )
    if servers.missing:
        section.notes.append(
            f"Not measured, the server did not answer: {', '.join(servers.missing)}."
        )
    report.sections.append(section)
    for name, limit in (("RedisStore", 1e-3), ("PostgresStore", 2e-3)):
        at = [v for (store, size), v in added.items() if store == name and size >= 10_000]
        if at:
            report.targets.append(
                Target(
                    f"{name}: added latency per allowed call, 10k+ entries",
                    f"≤ {limit * 1e3:g} ms",
                    f"{max(at) * 1e6:.0f} µs",
                    max(at) <= limit,
                )
            )
    if any(size >= 10_000 for _, size in added):
        worst = max(
            v for (name, size), v in added.items() if name.startswith("SQLite") and size >= 10_000
        )
        report.targets.append(
            Target(
                "SQLite: added latency per allowed call, 10k+ entries",
                "≤ 1 ms",
                f"{worst * 1e6:.0f} µs",
                worst <= 1e-3,
            )
        )
