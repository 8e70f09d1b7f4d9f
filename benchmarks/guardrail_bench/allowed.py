"""The allowed path: a guarded tool called with ids from the ledger, against its peers.

The ``sync`` and ``async`` groups share their ledgers (1,000 to 100,000 entries), built
once for both and freed after the last of them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import pydantic
import wrapt

from guardrail import Guard, Id, Ledger

from .common import CUSTOMER, ORDER, Run, Sizes, fill, ids, make_guard, scope
from .report import Report, Row, Section, Target, ratio
from .timing import Runner, awaits, interleaved, statement


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
    """A ledger of each size of ``sizes.ledgers``, half customers, half orders."""
    guard = make_guard()
    by_size: dict[int, Ledger] = {}
    picks: dict[int, tuple[str, str]] = {}
    for size in sizes.ledgers:
        customers = ids(rng, "cus_", 8, size // 2)
        orders = ids(rng, "ord_", 10, size - size // 2)
        by_size[size] = fill(guard, customers, orders)
        picks[size] = (customers[len(customers) // 2], orders[len(orders) // 3])
    return Ledgers(guard, by_size, picks)


def bench_sync(run: Run) -> None:
    """An allowed call of a sync tool, beside the bare call and the other wrappers."""
    sizes, ledgers = run.sizes, _ledgers(run)
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
        cases[name] = statement(stmt, env)
    for size, ledger in ledgers.by_size.items():
        c, o = ledgers.picks[size]
        cases[f"guarded, ledger {size:,}"] = statement(
            "f(customer_id=c, order_id=o)",
            {"f": refund, "c": c, "o": o},
            scope(guard, ledger),
        )
    times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    rows = {name: Row(name, samples) for name, samples in times.items()}
    _allowed_section(section, rows, skipped, sizes, run.report, "sync", "bare call")


def bench_async(run: Run) -> None:
    """An allowed call of an async tool, beside the bare await and the other wrappers."""
    sizes, ledgers = run.sizes, _ledgers(run)
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
                cases[name] = awaits(loop, functools.partial(tool.ainvoke, arguments))
            else:
                cases[name] = awaits(
                    loop, functools.partial(peer, customer_id=customer, order_id=order)
                )
        for size, ledger in ledgers.by_size.items():
            c, o = ledgers.picks[size]
            cases[f"guarded, ledger {size:,}"] = awaits(
                loop, functools.partial(refund, customer_id=c, order_id=o), scope(guard, ledger)
            )
        times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    finally:
        loop.close()
    section = Section("Allowed call, async tool with 2 id parameters (per awaited call)")
    rows = {name: Row(name, samples) for name, samples in times.items()}
    _allowed_section(section, rows, skipped, sizes, run.report, "async", "bare await")


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
    to_wrapt = max(ratio(g_small, wrapt_row), ratio(g_large, wrapt_row))
    to_validate = max(ratio(g_small, validate), ratio(g_large, validate))
    flat = ratio(g_large, g_small)
    section.ratios = [
        (f"guarded {small:,} / wrapt pass-through", f"{ratio(g_small, wrapt_row):.2f}×"),
        (f"guarded {large:,} / wrapt pass-through", f"{ratio(g_large, wrapt_row):.2f}×"),
        (f"guarded {small:,} / pydantic.validate_call", f"{ratio(g_small, validate):.2f}×"),
        (f"guarded {large:,} / pydantic.validate_call", f"{ratio(g_large, validate):.2f}×"),
        (f"guarded {large:,} / guarded {small:,} (flatness)", f"{flat:.2f}×"),
        (f"guarded {large:,} / {bare_name}", f"{ratio(g_large, bare):.1f}×"),
        (
            "guard's own work (guarded − wrapt) / wrapt's own cost (wrapt − bare)",
            f"{own * 1e6:.2f} / {wrapt_cost * 1e6:.2f} µs = {own / wrapt_cost:.2f}",
        ),
    ]
    lc = rows.get("LangChain tool.invoke") or rows.get("LangChain tool.ainvoke")
    if lc is not None:
        section.ratios.append((f"{lc.name} / guarded {large:,}", f"{ratio(lc, g_large):.1f}×"))
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
            "≤ 1×",
            f"{to_wrapt:.2f}×",
            to_wrapt <= 1.0,
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


def _ledgers(run: Run) -> Ledgers:
    """The ledgers of both groups, built by the first of them to run."""
    if "ledgers" not in run.shared:
        run.shared["ledgers"] = build_ledgers(run.sizes, run.rng)
    ledgers: Ledgers = run.shared["ledgers"]
    return ledgers


def bench_reads(run: Run) -> None:
    """A read tool whose dict result names only ids the ledger holds, beside an allowed write.

    Both calls pass the same two held ids and run back to back in the same rounds, so the
    ratio (read / write) is paired: a read that brings nothing new should cost little more
    than the check both share.
    """
    sizes, ledgers = run.sizes, _ledgers(run)
    guard = ledgers.guard
    refund, _ = guarded_tools(guard)

    @guard.tool(effect="read", produces={"order_id": ORDER, "customer_id": CUSTOMER})
    def get_order(
        customer_id: Annotated[str, Id(CUSTOMER)], order_id: Annotated[str, Id(ORDER)]
    ) -> dict[str, str]:
        return {"order_id": order_id, "customer_id": customer_id, "status": "paid"}

    cases: dict[str, Runner] = {}
    for size, ledger in ledgers.by_size.items():
        c, o = ledgers.picks[size]
        with scope(guard, ledger)():  # the first read settles the entries; later ones repeat it
            get_order(customer_id=c, order_id=o)
        env = {"c": c, "o": o}
        cases[f"allowed write, ledger {size:,}"] = statement(
            "f(customer_id=c, order_id=o)", {**env, "f": refund}, scope(guard, ledger)
        )
        cases[f"read of held ids, ledger {size:,}"] = statement(
            "f(customer_id=c, order_id=o)", {**env, "f": get_order}, scope(guard, ledger)
        )
        # A runtime's loop: it checks each call, runs the tool and reports the result (as
        # JSON text, as most do) to Guard.record.
        arguments = {"customer_id": c, "order_id": o}
        text = json.dumps(get_order.__wrapped__(c, o))  # type: ignore[attr-defined]
        runtime = {"g": guard, "a": arguments, "t": text}
        cases[f"runtime: guard.check of the write, ledger {size:,}"] = statement(
            "g.check('refund', a)", runtime, scope(guard, ledger)
        )
        cases[f"runtime: check and Guard.record of the read, ledger {size:,}"] = statement(
            "g.check('get_order', a); g.record('get_order', a, t)", runtime, scope(guard, ledger)
        )
    times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    rows = {name: Row(name, samples) for name, samples in times.items()}
    section = Section("Read tool whose dict result names only held ids, against an allowed write")
    section.rows = list(rows.values())
    worst = 0.0
    for size in sizes.ledgers:
        read, write = (
            rows[f"read of held ids, ledger {size:,}"],
            rows[f"allowed write, ledger {size:,}"],
        )
        worst = max(worst, ratio(read, write))
        section.ratios.append((f"read / write, ledger {size:,}", f"{ratio(read, write):.2f}×"))
    for size in sizes.ledgers:
        read = rows[f"runtime: check and Guard.record of the read, ledger {size:,}"]
        write = rows[f"runtime: guard.check of the write, ledger {size:,}"]
        section.ratios.append(
            (f"runtime read / runtime write, ledger {size:,}", f"{ratio(read, write):.2f}×")
        )
    run.report.sections.append(section)
    run.report.targets.append(
        Target("read of held ids / allowed write", "≤ 3×", f"{worst:.2f}×", worst <= 3)
    )
