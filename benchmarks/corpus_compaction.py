"""Compaction throughput on the shipped corpus, with the built-in (extractive) summarizer.

``python benchmarks/corpus_compaction.py`` (from the repository root). Each of the
200 tau-bench airline conversations is compacted from a fresh ledger with the
airline manifest's guard (``keep_recent=2``, the default summarizer, tokens counted
as characters / 4): harvest, masking, summary, lint and the sealed block. The
figure is the conversations' JSON size (``json.dumps``, UTF-8) over the best of
``--rounds`` timed passes (default 5), in MB/s, beside ``json.dumps`` of the same
conversations; and the same over the least CPU time of the process (``time.process_time``),
which moves less than wall time on a machine others share.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path
from typing import Any

from guardrail import Guard
from guardrail._guard.audit import SilentLogger
from guardrail.compaction import compact

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "corpus" / "tau-airline" / "traces.jsonl.gz"
MANIFEST = REPO / "examples" / "tau_airline.toml"


def _quarter(text: str) -> int:
    return -(-len(text) // 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=200)
    args = parser.parse_args()
    with gzip.open(TRACES, "rt", encoding="utf-8") as lines:
        conversations: list[list[dict[str, Any]]] = [
            json.loads(line)["messages"] for line in lines
        ][: args.conversations]
    guard = Guard.from_manifest(MANIFEST, logger=SilentLogger())
    mb = sum(len(json.dumps(c).encode()) for c in conversations) / 1e6

    def compact_all() -> None:
        for messages in conversations:
            compact(messages, guard.new_ledger(), guard=guard, keep_recent=2, tokens=_quarter)

    def dump_all() -> None:
        for messages in conversations:
            json.dumps(messages)

    def best(fn: Any) -> tuple[float, float]:
        """The least wall time and the least CPU time of the process, over the rounds."""
        fn()  # warm: imports, compiled patterns
        walls, cpus = [], []
        for _ in range(args.rounds):
            began, began_cpu = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - began)
            cpus.append(time.process_time() - began_cpu)
        return min(walls), min(cpus)

    (took, took_cpu), (dumped, _) = best(compact_all), best(dump_all)
    print(f"{len(conversations)} conversations, {mb:.2f} MB of JSON")
    print(f"compact, built-in summarizer: {took * 1000:.0f} ms, {mb / took:.1f} MB/s")
    print(f"  CPU time: {took_cpu * 1000:.0f} ms, {mb / took_cpu:.1f} MB/s")
    print(f"json.dumps: {dumped * 1000:.0f} ms; compact / json.dumps {took / dumped:.1f}x")


if __name__ == "__main__":
    main()
