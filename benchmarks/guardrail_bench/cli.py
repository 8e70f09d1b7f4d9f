"""The command: which groups run, at which size, and where the table goes.

``python benchmarks/run.py`` runs the published groups (the table in
``benchmarks/results/latest.md`` that the README quotes) and writes it to
``benchmarks/results/local/``, which git ignores; ``--save`` writes the tracked
``benchmarks/results/`` instead, for a run meant to be published. ``--only`` picks
groups (``integrations`` names every adapter, ``all`` every group); ``--quick``
runs them at tiny sizes, only to check that the harness works.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import Run, default_logging, production_logging
from .report import Section, plot, render
from .timing import stopwatch

BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"  # the published table and plot, tracked
LOCAL = RESULTS / "local"  # a run's own, git-ignored: a run on a laptop changes nothing
COMMAND = "python benchmarks/run.py"


@dataclass(frozen=True)
class Group:
    """One group of benchmarks: the function that runs it, imported only when it runs."""

    name: str
    function: str  # "module:function" within this package
    about: str
    shares: str | None = None  # what it builds for the next group of the same key
    default_logging: bool = False  # audit to the standard library logger, not structlog
    python: tuple[int, int] = (3, 10)  # the Python its runtime needs

    def run(self, run: Run) -> None:
        if sys.version_info < self.python:
            needs = ".".join(map(str, self.python))
            section = Section(f"{self.name}: not measured")
            section.notes.append(f"{self.about}: its runtime needs Python {needs}")
            run.report.sections.append(section)
            return
        module, function = self.function.split(":")
        bench: Callable[[Run], None] = getattr(
            importlib.import_module(f"{__package__}.{module}"), function
        )
        with default_logging() if self.default_logging else contextlib.nullcontext():
            bench(run)


GROUPS = (
    Group("sync", "allowed:bench_sync", "allowed call of a sync tool", shares="ledgers"),
    Group("async", "allowed:bench_async", "allowed call of an async tool", shares="ledgers"),
    Group(
        "reads",
        "allowed:bench_reads",
        "a read of held ids against an allowed write",
        shares="ledgers",
    ),
    Group("refused", "refused:bench_refused", "refused call against 100k entries"),
    Group(
        "harvest",
        "harvest:bench_harvest",
        "record of a 2 MB result, and of 10, 1k and 100k records against json.loads",
    ),
    Group("memory", "memory:bench_memory", "bytes per entry and per session"),
    Group("compaction", "compaction:bench_compaction", "compact() without the summarizer"),
    Group("stores", "stores:bench_stores", "a session opened per call, per store"),
    Group("langchain", "integrations.langchain:bench_langchain", "GuardrailMiddleware"),
    Group("loops", "integrations.loops:bench_loops", "run_tool_calls"),
    Group("mcp", "integrations.mcp:bench_mcp", "guard_server and guarded_call_tool"),
    Group(
        "openai-agents",
        "integrations.openai_agents:bench_openai_agents",
        "guard_agent",
        default_logging=True,
    ),
    Group("pydantic-ai", "integrations.pydantic_ai:bench_pydantic_ai", "Guardrail, GuardedToolset"),
    Group("crewai", "integrations.crewai:bench_crewai", "guard_crew"),
    Group(
        "google-adk",
        "integrations.google_adk:bench_google_adk",
        "GuardrailPlugin",
        default_logging=True,
    ),
    Group(
        "agent-framework",
        "integrations.agent_framework:bench_agent_framework",
        "the Guardrail context provider",
        default_logging=True,
        python=(3, 11),
    ),
    Group("servers", "servers:bench_servers", "Redis and PostgreSQL against memory, 8 workers"),
    Group("coldload", "coldload:bench_coldload", "first open of a stored session vs json.loads"),
    Group("pruning", "coldload:bench_pruning", "20k ids through a 1k ledger: rows and load"),
    Group("patterns", "crafted:bench_patterns", "ready-made kinds on crafted text, worst case"),
    Group("mentions", "mentions:bench_mentions", "mentions in one huge result"),
)
BY_NAME = {group.name: group for group in GROUPS}

#: What a run without --only measures, and the only run --save publishes.
PUBLISHED = ("sync", "async", "refused", "harvest", "memory", "compaction", "stores", "langchain")
#: Names that stand for several groups.
FAMILIES = {
    "integrations": (
        "langchain",
        "loops",
        "mcp",
        "openai-agents",
        "pydantic-ai",
        "crewai",
        "google-adk",
        "agent-framework",
    ),
    "all": tuple(BY_NAME),
}


def _groups(text: str) -> list[str]:
    """The groups named, families expanded, in the order the run takes them."""
    named: set[str] = set()
    for word in (w.strip() for w in text.split(",")):
        if word:
            named.update(FAMILIES.get(word, (word,)))
    unknown = sorted(named - set(BY_NAME))
    if unknown:
        choices = ", ".join([*BY_NAME, *FAMILIES])
        raise argparse.ArgumentTypeError(f"unknown group(s) {unknown}; choose from {choices}")
    return [name for name in BY_NAME if name in named]


def _entries(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(word.replace("_", "")) for word in text.split(",") if word.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give ledger sizes such as 1000,10000")
    return sizes


def parse(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str], Path | None]:
    """The options, the groups to run and the folder the results go to (None: printed only)."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the harness runs")
    parser.add_argument(
        "--only",
        type=_groups,
        default=list(PUBLISHED),
        help="comma-separated groups: "
        + ", ".join(f"{g.name} ({g.about})" for g in GROUPS)
        + "; or integrations (every adapter), all. Default: "
        + ",".join(PUBLISHED),
    )
    parser.add_argument(
        "--store-entries",
        type=_entries,
        default=None,
        metavar="N,N",
        help="ledger sizes of the stores and servers groups (default 1000,10000,100000)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for latest.md and scaling.png (default: benchmarks/results/local, "
        "git-ignored, on a full run of the published groups; nothing written otherwise)",
    )
    where.add_argument(
        "--save",
        action="store_true",
        help="write to the tracked benchmarks/results (latest.md, scaling.png) that the "
        "README quotes: a full run of the published groups only",
    )
    parser.add_argument("--seed", type=int, default=1234)
    options = parser.parse_args(argv)
    groups: list[str] = options.only
    full = not options.quick and groups == list(PUBLISHED) and options.store_entries is None
    if options.save and not full:
        parser.error(
            "--save replaces the published results: run the published groups at full size "
            "(drop --quick, --only and --store-entries), or write elsewhere with --out"
        )
    out: Path | None = options.out
    if options.save:
        out = RESULTS
    elif out is None and full:
        out = LOCAL
    return options, groups, out


def command(options: argparse.Namespace, groups: Sequence[str]) -> str:
    """The command line that reproduces this run, as the table prints it."""
    words = [COMMAND]
    if options.quick:
        words.append("--quick")
    if list(groups) != list(PUBLISHED):
        family = [name for name, members in FAMILIES.items() if list(members) == list(groups)]
        words.append(f"--only {family[0] if family else ','.join(groups)}")
    if options.store_entries is not None:
        words.append(f"--store-entries {','.join(str(n) for n in options.store_entries)}")
    return " ".join(words)


def main(argv: Sequence[str] | None = None) -> int:
    options, groups, out = parse(argv)
    run = Run(quick=options.quick, rng=random.Random(options.seed))
    run.store_entries = options.store_entries
    took = stopwatch()
    with production_logging():
        for index, name in enumerate(groups):
            group = BY_NAME[name]
            print(f"running {name} ...", file=sys.stderr, flush=True)
            group.run(run)
            later: Any = {BY_NAME[n].shares for n in groups[index + 1 :]}
            if group.shares is not None and group.shares not in later:
                # free them: a large heap slows every later collection
                run.shared.pop(group.shares, None)
    text = render(run.report, command(options, groups), options.quick)
    text += f"\nTotal run time: {took():.0f} s.\n"
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "latest.md").write_text(text, encoding="utf-8")
        print(f"table written to {out / 'latest.md'}", file=sys.stderr)
        print(plot(run.report, out / "scaling.png"), file=sys.stderr)
        if out == LOCAL:
            print("(--save writes the published benchmarks/results/ instead)", file=sys.stderr)
    return 0
