"""The refused path: a refusal classified against a large ledger, beside a naive scan."""

from __future__ import annotations

import functools
import random
import statistics
from collections.abc import Sequence

from ._internals import admit, batch
from .allowed import guarded_tools
from .common import ORDER, Run, fill, ids, make_guard
from .report import Row, Section, Target
from .timing import interleaved, once, statement


def levenshtein(a: str, b: str) -> int:
    """Edit distance, the textbook dynamic programme."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def naive_nearest(value: str, keys: Sequence[str], limit: int = 2) -> str | None:
    """The comparison: every key of the kind, one edit distance each, nearest wins."""
    best, distance = None, limit + 1
    for key in keys:
        d = levenshtein(value, key)
        if d < distance:
            best, distance = key, d
    return best


def mutate(value: str, rng: random.Random) -> str:
    """One character dropped near the end.

    The near-miss search finds it only with the last class of variant it tries (a character
    put back), after every other one.
    """
    position = len(value) - 2 - rng.randrange(2)
    while value[position] == value[position + 1]:  # else it reads as cut short, not mutated
        position -= 1
    return value[:position] + value[position + 1 :]


#: One refused call, timed as a statement: ``c`` the customer id, ``v`` the order id.
_CHECK = "guard.check('refund', {'customer_id': c, 'order_id': v}, ledger=ledger)"


def bench_refused(run: Run) -> None:
    """A refused call (an unknown and a mutated id), against a naive nearest-match scan."""
    sizes, report, rng = run.sizes, run.report, run.rng
    guard = make_guard(mode="reprompt")
    guarded_tools(guard)
    size = sizes.refused_ledger
    customers = ids(rng, "cus_", 8, 1)
    orders = ids(rng, "ord_", 10, size - 1)
    ledger = fill(guard, customers, orders)
    customer = customers[0]
    known = set(orders)
    unknown = next(v for v in ids(rng, "ord_", 10, 10) if v not in known)
    target = orders[len(orders) // 2]
    probes = {"unknown": unknown, "mutated": mutate(target, rng)}
    for problem, value in probes.items():
        verdict = guard.check("refund", {"customer_id": customer, "order_id": value}, ledger=ledger)
        found = verdict.findings[0].problem if verdict.findings else "allowed"
        if found != problem:
            raise SystemExit(f"refused-path set-up is wrong: {value!r} gave {found}, not {problem}")
    env = {"guard": guard, "ledger": ledger, "c": customer}
    cases = {
        f"{problem} id, ledger {size:,} (guard.check)": statement(_CHECK, {**env, "v": value})
        for problem, value in probes.items()
    }
    times = interleaved(cases, rounds=sizes.slow_rounds, sample=sizes.sample * 5)
    rows = [Row(name, samples) for name, samples in times.items()]
    naive = [
        Row(
            f"naive Levenshtein scan, {problem} id",
            once(functools.partial(naive_nearest, value, orders), rounds=sizes.naive_rounds),
            unit="ms",
        )
        for problem, value in probes.items()
    ]
    # A growing conversation: new ids arrived since the last refusal, so the near-miss
    # index has new keys to take in before it can answer.
    grown = [ids(rng, "ord_", 11, sizes.growth) for _ in range(sizes.slow_rounds)]
    batches = iter(grown)

    def grow() -> None:
        admit(ledger, [batch(ORDER, next(batches))], tool="t")

    def refuse() -> None:
        guard.check("refund", {"customer_id": customer, "order_id": unknown}, ledger=ledger)

    after_growth = Row(
        f"unknown id, {sizes.growth} new ids since the last refusal (guard.check)",
        once(refuse, rounds=sizes.slow_rounds, setup=grow),
    )
    section = Section(f"Refused call, classified against a ledger of {size:,} entries")
    section.rows = [*rows, after_growth, *naive]
    section.notes.append(
        "guard.check runs the whole refusal: classification, re-prompt text, and the "
        "warning event rendered as JSON. The mutated id has one character dropped near its "
        "end, which only the last class of variant the near-miss search tries finds. The "
        "third row adds "
        f"{sizes.growth} ids (not timed) before each refusal, as a growing conversation does."
    )
    report.targets.append(
        Target(
            f"refused (unknown) after {sizes.growth} new ids (extra: no published target)",
            "≤ 1 ms",
            f"{after_growth.median * 1e3:.3f} ms",
            after_growth.median <= 1e-3,
        )
    )
    for row, slow in zip(rows, naive, strict=True):
        speedup = slow.median / row.median
        section.ratios.append((f"{slow.name} / guard", f"{speedup:,.0f}×"))
        report.targets.append(
            Target(
                f"refused ({row.name.split(' id')[0]}): time at {size:,}",
                "≤ 100 µs",
                f"{row.median * 1e3:.3f} ms",
                row.median <= 1e-4,
            )
        )
        report.targets.append(
            Target(
                f"refused ({row.name.split(' id')[0]}): vs naive scan",
                "≥ 100× faster",
                f"{speedup:,.0f}×",
                speedup >= 100,
            )
        )
    report.sections.append(section)
    # The refusal against every ledger size, for the scaling curve.
    curve: list[tuple[int, float]] = []
    for step in sizes.ledgers:
        if step > size:
            continue
        small = fill(guard, customers, orders[: step - 1])
        probe = mutate(orders[(step - 1) // 2], rng)
        # The first refusal builds the near-miss index; time the ones after it.
        guard.check("refund", {"customer_id": customer, "order_id": probe}, ledger=small)
        check = statement(_CHECK, {"guard": guard, "ledger": small, "c": customer, "v": probe})
        curve.append(
            (step, statistics.median(interleaved({"x": check}, rounds=3, sample=sizes.sample)["x"]))
        )
    report.curves["refused, mutated id"] = curve
