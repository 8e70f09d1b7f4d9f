"""Cold loads and pruning: a worker opening a stored session it has not cached, per store.

``coldload``: the first open of a session of 1k, 10k and 100k entries in a guard
that never saw it (read, check every record, rebuild the ledger), against a plain
``json.loads`` of the same records as one JSON array: the floor any store pays
to read them. ``pruning``: 20,000 ids recorded through a 1,000-entry ledger,
what the store keeps of them, and what opening that session costs against a
session that only ever held 1,000 ids.
"""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .common import Run, ids, make_guard
from .report import Row, Section, Target
from .servers import ServerStores
from .timing import interleaved, once, single


@contextlib.contextmanager
def _all_stores() -> Iterator[tuple[dict[str, Callable[[], Any]], list[str]]]:
    """A factory per store (memory, a SQLite file, and the servers that answer), and what is not."""
    from guardrail.stores import MemoryStore, SQLiteStore

    shared = MemoryStore()
    servers = ServerStores()
    with tempfile.TemporaryDirectory() as tmp, contextlib.closing(servers):
        made: list[Any] = []

        def sqlite() -> Any:
            made.append(SQLiteStore(Path(tmp) / "sessions.sqlite3"))
            return made[-1]

        try:
            yield (
                {"MemoryStore": lambda: shared, "SQLiteStore": sqlite, **servers.factories()},
                servers.missing,
            )
        finally:
            for store in made:
                store.close()


def _stored(guard: Any, session: str, orders: list[str], each: int = 1000) -> None:
    """Record ``orders`` into ``session`` as results of ``each`` ids."""
    for start in range(0, len(orders), each):
        chunk = orders[start : start + each]
        found = {"orders": [{"order_id": o, "customer_id": "cus_00000000"} for o in chunk]}
        guard.record("list_orders", {}, found, call_id=f"c{start}", session=session)


def _cold(factory: Callable[[], Any], session: str, rounds: int, **options: Any) -> list[float]:
    """Seconds of the first open of ``session`` in a guard that has not cached it."""
    fresh = make_guard(store=factory(), **options)
    return once(
        functools.partial(fresh.ledger_for, session),
        rounds=rounds,
        setup=functools.partial(fresh.end_session, session),
    )


def bench_coldload(run: Run) -> None:
    """First open of a stored session against json.loads of its records, per store and size."""
    sizes = run.store_entries or run.pick((1_000, 10_000, 100_000), (100, 1_000))
    rounds, more = run.pick((5, 5), (2, 1))  # up to 5x the rounds for small sessions; quick: none
    section = Section("Cold load: first open of a stored session, against json.loads")
    worst: dict[int, float] = {}
    with _all_stores() as (factories, missing):
        for name, factory in factories.items():
            for size in sizes:
                session = f"cold-{size}"
                writer = make_guard(store=factory(), max_ids_per_call=size)
                _stored(writer, session, ids(run.rng, "ord_", 10, size))
                snapshot = factory().load(session)
                text = json.dumps(list(snapshot.records))
                # More rounds where one takes a few milliseconds: the best of 5 is mostly noise.
                # The two interleaved, round by round: a slow spell of the machine hits both.
                best_of = max(rounds, min(rounds * more, rounds * 5_000 // size))
                fresh = make_guard(store=factory())
                times = interleaved(
                    {
                        "floor": single(functools.partial(json.loads, text)),
                        "cold": single(
                            functools.partial(fresh.ledger_for, session),
                            setup=functools.partial(fresh.end_session, session),
                        ),
                    },
                    rounds=best_of,
                    number=1,
                )
                floor, cold = times["floor"], times["cold"]
                label = f"{name}, {size:,} entries"
                section.rows += [
                    Row(f"{label}: json.loads of the records", floor, unit="ms"),
                    Row(f"{label}: first open in a guard", cold, unit="ms"),
                ]
                ratio = min(cold) / min(floor)
                section.ratios.append((f"{label}: first open / json.loads", f"{ratio:.2f}×"))
                worst[size] = max(worst.get(size, 0.0), ratio)
    section.notes.append(
        f"Best of {rounds} rounds each, up to {rounds * more} where a session is smaller than "
        "5,000 entries "
        "(a small session opens in a few milliseconds), the two interleaved. First open: "
        "Guard.ledger_for in a guard that has not cached the session (the store read, every "
        "record checked, the ledger rebuilt); json.loads: the same records as one JSON array, "
        "parsed once."
    )
    if missing:
        section.notes.append(f"Not measured, the server did not answer: {', '.join(missing)}.")
    run.report.sections.append(section)
    for size, ratio in sorted(worst.items()):
        run.report.targets.append(
            Target(
                f"Cold load, {size:,} entries, slowest store: first open / json.loads",
                "≤ 2×",
                f"{ratio:.2f}×",
                ratio <= 2,
            )
        )


def bench_pruning(run: Run) -> None:
    """20,000 ids through a 1,000-entry ledger: rows kept, and the cost of opening it."""
    through, capacity = run.pick((20_000, 1_000), (2_000, 100))
    rounds = run.pick(5, 2)
    section = Section(f"Pruning: {through:,} ids through a {capacity:,}-entry ledger, per store")
    with _all_stores() as (factories, missing):
        for name, factory in factories.items():
            options: dict[str, Any] = {"capacity": capacity}
            flowed, plain = "pruned", "plain"
            writer = make_guard(store=factory(), max_ids_per_call=capacity // 10, **options)
            _stored(writer, flowed, ids(run.rng, "ord_", 10, through), capacity // 10)
            writer.end_session(flowed)
            with writer.session(flowed):  # a scope's end writes what the load let go
                pass
            _stored(writer, plain, ids(run.rng, "ord_", 10, capacity), capacity // 10)
            rows = len(factory().load(flowed).records)
            opened = _cold(factory, flowed, rounds, **options)
            baseline = _cold(factory, plain, rounds, **options)
            section.rows += [
                Row(f"{name}: rows stored after {through:,} ids", [float(rows)], unit="rows"),
                Row(f"{name}: first open of that session", opened, unit="ms"),
                Row(f"{name}: first open of a {capacity:,}-id session", baseline, unit="ms"),
            ]
            section.ratios.append(
                (f"{name}: first open, flowed / plain", f"{min(opened) / min(baseline):.2f}×")
            )
    section.notes.append(
        "Results of a tenth of the capacity each, recorded one after another into one session "
        "(tombstones: the default bound, one per entry); rows stored: what store.load returns "
        "for it after the session's next write."
    )
    if missing:
        section.notes.append(f"Not measured, the server did not answer: {', '.join(missing)}.")
    run.report.sections.append(section)
