"""What the guard costs, measured in one process run against the floor and the peers.

Run ``python benchmarks/run.py`` for the full table (it also writes
``latest.md`` and ``scaling.png`` to ``benchmarks/results/local/``, which git
ignores; ``--save`` writes them to the tracked ``benchmarks/results/`` instead,
for a run meant to be published), or ``--quick`` to run every benchmark with
tiny sizes, only to check that the harness works.

A plain ``timeit``-style harness rather than pytest-benchmark: every case is
measured in the same process, in interleaved rounds (round *r* runs every
case of a group once, in rotated order), so the ratios compare samples
taken moments apart on a noisy shared machine, and the paired ratio of each
round is available. Garbage collection stays enabled while timing, as it is
in a real program: a path that allocates pays for it here too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import importlib
import importlib.metadata
import json
import logging
import os
import platform
import random
import statistics
import string
import subprocess
import sys
import time
import timeit
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic
import structlog
import wrapt

from guardrail import Guard, Id, Ledger
from guardrail._harvest import Batch
from guardrail.compaction import compact
from guardrail.ledger import Source
from guardrail.ledger._ledger import state_of

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"  # the published table and plot, tracked
LOCAL = RESULTS / "local"  # a run's own, git-ignored: a run on a laptop changes nothing
ALPHABET = string.ascii_letters + string.digits
CUSTOMER, ORDER = "customer", "order"


# -- sizes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """How big and how long: the full run, or the quick harness check."""

    ledgers: tuple[int, ...]  # the allowed path's ledgers, for the scaling curve
    table: tuple[int, int]  # the two of them the table quotes
    refused_ledger: int
    growth: int  # ids added between two refusals, in the growing-ledger case
    harvest_ids: int
    harvest_bytes: int
    memory_ledgers: tuple[int, ...]
    sessions: int
    session_entries: int
    transcripts: tuple[int, ...]
    compaction_rounds: tuple[int, ...]  # per transcript size: compaction takes seconds
    compaction_entries: int
    rounds: int  # interleaved rounds for the per-call groups
    sample: float  # seconds one sample of a per-call case aims at
    slow_rounds: int  # rounds for the cases that take milliseconds or more
    naive_rounds: int
    store_ledgers: tuple[int, ...] = (1_000, 10_000, 100_000)  # entries per stored session
    finished_sessions: int = 20_000  # conversations ended, for the memory a guard holds


FULL = Sizes(
    ledgers=(1_000, 3_000, 10_000, 30_000, 100_000),
    table=(10_000, 100_000),
    refused_ledger=100_000,
    growth=300,
    harvest_ids=40_000,
    harvest_bytes=2_000_000,
    memory_ledgers=(10_000, 100_000),
    sessions=10_000,
    session_entries=50,
    transcripts=(1_000, 10_000, 100_000),
    compaction_rounds=(5, 3, 1),
    compaction_entries=5_000,
    rounds=25,
    sample=0.04,
    slow_rounds=9,
    naive_rounds=3,
)
QUICK = Sizes(
    ledgers=(100, 1_000),
    table=(100, 1_000),
    refused_ledger=1_000,
    growth=300,
    harvest_ids=400,
    harvest_bytes=20_000,
    memory_ledgers=(100, 1_000),
    sessions=20,
    session_entries=5,
    transcripts=(20, 50, 100),
    compaction_rounds=(2, 2, 2),
    compaction_entries=50,
    rounds=2,
    sample=0.001,
    slow_rounds=2,
    naive_rounds=1,
    store_ledgers=(100,),
    finished_sessions=100,
)
GROUPS = ("sync", "async", "refused", "harvest", "memory", "compaction", "stores", "integrations")


# -- results --------------------------------------------------------------------------------


@dataclass
class Row:
    """One measured case: samples (seconds per operation, or bytes), or why it was skipped."""

    name: str
    samples: list[float] = field(default_factory=list)
    unit: str = "µs"
    note: str = ""
    skipped: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclass
class Section:
    """One table: rows, then derived ratios."""

    title: str
    rows: list[Row] = field(default_factory=list)
    ratios: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Target:
    """One target of the issue, with what was measured."""

    what: str
    target: str
    measured: str
    met: bool | None  # None: not measured (skipped)


@dataclass
class Report:
    sections: list[Section] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def _scale(unit: str) -> float:
    return {"µs": 1e6, "ms": 1e3, "s": 1.0, "B": 1.0, "KB": 1e-3, "MB": 1e-6}[unit]


def _fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(a: Row, b: Row) -> float:
    """The median of per-round paired ratios when the rounds line up, else of medians."""
    if len(a.samples) == len(b.samples) and a.samples:
        return statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))
    return a.median / b.median


# -- timing ---------------------------------------------------------------------------------

Runner = Callable[[int], float]  # run n operations, return the seconds taken


def _calibrate(run: Runner, target: float) -> int:
    number = 1
    while True:
        elapsed = run(number)
        if elapsed >= target / 5 or number >= 1 << 24:
            return max(1, round(number * target / max(elapsed, 1e-9)))
        number *= 5 if elapsed < target / 50 else 2


def interleaved(cases: dict[str, Runner], *, rounds: int, sample: float) -> dict[str, list[float]]:
    """Seconds per operation of each case, over ``rounds`` interleaved rounds."""
    numbers = {name: _calibrate(run, sample) for name, run in cases.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    for r in range(rounds):
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            gc.collect()
            times[name].append(cases[name](numbers[name]) / numbers[name])
    return times


def once(
    run: Callable[[], Any], *, rounds: int, setup: Callable[[], Any] | None = None
) -> list[float]:
    """Seconds of each of ``rounds`` runs of a slow operation (setup not timed)."""
    times = []
    for _ in range(rounds):
        if setup is not None:
            setup()
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def sync_runner(stmt: str, env: dict[str, Any], context: Callable[[], Any] | None = None) -> Runner:
    """A timeit runner for ``stmt`` with gc enabled, optionally inside a context manager."""
    timer = timeit.Timer(stmt, setup="gc.enable()", globals={**env, "gc": gc})

    def run(number: int) -> float:
        with context() if context is not None else contextlib.nullcontext():
            return timer.timeit(number)

    return run


def async_runner(
    loop: asyncio.AbstractEventLoop,
    call: Callable[[], Any],
    context: Callable[[], Any] | None = None,
) -> Runner:
    """Awaits ``call()`` n times in one coroutine on ``loop``."""

    async def body(number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            await call()
        return time.perf_counter() - start

    def run(number: int) -> float:
        with context() if context is not None else contextlib.nullcontext():
            return loop.run_until_complete(body(number))

    return run


# -- logging as a production program sets it up ---------------------------------------------


@contextlib.contextmanager
def production_logging() -> Iterator[None]:
    """structlog filtering below WARNING, rendering JSON to a sink; restored afterwards.

    Refusals are warnings, so the refused path renders each one; the sink is
    the null device so the terminal is not flooded, as a log file would be.
    """
    saved = structlog.get_config()
    with Path(os.devnull).open("w") as sink:
        structlog.configure(
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            logger_factory=structlog.PrintLoggerFactory(file=sink),
            cache_logger_on_first_use=True,
        )
        try:
            yield
        finally:
            structlog.configure(**saved)


# -- data -----------------------------------------------------------------------------------


def ids(rng: random.Random, prefix: str, length: int, count: int) -> list[str]:
    """``count`` distinct ids such as ``ord_8F3kQ2xM01``."""
    made: dict[str, None] = {}
    while len(made) < count:
        made[prefix + "".join(rng.choices(ALPHABET, k=length))] = None
    return list(made)


def make_guard(**options: Any) -> Guard:
    guard = Guard(capacity=10_000_000, **options)
    guard.add_kind(CUSTOMER, pattern=r"cus_[A-Za-z0-9]{8}")
    guard.add_kind(ORDER, pattern=r"ord_[A-Za-z0-9]{10}")
    guard.declare(
        "list_orders",
        produces={"orders[*].order_id": ORDER, "orders[*].customer_id": CUSTOMER},
        effect="read",
    )
    return guard


def fill(guard: Guard, customers: Sequence[str], orders: Sequence[str]) -> Ledger:
    """A ledger holding ``customers`` and ``orders``, admitted as one tool result would be."""
    ledger = guard.new_ledger(f"bench-{len(customers) + len(orders)}")
    source = Source("list_orders", None, "orders[*]", 0)
    found = [
        Batch(CUSTOMER, "orders[*]", None, list(customers), list(customers), None),
        Batch(ORDER, "orders[*]", None, list(orders), list(orders), None),
    ]
    state_of(ledger).admit(found, source=source)
    return ledger


# -- the allowed path -----------------------------------------------------------------------


def _peers_sync() -> dict[str, Callable[..., Any] | str]:
    """The functions to compare against, each wrapping its own copy of the same body."""

    def body() -> Callable[..., str]:
        def refund(customer_id: str, order_id: str) -> str:
            return "ok"

        return refund

    def wraps(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def passthrough(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return passthrough

    @wrapt.decorator
    def empty(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return wrapped(*args, **kwargs)

    peers: dict[str, Any] = {
        "bare call": body(),
        "functools.wraps pass-through": wraps(body()),
        "wrapt pass-through (empty)": empty(body()),
        "pydantic.validate_call": pydantic.validate_call(body()),
    }
    try:
        from langchain_core.tools import StructuredTool
    except ImportError:
        peers["LangChain tool.invoke"] = "langchain-core is not installed (it is no dependency)"
    else:
        peers["LangChain tool.invoke"] = StructuredTool.from_function(
            func=body(), name="refund", description="Refund an order."
        )
    return peers


def _peers_async() -> dict[str, Callable[..., Any] | str]:
    def body() -> Callable[..., Any]:
        async def refund(customer_id: str, order_id: str) -> str:
            return "ok"

        return refund

    def wraps(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def passthrough(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **kwargs)

        return passthrough

    @wrapt.decorator
    async def empty(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        return await wrapped(*args, **kwargs)

    peers: dict[str, Any] = {
        "bare await": body(),
        "functools.wraps pass-through": wraps(body()),
        "wrapt pass-through (empty)": empty(body()),
        "pydantic.validate_call": pydantic.validate_call(body()),
    }
    try:
        from langchain_core.tools import StructuredTool
    except ImportError:
        peers["LangChain tool.ainvoke"] = "langchain-core is not installed (it is no dependency)"
    else:
        peers["LangChain tool.ainvoke"] = StructuredTool.from_function(
            coroutine=body(), name="refund", description="Refund an order."
        )
    return peers


def guarded_tools(guard: Guard) -> tuple[Callable[..., str], Callable[..., Any]]:
    """A sync and an async ``write`` tool with two identifier parameters."""

    @guard.tool(effect="write")
    def refund(
        customer_id: Annotated[str, Id(CUSTOMER)], order_id: Annotated[str, Id(ORDER)]
    ) -> str:
        return "ok"

    @guard.tool(effect="write")
    async def refund_async(
        customer_id: Annotated[str, Id(CUSTOMER)], order_id: Annotated[str, Id(ORDER)]
    ) -> str:
        return "ok"

    return refund, refund_async


@dataclass
class Ledgers:
    """The allowed path's ledgers by size, and the two ids each call passes."""

    guard: Guard
    by_size: dict[int, Ledger]
    picks: dict[int, tuple[str, str]]


def build_ledgers(sizes: Sizes, rng: random.Random) -> Ledgers:
    guard = make_guard()
    by_size: dict[int, Ledger] = {}
    picks: dict[int, tuple[str, str]] = {}
    for size in sizes.ledgers:
        customers = ids(rng, "cus_", 8, size // 2)
        orders = ids(rng, "ord_", 10, size - size // 2)
        by_size[size] = fill(guard, customers, orders)
        picks[size] = (customers[len(customers) // 2], orders[len(orders) // 3])
    return Ledgers(guard, by_size, picks)


def _session(guard: Guard, ledger: Ledger) -> Callable[[], Any]:
    return lambda: guard.session(ledger.session_id or "bench", ledger=ledger)


def bench_sync(sizes: Sizes, report: Report, ledgers: Ledgers) -> None:
    guard = ledgers.guard
    refund, _ = guarded_tools(guard)
    first = min(ledgers.by_size)
    customer, order = ledgers.picks[first]
    cases: dict[str, Runner] = {}
    section = Section("Allowed call, sync tool with 2 id parameters (per call)")
    skipped: list[Row] = []
    for name, peer in _peers_sync().items():
        if isinstance(peer, str):
            skipped.append(Row(name, skipped=peer))
            continue
        env = {"f": peer, "c": customer, "o": order}
        stmt = (
            "f.invoke({'customer_id': c, 'order_id': o})"
            if name.startswith("LangChain")
            else "f(customer_id=c, order_id=o)"
        )
        cases[name] = sync_runner(stmt, env)
    for size, ledger in ledgers.by_size.items():
        c, o = ledgers.picks[size]
        cases[f"guarded, ledger {size:,}"] = sync_runner(
            "f(customer_id=c, order_id=o)",
            {"f": refund, "c": c, "o": o},
            _session(guard, ledger),
        )
    times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    rows = {name: Row(name, samples) for name, samples in times.items()}
    _allowed_section(section, rows, skipped, sizes, report, "sync", "bare call")


def bench_async(sizes: Sizes, report: Report, ledgers: Ledgers) -> None:
    guard = ledgers.guard
    _, refund = guarded_tools(guard)
    loop = asyncio.new_event_loop()
    try:
        first = min(ledgers.by_size)
        customer, order = ledgers.picks[first]
        cases: dict[str, Runner] = {}
        skipped: list[Row] = []
        for name, peer in _peers_async().items():
            if isinstance(peer, str):
                skipped.append(Row(name, skipped=peer))
                continue
            if name.startswith("LangChain"):
                tool: Any = peer
                arguments = {"customer_id": customer, "order_id": order}
                cases[name] = async_runner(loop, functools.partial(tool.ainvoke, arguments))
            else:
                cases[name] = async_runner(
                    loop, functools.partial(peer, customer_id=customer, order_id=order)
                )
        for size, ledger in ledgers.by_size.items():
            c, o = ledgers.picks[size]
            cases[f"guarded, ledger {size:,}"] = async_runner(
                loop, functools.partial(refund, customer_id=c, order_id=o), _session(guard, ledger)
            )
        times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    finally:
        loop.close()
    section = Section("Allowed call, async tool with 2 id parameters (per awaited call)")
    rows = {name: Row(name, samples) for name, samples in times.items()}
    _allowed_section(section, rows, skipped, sizes, report, "async", "bare await")


def _allowed_section(
    section: Section,
    rows: dict[str, Row],
    skipped: list[Row],
    sizes: Sizes,
    report: Report,
    flavour: str,
    bare_name: str,
) -> None:
    small, large = sizes.table
    shown = [name for name in rows if not name.startswith("guarded")]
    shown += [f"guarded, ledger {small:,}", f"guarded, ledger {large:,}"]
    section.rows = [rows[name] for name in shown] + skipped
    bare, wrapt_row = rows[bare_name], rows["wrapt pass-through (empty)"]
    validate = rows["pydantic.validate_call"]
    g_small, g_large = rows[f"guarded, ledger {small:,}"], rows[f"guarded, ledger {large:,}"]
    wrapt_cost = wrapt_row.median - bare.median
    own = g_large.median - wrapt_row.median
    to_wrapt = max(_ratio(g_small, wrapt_row), _ratio(g_large, wrapt_row))
    to_validate = max(_ratio(g_small, validate), _ratio(g_large, validate))
    flat = _ratio(g_large, g_small)
    section.ratios = [
        (f"guarded {small:,} / wrapt pass-through", f"{_ratio(g_small, wrapt_row):.2f}×"),
        (f"guarded {large:,} / wrapt pass-through", f"{_ratio(g_large, wrapt_row):.2f}×"),
        (f"guarded {small:,} / pydantic.validate_call", f"{_ratio(g_small, validate):.2f}×"),
        (f"guarded {large:,} / pydantic.validate_call", f"{_ratio(g_large, validate):.2f}×"),
        (f"guarded {large:,} / guarded {small:,} (flatness)", f"{flat:.2f}×"),
        (f"guarded {large:,} / {bare_name}", f"{_ratio(g_large, bare):.1f}×"),
        (
            "guard's own work (guarded − wrapt) / wrapt's own cost (wrapt − bare)",
            f"{own * 1e6:.2f} / {wrapt_cost * 1e6:.2f} µs = {own / wrapt_cost:.2f}",
        ),
    ]
    lc = rows.get("LangChain tool.invoke") or rows.get("LangChain tool.ainvoke")
    if lc is not None:
        section.ratios.append((f"{lc.name} / guarded {large:,}", f"{_ratio(lc, g_large):.1f}×"))
    report.sections.append(section)
    report.curves[f"allowed {flavour}, guarded"] = [
        (size, rows[f"guarded, ledger {size:,}"].median) for size in sizes.ledgers
    ]
    report.curves[f"allowed {flavour}, wrapt pass-through"] = [
        (size, wrapt_row.median) for size in sizes.ledgers
    ]
    report.targets += [
        Target(
            f"allowed {flavour}: guarded / wrapt pass-through",
            "≤ 1.3×",
            f"{to_wrapt:.2f}×",
            to_wrapt <= 1.3,
        ),
        Target(
            f"allowed {flavour}: guarded / validate_call",
            "≤ 2×",
            f"{to_validate:.2f}×",
            to_validate <= 2,
        ),
        Target(
            f"allowed {flavour}: {large:,} / {small:,} entries",
            "flat (≤ 1.1×)",
            f"{flat:.2f}×",
            flat <= 1.1,
        ),
    ]


# -- the refused path -----------------------------------------------------------------------


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


def bench_refused(sizes: Sizes, report: Report, rng: random.Random) -> None:
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
        f"{problem} id, ledger {size:,} (guard.check)": sync_runner(_CHECK, {**env, "v": value})
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
        batch = next(batches)
        state_of(ledger).admit(
            [Batch(ORDER, "orders[*]", None, batch, batch, None)],
            source=Source("t", None, "orders[*]", 0),
        )

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
            f"refused (unknown) after {sizes.growth} new ids (extra; not in the issue)",
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
                "≤ 1 ms",
                f"{row.median * 1e3:.3f} ms",
                row.median <= 1e-3,
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
        run = sync_runner(_CHECK, {"guard": guard, "ledger": small, "c": customer, "v": probe})
        curve.append(
            (step, statistics.median(interleaved({"x": run}, rounds=3, sample=sizes.sample)["x"]))
        )
    report.curves["refused, mutated id"] = curve


# -- harvest --------------------------------------------------------------------------------


def harvest_payload(sizes: Sizes, rng: random.Random) -> tuple[str, int]:
    """A list_orders result: records with an order id and a customer id each, padded."""
    count = sizes.harvest_ids // 2
    orders = ids(rng, "ord_", 10, count)
    customers = ids(rng, "cus_", 8, count)
    statuses = ("delivered", "pending", "cancelled", "processed")
    records = [
        {
            "order_id": order,
            "customer_id": customer,
            "status": statuses[i % 4],
            "total": round(rng.uniform(5, 900), 2),
        }
        for i, (order, customer) in enumerate(zip(orders, customers, strict=True))
    ]
    bare = len(json.dumps({"orders": records}))
    pad = (sizes.harvest_bytes - bare) // count - len(', "note": ""')
    if pad > 0:
        for record in records:
            record["note"] = "x" * pad
    text = json.dumps({"orders": records})
    return text, 2 * count


def bench_harvest(sizes: Sizes, report: Report, rng: random.Random) -> None:
    guard = make_guard()
    text, count = harvest_payload(sizes, rng)
    ledgers: list[Ledger] = []

    def fresh() -> None:
        ledgers[:] = [guard.new_ledger("harvest")]

    def record() -> None:
        guard.record("list_orders", {}, text, ledger=ledgers[0])

    record_times = once(record, rounds=sizes.slow_rounds, setup=fresh)
    if len(ledgers[0]) != count:
        raise SystemExit(f"harvest set-up is wrong: {len(ledgers[0])} entries, not {count}")
    loads_times = once(lambda: json.loads(text), rounds=sizes.slow_rounds)
    mb = len(text.encode()) / 1e6
    rows = [
        Row(f"json.loads, {mb:.1f} MB", loads_times, unit="ms"),
        Row(
            f"guard.record, {mb:.1f} MB, {count:,} ids (parse + harvest + admit)",
            record_times,
            unit="ms",
        ),
    ]
    section = Section(f"Harvest and record one {mb:.1f} MB JSON result holding {count:,} ids")
    section.rows = rows
    rate = count / rows[1].median
    section.ratios = [
        ("guard.record / json.loads", f"{_ratio(rows[1], rows[0]):.1f}×"),
        ("ids recorded per second, parsing included", f"{rate:,.0f}"),
        ("MB of result per second", f"{mb / rows[1].median:.0f}"),
    ]
    report.sections.append(section)
    report.targets.append(
        Target(
            "harvest + record, parsing included",
            "≥ 500,000 ids/s",
            f"{rate:,.0f} ids/s",
            rate >= 5e5,
        )
    )


# -- memory ---------------------------------------------------------------------------------


def _traced(build: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated after ``build()`` (its result kept alive), by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, kept


def bench_memory(sizes: Sizes, report: Report, rng: random.Random) -> None:
    guard = make_guard()
    guarded_tools(guard)
    source = Source("list_orders", None, "orders[*]", 0)
    rows: list[Row] = []
    per_entry: list[float] = []
    for size in sizes.memory_ledgers:
        # The value strings (and their batch) exist before tracing starts: not counted.
        made = ids(rng, "ord_", 10, size)
        found = [Batch(ORDER, "orders[*]", None, made, made, None)]

        def build(found: list[Batch] = found) -> Ledger:
            ledger = guard.new_ledger("memory")
            state_of(ledger).admit(found, source=source)
            # One refusal, so the lazily built near-miss index is counted too.
            guard.check("refund", {"customer_id": "x", "order_id": "ord_0"}, ledger=ledger)
            return ledger

        used, ledger = _traced(build)
        assert len(ledger) == size
        per_entry.append(used / size)
        rows.append(Row(f"one ledger of {size:,} entries, per entry", [used / size], unit="B"))
        del ledger, found
    count, each = sizes.sessions, sizes.session_entries
    values = [ids(rng, "ord_", 10, each) for _ in range(count)]
    found_sets = [[Batch(ORDER, "orders[*]", None, chunk, chunk, None)] for chunk in values]
    many = make_guard()

    def sessions() -> None:
        for i, found in enumerate(found_sets):
            with many.session(f"conversation-{i}") as ledger:
                state_of(ledger).admit(found, source=source)

    used, _ = _traced(sessions)
    rows.append(Row(f"{count:,} sessions × {each} entries, per session", [used / count], unit="KB"))
    rows.append(
        Row(f"{count:,} sessions × {each} entries, per entry", [used / (count * each)], unit="B")
    )
    rows.append(Row(f"{count:,} sessions × {each} entries, in all", [float(used)], unit="MB"))
    section = Section("Memory (tracemalloc), apart from the identifier strings themselves")
    section.rows = rows
    section.notes.append(
        "Single measurements, not timings: min = median = max. Per session includes the "
        "ledger's own tables, lock and user-text buffer."
    )
    report.sections.append(section)
    worst = max(per_entry)
    report.targets.append(
        Target(
            "memory per ledger entry, apart from values", "≤ 300 B", f"{worst:.0f} B", worst <= 300
        )
    )


# -- stores ---------------------------------------------------------------------------------


def _stores(folder: Path) -> dict[str, Callable[[], Any]]:
    """The stores to measure, each a factory of a store over one shared place."""
    from guardrail.stores import MemoryStore, SQLiteStore

    shared = MemoryStore()
    return {
        "MemoryStore": lambda: shared,
        "SQLiteStore (file)": lambda: SQLiteStore(folder / "sessions.sqlite3"),
    }


def _stored_bytes(store: Any, session_id: str) -> float:
    """The bytes a store holds for one session: its file for SQLite, its JSON text in memory."""
    if hasattr(store, "stored_bytes"):
        return float(store.stored_bytes())
    from guardrail.stores._json import encode

    snapshot = store.load(session_id)
    return float(sum(len(encode(r).encode()) for r in snapshot.records))


def bench_stores(sizes: Sizes, report: Report, rng: random.Random) -> None:
    """Added latency per tool call when each call opens its session, per store and ledger size."""
    import tempfile

    section = Section("Stores: a session opened per tool call (cached), per store and ledger size")
    from servers import ServerStores  # Redis and PostgreSQL, where the servers answer

    added: dict[tuple[str, int], float] = {}
    servers = ServerStores()
    with tempfile.TemporaryDirectory() as tmp, contextlib.closing(servers):
        for store_name, factory in {**_stores(Path(tmp)), **servers.factories()}.items():
            for size in sizes.store_ledgers:
                session = f"bench-{size}"
                guard = make_guard(store=factory(), max_ids_per_call=size)
                guarded_tools(guard)
                customers = ids(rng, "cus_", 8, 10)
                orders = ids(rng, "ord_", 10, size)
                result = {
                    "orders": [
                        {"order_id": order, "customer_id": customers[i % 10]}
                        for i, order in enumerate(orders)
                    ]
                }
                guard.record("list_orders", {}, result, session=session)
                args = {"customer_id": customers[0], "order_id": orders[size // 2]}
                fresh = iter(ids(rng, "ord_", 11, 1_000_000 if size > 200 else 20_000))

                def record(
                    guard: Guard = guard,
                    session: str = session,
                    fresh: Iterator[str] = fresh,
                    customer: str = customers[0],
                ) -> None:
                    one = {"orders": [{"order_id": next(fresh), "customer_id": customer}]}
                    guard.record("list_orders", {}, one, session=session)

                env = {"guard": guard, "args": args, "session": session, "record": record}
                scope = _session(guard, guard.ledger_for(session))
                cases = {
                    "per call": sync_runner("guard.check('refund', args, session=session)", env),
                    "in one scope": sync_runner("guard.check('refund', args)", env, scope),
                    "record per call": sync_runner("record()", env),
                }
                times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
                label = f"{store_name}, ledger {size:,}"
                per_call = Row(f"{label}: allowed call, session opened per call", times["per call"])
                base = Row(f"{label}: allowed call in one open scope", times["in one scope"])
                rec = Row(
                    f"{label}: record of 1 new id, session per call", times["record per call"]
                )
                section.rows += [per_call, base, rec]
                added[store_name, size] = per_call.median - base.median
                section.ratios.append(
                    (
                        f"{label}: added per allowed call",
                        f"{(per_call.median - base.median) * 1e6:.1f} µs",
                    )
                )
                fresh_guard = make_guard(store=factory())
                cold = once(
                    functools.partial(fresh_guard.ledger_for, session),
                    rounds=sizes.slow_rounds,
                    setup=functools.partial(fresh_guard.end_session, session),
                )
                section.rows.append(
                    Row(f"{label}: first open of the stored session", cold, unit="ms")
                )
                held = servers.stored_bytes(guard.store, session)
                if held is None:
                    held = _stored_bytes(guard.store, session)
                used = held / len(guard.ledger_for(session))
                section.rows.append(Row(f"{label}: stored bytes per entry", [used], unit="B"))
    count = sizes.finished_sessions
    chunks = [ids(rng, "ord_", 10, 5) for _ in range(count)]

    def finished() -> Guard:
        many = make_guard()
        for i, chunk in enumerate(chunks):
            found = {"orders": [{"order_id": o, "customer_id": "cus_00000000"} for o in chunk]}
            many.record("list_orders", {}, found, session=f"conversation-{i}")
        return many

    used, _ = _traced(finished)
    section.rows.append(
        Row(
            f"{count:,} finished sessions × 5 ids, MemoryStore + cache of 1,024",
            [float(used)],
            unit="MB",
        )
    )
    section.notes.append(
        "Added latency = allowed call with the session opened per call (guard.check(..., "
        "session=id): the cached ledger, the store asked only whether anything changed) − the "
        "same check inside one open scope. A record writes one Change (the new id) per call. "
        "First open: a guard that has not cached the session reads and checks every record."
    )
    if servers.missing:
        section.notes.append(
            f"Not measured, the server did not answer: {', '.join(servers.missing)}."
        )
    report.sections.append(section)
    for name, limit in (("RedisStore", 1e-3), ("PostgresStore", 2e-3)):
        at = [v for (store, size), v in added.items() if store == name and size >= 10_000]
        if at:
            report.targets.append(
                Target(
                    f"{name}: added latency per allowed call, 10k+ entries",
                    f"≤ {limit * 1e3:g} ms",
                    f"{max(at) * 1e6:.0f} µs",
                    max(at) <= limit,
                )
            )
    if any(size >= 10_000 for _, size in added):
        worst = max(
            v for (name, size), v in added.items() if name.startswith("SQLite") and size >= 10_000
        )
        report.targets.append(
            Target(
                "SQLite: added latency per allowed call, 10k+ entries",
                "≤ 1 ms",
                f"{worst * 1e6:.0f} µs",
                worst <= 1e-3,
            )
        )


# -- compaction -----------------------------------------------------------------------------


def transcript(
    messages: int, orders: Sequence[str], customer: str, rng: random.Random
) -> list[dict[str, Any]]:
    """An OpenAI chat transcript: user, assistant tool call, tool result, assistant reply."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You help customers with orders."}]
    turn = 0
    while len(out) < messages:
        turn += 1
        order = rng.choice(orders)
        call_id = f"call_{turn}"
        shown = rng.sample(list(orders), k=min(5, len(orders)))
        out += [
            {"role": "user", "content": f"What happened to my order {order}? It is late."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "list_orders",
                            "arguments": json.dumps({"customer_id": customer}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(
                    {
                        "orders": [
                            {"order_id": o, "customer_id": customer, "status": "late"}
                            for o in shown
                        ]
                    }
                ),
            },
            {"role": "assistant", "content": f"Order {order} left the warehouse yesterday."},
        ]
    return out[:messages]


def _no_summary(messages: Any, roles: Any) -> str:
    return "The customer asked about late orders; each was traced."


def bench_compaction(sizes: Sizes, report: Report, rng: random.Random) -> None:
    section = Section(
        f"Compaction without the summariser ({sizes.compaction_entries:,} ledger entries)"
    )
    report.sections.append(section)
    guard = make_guard()
    customers = ids(rng, "cus_", 8, 1)
    orders = ids(rng, "ord_", 10, sizes.compaction_entries - 1)
    rates: list[float] = []
    curve: list[tuple[int, float]] = []
    for size, rounds in zip(sizes.transcripts, sizes.compaction_rounds, strict=True):
        messages = transcript(size, orders, customers[0], rng)
        mb = len(json.dumps(messages).encode()) / 1e6
        ledgers: list[Ledger] = []

        def fresh(ledgers: list[Ledger] = ledgers) -> None:
            ledgers[:] = [fill(guard, customers, orders)]

        def run(messages: list[dict[str, Any]] = messages, ledgers: list[Ledger] = ledgers) -> None:
            compact(messages, ledgers[0], summarize=_no_summary, keep_recent=2, guard=guard)

        def dump(messages: list[dict[str, Any]] = messages) -> None:
            json.dumps(messages)

        row = Row(
            f"compact, {size:,} messages ({mb:.1f} MB)",
            once(run, rounds=rounds, setup=fresh),
            unit="ms",
        )
        base = Row(f"json.dumps, {size:,} messages", once(dump, rounds=rounds), unit="ms")
        section.rows += [row, base]
        rate = mb / row.median
        rates.append(rate)
        curve.append((size, row.median))
        section.ratios.append((f"compact / json.dumps at {size:,}", f"{_ratio(row, base):.1f}×"))
        section.ratios.append((f"MB/s of transcript at {size:,}", f"{rate:.1f}"))
    report.curves["compaction, per transcript"] = curve
    linear = min(rates) / max(rates)
    report.targets.append(
        Target(
            "compaction throughput",
            "≥ 25 MB/s, linear",
            f"{min(rates):.1f} MB/s (slowest/fastest rate {linear:.2f})",
            min(rates) >= 25 and linear >= 0.7,
        )
    )


# -- output ---------------------------------------------------------------------------------


# -- the integrations -----------------------------------------------------------------------


#: The adapters' benchmarks that add their sections to this report, each a module beside this
#: file with ``bench(sizes, report, rng)``; the others run on their own (see README.md).
INTEGRATION_BENCHMARKS = ("integrations_langchain",)


def bench_integrations(sizes: Sizes, report: Report, rng: random.Random) -> None:
    """Runtime adapters' overhead beside the runtime's own (:data:`INTEGRATION_BENCHMARKS`)."""
    sys.path.insert(0, str(HERE))
    for name in INTEGRATION_BENCHMARKS:
        importlib.import_module(name).bench(sizes, report, rng)


def machine() -> list[str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), Path("/proc/cpuinfo").open() as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        importlib.import_module("wrapt._wrappers")
        wrapt_kind = "C extension"
    except ImportError:
        wrapt_kind = "pure Python"
    versions = {
        name: importlib.metadata.version(name) for name in ("wrapt", "pydantic", "structlog")
    }
    for optional in ("langchain-core", "langchain", "langgraph"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[optional] = importlib.metadata.version(optional)
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    return [
        f"- CPU: {cpu} ({os.cpu_count()} logical CPUs)",
        (
            f"- Python: {platform.python_implementation()} {platform.python_version()}"
            f" on {platform.system()}"
        ),
        "- "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + f" (wrapt {wrapt_kind})",
        *([f"- guardrail at commit {commit}"] if commit else []),
    ]


def render(report: Report, command: str, quick: bool) -> str:
    lines = ["# guardrail benchmarks", ""]
    if quick:
        lines += [
            "**Quick mode: tiny sizes, only a check that the harness runs. Not numbers.**",
            "",
        ]
    lines += [f"Command: `{command}`", "", *machine(), ""]
    lines += [
        (
            "Median, min and max over interleaved rounds; a ratio is the median of the per-round "
            "ratios of the two cases. structlog is configured as in production (filtering below "
            "WARNING, JSON to a sink)."
        ),
        "",
    ]
    for section in report.sections:
        lines += [
            f"## {section.title}",
            "",
            "| case | median | min | max | unit |",
            "|---|---:|---:|---:|---|",
        ]
        for row in section.rows:
            if row.skipped:
                lines.append(f"| {row.name} | skipped | | | {row.skipped} |")
                continue
            scale = _scale(row.unit)
            values = [row.median, min(row.samples), max(row.samples)]
            lines.append(
                f"| {row.name} | "
                + " | ".join(_fmt(v * scale) for v in values)
                + f" | {row.unit} |"
            )
        if section.ratios:
            lines += ["", "| ratio | value |", "|---|---:|"]
            lines += [f"| {what} | {value} |" for what, value in section.ratios]
        for note in section.notes:
            lines += ["", note]
        lines.append("")
    lines += ["## Targets", "", "| what | target | measured | met |", "|---|---|---|---|"]
    for target in report.targets:
        met = "n/a" if target.met is None else ("yes" if target.met else "**no**")
        lines.append(f"| {target.what} | {target.target} | {target.measured} | {met} |")
    lines.append("")
    return "\n".join(lines)


def plot(report: Report, path: Path) -> str:
    """Scaling curves as a PNG; returns a note (matplotlib is a dev dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[dev]'); no plot written"
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for label, points in report.curves.items():
        if label.startswith("compaction") or not points:
            continue
        xs, ys = zip(*points, strict=True)
        style = "--" if "wrapt" in label else "-o"
        left.plot(xs, [y * 1e6 for y in ys], style, label=label)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("ledger entries")
    left.set_ylabel("µs per call")
    left.set_title("Time against ledger size")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    points = report.curves.get("compaction, per transcript", [])
    if points:
        xs, ys = zip(*points, strict=True)
        right.plot(xs, [y * 1e3 for y in ys], "-o", label="compact, no summariser")
        right.set_xscale("log")
        right.set_yscale("log")
        right.legend(fontsize=8)
    else:
        right.text(
            0.5,
            0.5,
            "compaction not measured\n(not in this run's --only groups)",
            ha="center",
            va="center",
            transform=right.transAxes,
        )
    right.set_xlabel("transcript messages")
    right.set_ylabel("ms per compaction")
    right.set_title("Time against transcript size")
    right.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"plot written to {path}"


def parse(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str], Path | None]:
    """The options, the groups to run and the folder the results go to (None: printed only)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: check the harness runs")
    parser.add_argument(
        "--only", default=",".join(GROUPS), help=f"comma-separated groups of {', '.join(GROUPS)}"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for latest.md and scaling.png (default: benchmarks/results/local, "
        "git-ignored, on a full run of every group; nothing written in quick mode)",
    )
    where.add_argument(
        "--save",
        action="store_true",
        help="write to the tracked benchmarks/results (latest.md, scaling.png) that the "
        "README quotes: a full run of every group only",
    )
    parser.add_argument("--seed", type=int, default=1234)
    options = parser.parse_args(argv)
    groups = [g.strip() for g in options.only.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {unknown}; choose from {', '.join(GROUPS)}")
    full = not options.quick and set(groups) == set(GROUPS)
    if options.save and not full:
        parser.error(
            "--save replaces the published results: run every group at full size "
            "(drop --quick and --only), or write elsewhere with --out"
        )
    out: Path | None = options.out
    if options.save:
        out = RESULTS
    elif out is None and full:
        out = LOCAL
    return options, groups, out


def main(argv: Sequence[str] | None = None) -> int:
    options, groups, out = parse(argv)
    sizes = QUICK if options.quick else FULL
    rng = random.Random(options.seed)
    report = Report()
    started = time.perf_counter()
    with production_logging():
        ledgers = build_ledgers(sizes, rng) if {"sync", "async"} & set(groups) else None
        for group in GROUPS:
            if group not in groups:
                continue
            print(f"running {group} ...", file=sys.stderr, flush=True)
            if group in ("sync", "async"):
                assert ledgers is not None
                (bench_sync if group == "sync" else bench_async)(sizes, report, ledgers)
                if group == "async" or "async" not in groups:
                    ledgers = None  # free them: a large heap slows every later collection
            else:
                {
                    "refused": bench_refused,
                    "harvest": bench_harvest,
                    "memory": bench_memory,
                    "compaction": bench_compaction,
                    "stores": bench_stores,
                    "integrations": bench_integrations,
                }[group](sizes, report, rng)
    command = "python benchmarks/run.py" + (" --quick" if options.quick else "")
    if set(groups) != set(GROUPS):
        command += f" --only {','.join(groups)}"
    text = render(report, command, options.quick)
    text += f"\nTotal run time: {time.perf_counter() - started:.0f} s.\n"
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "latest.md").write_text(text, encoding="utf-8")
        print(f"table written to {out / 'latest.md'}", file=sys.stderr)
        print(plot(report, out / "scaling.png"), file=sys.stderr)
        if out == LOCAL:
            print("(--save writes the published benchmarks/results/ instead)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
