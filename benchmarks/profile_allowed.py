"""Where an allowed call's time goes: the ``sync`` group's tool under cProfile, by function.

``python benchmarks/profile_allowed.py [ENTRIES]`` from the repository root: 20,000
allowed calls of the 2-id write tool the ``sync`` group times, in a ledger of
``ENTRIES`` (default 100,000), structlog as in production; prints the functions by
their own time.
"""

from __future__ import annotations

import cProfile
import pstats
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from guardrail_bench.allowed import guarded_tools
from guardrail_bench.common import fill, ids, make_guard, production_logging

CALLS = 20_000


def main() -> None:
    entries = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rng = random.Random(1234)
    with production_logging():
        guard = make_guard()
        refund, _ = guarded_tools(guard)
        customers = ids(rng, "cus_", 8, entries // 2)
        orders = ids(rng, "ord_", 10, entries - entries // 2)
        ledger = fill(guard, customers, orders)
        c, o = customers[len(customers) // 2], orders[len(orders) // 3]
        with guard.session(ledger.session_id or "bench", ledger=ledger):
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(CALLS):
                refund(customer_id=c, order_id=o)
            profile.disable()
    print(f"{CALLS:,} allowed calls, 2 ids, ledger of {entries:,} entries")
    pstats.Stats(profile).sort_stats("tottime").print_stats(10)


if __name__ == "__main__":
    main()
