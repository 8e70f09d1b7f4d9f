"""Shared fixtures: a small shop guard, the path of the real traces, the corpus replayed once."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import structlog
from filelock import FileLock

from guardrail import Guard, Ledger
from guardrail.cli import _main as cli
from guardrail.replay import ReplayReport, SideBySide, side_by_side
from guardrail.replay._replay import replay

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpus"
AIRLINE_TRACES = CORPUS / "tau-airline" / "traces.jsonl.gz"
AIRLINE_MANIFEST = REPO / "examples" / "tau_airline.toml"


#: Marks a test that replays the airline corpus: slow, but run everywhere (the corpus ships here).
needs_corpus = pytest.mark.slow

T = TypeVar("T")


def computed_once(name: str, compute: Callable[[], T], factory: pytest.TempPathFactory) -> T:
    """``compute()``, run once for the whole test run, however many pytest-xdist workers ask.

    The corpus replays and the benchmark run take many seconds; a session fixture built
    on each worker would repeat them. Under pytest-xdist the workers of one run share the
    parent of their temporary folders: the first to ask computes the value under a file
    lock and pickles it there, the others wait for it and load it. A serial run computes.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return compute()
    shared = factory.getbasetemp().parent
    cached = shared / f"{name}.pickle"
    with FileLock(shared / f"{name}.lock"):
        if cached.exists():
            value: T = pickle.loads(cached.read_bytes())  # noqa: S301 - written by this run
            return value
        value = compute()
        cached.write_bytes(pickle.dumps(value))
        return value


#: The agent runtimes' packages: `--core` runs the tests that import none of them.
RUNTIMES = (
    "langchain",
    "langchain_core",
    "langgraph",
    "pydantic_ai",
    "agents",
    "mcp",
    "crewai",
    "google.adk",
    "agent_framework",
)

# `import crewai` reports the install to CrewAI's servers unless its telemetry is off, and a
# crew's first run asks on the console whether to show traces unless it runs under test: set
# before any test module imports it (tests/integrations/_crewai_model.py sets them per test too).
for _name in ("CREWAI_DISABLE_TELEMETRY", "CREWAI_DISABLE_TRACKING", "CREWAI_TESTING"):
    os.environ.setdefault(_name, "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--core`: the core library's tests, without the runtime adapters' (make test-quick)."""
    parser.addoption(
        "--core",
        action="store_true",
        help="leave out tests/integrations and the tests marked runtimes, and fail if a test "
        f"imports an agent runtime's package ({', '.join(RUNTIMES)}): the core library's loop",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With --core, the adapters' tests are not collected, so their runtimes are not imported."""
    if config.getoption("core") and collection_path == REPO / "tests" / "integrations":
        return True
    if sys.version_info < (3, 11) and collection_path.name.startswith("test_agent_framework"):
        return True  # Agent Framework needs Python 3.11; the project runs on 3.10
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --core, the tests marked runtimes are left out."""
    if not config.getoption("core"):
        return
    dropped = [item for item in items if item.get_closest_marker("runtimes") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("runtimes") is None]


@pytest.fixture(autouse=True)
def _structlog_as_found() -> Iterator[None]:
    """A test that configures structlog leaves it as it found it, configured or not.

    Whether structlog is configured decides where the audit writes (through
    structlog, or to the standard library's ``guardrail`` logger), so one
    test's configuration would change what the next prints.
    """
    configured, config = structlog.is_configured(), structlog.get_config()
    yield
    if configured:
        structlog.configure(**config)
    elif structlog.is_configured():
        structlog.reset_defaults()


@pytest.fixture(scope="session", autouse=True)
def _core_imports_no_runtime(request: pytest.FixtureRequest) -> Iterator[None]:
    """With --core, the run fails if any test imported an agent runtime's package."""
    yield
    if request.config.getoption("core"):
        imported = sorted(name for name in RUNTIMES if name in sys.modules)
        assert not imported, (
            f"--core imported {imported}: move the test that needs them to tests/integrations"
        )


def need_corpus() -> Path:
    """The airline traces, which ship with the repository."""
    assert AIRLINE_TRACES.exists(), f"{AIRLINE_TRACES} is missing: restore it from git"
    return AIRLINE_TRACES


def corpus_traces() -> list[dict[str, Any]]:
    """The 200 airline conversations as the corpus writes them (id, messages, metadata)."""
    with gzip.open(need_corpus(), "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def corpus_conversations() -> list[list[dict[str, Any]]]:
    """The message lists of the 200 airline conversations."""
    return [trace["messages"] for trace in corpus_traces()]


@pytest.fixture(scope="session")
def corpus_side_by_side(tmp_path_factory: pytest.TempPathFactory) -> SideBySide:
    """side_by_side() over all 200 airline conversations, keep_recent 0 to 4, computed once.

    The full sweep takes about thirty seconds; the compaction test asserts on it and the
    README check compares the table the README quotes with it.
    """

    def sweep() -> SideBySide:
        quiet = structlog.wrap_logger(
            None, wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR)
        )
        guard = Guard.from_manifest(AIRLINE_MANIFEST, logger=quiet)
        return side_by_side(corpus_conversations(), guard, keep_recent=range(5))

    return computed_once("corpus_side_by_side", sweep, tmp_path_factory)


#: The agent the README's replay command asks for its call on each context.
REFERENCE_AGENT = "guardrail.replay:reference_agent"

#: The README's replay command: every trace and corruption class, a compaction (guardrail's and
#: a plain summary's, keep_recent 0) before each of the 1,164 recorded calls, and the reference
#: agent asked on each context.
CORPUS_REPLAY = (
    "replay",
    str(AIRLINE_TRACES),
    "--manifest",
    str(AIRLINE_MANIFEST),
    "--compact",
    "--keep-recent",
    "0",
    "--agent",
    REFERENCE_AGENT,
)


@dataclass(frozen=True)
class CorpusReplay:
    """One run of the README's replay command: its exit code, its tables and its report."""

    code: int
    printed: str  # the tables, as printed to a file: each as wide as it is
    report: ReplayReport  # the report the command printed; --json prints report.to_json()


@contextlib.contextmanager
def reports_kept() -> Iterator[list[ReplayReport]]:
    """While open, each report the replay command builds is also appended to the list given."""
    reports: list[ReplayReport] = []

    def keep(*args: Any, **options: Any) -> ReplayReport:
        report = replay(*args, **options)
        reports.append(report)
        return report

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "replay", keep)
        yield reports


@pytest.fixture(scope="session")
def corpus_replay(tmp_path_factory: pytest.TempPathFactory) -> CorpusReplay:
    """The README's replay command over the whole corpus, run once, in process, for the suite.

    The sweep takes ten seconds or more; the command-line, replay and README tests all assert
    on this one run. The report is the object the command built and printed.
    """
    need_corpus()

    def run() -> CorpusReplay:
        out = io.StringIO()
        with reports_kept() as reports, contextlib.redirect_stdout(out):
            code = cli.main([*CORPUS_REPLAY, "--no-progress"])
        (report,) = reports
        return CorpusReplay(code=code, printed=out.getvalue(), report=report)

    return computed_once("corpus_replay", run, tmp_path_factory)


def shop_guard(mode: str = "raise", **options: object) -> Guard:
    """A guard with the kinds of a small web shop."""
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    guard.add_kind(
        "order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"], examples=["#W0000000"]
    )
    guard.add_kind("customer", pattern=r"cus_[A-Za-z0-9]{6}")
    guard.add_kind("item", pattern=r"it_[a-z0-9]{4,}")
    guard.add_kind("email", normalize="email")
    guard.declare(
        "search_orders",
        ids={"customer_id": "customer"},
        produces={"orders[*].order_id": {"kind": "order", "status": "status"}},
        effect="read",
    )
    guard.declare(
        "get_order",
        ids={"order_id": "order"},
        produces={"items[*].item_id": "item", "order_id": "order"},
        effect="read",
    )
    guard.declare("issue_refund", ids={"order_id": "order", "item_ids[*]": "item"})
    return guard


@pytest.fixture
def guard() -> Guard:
    """A raise-mode shop guard."""
    return shop_guard()


@pytest.fixture
def ledger(guard: Guard) -> Iterator[Ledger]:
    """An open session of the shop guard."""
    with guard.session("test") as opened:
        yield opened


ORDERS = {
    "orders": [
        {"order_id": "#W8855135", "status": "delivered"},
        {"order_id": "#W2378156", "status": "pending"},
    ]
}


# -- recorded conversations in the corpus shape, for replay tests ----------------------------


def user(text: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """An assistant message making one tool call; ``arguments`` as given (an object, or text)."""
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "name": name, "arguments": arguments}],
    }


def result(call_id: str, output: Any, *, error: bool = False) -> dict[str, Any]:
    """The tool message answering ``call_id``; an output that is not text is written as JSON."""
    text = output if isinstance(output, str) else json.dumps(output)
    return {"role": "tool", "tool_call_id": call_id, "content": text, "error": error}


def stored_ids(store: Any, session_id: str) -> set[str]:
    """The values of the live entries a store holds for a session (empty if none)."""
    snapshot = store.load(session_id)
    if snapshot is None:
        return set()
    return {r["value"] for r in snapshot.records if r["state"] == "live"}
