"""Compaction: ``compact()`` with a summariser that does no work, beside ``json.dumps``."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from guardrail import Ledger
from guardrail.compaction import compact

from .common import Run, fill, ids, make_guard
from .report import Row, Section, Target, ratio
from .timing import once


def transcript(
    messages: int, orders: Sequence[str], customer: str, rng: random.Random
) -> list[dict[str, Any]]:
    """An OpenAI chat transcript: user, assistant tool call, tool result, assistant reply."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You help customers with orders."}]
    turn = 0
    while len(out) < messages:
        turn += 1
        order = rng.choice(orders)
        call_id = f"call_{turn}"
        shown = rng.sample(list(orders), k=min(5, len(orders)))
        out += [
            {"role": "user", "content": f"What happened to my order {order}? It is late."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "list_orders",
                            "arguments": json.dumps({"customer_id": customer}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(
                    {
                        "orders": [
                            {"order_id": o, "customer_id": customer, "status": "late"}
                            for o in shown
                        ]
                    }
                ),
            },
            {"role": "assistant", "content": f"Order {order} left the warehouse yesterday."},
        ]
    return out[:messages]


def _no_summary(messages: Any, roles: Any) -> str:
    return "The customer asked about late orders; each was traced."


def bench_compaction(run: Run) -> None:
    """Compaction of 1,000 to 100,000 messages against a 5,000-entry ledger."""
    sizes, report, rng = run.sizes, run.report, run.rng
    section = Section(
        f"Compaction without the summariser ({sizes.compaction_entries:,} ledger entries)"
    )
    report.sections.append(section)
    guard = make_guard()
    customers = ids(rng, "cus_", 8, 1)
    orders = ids(rng, "ord_", 10, sizes.compaction_entries - 1)
    rates: list[float] = []
    curve: list[tuple[int, float]] = []
    for size, rounds in zip(sizes.transcripts, sizes.compaction_rounds, strict=True):
        messages = transcript(size, orders, customers[0], rng)
        mb = len(json.dumps(messages).encode()) / 1e6
        ledgers: list[Ledger] = []

        def fresh(ledgers: list[Ledger] = ledgers) -> None:
            ledgers[:] = [fill(guard, customers, orders)]

        def squeeze(
            messages: list[dict[str, Any]] = messages, ledgers: list[Ledger] = ledgers
        ) -> None:
            compact(messages, ledgers[0], summarize=_no_summary, keep_recent=2, guard=guard)

        def dump(messages: list[dict[str, Any]] = messages) -> None:
            json.dumps(messages)

        row = Row(
            f"compact, {size:,} messages ({mb:.1f} MB)",
            once(squeeze, rounds=rounds, setup=fresh),
            unit="ms",
        )
        base = Row(f"json.dumps, {size:,} messages", once(dump, rounds=rounds), unit="ms")
        section.rows += [row, base]
        rate = mb / row.median
        rates.append(rate)
        curve.append((size, row.median))
        section.ratios.append((f"compact / json.dumps at {size:,}", f"{ratio(row, base):.1f}×"))
        section.ratios.append((f"MB/s of transcript at {size:,}", f"{rate:.1f}"))
    report.curves["compaction, per transcript"] = curve
    linear = min(rates) / max(rates)
    report.targets.append(
        Target(
            "compaction throughput",
            "≥ 25 MB/s, linear",
            f"{min(rates):.1f} MB/s (slowest/fastest rate {linear:.2f})",
            min(rates) >= 25 and linear >= 0.7,
        )
    )
