"""Memory: what a ledger entry and a session hold, apart from the id strings (tracemalloc)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

from guardrail import Ledger

from ._internals import Batch, admit, batch
from .allowed import guarded_tools
from .common import ORDER, Run, ids, make_guard
from .report import Row, Section, Target


def traced(build: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated after ``build()`` (its result kept alive), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, kept


def bench_memory(run: Run) -> None:
    """Bytes per entry of one large ledger, and per session of many small ones."""
    sizes, report, rng = run.sizes, run.report, run.rng
    guard = make_guard()
    guarded_tools(guard)
    rows: list[Row] = []
    per_entry: list[float] = []
    for size in sizes.memory_ledgers:
        # The value strings (and their batch) exist before tracing starts: not counted.
        made = ids(rng, "ord_", 10, size)
        found = [batch(ORDER, made)]

        def build(found: list[Batch] = found) -> Ledger:
            ledger = guard.new_ledger("memory")
            admit(ledger, found)
            # One refusal, so the lazily built near-miss index is counted too.
            guard.check("refund", {"customer_id": "x", "order_id": "ord_0"}, ledger=ledger)
            return ledger

        used, ledger = traced(build)
        assert len(ledger) == size
        per_entry.append(used / size)
        rows.append(Row(f"one ledger of {size:,} entries, per entry", [used / size], unit="B"))
        del ledger, found
    count, each = sizes.sessions, sizes.session_entries
    values = [ids(rng, "ord_", 10, each) for _ in range(count)]
    found_sets = [[batch(ORDER, chunk)] for chunk in values]
    many = make_guard()

    def sessions() -> None:
        for i, found in enumerate(found_sets):
            with many.session(f"conversation-{i}") as ledger:
                admit(ledger, found)

    used, _ = traced(sessions)
    rows.append(Row(f"{count:,} sessions × {each} entries, per session", [used / count], unit="KB"))
    rows.append(
        Row(f"{count:,} sessions × {each} entries, per entry", [used / (count * each)], unit="B")
    )
    rows.append(Row(f"{count:,} sessions × {each} entries, in all", [float(used)], unit="MB"))
    section = Section("Memory (tracemalloc), apart from the identifier strings themselves")
    section.rows = rows
    section.notes.append(
        "Single measurements, not timings: min = median = max. Per session includes the "
        "ledger's own tables, lock and user-text buffer."
    )
    report.sections.append(section)
    worst = max(per_entry)
    report.targets.append(
        Target(
            "memory per ledger entry, apart from values", "≤ 300 B", f"{worst:.0f} B", worst <= 300
        )
    )
