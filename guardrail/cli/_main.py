"""The ``guardrail`` command: ``guardrail demo``, ``init``, ``check``, ``replay``, ``--version``.

``guardrail init DEFINITIONS.json`` proposes a starter manifest from the tool
definitions an agent sends its model (see :mod:`guardrail.cli._init`).

``guardrail check --manifest FILE --user TEXT --result JSON --call JSON``
tries a manifest's rules on one call (see :mod:`guardrail.cli._check_call`);
``--kinds-only`` shows what each kind's pattern takes from the user's text.

``guardrail replay TRACES... --manifest FILE`` replays recorded
conversations through a guard built from the manifest and prints what it
would cost (false refusals) and catch (detection per corruption class), as
tables or, with ``--json``, for machines. ``--compact`` adds availability
after compaction (guardrail's and a plain summary's, both through the
seeded lossy summariser) and ``--agent module:callable`` the agent diff.
``--live module:attribute`` runs the recorded calls through the real tools
instead, without and with the guard (see :func:`guardrail.replay.replay_live`).
The exit code is non-zero only for errors of use: a bad manifest, an
unreadable trace file, an agent or environment that cannot be loaded, a
bad option.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from guardrail import __version__
from guardrail._guard.facade import Guard
from guardrail.cli._check_call import add_parser as add_check
from guardrail.cli._init import add_parser as add_init
from guardrail.errors import GuardrailUsageError
from guardrail.replay import (
    ALL_CLASSES,
    Agent,
    Compaction,
    LossySummarizer,
    TraceFile,
    load_agent,
    load_live,
    load_trace_file,
    replay,
    replay_live,
    strategies,
)

#: The exit code of an error of use (argparse uses it for bad options too).
USAGE_ERROR = 2

#: The width of tables printed to a file or a pipe: wider than any table, so none is cut. Tables
#: take their natural width; a line of text is not wrapped.
UNBOUNDED = 100_000


def _classes(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL_CLASSES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown corruption class(es) {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(ALL_CLASSES)}"
        )
    return names


def _depths(text: str) -> list[int]:
    """``0`` or ``0,1,2``: turns kept raw by each compaction."""
    depth = _count(0, hint=" (give K, or a list like 0,1,2)")
    return [depth(part.strip()) for part in text.split(",")]


def _count(minimum: int, *, hint: str = "") -> Callable[[str], int]:
    def count(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number{hint}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {number}")
        return number

    return count


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guardrail",
        description="Keep LLM agents from acting on identifiers they never really saw.",
    )
    parser.add_argument(
        "--version", action="version", version=f"guardrail {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="play a scripted support conversation where the guard stops a mutated order id",
        description="A refund for a damaged blender: a summary mutates the order id, the guard "
        "refuses the call, the agent copies the id from the ledger. Offline, no model.",
    )
    demo.add_argument("--width", type=_count(40), help="output width in characters")
    demo.set_defaults(run=_demo)

    add_check(commands)
    commands.choices["check"].set_defaults(run=_check)
    add_init(commands)
    commands.choices["init"].set_defaults(run=_init)

    rep = commands.add_parser(
        "replay",
        help="replay recorded traces through a guard: false refusals, detection rates, "
        "availability after compaction and the agent diff",
        description="Replay recorded conversations (JSONL in the corpus shape, or OpenAI chat "
        "messages) through a guard built from a manifest. Reports, per file and in total, the "
        "real calls the guard would refuse and the share of corrupted identifiers it refuses.",
    )
    rep.add_argument("traces", nargs="+", metavar="TRACES", help="trace files (JSONL or JSON)")
    rep.add_argument(
        "--manifest", required=True, metavar="FILE", help="the tools' manifest (TOML or JSON)"
    )
    rep.add_argument("--json", action="store_true", help="print the report as JSON")
    rep.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the corruptions and of the lossy summariser (default 0)",
    )
    rep.add_argument("--limit", type=_count(0), metavar="N", help="replay at most N traces in all")
    rep.add_argument(
        "--classes",
        type=_classes,
        metavar="LIST",
        help=f"corruption classes, comma-separated (default: all: {','.join(ALL_CLASSES)})",
    )
    rep.add_argument(
        "--variants",
        type=_count(0),
        metavar="N",
        help="variants per class and identifier argument (default 1)",
    )
    rep.add_argument(
        "--capacity", type=_count(1), metavar="N", help="ledger capacity (default: the guard's)"
    )
    rep.add_argument(
        "--examples",
        type=_count(0),
        default=10,
        metavar="N",
        help="examples kept per list (default 10)",
    )
    rep.add_argument(
        "--compact",
        action="store_true",
        help="force a compaction before each recorded call and report the identifier arguments "
        "still in the context: guardrail's compact() and a plain summary, both through the "
        "lossy summariser seeded with --seed",
    )
    rep.add_argument(
        "--keep-recent",
        type=_depths,
        action="append",
        metavar="K",
        help="turns each compaction keeps raw (default 0); repeat it or give a list (0,1,2) "
        "to compare; implies --compact",
    )
    rep.add_argument(
        "--agent",
        metavar="MODULE:CALLABLE",
        help="an agent (messages, tools) -> {name, arguments} | None, asked for its call on "
        "the uncompacted and each compacted context; the report diffs their identifier "
        "arguments (e.g. guardrail.replay:reference_agent); implies --compact",
    )
    rep.add_argument(
        "--approve",
        choices=("all", "none"),
        help="answer every call that would wait for the user's approval: approve all (the call "
        "is checked again) or none (refused as declined); without it such calls are counted "
        "as asked, neither allowed nor refused (with --live: all approved)",
    )
    rep.add_argument(
        "--live",
        metavar="MODULE[:ATTRIBUTE]",
        help="run the recorded calls through the real tools, without the guard and behind it "
        "(re-prompt mode), on a fresh environment for each conversation and side: a function "
        "returning the tools of a fresh environment ({name: callable}), or an object (or "
        "module) with tools, and optionally environment and schemas (e.g. "
        "examples.live_shop:fresh); replaces detection and compaction",
    )
    rep.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it goes to stderr)"
    )
    rep.add_argument("--width", type=_count(40), help="table width in characters")
    rep.set_defaults(run=_replay)
    return parser


def _fail(message: str) -> int:
    # Plain text, never wrapped: a path and line number must stay on one line to be copied.
    print(f"guardrail: error: {message}", file=sys.stderr)
    return USAGE_ERROR


def _progress(args: argparse.Namespace) -> tuple[Progress, Callable[[int, int], None]]:
    """A progress bar on stderr (where it is a terminal, unless --no-progress), and its update."""
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("traces"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=args.no_progress or not err.is_terminal,
    )
    task = progress.add_task("replay", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    return progress, advance


#: Replay options that corrupt or compact: a live replay runs the real calls instead.
_NOT_LIVE = ("seed", "classes", "variants", "compact", "keep_recent", "agent")


def _live(args: argparse.Namespace) -> int:
    """``guardrail replay --live``: the recorded calls through the real tools, guarded and not."""
    given = [name for name in _NOT_LIVE if getattr(args, name) not in (None, False)]
    if given:
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        return _fail(
            f"--live runs the recorded calls through the real tools; {options} corrupt or "
            "compact a replay of recorded results: run those without --live"
        )
    try:
        tools, environment, schemas = load_live(args.live)
        files: list[TraceFile] = [load_trace_file(path) for path in args.traces]
        progress, advance = _progress(args)
        with progress:
            report = replay_live(
                files,
                args.manifest,
                tools,
                environment=environment,
                schemas=schemas,
                limit=args.limit,
                examples=args.examples,
                capacity=args.capacity,
                approve=args.approve or "all",
                progress=advance,
            )
    except GuardrailUsageError as exc:
        return _fail(str(exc))
    report.settings["live"] = args.live
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        output_console(args.width).print(report)
    return 0


def _replay(args: argparse.Namespace) -> int:
    if args.live is not None:
        return _live(args)
    args.seed = 0 if args.seed is None else args.seed
    args.classes = list(ALL_CLASSES) if args.classes is None else args.classes
    args.variants = 1 if args.variants is None else args.variants
    # Errors of use first, before anything runs: the manifest, then every trace file.
    try:
        guard = Guard.from_manifest(args.manifest, **_capacity(args))
        files: list[TraceFile] = [load_trace_file(path) for path in args.traces]
        agent: Agent | None = load_agent(args.agent) if args.agent else None
    except GuardrailUsageError as exc:
        return _fail(str(exc))
    depths = list(dict.fromkeys(k for given in args.keep_recent or [[0]] for k in given))
    compact = args.compact or args.keep_recent is not None or agent is not None
    summariser = LossySummarizer(seed=args.seed, kinds=guard.kinds)
    compaction: dict[str, Compaction] = {}
    if compact:
        for depth in depths:
            for name, strategy in strategies(
                guard, summarize=summariser, keep_recent=depth
            ).items():
                compaction[f"{name} k={depth}"] = strategy
    progress, advance = _progress(args)
    try:
        with progress:
            report = replay(
                files,
                guard,
                seed=args.seed,
                limit=args.limit,
                classes=args.classes,
                variants=args.variants,
                examples=args.examples,
                compaction=compaction or None,
                agent=agent,
                progress=advance,
                approve=args.approve,
            )
    except GuardrailUsageError as exc:
        return _fail(str(exc))
    report.settings["manifest"] = args.manifest  # the path as typed, not "<guard>"
    if compact:
        report.settings["keep_recent"] = depths
        report.settings["summariser"] = _describe_summariser(summariser)
    if agent is not None:
        report.settings["agent"] = args.agent
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        output_console(args.width).print(report)
    return 0


def output_console(width: int | None) -> Console:
    """Where tables go: ``--width`` columns, else the terminal's width, else as wide as they are.

    Rich gives a console that is not a terminal 80 columns; a report piped to a file or to
    another program has no screen to fit, so it is not cut at 80.
    """
    console = Console(width=width, highlight=False)
    if width is None and not console.is_terminal:
        console = Console(file=_Trimmed(sys.stdout), width=UNBOUNDED, highlight=False)
    return console


class _Trimmed(io.StringIO):
    """Text written to a file or a pipe, each line without the spaces rich pads it with."""

    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self._out = out
        self._partial = ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        self._out.writelines(line.rstrip() + "\n" for line in lines)
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # rich picks its box characters by it
        return getattr(self._out, "encoding", None) or "utf-8"


def _describe_summariser(summariser: LossySummarizer) -> str:
    rates = ", ".join(f"{name} {rate:.0%}" for name, rate in summariser.rates.items())
    return f"LossySummarizer(seed={summariser.seed}; {rates})"


def _capacity(args: argparse.Namespace) -> dict[str, Any]:
    return {"capacity": args.capacity} if args.capacity is not None else {}


def _check(args: argparse.Namespace) -> int:
    from guardrail.cli._check_call import run_check

    try:
        return run_check(args, output_console(args.width))
    except GuardrailUsageError as exc:
        return _fail(str(exc))


def _init(args: argparse.Namespace) -> int:
    from guardrail.cli._init import run_init

    try:
        return run_init(args, output_console(None))
    except GuardrailUsageError as exc:
        return _fail(str(exc))


def _demo(args: argparse.Namespace) -> int:
    from guardrail.cli._demo import run_demo

    run_demo(Console(width=args.width, highlight=False))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0, or 2 for an error of use)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a bad option (argparse printed why)
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR
    result: int = args.run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
