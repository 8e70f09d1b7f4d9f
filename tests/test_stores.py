"""Stores: sessions kept in memory, or in SQLite across guards and processes."""

from __future__ import annotations

from pathlib import Path

from guardrail import MemoryStore, SQLiteStore, Store

from .conftest import ORDERS, shop_guard


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
