"""What the every-turn ledger block costs: its tokens at 10, 50 and 200 entries, tau-airline.

``python benchmarks/every_turn_block.py`` (from the repository root). The tool
results of the shipped tau-bench airline conversations are recorded, one
conversation after another, into one ledger (a long session); when the ledger first
holds at least 10, 50 and 200 entries, the whole ledger block is written as the
every-turn block would write it unbounded, and its tokens are counted as the block's
budget counts them: characters / 4, rounded up (and with tiktoken's o200k_base where
it is installed). The last line says how many entries the default budget shows,
and how long the block takes to build (the median of five rounds of 20).
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


if __name__ == "__main__":
    main()
