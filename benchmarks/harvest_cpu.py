"""The harvest in CPU time: ``guard.record`` of N records against ``json.loads``, per size.

``python benchmarks/harvest_cpu.py [--records 10,1000,100000] [--rounds 5]`` from the
repository root: for each size, the ``harvest`` group's result of that many records
(two ids each, 100 bytes of JSON a record) is recorded into fresh ledgers and parsed
by ``json.loads`` in alternating rounds, each timed as CPU time
(:func:`time.process_time`, which other work on a shared machine disturbs less than
the wall clock); prints the median of the per-round ratios. ``--profile N`` prints
instead where one record of N records spends its time (``cProfile``, cumulative).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import functools
import gc
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from guardrail_bench.common import FULL, make_guard
from guardrail_bench.harvest import RECORD_BYTES, harvest_payload

from guardrail import Ledger

#: Operations per round, so that a round of the smallest size is not all timer.
OPERATIONS = 20_000


def _payload(records: int) -> str:
    sizes = dataclasses.replace(FULL, harvest_ids=2 * records, harvest_bytes=RECORD_BYTES * records)
    text, _ = harvest_payload(sizes, random.Random(1234))
    return text


def _cpu(run: Callable[[], Any], number: int) -> float:
    gc.collect()
    start = time.process_time()
    for _ in range(number):
        run()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="10,1000,100000", help="sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per size")
    parser.add_argument("--profile", type=int, default=0, help="profile one size instead")
    options = parser.parse_args()
    guard = make_guard()
    if options.profile:
        text = _payload(options.profile)
        number = max(1, OPERATIONS // options.profile)
        ledgers = [guard.new_ledger("harvest") for _ in range(number)]
        profile = cProfile.Profile()
        profile.enable()
        for ledger in ledgers:
            guard.record("list_orders", {}, text, ledger=ledger)
        profile.disable()
        print(f"guard.record of {options.profile:,} records, {number:,} times")
        pstats.Stats(profile).sort_stats("cumtime").print_stats(20)
        return
    for records in (int(size) for size in options.records.split(",")):
        text = _payload(records)
        number = max(1, OPERATIONS // records)
        ratios = []
        for _ in range(options.rounds):
            ledgers = [guard.new_ledger("harvest") for _ in range(number)]
            fresh = iter(ledgers)

            def record(fresh: Iterator[Ledger] = fresh, text: str = text) -> None:
                guard.record("list_orders", {}, text, ledger=next(fresh))

            recorded = _cpu(record, number)
            loaded = _cpu(functools.partial(json.loads, text), number)
            ratios.append(recorded / loaded)
        shown = ", ".join(f"{r:.2f}" for r in ratios)
        print(
            f"{records:,} records: guard.record / json.loads {statistics.median(ratios):.2f}× "
            f"(CPU time, median of {shown})"
        )


if __name__ == "__main__":
    main()
