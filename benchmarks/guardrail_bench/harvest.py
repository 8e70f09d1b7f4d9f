"""Harvest: one large JSON result recorded, beside ``json.loads`` of the same bytes."""

from __future__ import annotations

import json
import random

from guardrail import Ledger

from .common import Run, Sizes, ids, make_guard
from .report import Row, Section, Target, ratio
from .timing import once


def harvest_payload(sizes: Sizes, rng: random.Random) -> tuple[str, int]:
    """A list_orders result: records with an order id and a customer id each, padded."""
    count = sizes.harvest_ids // 2
    orders = ids(rng, "ord_", 10, count)
    customers = ids(rng, "cus_", 8, count)
    statuses = ("delivered", "pending", "cancelled", "processed")
    records = [
        {
            "order_id": order,
            "customer_id": customer,
            "status": statuses[i % 4],
            "total": round(rng.uniform(5, 900), 2),
        }
        for i, (order, customer) in enumerate(zip(orders, customers, strict=True))
    ]
    bare = len(json.dumps({"orders": records}))
    pad = (sizes.harvest_bytes - bare) // count - len(', "note": ""')
    if pad > 0:
        for record in records:
            record["note"] = "x" * pad
    text = json.dumps({"orders": records})
    return text, 2 * count


def bench_harvest(run: Run) -> None:
    """Record a 2 MB result of 40,000 ids: parse, harvest and admit."""
    sizes, report, rng = run.sizes, run.report, run.rng
    guard = make_guard()
    text, count = harvest_payload(sizes, rng)
    ledgers: list[Ledger] = []

    def fresh() -> None:
        ledgers[:] = [guard.new_ledger("harvest")]

    def record() -> None:
        guard.record("list_orders", {}, text, ledger=ledgers[0])

    record_times = once(record, rounds=sizes.slow_rounds, setup=fresh)
    if len(ledgers[0]) != count:
        raise SystemExit(f"harvest set-up is wrong: {len(ledgers[0])} entries, not {count}")
    loads_times = once(lambda: json.loads(text), rounds=sizes.slow_rounds)
    mb = len(text.encode()) / 1e6
    records = f"{count // 2:,} records of 2 ids"  # the rate depends on the records' size
    rows = [
        Row(f"json.loads, {mb:.1f} MB", loads_times, unit="ms"),
        Row(
            f"guard.record, {mb:.1f} MB, {count:,} ids in {records} (parse + harvest + admit)",
            record_times,
            unit="ms",
        ),
    ]
    section = Section(f"Harvest and record one {mb:.1f} MB JSON result holding {count:,} ids")
    section.rows = rows
    rate = count / rows[1].median
    section.ratios = [
        ("guard.record / json.loads", f"{ratio(rows[1], rows[0]):.1f}×"),
        (f"ids recorded per second, parsing included ({records})", f"{rate:,.0f}"),
        ("MB of result per second", f"{mb / rows[1].median:.0f}"),
    ]
    report.sections.append(section)
    report.targets.append(
        Target(
            f"harvest + record, parsing included ({records})",
            "≥ 500,000 ids/s",
            f"{rate:,.0f} ids/s",
            rate >= 5e5,
        )
    )
