"""Harvest: one large JSON result recorded, beside ``json.loads`` of the same bytes."""

from __future__ import annotations

import dataclasses
import functools
import json
import random

from guardrail import Guard, Ledger

from .common import Run, Sizes, ids, make_guard
from .report import Row, Section, Target, ratio
from .timing import Runner, calls, each, interleaved, once

#: Bytes of JSON per record in the sizes cases, as in the 2 MB result (100 per 2 ids).
RECORD_BYTES = 100


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
    """Record a 2 MB result of 40,000 ids (parse, harvest and admit), then the sizes cases."""
    _bench_two_megabytes(run)
    bench_harvest_sizes(run)


def _bench_two_megabytes(run: Run) -> None:
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


def _record(guard: Guard, text: str, ledger: Ledger) -> None:
    guard.record("list_orders", {}, text, ledger=ledger)


def bench_harvest_sizes(run: Run) -> None:
    """Record results of 10, 1,000 and 100,000 records, each against ``json.loads`` of it."""
    sizes, report = run.sizes, run.report
    guard = make_guard()
    cases: dict[str, Runner] = {}
    for count in sizes.harvest_records:
        shaped = dataclasses.replace(
            sizes, harvest_ids=2 * count, harvest_bytes=RECORD_BYTES * count
        )
        text, ids_in = harvest_payload(shaped, run.rng)
        ledger = guard.new_ledger("check")
        guard.record("list_orders", {}, text, ledger=ledger)
        if len(ledger) != ids_in:
            raise SystemExit(f"harvest set-up is wrong: {len(ledger)} entries, not {ids_in}")
        cases[f"json.loads, {count:,} records"] = calls(functools.partial(json.loads, text))
        cases[f"guard.record, {count:,} records"] = each(
            functools.partial(_record, guard, text), functools.partial(guard.new_ledger, "harvest")
        )
    times = interleaved(cases, rounds=sizes.slow_rounds, sample=sizes.sample * 5)
    rows = {name: Row(name, samples) for name, samples in times.items()}
    section = Section(
        f"Record one result of N records (2 ids each, {RECORD_BYTES} B of JSON a record) "
        "into a fresh ledger, against json.loads of the same text"
    )
    section.rows = list(rows.values())
    for count in sizes.harvest_records:
        record = rows[f"guard.record, {count:,} records"]
        loads = rows[f"json.loads, {count:,} records"]
        times_over = ratio(record, loads)
        section.ratios.append(
            (f"guard.record / json.loads, {count:,} records", f"{times_over:.2f}×")
        )
        report.targets.append(
            Target(
                f"record / json.loads, {count:,} records",
                "≤ 3×",
                f"{times_over:.2f}×",
                times_over <= 3,
            )
        )
    report.sections.append(section)
