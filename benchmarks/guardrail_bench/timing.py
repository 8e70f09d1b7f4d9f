"""The one timing helper every group uses: cases measured in interleaved rounds.

Round *r* runs every case once, in an order rotated by *r*, so the cases of a group
are sampled moments apart on a noisy shared machine and the paired ratio of each
round is available (:func:`paired_ratio`). A case is a :data:`Runner`: it runs *n*
operations and returns the seconds they took, so it times only what it means to
(an agent run, a tool call, a refusal) and leaves its set-up out. Garbage
collection stays enabled while timing, as in a real program; a full collection
runs before each sample, outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import time
import timeit
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

T = TypeVar("T")

#: Runs ``n`` operations and returns the seconds they took.
Runner = Callable[[int], float]
#: A context manager factory a runner enters around its timed loop (a guard's session).
Context = Callable[[], Any]


def interleaved(
    cases: Mapping[str, Runner],
    *,
    rounds: int,
    sample: float | None = None,
    number: int | None = None,
) -> dict[str, list[float]]:
    """Seconds per operation of each case, one sample per case per round.

    Each sample runs ``number`` operations, or as many as take about ``sample``
    seconds (counted once per case, before the rounds).
    """
    if (sample is None) == (number is None):
        raise ValueError("give the operations per sample as sample= (seconds) or number=")
    numbers = {
        name: number if number is not None else _calibrate(run, sample or 0.0)
        for name, run in cases.items()
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    for r in range(rounds):
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            gc.collect()
            times[name].append(cases[name](numbers[name]) / numbers[name])
    return times


def _calibrate(run: Runner, target: float) -> int:
    """How many operations take about ``target`` seconds."""
    number = 1
    while True:
        elapsed = run(number)
        if elapsed >= target / 5 or number >= 1 << 24:
            return max(1, round(number * target / max(elapsed, 1e-9)))
        number *= 5 if elapsed < target / 50 else 2


def once(
    run: Callable[[], Any], *, rounds: int, setup: Callable[[], Any] | None = None
) -> list[float]:
    """Seconds of each of ``rounds`` runs of a slow operation (``setup`` before each, not timed)."""
    return interleaved({"once": single(run, setup)}, rounds=rounds, number=1)["once"]


def fastest(run: Callable[[], Any], rounds: int) -> float:
    """The fastest of ``rounds`` back-to-back runs, in seconds: the least the machine added.

    No collection between runs: for a case shorter than a full collection (a
    search of a text), which :func:`once` would dwarf.
    """
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def stopwatch() -> Callable[[], float]:
    """A clock started now: each call returns the seconds since (a whole run's, or a rate's)."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


# -- runners ----------------------------------------------------------------------------------


def single(run: Callable[[], Any], setup: Callable[[], Any] | None = None) -> Runner:
    """Runs ``run`` ``n`` times, each after an untimed ``setup`` and a full collection."""

    def runner(number: int) -> float:
        took = 0.0
        for _ in range(number):
            if setup is not None:
                setup()
                gc.collect()
            start = time.perf_counter()
            run()
            took += time.perf_counter() - start
        return took

    return runner


def each(call: Callable[[Any], Any], make: Callable[[], Any]) -> Runner:
    """Calls ``call(thing)`` ``n`` times, each on a fresh ``make()`` made before (untimed)."""

    def runner(number: int) -> float:
        things = [make() for _ in range(number)]
        start = time.perf_counter()
        for thing in things:
            call(thing)
        return time.perf_counter() - start

    return runner


def calls(call: Callable[[], Any], context: Context | None = None) -> Runner:
    """Calls ``call()`` ``n`` times in a Python loop, optionally inside ``context()``."""

    def runner(number: int) -> float:
        with context() if context is not None else contextlib.nullcontext():
            start = time.perf_counter()
            for _ in range(number):
                call()
            return time.perf_counter() - start

    return runner


def statement(stmt: str, env: dict[str, Any], context: Context | None = None) -> Runner:
    """A :mod:`timeit` runner for ``stmt`` (gc enabled), optionally inside ``context()``."""
    timer = timeit.Timer(stmt, setup="gc.enable()", globals={**env, "gc": gc})

    def runner(number: int) -> float:
        with context() if context is not None else contextlib.nullcontext():
            return timer.timeit(number)

    return runner


def awaits(
    loop: asyncio.AbstractEventLoop,
    call: Callable[[], Awaitable[Any]],
    context: Context | None = None,
) -> Runner:
    """Awaits ``call()`` ``n`` times in one coroutine on ``loop``, timed inside it."""

    async def body(number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            await call()
        return time.perf_counter() - start

    def runner(number: int) -> float:
        with context() if context is not None else contextlib.nullcontext():
            return loop.run_until_complete(body(number))

    return runner


@contextlib.contextmanager
def held_open(
    loop: asyncio.AbstractEventLoop, manager: AbstractAsyncContextManager[T]
) -> Iterator[T]:
    """``manager`` entered on ``loop`` and held open while the block runs.

    One task of its own enters and leaves it (an anyio task group must be left by
    the task that entered it), so the runners of :func:`awaits`, each a task of
    its own, can use what it opened: an MCP client's connection, say.
    """
    opened: asyncio.Future[T] = loop.create_future()
    release = asyncio.Event()

    async def hold() -> None:
        async with manager as value:
            opened.set_result(value)
            await release.wait()

    holder = loop.create_task(hold())
    either: list[asyncio.Future[Any]] = [holder, opened]
    loop.run_until_complete(asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED))
    if not opened.done():
        loop.run_until_complete(holder)  # it failed before it opened: raise why
    try:
        yield opened.result()
    finally:
        release.set()
        loop.run_until_complete(holder)


@contextlib.asynccontextmanager
async def all_of(*managers: AbstractAsyncContextManager[Any]) -> AsyncIterator[list[Any]]:
    """Several async context managers entered in order, as one."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(manager) for manager in managers]


# -- paired statistics --------------------------------------------------------------------------


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """The median of the per-round ratios ``a / b`` when the rounds pair up, else of medians."""
    if len(a) == len(b) and a:
        return statistics.median(x / y for x, y in zip(a, b, strict=True))
    return statistics.median(a) / statistics.median(b)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """The median of the per-round differences ``a - b``: paired, as ratios are."""
    return statistics.median(x - y for x, y in zip(a, b, strict=True))
