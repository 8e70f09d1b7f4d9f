"""What the every-turn ledger block costs: its tokens at 10, 50 and 200 entries, tau-airline.

``python benchmarks/every_turn_block.py`` (from the repository root). The tool
results of the shipped tau-bench airline conversations are recorded, one
conversation after another, into one ledger (a long session); when the ledger first
holds at least 10, 50 and 200 entries, the whole ledger block is written as the
every-turn block would write it unbounded, and its tokens are counted as the block's
budget counts them: characters / 4, rounded up (and with tiktoken's o200k_base where
it is installed). Then how many entries the default budget shows, and how long
the block takes to build (the median of five rounds of 20); last, what the
default-budget block costs in a ledger of 200 and of 20,000 entries (orders with
a name and a status, fifty to a result, the first ones used last), and the ratio.
"""

from __future__ import annotations

import importlib
import statistics
import timeit
from collections.abc import Callable

from guardrail import Guard
from guardrail.compaction import DEFAULT_BLOCK_TOKENS, recent_block
from guardrail.compaction._recent import quarter_tokens
from guardrail.ledger import Ledger
from guardrail.replay import load_trace_file, sample_corpus

SIZES = (10, 50, 200)
UNBOUNDED = 10**9


def tiktoken_counter() -> Callable[[str], int] | None:
    """tiktoken's o200k_base counter, where tiktoken and its encoding are available."""
    try:
        encoding = importlib.import_module("tiktoken").get_encoding("o200k_base")
    except Exception:
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def grown(guard: Guard, sizes: tuple[int, ...]) -> tuple[dict[int, tuple[int, str]], Ledger]:
    """For each size, the entries and unbounded block of the ledger when it first reached it.

    Also the ledger as it stands at the largest size.
    """
    sample = sample_corpus()
    ledger = guard.new_ledger("every-turn")
    found: dict[int, tuple[int, str]] = {}
    for trace in load_trace_file(sample.traces).traces:
        calls = {call.id: call for message in trace.messages for call in message.tool_calls}
        for message in trace.messages:
            call = calls.get(message.tool_call_id) if message.role == "tool" else None
            if call is None or message.error or call.name not in guard.specs:
                continue
            result = message.result if message.result is not None else message.content
            guard.record(call.name, call.arguments or {}, result, call_id=call.id, ledger=ledger)
            for size in sizes:
                if size not in found and len(ledger) >= size:
                    found[size] = (len(ledger), recent_block(ledger, max_tokens=UNBOUNDED))
            if len(found) == len(sizes):
                return found, ledger
    raise SystemExit(f"the corpus gave only {len(ledger)} entries")


def main() -> None:
    guard = Guard.from_manifest(sample_corpus().manifest)
    tiktoken = tiktoken_counter()
    found, ledger = grown(guard, SIZES)
    print("| ledger entries | block characters | tokens (chars/4) | per entry |"
          + (" tokens (tiktoken o200k) |" if tiktoken else ""))  # fmt: skip
    print("|---:|---:|---:|---:|" + ("---:|" if tiktoken else ""))
    for size in SIZES:
        entries, block = found[size]
        tokens = quarter_tokens(block)
        row = f"| {entries} | {len(block):,} | {tokens:,} | {tokens / entries:.1f} |"
        print(row + (f" {tiktoken(block):,} |" if tiktoken else ""))
    largest = found[SIZES[-1]][0]
    bounded = recent_block(ledger, max_tokens=DEFAULT_BLOCK_TOKENS)
    shown = sum(1 for line in bounded.splitlines()[1:] if not line.startswith("("))
    print()
    runs = timeit.repeat(lambda: recent_block(ledger), number=20, repeat=5)
    took = statistics.median(runs) / 20 * 1e6
    print(
        f"default budget {DEFAULT_BLOCK_TOKENS:,} tokens: {shown} of {largest} entries shown, "
        f"{quarter_tokens(bounded):,} tokens (chars/4), built in {took:,.0f} µs"
    )
    print()
    costs = {size: block_cost(size) for size in SCALING}
    small, large = (costs[size] for size in SCALING)
    print(
        f"default-budget block, {SCALING[0]:,} entries: {small:,.0f} µs; "
        f"{SCALING[1]:,} entries: {large:,.0f} µs ({large / small:.2f}x)"
    )


SCALING = (200, 20_000)


def block_cost(size: int) -> float:
    """µs to build the default-budget block of a ledger of ``size`` orders (best of 5 x 20)."""
    guard = Guard(capacity=max(size, 1000))  # room for all, 50 to a result
    guard.add_kind("order", pattern=r"W\d{7}")
    guard.declare("search", produces={"orders[*].order_id": "order"}, effect="read")
    guard.declare("get_order", ids={"order_id": "order"}, effect="read")
    ledger = guard.new_ledger(f"scaling-{size}")
    records = [
        {"order_id": f"W{1000000 + n}", "name": f"item {n % 97}", "status": ("paid", "sent")[n % 2]}
        for n in range(size)
    ]
    with guard.session(f"scaling-{size}", ledger=ledger):
        for start in range(0, size, 50):
            guard.record("search", {}, {"orders": records[start : start + 50]})
        for record in records[:10]:
            guard.check("get_order", {"order_id": record["order_id"]})
    assert len(ledger) == size
    runs = timeit.repeat(lambda: recent_block(ledger), number=20, repeat=5)
    return min(runs) / 20 * 1e6


if __name__ == "__main__":
    main()
