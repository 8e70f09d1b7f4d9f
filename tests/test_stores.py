"""Stores: sessions kept in memory, or in SQLite across guards and processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from guardrail import (
    GuardrailError,
    GuardrailUsageError,
    Ledger,
    MemoryStore,
    Source,
    SQLiteStore,
    Store,
    StoreError,
    compact,
)
from guardrail._data.rows import FIELDS
from guardrail.ledger._ledger import state_of
from guardrail.stores.protocol import Change, Written

from .conftest import ORDERS, call, result, shop_guard, user

SRC = Source("get_order", "call_1", "order_id", 0)


def test_both_stores_follow_the_protocol() -> None:
    """MemoryStore and SQLiteStore are Stores."""
    assert isinstance(MemoryStore(), Store)
    assert isinstance(SQLiteStore(":memory:"), Store)


def test_sqlite_sessions_survive_the_guard(tmp_path: Path) -> None:
    """A conversation resumed by another guard on the same file sees its ledger."""
    path = tmp_path / "sessions.sqlite3"
    first = shop_guard(store=SQLiteStore(path))
    with first.session("conv-7"):
        first.record("search_orders", {}, ORDERS)
        first.label("order_2", "pending_order")
    second = shop_guard(store=SQLiteStore(path))
    with second.session("conv-7") as ledger:
        assert second.check("issue_refund", {"order_id": "W2378156"}).allowed
        assert ledger["pending_order"].value == "#W2378156"
    with second.session("conv-8") as fresh:
        assert len(fresh) == 0
    store = SQLiteStore(path)
    store.delete("conv-7")
    assert store.load("conv-7") is None
    store.close()


def test_memory_store_forgets_on_delete() -> None:
    """Deleting a session from the memory store starts it afresh next time."""
    guard = shop_guard()
    with guard.session("a"):
        guard.record("search_orders", {}, ORDERS)
    assert isinstance(guard.store, MemoryStore)
    assert "a" in guard.store
    guard.store.delete("a")
    with guard.session("a") as ledger:
        assert len(ledger) == 0


def test_a_default_session_keeps_its_ledger_with_a_copying_store(tmp_path: Path) -> None:
    """Calls outside any session share one ledger, even when the store hands out copies."""
    guard = shop_guard(store=SQLiteStore(tmp_path / "s.sqlite3"), default_session="only")
    guard.record("search_orders", {}, ORDERS)
    assert guard.check("issue_refund", {"order_id": "W8855135"}).allowed


# -- one session, many scopes: threads, guards and processes ---------------------------------


def orders(prefix: str, count: int) -> list[dict[str, Any]]:
    """``count`` distinct get_order results whose ids start with ``prefix``."""
    return [{"order_id": f"W{prefix}{n:05d}"} for n in range(count)]


def stored_keys(path: Path, session_id: str) -> set[str]:
    """The keys of the live entries the file holds for a session, read by a store of its own."""
    store = SQLiteStore(path)
    try:
        snapshot = store.load(session_id)
    finally:
        store.close()
    assert snapshot is not None
    return {r["key"] for r in snapshot.records if r["state"] == "live"}


def test_two_threads_on_one_session_keep_all_their_ids(tmp_path: Path) -> None:
    """Two threads in scopes of one session id record 50 ids each: the file keeps all 100."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    both_open = threading.Barrier(2)

    def worker(prefix: str) -> None:
        with guard.session("s"):
            both_open.wait()
            for result in orders(prefix, 50):
                guard.record("get_order", {}, result)
            both_open.wait()

    threads = [threading.Thread(target=worker, args=(p,)) for p in ("11", "22")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stored_keys(path, "s")) == 100


def test_concurrent_scopes_of_one_session_share_one_live_ledger(tmp_path: Path) -> None:
    """Within one guard, scopes of one session id open at once hold the same ledger object."""
    guard = shop_guard(store=SQLiteStore(tmp_path / "s.sqlite3"))
    with guard.session("s") as first, guard.session("s") as second:
        assert first is second
        guard.record("search_orders", {}, ORDERS)
    with guard.session("s") as later:
        assert later is first  # cached between scopes
    with shop_guard(store=SQLiteStore(tmp_path / "s.sqlite3")).session("s") as elsewhere:
        assert len(elsewhere) == 2 and elsewhere is not first


def test_two_guards_on_one_file_merge_on_save(tmp_path: Path) -> None:
    """Two guards (as two processes) in one conversation at once: neither loses the other's ids."""
    path = tmp_path / "s.sqlite3"
    one = shop_guard(store=SQLiteStore(path))
    two = shop_guard(store=SQLiteStore(path))
    with one.session("s"), two.session("s"):
        for result in orders("11", 20):
            one.record("get_order", {}, result)
        for result in orders("22", 30):
            two.record("get_order", {}, result)
    assert len(stored_keys(path, "s")) == 50
    with one.session("s"):
        assert one.check("issue_refund", {"order_id": "W2200007"}).allowed


def _process_worker(path: str, prefix: str, barrier: Any) -> None:
    """One process of the multiprocessing test: a scope of "s" held while the other holds one."""
    guard = shop_guard(store=SQLiteStore(path))
    with guard.session("s"):
        barrier.wait(timeout=20)
        for result in orders(prefix, 50):
            guard.record("get_order", {}, result)
        barrier.wait(timeout=20)


def test_two_processes_on_one_file_lose_no_entry(tmp_path: Path) -> None:
    """Two real processes serving one conversation at once leave all their ids in the file."""
    path = tmp_path / "s.sqlite3"
    SQLiteStore(path).close()  # the file and its table exist before the workers start
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, as a real worker
    barrier = context.Barrier(2)
    workers = [
        context.Process(target=_process_worker, args=(str(path), p, barrier)) for p in ("11", "22")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len(stored_keys(path, "s")) == 100


def test_a_single_writer_saves_forget_and_unpin_exactly(tmp_path: Path) -> None:
    """With no other writer since it loaded, a save replaces the row: forget and unpin persist."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    with guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        ledger.pin("order")
    with guard.session("s") as ledger:
        ledger.forget("order_2")
        ledger.pin("order", False)
    with guard.session("s") as ledger:
        assert [entry.role for entry in ledger] == ["order"]
        assert not ledger["order"].pinned
        assert state_of(ledger).tombstone("order", "W2378156") is not None


# -- the default session ----------------------------------------------------------------------


class CountingStore(MemoryStore):
    """A memory store that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    def apply(self, session_id: str, change: Change) -> Written:
        self.saves += 1
        return super().apply(session_id, change)


def test_the_default_session_persists_every_change(tmp_path: Path) -> None:
    """Ids recorded, typed, labelled, pinned or forgotten outside any scope reach the file."""
    path = tmp_path / "s.sqlite3"
    first = shop_guard(default_session="d", store=SQLiteStore(path))
    first.record("search_orders", {}, ORDERS)
    first.observe_user("I am cus_ABC123")
    first.label("order_2", "pending_order")
    first.pin("pending_order")
    first.forget("order")
    second = shop_guard(default_session="d", store=SQLiteStore(path))
    ledger = second.ledger
    assert ledger["pending_order"].pinned
    assert ledger.get("customer", "cus_ABC123") is not None
    assert second.check("issue_refund", {"order_id": "W2378156"}).allowed
    assert state_of(ledger).tombstone("order", "W8855135") is not None


def test_the_default_session_persists_what_compaction_brings_in(tmp_path: Path) -> None:
    """compact(messages, guard.ledger, guard=guard) on the default session saves its harvest."""
    path = tmp_path / "s.sqlite3"
    first = shop_guard(default_session="d", store=SQLiteStore(path))
    messages = [
        user("Where is my order?"),
        call("c1", "search_orders", {"customer_id": "cus_ABC123"}),
        result("c1", ORDERS),
        user("Refund the first one"),
    ]
    compact(messages, first.ledger, guard=first, keep_recent=1)
    second = shop_guard(default_session="d", store=SQLiteStore(path))
    assert second.check("issue_refund", {"order_id": "W8855135"}).allowed


def test_the_default_session_is_saved_only_when_it_changed() -> None:
    """A record that adds nothing new, or a check, costs no save of the default session."""
    store = CountingStore()
    guard = shop_guard(default_session="d", store=store)
    guard.record("search_orders", {}, ORDERS)
    assert store.saves == 1
    guard.record("search_orders", {}, ORDERS)
    guard.check("issue_refund", {"order_id": "W8855135"})
    guard.observe_user("nothing to see here")
    assert store.saves == 1
    guard.observe_user("it is cus_ABC123")
    assert store.saves == 2


def test_a_scope_of_the_default_session_shares_its_ledger(tmp_path: Path) -> None:
    """with guard.session(default) and calls outside any scope work on one ledger object."""
    guard = shop_guard(default_session="d", store=SQLiteStore(tmp_path / "s.sqlite3"))
    guard.record("search_orders", {}, ORDERS)
    with guard.session("d") as ledger:
        assert ledger is guard.ledger
        assert len(ledger) == 2


# -- a database that goes away or stays locked ------------------------------------------------


def remove_database(path: Path) -> None:
    """Delete a SQLite file and its WAL companions, as a cleanup job might."""
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)


def test_a_deleted_database_is_an_error_not_a_silent_loss(tmp_path: Path) -> None:
    """Ending a scope after the file was deleted raises StoreError naming the session."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))

    def conversation() -> None:
        with guard.session("conv-1"):
            guard.record("search_orders", {}, ORDERS)
            remove_database(path)

    with pytest.raises(StoreError, match="deleted") as info:
        conversation()
    assert info.value.session_id == "conv-1"
    assert isinstance(info.value, GuardrailError)


def test_a_replaced_database_is_an_error(tmp_path: Path) -> None:
    """A file replaced by another one at the same path is not written to blindly."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    guard = shop_guard(store=store)

    def conversation() -> None:
        with guard.session("s"):
            guard.record("search_orders", {}, ORDERS)
            remove_database(path)
            SQLiteStore(path).close()

    with pytest.raises(StoreError, match="replaced"):
        conversation()
    with pytest.raises(StoreError, match="replaced"):
        store.load("s")


def test_a_locked_database_raises_a_store_error_after_the_timeout(tmp_path: Path) -> None:
    """A save blocked by another connection's lock is a StoreError, not an OperationalError."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path, timeout=0.05))
    locker = sqlite3.connect(path, isolation_level=None)

    def conversation() -> None:
        with guard.session("conv-2"):
            guard.record("search_orders", {}, ORDERS)
            locker.execute("BEGIN EXCLUSIVE")

    try:
        with pytest.raises(StoreError, match="locked") as info:
            conversation()
        assert info.value.session_id == "conv-2"
        assert "conv-2" in str(info.value)
    finally:
        locker.close()


def test_the_store_timeout_is_validated() -> None:
    """SQLiteStore(timeout=) takes a number of seconds >= 0."""
    with pytest.raises(GuardrailUsageError, match="timeout"):
        SQLiteStore(":memory:", timeout=-1)


@pytest.mark.parametrize("run_async", [False, True])
def test_a_failed_save_never_hides_the_original_exception(tmp_path: Path, run_async: bool) -> None:
    """A scope leaving by an exception re-raises it; the failed save is logged and noted."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path, timeout=0.05))
    locker = sqlite3.connect(path, isolation_level=None)

    def body() -> None:
        guard.record("search_orders", {}, ORDERS)
        locker.execute("BEGIN EXCLUSIVE")
        raise KeyError("the original failure")

    async def in_async_scope() -> None:
        async with guard.session("conv-3"):
            body()

    def conversation() -> None:
        if run_async:
            asyncio.run(in_async_scope())
        else:
            with guard.session("conv-3"):
                body()

    try:
        with capture_logs() as logs, pytest.raises(KeyError, match="original") as info:
            conversation()
    finally:
        locker.close()
    assert any("conv-3" in note and "not saved" in note for note in info.value.__notes__)
    [event] = [e for e in logs if e["event"] == "guardrail.session_not_saved"]
    assert (event["log_level"], event["session"]) == ("error", "conv-3")
    assert "locked" in event["error"]


def test_a_bad_stored_record_names_its_session_store_and_field(tmp_path: Path) -> None:
    """A stored record that is not an entry's is a StoreError naming session, file and field."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    with guard.session("conv-9"):
        guard.record("search_orders", {}, ORDERS)
    with closing(sqlite3.connect(path)) as db, db:
        pinned = f"$[{FIELDS['live'].index('pinned')}]"  # a record is written as a row of values
        db.execute("UPDATE guardrail_record SET record = json_set(record, ?, 'yes')", (pinned,))
    other = shop_guard(store=SQLiteStore(path))
    with (
        pytest.raises(
            StoreError,
            match=r"SQLiteStore\('.*s\.sqlite3'\): session 'conv-9' .*pinned: expected a boolean",
        ),
        other.session("conv-9"),
    ):
        pass
    assert other.cached_sessions() == []


def old_file(path: Path, rows: dict[str, str]) -> None:
    """A database as earlier versions wrote it: one JSON ledger per session."""
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "CREATE TABLE guardrail_sessions (session_id TEXT PRIMARY KEY, ledger TEXT NOT NULL,"
            " updated REAL NOT NULL DEFAULT (julianday('now')),"
            " version INTEGER NOT NULL DEFAULT 0)"
        )
        for session_id, text in rows.items():
            db.execute(
                "INSERT INTO guardrail_sessions (session_id, ledger) VALUES (?, ?)",
                (session_id, text),
            )


def test_a_file_of_the_one_row_per_session_format_is_converted(tmp_path: Path) -> None:
    """Sessions saved as one JSON row each by an earlier version load, every field intact."""
    path = tmp_path / "old.sqlite3"
    guard = shop_guard()
    with guard.session("s") as ledger:
        guard.observe_user("I am cus_ABC123")
        guard.record("search_orders", {}, ORDERS)
        guard.label("order_2", "pending_order")
        guard.pin("pending_order")
        guard.forget("order")
    old_file(path, {"s": ledger.to_json()})
    resumed = shop_guard(store=SQLiteStore(path))
    with resumed.session("s") as loaded:
        assert loaded == ledger
    with closing(sqlite3.connect(path)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "guardrail_sessions" not in tables


def test_an_old_file_with_a_bad_row_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A bad row in an old file stops the conversion, naming its session; nothing changes."""
    path = tmp_path / "old.sqlite3"
    old_file(path, {"good": Ledger(session_id="good").to_json(), "bad": '{"format": 2}'})
    with pytest.raises(StoreError, match=r"session 'bad' .*earlier version"):
        SQLiteStore(path)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT count(*) FROM guardrail_sessions").fetchone() == (2,)
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert "guardrail_session" not in tables


def test_a_default_session_that_cannot_be_saved_says_so(tmp_path: Path) -> None:
    """A change to the default session with its file gone raises StoreError and logs it."""
    path = tmp_path / "s.sqlite3"
    # Captured from the start: a guard's audit picks its route (structlog or the standard
    # library) at its first event.
    with capture_logs() as logs:
        guard = shop_guard(default_session="d", store=SQLiteStore(path))
        guard.record("search_orders", {}, ORDERS)
        remove_database(path)
        with pytest.raises(StoreError, match="deleted"):
            guard.record("get_order", {}, {"order_id": "W1234567"})
    assert [e["session"] for e in logs if e["event"] == "guardrail.session_not_saved"] == ["d"]
    assert guard.check("issue_refund", {"order_id": "W1234567"}).allowed  # still in memory


@pytest.mark.parametrize("ttl", [0, -1, True, "60", float("inf"), float("nan")])
@pytest.mark.parametrize("build", [MemoryStore, lambda ttl: SQLiteStore(":memory:", ttl=ttl)])
def test_a_ttl_that_is_not_a_positive_number_of_seconds_is_a_usage_error(
    build: Callable[..., Any], ttl: object
) -> None:
    """Zero, a negative, a bool, text, infinity or NaN: an error saying what ttl is."""
    with pytest.raises(GuardrailUsageError, match=r"ttl is how many seconds .* \(> 0\), or None"):
        build(ttl=ttl)
