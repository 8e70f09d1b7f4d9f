"""The tests every store with a ``ttl`` passes (memory, SQLite, PostgreSQL; Redis expires itself).

A store's test module imports them beside the suite and gives a
``ttl_store_factory`` fixture (stores with ``ttl=60`` over the same data as
``store_factory``) and the suite's ``age`` fixture. No test waits for a
clock: sessions are made older through the store's own record of their
last write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from guardrail.errors import SessionDeleted
from guardrail.stores import Store
from guardrail.stores.protocol import Change
from tests.conftest import ORDERS, shop_guard

from .conformance import StoreFactory, by_key, live, meta

__all__ = [
    "_close_ttl_stores",
    "test_a_session_past_its_ttl_reads_as_gone_and_is_deleted",
    "test_a_write_read_before_the_ttl_ran_out_is_refused",
    "test_each_write_sweeps_a_few_sessions_past_their_ttl",
    "test_the_ids_of_a_session_past_its_ttl_are_refused",
]

Age = Callable[[Store, str, float], None]


@pytest.fixture(autouse=True)
def _close_ttl_stores(ttl_store_factory: StoreFactory) -> Iterator[None]:
    """After each test, the ttl stores it built are closed."""
    yield
    ttl_store_factory.close_all()


def test_a_session_past_its_ttl_reads_as_gone_and_is_deleted(
    ttl_store_factory: StoreFactory, store_factory: StoreFactory, age: Age
) -> None:
    """Idle past its ttl: load is None, a reader's copy is told it is gone, and it is deleted."""
    store, plain = ttl_store_factory(), store_factory()
    version = store.apply("X", Change(0, [live("W1")], meta())).version
    store.apply("kept", Change(0, [live("W2")], meta()))
    age(store, "X", 30)
    assert store.changes_since("X", version) is None  # within its ttl
    age(store, "X", 60)
    gone = store.changes_since("X", version)
    assert gone is not None and gone.complete and gone.version == 0
    assert store.load("X") is None
    assert plain.load("X") is None  # deleted, not only hidden
    assert set(by_key(plain.load("kept"))) == {("order", "W2")}


def test_a_write_read_before_the_ttl_ran_out_is_refused(
    ttl_store_factory: StoreFactory, age: Age
) -> None:
    """A write based on a session that expired since is refused; one that read nothing starts it."""
    store = ttl_store_factory()
    base = store.apply("X", Change(0, [live("W1")], meta())).version
    age(store, "X", 120)
    with pytest.raises(SessionDeleted):
        store.apply("X", Change(base, [live("W2")]))
    store.apply("X", Change(0, [live("W3")], meta()))
    assert set(by_key(store.load("X"))) == {("order", "W3")}


def test_each_write_sweeps_a_few_sessions_past_their_ttl(
    ttl_store_factory: StoreFactory, store_factory: StoreFactory, age: Age
) -> None:
    """Twenty expired sessions: a write deletes a bounded few of them, three writes all."""
    store, plain = ttl_store_factory(), store_factory()
    for n in range(20):  # written by a store with no ttl, which sweeps nothing
        plain.apply(f"idle-{n}", Change(0, [live("W1")], meta()))
        age(plain, f"idle-{n}", 120 + n)

    def left() -> int:
        return sum(plain.load(f"idle-{n}") is not None for n in range(20))

    store.apply("busy", Change(0, [live("W1")], meta()))
    assert 12 <= left() < 20
    store.apply("busy-2", Change(0, [live("W1")], meta()))
    store.apply("busy-3", Change(0, [live("W1")], meta()))
    assert left() == 0


def test_the_ids_of_a_session_past_its_ttl_are_refused(
    ttl_store_factory: StoreFactory, age: Age
) -> None:
    """A guard on a ttl store: the ids of a conversation idle past the ttl are refused."""
    store = ttl_store_factory()
    shop_guard(store=store).record("search_orders", {}, ORDERS, call_id="c1", session="X")
    age(store, "X", 120)
    fresh = shop_guard(store=ttl_store_factory())
    assert not fresh.check("issue_refund", {"order_id": "W8855135"}, session="X").allowed
