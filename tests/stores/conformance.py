"""The tests every store passes: import them into a store's test module with a factory fixture.

A store's test module does::

    from .conformance import *  # noqa: F403  (the suite)

    @pytest.fixture
    def store_factory(tmp_path) -> StoreFactory:
        return StoreFactory(functools.partial(SQLiteStore, tmp_path / "s.sqlite3"))

``StoreFactory.build`` makes a new store over the same data each time it is
called. The module also gives an ``age`` fixture, ``age(store, session_id,
seconds)``, making a session's last write that much older (time-dependent
tests use it, never sleeps), and a ``damage`` fixture: a function
``damage(store, session_id, how)`` that damages one stored session in one of
the ways of :data:`DAMAGES`, as a failing disk, an operator or an attacker
with access to the database would. A store that other processes share
(SQLite, Redis, PostgreSQL) also runs
:mod:`tests.stores.conformance_processes`, whose workers rebuild their store
from the factory, so there it must pickle.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from guardrail import Guard, GuardrailError, Id, IdentifierViolation, Ledger
from guardrail.errors import SessionDeleted, StoreError
from guardrail.ledger._ledger import state_of
from guardrail.stores import Store
from guardrail.stores.protocol import Change, Snapshot
from tests.conftest import ORDERS, shop_guard

__all__ = [
    "DAMAGES",
    "StoreFactory",
    "_close_built_stores",
    "live",
    "store",
    "test_a_change_is_all_or_nothing",
    "test_a_concurrent_removal_wins_over_an_older_use",
    "test_a_delete_wins_over_a_scope_open_in_another_guard",
    "test_a_deleted_session_reads_as_new",
    "test_a_field_equal_to_a_right_value_but_of_the_wrong_type_is_refused",
    "test_a_guard_keeps_the_ids_of_a_session_whose_user_typed_a_lone_surrogate",
    "test_a_guard_reads_every_ledger_field_back",
    "test_a_guard_sees_what_another_guard_wrote_since",
    "test_a_later_use_wins_over_a_concurrent_removal",
    "test_a_missing_session_loads_as_none",
    "test_a_record_a_guard_cannot_read_is_refused_with_its_session_named",
    "test_a_record_of_any_shape_comes_back_as_written",
    "test_a_row_written_as_a_json_object_reads_the_same",
    "test_a_session_id_with_a_lone_surrogate_round_trips_or_is_a_store_error",
    "test_a_write_based_on_a_deleted_session_is_refused",
    "test_a_writer_that_saw_a_row_replaces_it",
    "test_changes_since_gives_only_other_writers_rows",
    "test_concurrent_writers_keep_the_note_of_the_later_use",
    "test_concurrent_writers_merge_one_entry",
    "test_damaged_or_missing_session_data_is_a_store_error",
    "test_expire_deletes_only_idle_sessions",
    "test_lone_surrogates_round_trip_in_ids_roles_texts_and_statuses",
    "test_marks_past_the_bound_are_pruned_by_the_write_that_evicts_them",
    "test_pruned_rows_go_unless_written_since_the_base",
    "test_records_and_meta_round_trip",
    "test_rows_an_earlier_version_left_past_the_bound_go_at_the_next_write",
    "test_threads_writing_one_session_lose_nothing",
    "test_tiers_outside_marks_and_approvals_reach_another_worker",
    "test_versions_count_writes",
]


@dataclass(frozen=True)
class StoreFactory:
    """Builds stores over the same data (each call a new store object), closed after the test."""

    build: Callable[[], Store]
    built: list[Store] = field(default_factory=list, repr=False, compare=False)

    def __call__(self) -> Store:
        store = self.build()
        self.built.append(store)
        return store

    def close_all(self) -> None:
        """Close every store built so far (a pool left to the collector may fail in a thread)."""
        while self.built:
            self.built.pop().close()


@pytest.fixture(autouse=True)
def _close_built_stores(store_factory: StoreFactory) -> Iterator[None]:
    """After each test, the stores its factory built are closed."""
    yield
    store_factory.close_all()


@pytest.fixture
def store(store_factory: StoreFactory) -> Iterator[Store]:
    """One store from the module's factory, closed after the test."""
    built = store_factory()
    yield built
    built.close()


#: How a stored session gets damaged: a record row that is not JSON, one holding two records
#: (the second an id no tool returned), one holding a JSON value that is no object, every
#: record gone (the table dropped, the key deleted), the meta gone, a record of no known state.
DAMAGES = (
    "row not json",
    "two records in a row",
    "row not an object",
    "records gone",
    "meta gone",
    "unknown state",
    "row of the wrong length",
    "row of a mark's state with an entry's values",
    "row whose extra fields name the value",
)

#: The record a damaged row smuggles in beside its own: an id no tool returned.
FORGED = "W9999999"


def live(key: str, *, turn: int = 0, kind: str = "order", **fields: Any) -> dict[str, Any]:
    """A live record as a ledger writes it (an entry's fields plus state and turn)."""
    record: dict[str, Any] = {
        "kind": kind,
        "key": key,
        "state": "live",
        "turn": turn,
        "value": key,
        "role": f"{kind}_{key}",
        "aliases": [],
        "source": {"tool": "get_order", "call_id": "c1", "path": "order_id", "turn": turn},
        "first_seen": turn,
        "last_used": turn,
        "verified": True,
        "status": None,
        "pinned": False,
        "epoch": 1,
    }
    record.update(fields)
    if "turn" in fields or "last_used" not in fields:
        record["last_used"] = record["turn"]
    return record


def meta(**fields: Any) -> dict[str, Any]:
    """A session meta as a ledger writes it."""
    data: dict[str, Any] = {
        "capacity": 1000,
        "tombstone_capacity": 1000,
        "turn": 0,
        "epoch": 1,
        "kinds": ["order"],
        "counters": {"order": 1},
        "user_texts": [],
        "refusals": {},
    }
    data.update(fields)
    return data


def by_key(snapshot: Snapshot | None) -> dict[tuple[str, str], dict[str, Any]]:
    """A snapshot's records by (kind, key), as plain dicts."""
    assert snapshot is not None
    return {(r["kind"], r["key"]): dict(r) for r in snapshot.records}


def test_a_missing_session_loads_as_none(store: Store) -> None:
    """A session never written loads as None and has no changes."""
    assert store.load("nobody") is None
    assert store.changes_since("nobody", 0) is None


def test_records_and_meta_round_trip(store: Store) -> None:
    """Every field of every record state and of the meta comes back as written."""
    records = [
        live("W1", turn=2, pinned=True, aliases=["old"], status="pending", verified=False),
        {"kind": "order", "key": "W2", "state": "evicted", "turn": 3, "value": "#W2", "role": "o2"},
        {
            "kind": "item",
            "key": "it_1",
            "state": "dropped",
            "turn": 1,
            "value": "it_1",
            "tool": "search",
        },
        {"kind": "order", "key": "W3", "state": "gone", "turn": 4},
    ]
    written = meta(turn=4, user_texts=["refund W1 ü"], refusals={"refund": 2})
    version = store.apply("s", Change(0, records, written)).version
    loaded = store.load("s")
    assert loaded is not None and loaded.complete and loaded.version == version
    assert by_key(loaded) == {(r["kind"], r["key"]): r for r in records}
    assert dict(loaded.meta or {}) == written


def test_a_record_of_any_shape_comes_back_as_written(store: Store) -> None:
    """A store checks nothing: odd records come back as written, for the guard to judge."""
    odd = [
        {**live("W1"), "verified": "yes", "extra": 1},
        {"kind": "order", "key": "W2", "state": "haunted", "turn": 1},
        {**live("W3"), "source": {"tool": "t"}},
    ]
    store.apply("s", Change(0, odd, meta()))
    assert by_key(store.load("s")) == {(r["kind"], r["key"]): r for r in odd}


#: A lone surrogate, as ``json.loads('"\\ud83d"')`` gives one: half an emoji cut off.
LONE = "\ud83d"


def _store_name(store: Store) -> str:
    """The class name a store's errors name it by (the async store behind a test wrapper)."""
    return type(getattr(store, "store", store)).__name__


def test_lone_surrogates_round_trip_in_ids_roles_texts_and_statuses(store: Store) -> None:
    """Text holding a lone surrogate (a JSON request may) is stored and read back as written."""
    odd = f"W1{LONE}"
    records = [
        live(
            odd,
            value=f"#{odd}",
            role=f"order{LONE}",
            aliases=[f"old{LONE}"],
            status=f"pending {LONE}",
            source={"tool": "get_order", "call_id": f"c{LONE}", "path": "order_id", "turn": 0},
        ),
        live("W2"),
        {"kind": "order", "key": f"W3{LONE}", "state": "evicted", "turn": 1, "value": "W3"},
    ]
    written = meta(user_texts=[f"cancel {odd} please {LONE}"])
    base = store.apply("s", Change(0, records, written)).version
    loaded = store.load("s")
    assert by_key(loaded) == {(r["kind"], r["key"]): r for r in records}
    assert loaded is not None and dict(loaded.meta or {}) == written
    # A later write of the same session, and of the same id, works as any other.
    later = store.apply("s", Change(base, [live(odd, turn=4, value=f"#{odd}", role="o")]))
    delta = store.changes_since("s", base)
    assert delta is not None and delta.version == later.version
    assert by_key(delta)["order", odd]["turn"] == 4
    assert by_key(store.load("s"))["order", "W2"] == records[1]


def test_a_session_id_with_a_lone_surrogate_round_trips_or_is_a_store_error(store: Store) -> None:
    """A session id no UTF-8 codec encodes is kept as given, or refused by a StoreError."""
    session = f"conv-{LONE}"
    refused: StoreError | None = None
    try:
        store.apply(session, Change(0, [live("W1")], meta()))
    except StoreError as exc:
        refused = exc
    if refused is not None:
        assert _store_name(store) in str(refused)
        with pytest.raises(StoreError, match=_store_name(store)):
            store.load(session)
        return
    assert set(by_key(store.load(session))) == {("order", "W1")}
    assert store.load("conv-") is None
    store.delete(session)
    assert store.load(session) is None


def test_a_guard_keeps_the_ids_of_a_session_whose_user_typed_a_lone_surrogate(
    store_factory: StoreFactory,
) -> None:
    """Half an emoji in the user's text does not stop the session's later ids reaching a store."""
    writer = shop_guard("reprompt", store=store_factory())
    with writer.session("s"):
        writer.observe_user(f"hi {LONE} it is about #W7777777")
    with writer.session("s"):
        writer.record("search_orders", {}, ORDERS, call_id="c1")
        odd = {"orders": [{"order_id": f"W1{LONE}", "status": f"x{LONE}"}]}
        writer.record("search_orders", {}, odd, call_id=f"c{LONE}")
    reader = shop_guard("reprompt", store=store_factory())
    with reader.session("s") as ledger:
        assert reader.check("issue_refund", {"order_id": "W8855135"}).allowed
        assert ledger.get("order", "W7777777") is not None
        entry = ledger.get("order", f"W1{LONE}")
        assert entry is not None and entry.status == f"x{LONE}"
        assert any(LONE in text for text in state_of(ledger).user_texts)


def test_versions_count_writes(store: Store) -> None:
    """Each write adds one to the version and says whether the writer was up to date."""
    first = store.apply("s", Change(0, [live("W1")], meta()))
    assert first.alone  # it created the session
    second = store.apply("s", Change(first.version, [live("W2")]))
    assert second == (first.version + 1, True)
    assert store.changes_since("s", second.version) is None
    assert store.load("s").version == second.version  # type: ignore[union-attr]
    third = store.apply("s", Change(first.version, [live("W3")]))  # missed the second write
    assert third == (second.version + 1, False)


def test_changes_since_gives_only_other_writers_rows(store: Store) -> None:
    """changes_since a version returns the rows written after it, and the meta only if changed."""
    base = store.apply("s", Change(0, [live("W1")], meta())).version
    store.apply("s", Change(base, [live("W2", turn=1)]))
    delta = store.changes_since("s", base)
    assert delta is not None and not delta.complete and delta.meta is None
    assert set(by_key(delta)) == {("order", "W2")}
    latest = store.apply("s", Change(delta.version, (), meta(turn=5))).version
    delta = store.changes_since("s", delta.version)
    assert delta is not None and delta.version == latest and delta.meta is not None
    assert delta.meta["turn"] == 5 and not delta.records


def test_concurrent_writers_merge_one_entry(store: Store) -> None:
    """Two writers unaware of each other: one entry, verified, latest use, pinned, both names."""
    base = store.apply("s", Change(0, [], meta())).version
    store.apply("s", Change(base, [live("W1", turn=1, verified=False, role="typed")]))
    store.apply("s", Change(base, [live("W1", turn=3, pinned=True, role="order", value="#W1")]))
    record = by_key(store.load("s"))["order", "W1"]
    assert record["verified"] and record["value"] == "#W1" and record["pinned"]
    assert (record["turn"], record["last_used"], record["first_seen"]) == (3, 3, 1)
    assert (record["role"], record["aliases"]) == ("typed", ["order"])


def test_concurrent_writers_keep_the_note_of_the_later_use(store: Store) -> None:
    """A note merges as a status does: the later use's, and a copy without one keeps it."""
    base = store.apply("s", Change(0, [], meta())).version
    store.apply("s", Change(base, [live("W1", turn=1, note="Kettle K2; 2025-03-02")]))
    store.apply("s", Change(base, [live("W1", turn=3)]))
    assert by_key(store.load("s"))["order", "W1"]["note"] == "Kettle K2; 2025-03-02"
    store.apply("s", Change(base, [live("W1", turn=5, note="Vortex 900 blender")]))
    assert by_key(store.load("s"))["order", "W1"]["note"] == "Vortex 900 blender"


def test_a_writer_that_saw_a_row_replaces_it(store: Store) -> None:
    """A writer up to date with a row replaces it: unpinning and forgetting persist."""
    base = store.apply("s", Change(0, [live("W1", pinned=True)], meta())).version
    now = store.apply("s", Change(base, [live("W1", pinned=False)])).version
    assert not by_key(store.load("s"))["order", "W1"]["pinned"]
    store.apply("s", Change(now, [{"kind": "order", "key": "W1", "state": "gone", "turn": 0}]))
    assert by_key(store.load("s"))["order", "W1"]["state"] == "gone"


def test_a_concurrent_removal_wins_over_an_older_use(store: Store) -> None:
    """A tombstone written concurrently beats a live copy used no later than it."""
    base = store.apply("s", Change(0, [live("W1", turn=2)], meta())).version
    tomb = {"kind": "order", "key": "W1", "state": "evicted", "turn": 2, "value": "W1", "role": "o"}
    store.apply("s", Change(base, [tomb]))
    store.apply("s", Change(base, [live("W1", turn=2, pinned=True)]))  # never saw the eviction
    assert by_key(store.load("s"))["order", "W1"]["state"] == "evicted"


def test_a_later_use_wins_over_a_concurrent_removal(store: Store) -> None:
    """A live copy used after a concurrent eviction comes back (it was seen again)."""
    base = store.apply("s", Change(0, [live("W1", turn=2)], meta())).version
    tomb = {"kind": "order", "key": "W1", "state": "evicted", "turn": 2, "value": "W1", "role": "o"}
    store.apply("s", Change(base, [tomb]))
    store.apply("s", Change(base, [live("W1", turn=5)]))
    assert by_key(store.load("s"))["order", "W1"]["state"] == "live"


def test_a_deleted_session_reads_as_new(store: Store) -> None:
    """After delete: load is None, and a reader holding an old version gets a complete snapshot."""
    old = store.apply("s", Change(0, [live("W1")], meta())).version
    store.delete("s")
    assert store.load("s") is None
    gone = store.changes_since("s", old)
    assert gone is not None and gone.complete and not gone.records and gone.version == 0
    store.apply("s", Change(0, [live("W9")], meta()))
    again = store.changes_since("s", old)
    assert again is not None and again.complete and set(by_key(again)) == {("order", "W9")}


def test_a_write_based_on_a_deleted_session_is_refused(store: Store) -> None:
    """A change read from a session deleted since is refused and brings nothing back."""
    base = store.apply("s", Change(0, [live("W1")], meta())).version
    store.delete("s")
    with pytest.raises(SessionDeleted, match=rf"{_store_name(store)}.*session 's' was deleted"):
        store.apply("s", Change(base, [live("W1", turn=3), live("W2")], meta(turn=3)))
    assert store.load("s") is None
    # Started again by a writer that found nothing: the old base still names the deleted life.
    store.apply("s", Change(0, [live("W9")], meta()))
    with pytest.raises(SessionDeleted):
        store.apply("s", Change(base, [live("W1", turn=3)]))
    assert set(by_key(store.load("s"))) == {("order", "W9")}


def test_a_delete_wins_over_a_scope_open_in_another_guard(store_factory: StoreFactory) -> None:
    """B deletes while A is inside `with session(X)`: A's write is refused, the ids stay gone."""
    a, b = shop_guard(store=store_factory()), shop_guard(store=store_factory())
    a.record("search_orders", {}, ORDERS, call_id="c1", session="X")
    scope = a.session("X")
    scope.__enter__()
    assert a.check("issue_refund", {"order_id": "W8855135"}).allowed  # a use: written
    a.record("get_order", {}, {"order_id": "W1000001"}, call_id="c2")
    b.end_session("X", delete=True)
    with pytest.raises(SessionDeleted, match="session 'X' was deleted"):
        scope.__exit__(None, None, None)
    fresh = shop_guard(store=store_factory())
    for guard in (a, b, fresh):
        for order in ("W8855135", "W2378156", "W1000001"):
            verdict = guard.check("issue_refund", {"order_id": order}, session="X")
            assert not verdict.allowed, (guard, order)
    probe = store_factory()
    held = probe.load("X")  # the refusals above started it again, with no id
    assert held is None or not held.records
    for built in (a.store, b.store, fresh.store, probe):
        built.close()


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_or_missing_session_data_is_a_store_error(
    store_factory: StoreFactory, damage: Callable[[Store, str, str], None], how: str
) -> None:
    """Each damage stops the session from opening: a StoreError naming store and session."""
    writer, hurt = store_factory(), store_factory()
    shop_guard(store=writer).record("search_orders", {}, ORDERS, call_id="c1", session="X")
    damage(hurt, "X", how)
    store = store_factory()  # built after the damage: it must not take it for a new database
    reader = shop_guard(store=store)
    with pytest.raises(StoreError) as caught:
        reader.check("issue_refund", {"order_id": FORGED}, session="X")
    assert caught.value.session_id == "X"
    assert _store_name(store) in str(caught.value) and "'X'" in str(caught.value)
    assert reader.cached_sessions() == []
    for built in (writer, hurt, store):
        built.close()


def test_a_row_written_as_a_json_object_reads_the_same(
    store_factory: StoreFactory, damage: Callable[[Store, str, str], None]
) -> None:
    """Records written as objects (layout 2) read back as the rows written now do."""
    writer, rewriter = store_factory(), store_factory()
    shop_guard(store=writer).record("search_orders", {}, ORDERS, call_id="c1", session="X")
    before = writer.load("X")
    damage(rewriter, "X", "row as an object")  # not damage: the record as layout 2 wrote it
    after = store_factory().load("X")
    assert before is not None and after is not None
    assert sorted(map(json.dumps, after.records)) == sorted(map(json.dumps, before.records))
    reader = shop_guard(store=store_factory())
    for order in ORDERS["orders"]:
        assert reader.check("issue_refund", {"order_id": order["order_id"]}, session="X").allowed
    assert not reader.check("issue_refund", {"order_id": FORGED}, session="X").allowed
    for built in (writer, rewriter, reader.store, after):
        if hasattr(built, "close"):
            built.close()


def _evicted(key: str, turn: int) -> dict[str, Any]:
    """A tombstone's record, as a ledger writes one."""
    return {
        "kind": "order",
        "key": key,
        "state": "evicted",
        "turn": turn,
        "value": key,
        "role": "o",
    }


def test_pruned_rows_go_unless_written_since_the_base(store: Store) -> None:
    """Change.pruned deletes rows the writer had seen; a row another wrote since stays."""
    base = store.apply("s", Change(0, [_evicted("W1", 1), _evicted("W2", 1)], meta())).version
    store.apply("s", Change(base, [live("W2", turn=3)]))  # another writer: W2 seen again
    store.apply("s", Change(base, [], None, [("order", "W1"), ("order", "W2")]))
    held = by_key(store.load("s"))
    assert set(held) == {("order", "W2")} and held["order", "W2"]["state"] == "live"


def test_marks_past_the_bound_are_pruned_by_the_write_that_evicts_them(
    store_factory: StoreFactory,
) -> None:
    """200 ids through a 10-entry ledger with 5 tombstones: about 15 rows stored, not 200."""
    guard = shop_guard(store=store_factory(), capacity=10, tombstones=5)
    for n in range(200):
        guard.record("get_order", {}, {"order_id": f"W1{n:06d}"}, call_id=f"c{n}", session="X")
    stored = store_factory().load("X")
    assert stored is not None
    states = [record["state"] for record in stored.records]
    assert states.count("live") == 10 and states.count("evicted") == 5 and len(states) == 15
    reader = shop_guard(store=store_factory(), capacity=10, tombstones=5)
    assert reader.check("issue_refund", {"order_id": "W1000199"}, session="X").allowed
    old = reader.check("issue_refund", {"order_id": "W1000000"}, session="X")
    assert not old.allowed and old.findings[0].problem == "unknown"


def test_rows_an_earlier_version_left_past_the_bound_go_at_the_next_write(
    store_factory: StoreFactory,
) -> None:
    """A session holding 50 tombstones over a bound of 5: the first scope's end prunes 45."""
    records = [_evicted(f"W1{n:06d}", n) for n in range(50)]
    store_factory().apply("X", Change(0, records, meta(capacity=10, tombstone_capacity=5)))
    guard = shop_guard(store=store_factory(), capacity=10, tombstones=5)
    with guard.session("X"):
        pass
    stored = store_factory().load("X")
    assert stored is not None and sorted(r["key"] for r in stored.records) == [
        f"W1{n:06d}" for n in range(45, 50)
    ]


def test_expire_deletes_only_idle_sessions(
    store: Store, age: Callable[[Store, str, float], None]
) -> None:
    """expire(max_idle) deletes the sessions no one wrote for that long, and returns their ids."""
    store.apply("old", Change(0, [live("W1")], meta()))
    store.apply("new", Change(0, [live("W2")], meta()))
    assert store.expire(3600) == []
    age(store, "old", 7200)  # no clock to wait for: the store's own record of the last write
    age(store, "new", 1800)
    assert store.expire(3600) == ["old"]
    assert store.load("old") is None and store.load("new") is not None


def test_a_change_is_all_or_nothing(store: Store) -> None:
    """A change that cannot be written is a StoreError naming the store, and leaves nothing."""
    base = store.apply("s", Change(0, [live("W1")], meta())).version
    bad = live("W3", value=object())  # cannot be stored as JSON
    with pytest.raises(StoreError, match=_store_name(store)):
        store.apply("s", Change(base, [live("W2"), bad]))
    assert set(by_key(store.load("s"))) == {("order", "W1")}
    assert store.changes_since("s", base) is None


def test_threads_writing_one_session_lose_nothing(store_factory: StoreFactory) -> None:
    """Eight threads (each with its own store) writing one session at once keep every record."""
    stores = [store_factory() for _ in range(8)]
    stores[0].apply("s", Change(0, [], meta()))

    def write(n: int) -> None:
        for i in range(25):
            stores[n].apply("s", Change(0, [live(f"W{n}_{i}", turn=i)]))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(by_key(stores[0].load("s"))) == 200
    for built in stores:
        built.close()


# -- through a guard ---------------------------------------------------------------------------


def canonical(ledger: Ledger) -> dict[str, Any]:
    """Everything a ledger holds, in a form that ignores the order of equally recent entries."""
    data = ledger.to_dict()
    data["records"] = sorted(data["records"], key=lambda r: (r["kind"], r["key"]))
    for record in data["records"]:
        if record["state"] == "live":
            record["aliases"] = sorted(record["aliases"])
    data["meta"]["kinds"] = sorted(data["meta"]["kinds"])
    return data


def test_a_guard_reads_every_ledger_field_back(store_factory: StoreFactory) -> None:
    """Typed, verified, labelled, pinned, forgotten, dropped, refused: another guard reads all."""
    options: dict[str, Any] = {"max_ids_per_call": 2, "tombstones": 5, "secret": "workers'"}
    writer = shop_guard("reprompt", store=store_factory(), **options)
    with writer.session("s") as ledger:
        writer.observe_user("I am cus_ABC123, about #W7777777")
        writer.record("search_orders", {}, ORDERS, call_id="c1")
        writer.label("order_2", "pending_order")
        writer.pin("pending_order")
        writer.forget("order")
        flood = {"orders": [{"order_id": f"W55{n:05d}"} for n in range(6)]}
        writer.record("search_orders", {}, flood, call_id="c2")
        writer.enforce("issue_refund", {"order_id": "W1231231"})
        expected = canonical(ledger)
    states = {record["state"] for record in expected["records"]}
    assert {"evicted", "dropped"} <= states and expected["meta"]["refusals"]
    reader = shop_guard("reprompt", store=store_factory(), **options)
    with reader.session("s") as loaded:
        assert canonical(loaded) == expected
        assert loaded.seal_key == ledger.seal_key  # the session's, derived from the secret
        assert loaded["pending_order"].aliases == ("order_2",)
    stored = store_factory().load("s")
    assert stored is not None
    written = json.dumps([*stored.records, stored.meta])
    assert ledger.seal_key.hex() not in written and "seal" not in written  # no key in the store


def test_a_guard_sees_what_another_guard_wrote_since(store_factory: StoreFactory) -> None:
    """A session cached by one guard picks up the ids another guard recorded, at the next scope."""
    one, two = shop_guard(store=store_factory()), shop_guard(store=store_factory())
    with one.session("s"):
        one.record("get_order", {}, {"order_id": "W1000001"})
    with two.session("s"):
        two.record("get_order", {}, {"order_id": "W2000002"})
        two.forget("order")
    with one.session("s") as ledger:
        assert one.check("issue_refund", {"order_id": "W2000002"}).allowed
        with pytest.raises(IdentifierViolation):
            one.enforce("issue_refund", {"order_id": "W1000001"})  # forgotten by the other
        assert state_of(ledger).tombstone("order", "W1000001") is not None


def test_a_record_a_guard_cannot_read_is_refused_with_its_session_named(
    store_factory: StoreFactory,
) -> None:
    """A stored entry whose fields are wrong stops the session from opening: no smaller ledger."""
    store = store_factory()
    bad = live("W1234567", value="#W1234567", verified="yes")
    store.apply("s", Change(0, [bad], meta()))
    guard = shop_guard(store=store_factory())
    with pytest.raises(Exception, match=r"session 's'.*verified: expected a boolean") as info:
        guard.session("s").__enter__()
    assert isinstance(info.value, GuardrailError)
    assert guard.cached_sessions() == []


#: Wrong values that a Python comparison takes for right ones (false == 0, 1.0 == 1), each in
#: a record whose call another, good record shares: a check that remembered the call's source
#: by equality would let them pass.
LOOKALIKES: dict[str, dict[str, Any]] = {
    "source turn false": {
        "source": {"tool": "get_order", "call_id": "c1", "path": "order_id", "turn": False}
    },
    "epoch true": {"epoch": True},
    "first_seen a float": {"first_seen": 0.0},
    "verified one": {"verified": 1},
    "pinned zero": {"pinned": 0},
    "aliases holding a number": {"aliases": [1]},
}


@pytest.mark.parametrize("how", LOOKALIKES)
def test_a_field_equal_to_a_right_value_but_of_the_wrong_type_is_refused(
    store_factory: StoreFactory, how: str
) -> None:
    """A record field of the wrong type (false for a turn of 0) stops the session from opening."""
    store = store_factory()
    records = [live("W1000001"), live("W1000002", **LOOKALIKES[how])]
    store.apply("s", Change(0, records, meta()))
    guard = shop_guard(store=store_factory())
    with pytest.raises(StoreError, match=r"session 's'") as info:
        guard.check("issue_refund", {"order_id": "W1000002"}, session="s")
    assert info.value.session_id == "s"
    assert guard.cached_sessions() == []


def _bank_guard(store: Store) -> Guard:
    """A guard whose IBANs are asked when only mentioned or sent by an outside party."""
    guard = Guard(store=store, secret="shared")
    guard.add_kind("iban", pattern=r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", mentions="ask", outside="ask")
    guard.declare("read_file", effect="read")
    guard.declare("get_transactions", produces={"[*].sender": Id("iban", outside=True)})
    guard.declare("send_money", ids={"recipient": "iban"})
    return guard


def test_tiers_outside_marks_and_approvals_reach_another_worker(
    store_factory: StoreFactory,
) -> None:
    """A mention with its evidence, an outside mark and an approval come back from the store."""
    writer = _bank_guard(store_factory())
    with writer.session("s"):
        writer.record("read_file", {}, "Please pay to UK12345678901234567890, thanks")
        writer.record("get_transactions", {}, [{"sender": "DE89370400440532013000"}])
        request = writer.check("send_money", {"recipient": "UK12345678901234567890"}).approvals[0]
        writer.approve(request)
    reader = _bank_guard(store_factory())
    with reader.session("s") as ledger:
        bill = ledger.get("iban", "UK12345678901234567890")
        sender = ledger.get("iban", "DE89370400440532013000")
        assert bill is not None and sender is not None
        assert (bill.tier, bill.approved) == ("mentioned", frozenset({"send_money"}))
        assert list(bill.seals) == ["+send_money"]  # the answer's MAC: the guards have a secret
        assert bill.mention is not None and "Please pay" in bill.mention.excerpt
        assert (sender.tier, sender.outside) == ("produced", True)
        assert reader.check("send_money", {"recipient": "UK12345678901234567890"}).allowed
        assert reader.check("send_money", {"recipient": "DE89370400440532013000"}).outcome == "ask"
