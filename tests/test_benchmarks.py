"""The benchmark harness (benchmarks/guardrail_bench): its command, its timing helper, its groups.

No timing is asserted: the quick run only proves that every group runs end to end and
prints its rows; the timing helper is tested with a fake clock of counted calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from guardrail_bench import cli, timing

from .conftest import REPO, computed_once

BENCHMARKS = REPO / "benchmarks"
PACKAGE = BENCHMARKS / "guardrail_bench"

#: A row of each group's table, in quick mode.
EXPECTED_ROWS = {
    "sync": ("| bare call |", "| functools.wraps pass-through |", "| guarded, ledger 1,000 |"),
    "async": ("| bare await |", "| LangChain tool.ainvoke |", "| guarded, ledger 100 |"),
    "reads": ("| allowed write, ledger 1,000 |", "| read of held ids, ledger 1,000 |"),
    "refused": (
        "| unknown id, ledger 1,000 (guard.check) |",
        "| mutated id, ledger 1,000 (guard.check) |",
        "| unknown id, 300 new ids since the last refusal (guard.check) |",
        "| naive Levenshtein scan, mutated id |",
    ),
    "harvest": ("| guard.record, ", "| json.loads, ", "| ids recorded per second, parsing"),
    "memory": ("| one ledger of 1,000 entries, per entry |", "| 20 sessions × 5 entries, per"),
    "compaction": ("| compact, 100 messages", "| MB/s of transcript at 100 |"),
    "stores": (
        "| MemoryStore, ledger 100: allowed call, session opened per call |",
        "| SQLiteStore (file), ledger 100: record of 1 new id, session per call |",
        "| SQLiteStore (file), ledger 100: stored bytes per entry |",
        "finished sessions × 5 ids, MemoryStore + cache of 1,024 |",
    ),
    "langchain": (
        "| GuardrailMiddleware around tool.invoke |",
        "| create_agent run, GuardrailMiddleware |",
        "| LangChain's tool.invoke / the middleware's own cost |",
    ),
    "crewai": (
        "| the tool alone: guard_crew adds |",
        "| crew.kickoff, 2 calls: guard_crew adds per call |",
        "| the tool alone: guard_crew adds / CrewAI's invoke |",
    ),
    "loops": (
        "| hand-written loop (parse, call, answer), no guard |",
        "| run_tool_calls, Anthropic message, schema validated / hand-written loop |",
    ),
    "mcp": (
        "| MCP call, guarded server (guard_server) |",
        "| MCP call, guarded client (guarded_call_tool) / no guard |",
        "| the guard's own work: enforce + record, no MCP |",
    ),
    "openai-agents": (
        "| Runner.run, one call per model turn (2 turns): guard_agent adds |",
        "| Runner.run, 2 parallel calls in one turn: the SDK's own cost |",
        "| guardrails + invoker alone, vs the tool's own invoker: guard_agent adds / the SDK",
    ),
    "google-adk": (
        "| run_async, one call per model turn (2 turns): GuardrailPlugin adds |",
        "| run_async, 2 parallel calls in one turn: ADK's own cost |",
        "| the callbacks alone, vs the tool's own run_async: GuardrailPlugin adds / ADK's",
    ),
    "pydantic-ai": (
        "| agent run, 20 tool calls, Guardrail(guard) |",
        "| GuardedToolset.call_tool / bare call_tool |",
        "| Python function calls added per run: GuardedToolset in toolsets= |",
    ),
    "agent-framework": (
        "| agent.run, one call per model turn (2 turns): Guardrail adds |",
        "| agent.run, 2 parallel calls in one turn: the framework's own cost |",
        "| GuardrailMiddleware.process alone, vs the tool's invoke: Guardrail adds / the framework",
    )
    if sys.version_info >= (3, 11)  # the framework needs 3.11: the table says it was not run
    else ("agent-framework: not measured",),
    "servers": (
        "| Redis, 200 entries: allowed call, added |",
        "| PostgreSQL, synchronous_commit off, 200 entries: record, added |",
        "| PostgreSQL: bytes per entry, a 200-entry session |",
        "| Redis: tool calls/s, 2 worker processes (a check and a record each) |",
    ),
    "coldload": (
        "| MemoryStore, 1,000 entries: json.loads of the records |",
        "| SQLiteStore, 1,000 entries: first open in a guard |",
        "| SQLiteStore, 1,000 entries: first open / json.loads |",
    ),
    "pruning": (
        "| MemoryStore: rows stored after 2,000 ids |",
        "| SQLiteStore: first open of that session |",
        "| SQLiteStore: first open, flowed / plain |",
    ),
    "patterns": (
        "| phone: ids_in, worst input (",
        "| email: re.search of a trivial pattern |",
        "| prefixed:cus_: worst input / trivial search |",
    ),
    "mentions": (
        "| guard.record, 2,000 words in one string, each the same IBAN (",
        "| re.findall(r'\\S+') of the same text (",
        "| 200 distinct e-mail addresses in one string: record / findall |",
    ),
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One quick run of every group, as the command runs it: its output and its folder.

    It takes about a minute of CPU, so its tests are marked slow, and it runs once
    however many pytest-xdist workers run them.
    """

    def run() -> tuple[str, Path]:
        out = tmp_path_factory.mktemp("bench")
        command = [sys.executable, str(BENCHMARKS / "run.py"), "--quick", "--only", "all"]
        done = subprocess.run(
            [*command, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout, out

    return computed_once("benchmarks_quick_run", run, tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("group", list(EXPECTED_ROWS))
def test_quick_mode_prints_the_rows_of_every_group(quick_run: tuple[str, Path], group: str) -> None:
    """Quick mode runs every group and prints its rows in the one markdown table format."""
    text, _ = quick_run
    optional = os.environ.get("GUARDRAIL_REQUIRE_SERVICES") != "1"
    if group == "servers" and optional and "| Redis and PostgreSQL stores | skipped |" in text:
        pytest.skip("Redis or PostgreSQL did not answer; the table says so")
    missing = [row for row in EXPECTED_ROWS[group] if row not in text]
    assert not missing, f"rows of {group} missing from the table: {missing}\n{text}"
    assert "| case | median | min | max | unit |" in text


@pytest.mark.slow
def test_quick_mode_names_the_machine_the_command_and_the_targets(
    quick_run: tuple[str, Path],
) -> None:
    """The table names the CPU, Python, the command that made it, and ends in the targets."""
    text, _ = quick_run
    assert "- CPU: " in text
    assert "- Python: " in text
    assert "Command: `python benchmarks/run.py --quick --only all`" in text
    assert "## Targets" in text
    assert "Quick mode" in text


@pytest.mark.slow
def test_quick_mode_writes_results(quick_run: tuple[str, Path]) -> None:
    """With --out the table is saved, and the scaling plot when matplotlib is installed."""
    _, out = quick_run
    assert (out / "latest.md").read_text(encoding="utf-8").startswith("# guardrail benchmarks")
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_group_has_expected_rows_and_a_line_in_the_readme() -> None:
    """Each group of the command is checked by the quick run and named in benchmarks/README.md."""
    assert set(EXPECTED_ROWS) == set(cli.BY_NAME)
    readme = (BENCHMARKS / "README.md").read_text(encoding="utf-8")
    assert [name for name in cli.BY_NAME if f"`{name}`" not in readme] == []


# -- the command --------------------------------------------------------------------------------


def test_a_full_run_writes_to_the_ignored_local_folder_unless_saved() -> None:
    """A full run writes benchmarks/results/local/, which git ignores; --save the tracked files."""
    _, groups, out = cli.parse([])
    assert groups == list(cli.PUBLISHED)
    assert out == BENCHMARKS / "results" / "local"
    _, _, saved = cli.parse(["--save"])
    assert saved == BENCHMARKS / "results"
    ignored = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", str(out / "latest.md")], check=False
    )
    assert ignored.returncode == 0, "benchmarks/results/local/ must be git-ignored"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "--error-unmatch", str(saved / "latest.md")],
        capture_output=True,
        check=False,
    )
    assert tracked.returncode == 0, "benchmarks/results/latest.md must stay tracked"


def test_the_published_table_comes_from_the_default_command() -> None:
    """The tracked latest.md, which the README quotes, is a full run of the default command."""
    text = (BENCHMARKS / "results" / "latest.md").read_text(encoding="utf-8")
    assert "Command: `python benchmarks/run.py`\n" in text
    assert "Quick mode" not in text
    for title in (
        "## Allowed call, sync tool",
        "## Allowed call, async tool",
        "## Refused call",
        "## Harvest and record",
        "## Memory (tracemalloc)",
        "## Compaction without the summariser",
    ):
        assert title in text


def test_quick_partial_and_explicit_runs_choose_their_folder() -> None:
    """Quick and partial runs write nothing unless --out names a folder; --out is used as given."""
    assert cli.parse(["--quick"])[2] is None
    assert cli.parse(["--only", "sync,refused"])[2] is None
    assert cli.parse(["--store-entries", "1000"])[2] is None
    assert cli.parse(["--quick", "--out", "elsewhere"])[2] == Path("elsewhere")


@pytest.mark.parametrize(
    "argv",
    [
        ["--save", "--quick"],
        ["--save", "--only", "sync"],
        ["--save", "--out", "x"],
        ["--save", "--store-entries", "1000"],
    ],
)
def test_save_refuses_a_run_that_is_not_the_full_one(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--save with --quick, --only, --out or --store-entries stops before anything runs."""
    with pytest.raises(SystemExit) as stopped:
        cli.parse(argv)
    assert stopped.value.code == 2
    assert "--save" in capsys.readouterr().err


def test_only_expands_families_and_runs_groups_in_their_order() -> None:
    """`integrations` names every adapter, `all` every group; the run keeps one order."""
    _, groups, _ = cli.parse(["--only", "servers,integrations,sync"])
    assert groups == [
        "sync",
        "langchain",
        "loops",
        "mcp",
        "openai-agents",
        "pydantic-ai",
        "crewai",
        "google-adk",
        "agent-framework",
        "servers",
    ]
    assert cli.parse(["--only", "all"])[1] == list(cli.BY_NAME)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--only", "sync,nonsense"], "unknown group(s) ['nonsense']; choose from sync, async"),
        (["--store-entries", "ten"], "give ledger sizes such as 1000,10000"),
        (["--store-entries", "0"], "give ledger sizes such as 1000,10000"),
    ],
)
def test_a_bad_option_is_a_usage_error_that_says_what_to_give(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown group or a bad ledger size stops with a usage error naming the choices."""
    with pytest.raises(SystemExit) as stopped:
        cli.parse(argv)
    assert stopped.value.code == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        ([], "python benchmarks/run.py"),
        (
            ["--quick", "--only", "integrations"],
            "python benchmarks/run.py --quick --only integrations",
        ),
        (
            ["--only", "servers", "--store-entries", "1_000,10000"],
            "python benchmarks/run.py --only servers --store-entries 1000,10000",
        ),
        (["--only", "mcp,loops"], "python benchmarks/run.py --only loops,mcp"),
    ],
)
def test_the_table_prints_the_command_that_reproduces_the_run(
    argv: list[str], printed: str
) -> None:
    """The command line in the table's header gives the same groups, sizes and mode."""
    options, groups, _ = cli.parse(argv)
    assert cli.command(options, groups) == printed
    again = printed.split()[2:]
    assert cli.parse(again)[1] == groups


# -- one timing helper, one door into the library's internals ----------------------------------


def _sources() -> list[tuple[str, str]]:
    return [
        (path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_every_group_times_through_the_one_timing_helper() -> None:
    """No module but timing.py reads a clock or runs timeit: every group times through it."""
    clocks = re.compile(r"\b(perf_counter|monotonic|timeit|process_time)\b|\btime\.time\(")
    reading = [name for name, text in _sources() if name != "timing.py" and clocks.search(text)]
    assert reading == []


def test_only_the_internals_module_reaches_into_the_library() -> None:
    """Private library names (guardrail._x, guardrail.x._y, ._admit) are imported in one place."""
    private = re.compile(r"guardrail(\.\w+)*\._\w+|\._admit\b")
    reaching = [name for name, text in _sources() if private.search(text)]
    assert reaching == ["_internals.py"]


@pytest.fixture(autouse=True)
def _no_full_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper collects garbage before each sample: seconds in a worker holding the corpus."""
    monkeypatch.setattr(gc, "collect", lambda: 0)


def _counting_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """perf_counter as a counter: each read advances one second, so timings are exact."""
    ticks = iter(range(1_000_000))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))


def test_interleaved_rotates_the_order_of_the_cases_each_round() -> None:
    """Round r starts with case r (mod the number of cases), so no case always goes first."""
    seen: list[str] = []

    def case(name: str) -> timing.Runner:
        def run(number: int) -> float:
            seen.append(name)
            return float(number)

        return run

    times = timing.interleaved({n: case(n) for n in "abc"}, rounds=4, number=2)
    assert "".join(seen) == "abc" + "bca" + "cab" + "abc"
    assert times == {n: [1.0] * 4 for n in "abc"}


def test_interleaved_calibrates_a_sample_to_the_seconds_asked() -> None:
    """With sample=, each case runs as many operations as take about that long."""
    numbers: list[int] = []

    def run(number: int) -> float:
        numbers.append(number)
        return number * 0.001  # one operation takes a millisecond

    timing.interleaved({"x": run}, rounds=2, sample=0.1)
    assert numbers[-2:] == [100, 100]
    with pytest.raises(ValueError, match="sample= .seconds. or number="):
        timing.interleaved({"x": run}, rounds=1)


def test_once_times_the_run_and_leaves_the_setup_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """once() runs setup before each run and counts only the run itself."""
    _counting_clock(monkeypatch)
    order: list[str] = []
    times = timing.once(lambda: order.append("run"), rounds=3, setup=lambda: order.append("set"))
    assert order == ["set", "run"] * 3
    assert times == [1.0, 1.0, 1.0]  # two clock reads around each run, none around a setup


def test_runners_enter_their_context_outside_the_timed_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """calls() and awaits() run n operations inside one context, timed from inside it."""
    _counting_clock(monkeypatch)
    entered: list[str] = []

    @contextlib.contextmanager
    def context() -> Iterator[None]:
        entered.append("in")
        yield
        entered.append("out")

    assert timing.calls(lambda: None, context)(5) == 1.0
    loop = asyncio.new_event_loop()
    try:

        async def nothing() -> None:
            return None

        assert timing.awaits(loop, nothing, context)(5) == 1.0
    finally:
        loop.close()
    assert entered == ["in", "out", "in", "out"]


def test_paired_statistics_pair_the_rounds() -> None:
    """A ratio or difference is the median over rounds of the pair taken in that round."""
    a, b = [2.0, 9.0, 4.0], [1.0, 3.0, 1.0]
    assert timing.paired_ratio(a, b) == 3.0  # rounds give 2, 3, 4
    assert timing.paired_difference(a, b) == 3.0  # rounds give 1, 6, 3
    assert timing.paired_ratio([6.0], [1.0, 2.0]) == 4.0  # unpaired: medians 6 / 1.5


def test_held_open_keeps_an_async_context_open_across_runners() -> None:
    """A context entered once on the loop serves every awaited sample, and is left by its task."""
    loop = asyncio.new_event_loop()
    tasks: list[object] = []

    @contextlib.asynccontextmanager
    async def connection() -> AsyncIterator[list[str]]:
        tasks.append(asyncio.current_task())
        log: list[str] = []
        yield log
        tasks.append(asyncio.current_task())
        log.append("closed")

    try:
        with timing.held_open(loop, timing.all_of(connection())) as (log,):

            async def use() -> None:
                log.append("used")

            timing.interleaved({"use": timing.awaits(loop, use)}, rounds=3, number=2)
            assert log == ["used"] * 6
        assert log[-1] == "closed"
        assert tasks[0] is tasks[1]
    finally:
        loop.close()


def test_held_open_raises_what_failed_before_it_opened() -> None:
    """A context that fails on entry raises its own error, and nothing hangs."""
    loop = asyncio.new_event_loop()

    @contextlib.asynccontextmanager
    async def refused() -> AsyncIterator[None]:
        raise ConnectionError("no server")
        yield

    try:
        with pytest.raises(ConnectionError, match="no server"), timing.held_open(loop, refused()):
            pass
    finally:
        loop.close()


def test_the_every_turn_block_script_prints_its_table_and_the_default_budget() -> None:
    """benchmarks/every_turn_block.py runs on the shipped corpus: one row a size, the default."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "every_turn_block.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    rows = [
        line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert len(rows) == 4  # the header and the three sizes
    assert "default budget 1,000 tokens:" in done.stdout


def test_the_corpus_compaction_script_prints_its_rate() -> None:
    """benchmarks/corpus_compaction.py compacts shipped conversations; prints MB/s, wall and CPU."""
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "corpus_compaction.py"),
            "--conversations",
            "3",
            "--rounds",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.stdout.startswith("3 conversations, ")
    assert re.search(r"compact, built-in summarizer: \d+ ms, [\d.]+ MB/s", done.stdout)
    assert re.search(r"CPU time: \d+ ms, [\d.]+ MB/s", done.stdout)


def test_a_quick_report_judges_no_target() -> None:
    """At quick sizes the targets are listed, never marked met or not met."""
    from guardrail_bench.report import Report, Target, render

    report = Report(targets=[Target("allowed sync", "≤ 1×", "0.9×", True)])
    quick = render(report, "python benchmarks/run.py --quick", quick=True)
    full = render(report, "python benchmarks/run.py", quick=False)
    assert "| allowed sync | ≤ 1× | 0.9× | not judged |" in quick
    assert "| allowed sync | ≤ 1× | 0.9× | yes |" in full


def test_the_harvest_cpu_script_prints_a_ratio_per_size() -> None:
    """benchmarks/harvest_cpu.py records N records against json.loads and prints each ratio."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "harvest_cpu.py"), "--records", "10,20", "--rounds", "1"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["10 records", "20 records"]
    assert all(re.search(r"guard.record / json.loads [\d.]+×", line) for line in lines)
