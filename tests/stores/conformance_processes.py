"""The tests every store shared between processes passes: workers in other processes, SIGKILL.

A store's test module imports them beside the suite of :mod:`tests.stores.conformance`::

    from .conformance import *  # noqa: F403  (the suite)
    from .conformance_processes import *  # noqa: F403  (the multi-process tests)

Each worker is a forked process that rebuilds its store from ``store_factory``.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from typing import Any

from guardrail.errors import SessionDeleted
from tests.conftest import ORDERS, shop_guard

from .conformance import StoreFactory

__all__ = [
    "test_a_delete_in_one_process_wins_over_a_scope_open_in_another",
    "test_a_killed_writer_leaves_all_or_none_of_a_result",
    "test_eight_processes_serving_interleaved_turns_lose_nothing",
    "test_two_processes_with_two_threads_each_on_one_session_lose_nothing",
]


def _serve(factory: StoreFactory, worker: int, workers: int, sessions: int, turns: int) -> None:
    """One worker process: its share of every conversation's turns, a session opened per call."""
    guard = shop_guard(store=factory(), max_ids_per_call=10)
    for turn in range(turns):
        for conversation in range(sessions):
            if (conversation + turn) % workers != worker:
                continue
            session = f"conv-{conversation}"
            order = f"W1{conversation:02d}{turn:04d}"
            guard.record(
                "get_order", {}, {"order_id": order}, call_id=f"w{worker}t{turn}", session=session
            )
            guard.check("issue_refund", {"order_id": order}, session=session)


def test_eight_processes_serving_interleaved_turns_lose_nothing(
    store_factory: StoreFactory,
) -> None:
    """8 processes, 100 conversations: each id recorded is in its ledger once, with its source."""
    workers, sessions, turns = 8, 100, 6
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(target=_serve, args=(store_factory, w, workers, sessions, turns))
        for w in range(workers)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    guard = shop_guard(store=store_factory())
    for conversation in range(sessions):
        with guard.session(f"conv-{conversation}") as ledger:
            entries = ledger.entries()
            assert len(entries) == turns and len({e.role for e in entries}) == turns
            for entry in entries:
                turn = int(entry.key[4:])
                assert entry.key == f"W1{conversation:02d}{turn:04d}" and entry.verified
                worker = (conversation + turn) % workers
                assert (entry.source.tool, entry.source.call_id) == (
                    "get_order",
                    f"w{worker}t{turn}",
                )


def _flood(factory: StoreFactory, started: Any) -> None:
    """Record 400-id results into one session until killed."""
    guard = shop_guard(store=factory(), capacity=1_000_000, max_ids_per_call=1000)
    for n in range(10_000):
        orders = {"orders": [{"order_id": f"W{n + 100:03d}{i:04d}"} for i in range(400)]}
        guard.record("search_orders", {}, orders, call_id=f"r{n}", session="s")
        started.set()


def test_a_killed_writer_leaves_all_or_none_of_a_result(store_factory: StoreFactory) -> None:
    """SIGKILL mid-record: each result is stored whole or not at all; the next writer goes on."""
    context = multiprocessing.get_context("fork")
    started = context.Event()
    proc = context.Process(target=_flood, args=(store_factory, started))
    proc.start()
    assert started.wait(timeout=60)
    time.sleep(random.uniform(0.05, 0.4))
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    store = store_factory()
    snapshot = store.load("s")
    assert snapshot is not None
    per_result: dict[str, int] = {}
    for record in snapshot.records:
        if record["state"] == "live":
            call = record["source"]["call_id"]
            per_result[call] = per_result.get(call, 0) + 1
    assert per_result and set(per_result.values()) == {400}
    following = shop_guard(store=store_factory(), capacity=1_000_000)
    following.record("get_order", {}, {"order_id": "W9999999"}, session="s")
    with following.session("s") as ledger:
        assert len(ledger) == 400 * len(per_result) + 1
    store.close()


def _two_threads(factory: StoreFactory, prefix: str) -> None:
    """One process of the next test: two threads, one guard, both in session "s" at once."""
    guard = shop_guard(store=factory())
    barrier = threading.Barrier(2)

    def thread(name: str) -> None:
        with guard.session("s"):
            barrier.wait(timeout=30)
            for n in range(40):
                guard.record("get_order", {}, {"order_id": f"W{prefix}{name}{n:04d}"})

    threads = [threading.Thread(target=thread, args=(t,)) for t in "12"]
    for running in threads:
        running.start()
    for running in threads:
        running.join()


def test_two_processes_with_two_threads_each_on_one_session_lose_nothing(
    store_factory: StoreFactory,
) -> None:
    """Two processes, two threads each, one session at once: all 160 ids are stored."""
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_two_threads, args=(store_factory, p)) for p in ("11", "22")]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    guard = shop_guard(store=store_factory())
    with guard.session("s") as ledger:
        assert len(ledger) == 160


_DELETED_IDS = ("W8855135", "W2378156", "W1000001")


def _refused_everywhere(guard: Any) -> bool:
    """Whether ``guard`` refuses every id session "X" held before it was deleted."""
    return not any(
        guard.check("issue_refund", {"order_id": order}, session="X").allowed
        for order in _DELETED_IDS
    )


def _holder(factory: StoreFactory, inside: Any, deleted: Any, result: Any) -> None:
    """Worker A: inside `with guard.session("X")` while the other process deletes it."""
    guard = shop_guard(store=factory())
    outcome = "no error"
    try:
        with guard.session("X"):
            guard.check("issue_refund", {"order_id": "W8855135"})
            guard.record("get_order", {}, {"order_id": "W1000001"}, call_id="a2")
            inside.set()
            assert deleted.wait(timeout=60)
    except SessionDeleted:
        outcome = "refused"
    result.put(("A", outcome, _refused_everywhere(guard)))


def _deleter(factory: StoreFactory, inside: Any, deleted: Any, result: Any) -> None:
    """Worker B: has the session cached, deletes it while A is inside its scope."""
    guard = shop_guard(store=factory())
    guard.ledger_for("X")
    assert inside.wait(timeout=60)
    guard.end_session("X", delete=True)
    deleted.set()
    result.put(("B", "deleted", _refused_everywhere(guard)))


def test_a_delete_in_one_process_wins_over_a_scope_open_in_another(
    store_factory: StoreFactory,
) -> None:
    """B deletes X while A is in `with session(X)`: A's write fails; A, B, a new worker refuse."""
    setup = shop_guard(store=store_factory())
    setup.record("search_orders", {}, ORDERS, call_id="c1", session="X")
    context = multiprocessing.get_context("fork")
    inside, deleted, result = context.Event(), context.Event(), context.Queue()
    procs = [
        context.Process(target=_holder, args=(store_factory, inside, deleted, result)),
        context.Process(target=_deleter, args=(store_factory, inside, deleted, result)),
    ]
    for proc in procs:
        proc.start()
    outcomes = {}
    for _ in procs:
        name, outcome, refused = result.get(timeout=120)
        outcomes[name] = (outcome, refused)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert outcomes == {"A": ("refused", True), "B": ("deleted", True)}
    after = shop_guard(store=store_factory())
    assert _refused_everywhere(after) and _refused_everywhere(setup)
    after.store.close()
    setup.store.close()
