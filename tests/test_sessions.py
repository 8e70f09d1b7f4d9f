"""Sessions: cached live ledgers, written as they change, refreshed from the store, fail closed."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from guardrail import (
    GuardrailUsageError,
    IdentifierViolation,
    Ledger,
    MemoryStore,
    SessionDeleted,
    SQLiteStore,
    StoreError,
)
from guardrail._guard import journal
from guardrail.ledger._rebuild import rebuilt
from guardrail.stores import ThreadedAsyncStore
from guardrail.stores.protocol import Change, Snapshot, Written, merge_meta

from .conftest import ORDERS, shop_guard, stored_ids


class FlakyStore(MemoryStore):
    """A memory store whose reads or writes can be made to fail, and that counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_reads = self.fail_writes = False
        self.writes = self.reads = 0

    def load(self, session_id: str) -> Snapshot | None:
        self.reads += 1
        if self.fail_reads:
            raise StoreError("the store is down", session_id=session_id)
        return super().load(session_id)

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        self.reads += 1
        if self.fail_reads:
            raise StoreError("the store is down", session_id=session_id)
        return super().changes_since(session_id, version)

    def apply(self, session_id: str, change: Change) -> Written:
        self.writes += 1
        if self.fail_writes:
            raise StoreError("the store is down", session_id=session_id)
        return super().apply(session_id, change)


def test_a_session_stays_cached_and_an_allowed_call_writes_nothing() -> None:
    """Reopening a cached session reads nothing but the version; a repeated check writes nothing."""
    store = FlakyStore()
    guard = shop_guard(store=store)
    guard.record("search_orders", {}, ORDERS, session="s")
    guard.check("issue_refund", {"order_id": "W8855135"}, session="s")
    before = (store.reads, store.writes)
    for _ in range(5):
        assert guard.check("issue_refund", {"order_id": "W8855135"}, session="s").allowed
    assert (store.reads - before[0], store.writes - before[1]) == (5, 0)
    assert store.load("s") is not None


def test_a_check_on_a_session_never_used_stores_nothing() -> None:
    """Checks, allowed or refused, and an empty scope store no session; the first id stores it."""
    store = FlakyStore()
    guard = shop_guard(store=store)
    for n in range(20):
        assert not guard.check("issue_refund", {"order_id": f"W{n:07d}"}, session=f"s{n}").allowed
        assert guard.check("search_orders", {}, session=f"t{n}").allowed
    with guard.session("u"):
        pass
    assert store.writes == 0
    assert store.expire(0) == []  # nothing stored, nothing to expire
    guard.record("search_orders", {}, ORDERS, session="s1")
    stored = store.load("s1")
    assert stored is not None
    assert stored.meta is not None
    assert stored_ids(store, "s1") == {"#W8855135", "#W2378156"}


def test_a_check_in_an_async_scope_of_a_session_never_used_stores_nothing() -> None:
    """The asyncio path: a check inside ``async with guard.session`` writes nothing either."""
    store = FlakyStore()
    guard = shop_guard(store=ThreadedAsyncStore(store))

    async def scenario() -> None:
        async with guard.session("a"):
            assert not guard.check("issue_refund", {"order_id": "W0000001"}).allowed

    asyncio.run(scenario())
    assert store.writes == 0


def test_session_handles_work_without_a_with_block() -> None:
    """observe_user, record, check and enforce take session=; each call is a scope of its own."""
    store = MemoryStore()
    guard = shop_guard(store=store)
    guard.observe_user("I am cus_ABC123", session="s")
    guard.record("search_orders", {"customer_id": "cus_ABC123"}, ORDERS, session="s")
    assert guard.enforce("issue_refund", {"order_id": "W8855135"}, session="s").allowed
    assert not guard.check("issue_refund", {"order_id": "W8855135"}, session="other").allowed
    assert stored_ids(store, "s") == {"cus_ABC123", "#W8855135", "#W2378156"}
    with pytest.raises(GuardrailUsageError, match="not both"):
        guard.check("issue_refund", {}, session="s", ledger=guard.new_ledger())


def test_session_and_ledger_together_are_refused_by_every_form() -> None:
    """session= with ledger= is a usage error for the sync calls and enforce_async alike."""
    guard = shop_guard()
    both: dict[str, Any] = {"session": "s", "ledger": guard.new_ledger()}
    calls: list[Callable[[], object]] = [
        lambda: guard.observe_user("hi", **both),
        lambda: guard.check("issue_refund", {}, **both),
        lambda: guard.enforce("issue_refund", {}, **both),
        lambda: guard.record("get_order", {}, {"order_id": "W1000001"}, **both),
        lambda: asyncio.run(guard.enforce_async("issue_refund", {}, **both)),
    ]
    for call in calls:
        with pytest.raises(GuardrailUsageError, match="not both"):
            call()
    assert guard.cached_sessions() == []


def test_ledger_for_is_the_live_ledger_of_the_session() -> None:
    """ledger_for(id) is the object a scope of that session works on, up to date."""
    guard = shop_guard()
    guard.record("search_orders", {}, ORDERS, session="s")
    ledger = guard.ledger_for("s")
    with guard.session("s") as scoped:
        assert scoped is ledger and len(ledger) == 2
    with pytest.raises(GuardrailUsageError, match="session id"):
        guard.ledger_for("")


def test_the_cache_keeps_at_most_max_cached_sessions_and_loses_nothing() -> None:
    """Past the bound the least recently used session leaves the cache, written first."""
    store = MemoryStore()
    guard = shop_guard(store=store, max_cached_sessions=2)
    for n in range(1, 4):
        guard.record("get_order", {}, {"order_id": f"W100000{n}"}, session=f"s{n}")
    assert guard.cached_sessions() == ["s2", "s3"]
    # A change made through ledger_for (no scope's end writes it) is written as it leaves.
    guard.ledger_for("s2").pin("order")
    guard.record("get_order", {}, {"order_id": "W1000004"}, session="s4")
    guard.record("get_order", {}, {"order_id": "W1000005"}, session="s5")
    assert "s2" not in guard.cached_sessions()
    snapshot = store.load("s2")
    assert snapshot is not None and [r["pinned"] for r in snapshot.records] == [True]
    fresh = shop_guard(store=store)
    with fresh.session("s1"):
        assert fresh.check("issue_refund", {"order_id": "W1000001"}).allowed


def test_a_session_that_cannot_be_written_stays_cached() -> None:
    """A session the store refuses to take is kept in the cache, unwritten changes and all."""
    store = FlakyStore()
    guard = shop_guard(store=store, max_cached_sessions=1)
    guard.record("get_order", {}, {"order_id": "W1000001"}, session="s1")
    guard.ledger_for("s1").pin("order")
    store.fail_writes = True
    with pytest.raises(StoreError):
        guard.record("get_order", {}, {"order_id": "W1000002"}, session="s2")
    assert guard.cached_sessions() == ["s1", "s2"]
    store.fail_writes = False
    guard.check("issue_refund", {"order_id": "W1000002"}, session="s2")  # writes s2, lets s1 go
    assert guard.cached_sessions() == ["s2"]
    assert stored_ids(store, "s2") == {"W1000002"}
    assert [r["pinned"] for r in store.load("s1").records] == [True]  # type: ignore[union-attr]


def test_a_failed_write_loses_no_id() -> None:
    """Ids recorded in a scope whose write failed are written by the next scope's end."""
    store = FlakyStore()
    guard = shop_guard(store=store)
    guard.record("get_order", {}, {"order_id": "W1000001"}, session="s")
    store.fail_writes = True
    with pytest.raises(StoreError):
        guard.record("get_order", {}, {"order_id": "W1000002"}, session="s")
    store.fail_writes = False
    guard.check("issue_refund", {"order_id": "W1000002"}, session="s")
    assert stored_ids(store, "s") == {"W1000001", "W1000002"}


def test_a_store_that_cannot_be_read_fails_closed() -> None:
    """A cached session whose store cannot say what changed raises: no check on a stale ledger."""
    store = FlakyStore()
    guard = shop_guard(store=store)
    checked = []
    guard.record("search_orders", {}, ORDERS, session="s")
    store.fail_reads = True
    with pytest.raises(StoreError, match="down"), guard.session("s"):
        checked.append(guard.enforce("issue_refund", {"order_id": "W8855135"}))
    with pytest.raises(StoreError, match="down"):
        guard.enforce("issue_refund", {"order_id": "W8855135"}, session="new")
    assert checked == []
    store.fail_reads = False
    assert guard.enforce("issue_refund", {"order_id": "W8855135"}, session="s").allowed


def test_end_session_writes_and_lets_go_and_can_delete() -> None:
    """end_session writes the ledger and drops it from the cache; delete=True forgets it too."""
    store = MemoryStore()
    guard = shop_guard(store=store)
    guard.record("search_orders", {}, ORDERS, session="s")
    guard.ledger_for("s").label("order", "first_order")
    guard.end_session("s")
    assert guard.cached_sessions() == []
    assert any(r["role"] == "first_order" for r in store.load("s").records)  # type: ignore[union-attr]
    guard.end_session("s", delete=True)
    assert store.load("s") is None
    with guard.session("s"), pytest.raises(GuardrailUsageError, match="still open"):
        guard.end_session("s")


def test_expire_sessions_deletes_idle_ones_from_store_and_cache() -> None:
    """expire_sessions(max_idle) deletes sessions no one wrote for that long, cached or not."""
    store = MemoryStore()
    guard = shop_guard(store=store)
    guard.record("search_orders", {}, ORDERS, session="s")
    assert guard.expire_sessions(3600) == []
    assert guard.expire_sessions(0) == ["s"]
    assert guard.cached_sessions() == [] and store.load("s") is None
    with pytest.raises(GuardrailUsageError, match="max_idle"):
        guard.expire_sessions(-1)


def test_concurrent_meta_keeps_the_later_turns_refusals() -> None:
    """Re-prompt counts merge as a ledger's do: the later turn's, else the larger of each."""
    held = {
        "turn": 3,
        "epoch": 1,
        "counters": {},
        "user_texts": [],
        "kinds": [],
        "refusals": {"refund": 2, "cancel": 1},
    }
    same_turn = merge_meta(held, {**held, "refusals": {"refund": 1, "ship": 1}}, concurrent=True)
    assert same_turn["refusals"] == {"refund": 2, "cancel": 1, "ship": 1}
    later = merge_meta(held, {**held, "turn": 4, "refusals": {}}, concurrent=True)
    assert later["refusals"] == {} and later["turn"] == 4
    earlier = merge_meta(held, {**held, "turn": 2, "refusals": {"ship": 3}}, concurrent=True)
    assert earlier["refusals"] == held["refusals"]


def test_max_cached_sessions_is_checked() -> None:
    """max_cached_sessions must be a positive integer."""
    with pytest.raises(GuardrailUsageError, match="max_cached_sessions"):
        shop_guard(max_cached_sessions=0)


def test_a_sqlite_store_needs_its_path() -> None:
    """SQLiteStore takes the file to write (or ':memory:'); nothing is written by default."""
    with pytest.raises(TypeError):
        SQLiteStore()  # type: ignore[call-arg]
    with pytest.raises(GuardrailUsageError, match="path"):
        SQLiteStore(3)  # type: ignore[arg-type]
    SQLiteStore(":memory:").close()


def test_a_deleted_database_fails_closed_when_a_cached_session_opens(tmp_path: Path) -> None:
    """The file of a cached session deleted: the next scope raises StoreError, not an old ledger."""
    path = tmp_path / "s.sqlite3"
    guard = shop_guard(store=SQLiteStore(path))
    guard.record("search_orders", {}, ORDERS, session="s")
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        name.unlink(missing_ok=True)
    with pytest.raises(StoreError, match="deleted"):
        guard.check("issue_refund", {"order_id": "W8855135"}, session="s")


# -- an attacker who can write the store while a worker has the session cached -----------------


def _forge(path: Path, session_id: str, record: dict[str, object]) -> None:
    """Write one record row straight into the file, stamped as the newest write."""
    with closing(sqlite3.connect(path)) as db, db:
        (version,) = db.execute(
            "SELECT version FROM guardrail_session WHERE session_id = ?", (session_id,)
        ).fetchone()
        db.execute(
            "INSERT OR REPLACE INTO guardrail_record VALUES (?, ?, ?, ?, ?)",
            (session_id, record["kind"], record["key"], version + 1, json.dumps(record)),
        )
        db.execute(
            "UPDATE guardrail_session SET version = ? WHERE session_id = ?",
            (version + 1, session_id),
        )


def _live(store: SQLiteStore, session_id: str, value: str) -> dict[str, object]:
    snapshot = store.load(session_id)
    assert snapshot is not None
    [record] = [r for r in snapshot.records if r.get("value") == value]
    return dict(record)


def test_a_key_written_into_the_store_cannot_vouch_for_another_id(tmp_path: Path) -> None:
    """A record refreshed into a cached ledger is keyed by its value, not by its stored key."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    guard = shop_guard(store=store)
    guard.record("get_order", {}, {"order_id": "#W8855135"}, session="s")
    forged = _live(store, "s", "#W8855135")
    forged["key"] = "W6666666"  # the verified entry of W8855135, claimed under another key
    _forge(path, "s", forged)
    with pytest.raises(IdentifierViolation):
        guard.enforce("issue_refund", {"order_id": "W6666666"}, session="s")


def test_a_typed_id_stays_unverified_through_a_refresh(tmp_path: Path) -> None:
    """A record written as verified "yes" is refused when refreshed: nothing is allowed on it."""
    path = tmp_path / "s.sqlite3"
    store = SQLiteStore(path)
    guard = shop_guard(store=store)
    guard.observe_user("refund #W7777777", session="s")
    forged = _live(store, "s", "#W7777777")
    forged["verified"] = "yes"
    _forge(path, "s", forged)
    with pytest.raises(StoreError, match="verified: expected a boolean"):
        guard.check("issue_refund", {"order_id": "W7777777"}, session="s")


# -- an asynchronous store ----------------------------------------------------------------------


def test_an_async_store_serves_async_scopes() -> None:
    """With an AsyncStore, `async with` reads and writes through it; tasks share one ledger."""
    memory = MemoryStore()
    guard = shop_guard(store=ThreadedAsyncStore(memory))

    async def conversation() -> None:
        async with guard.session("s") as ledger:
            guard.record("search_orders", {}, ORDERS)

            async def second() -> bool:
                async with guard.session("s") as same:
                    return (
                        same is ledger
                        and guard.check("issue_refund", {"order_id": "W8855135"}).allowed
                    )

            assert list(await asyncio.gather(second(), second())) == [True, True]
        assert stored_ids(memory, "s") == {"#W8855135", "#W2378156"}
        assert await guard.ledger_for_async("s") is ledger
        await guard.end_session_async("s")
        assert guard.cached_sessions() == []
        other = shop_guard(store=ThreadedAsyncStore(memory))
        async with other.session("s"):
            assert other.check("issue_refund", {"order_id": "W2378156"}).allowed
        assert await other.expire_sessions_async(0) == ["s"]
        assert memory.load("s") is None

    asyncio.run(conversation())


def test_an_async_store_refuses_synchronous_use() -> None:
    """A synchronous scope or handle on an async store is a usage error saying what to use."""
    guard = shop_guard(store=ThreadedAsyncStore(MemoryStore()))
    with pytest.raises(GuardrailUsageError, match="async with"), guard.session("s"):
        pass
    with pytest.raises(GuardrailUsageError, match="asynchronous"):
        guard.check("issue_refund", {"order_id": "W1"}, session="s")
    with pytest.raises(GuardrailUsageError, match="default_session"):
        shop_guard(store=ThreadedAsyncStore(MemoryStore()), default_session="d")


def test_an_async_store_that_fails_fails_closed_and_loses_nothing() -> None:
    """An async store's failed write keeps the changes; its failed read stops the scope."""
    flaky = FlakyStore()
    guard = shop_guard(store=ThreadedAsyncStore(flaky))

    async def conversation() -> None:
        flaky.fail_writes = True
        with pytest.raises(StoreError):
            async with guard.session("s"):
                guard.record("get_order", {}, {"order_id": "W1000001"})
        flaky.fail_writes = False
        async with guard.session("s"):
            pass
        assert stored_ids(flaky, "s") == {"W1000001"}
        flaky.fail_reads = True
        with pytest.raises(StoreError):
            async with guard.session("s"):
                raise AssertionError("the scope ran on a ledger the store could not confirm")

    asyncio.run(conversation())


# -- one sequence, every form: the same failures handled alike -----------------------------------

#: How a test reaches the sessions: synchronous calls on a synchronous store, the async calls
#: on an AsyncStore, and the async calls on a synchronous store (they run it directly).
FORMS = ["sync", "async", "async calls, sync store"]


class Form:
    """One guard on a FlakyStore, its scopes and handles called in one of the FORMS."""

    def __init__(self, form: str, store: FlakyStore | None = None, **options: object) -> None:
        self.form = form
        self.store = store if store is not None else FlakyStore()
        backend = ThreadedAsyncStore(self.store) if form == "async" else self.store
        self.guard = shop_guard("raise", store=backend, **options)

    def scope(self, session_id: str, body: Callable[[], object] = lambda: None) -> None:
        """``body()`` in a ``with`` (or ``async with``) scope of ``session_id``."""
        if self.form == "sync":
            with self.guard.session(session_id):
                body()
            return

        async def scoped() -> None:
            async with self.guard.session(session_id):
                body()

        asyncio.run(scoped())

    def ledger_for(self, session_id: str) -> Ledger:
        """guard.ledger_for, or ledger_for_async."""
        if self.form == "sync":
            return self.guard.ledger_for(session_id)
        return asyncio.run(self.guard.ledger_for_async(session_id))

    def end(self, session_id: str) -> None:
        """guard.end_session, or end_session_async."""
        if self.form == "sync":
            self.guard.end_session(session_id)
        else:
            asyncio.run(self.guard.end_session_async(session_id))

    def record(self, order_id: str) -> None:
        """The result of get_order for ``order_id``, recorded in the current scope."""
        self.guard.record("get_order", {}, {"order_id": order_id})


@pytest.mark.parametrize("form", FORMS)
def test_a_failed_write_is_undone_and_the_scope_released_in_every_form(form: str) -> None:
    """A failed write keeps the scope's ids unwritten and cached, and releases the scope."""
    forms = Form(form)
    forms.scope("s", lambda: forms.record("W1000001"))
    forms.store.fail_writes = True
    with pytest.raises(StoreError, match="down"):
        forms.scope("s", lambda: forms.record("W1000002"))
    assert forms.guard.cached_sessions() == ["s"]
    assert stored_ids(forms.store, "s") == {"W1000001"}
    forms.store.fail_writes = False
    writes = forms.store.writes
    forms.end("s")  # released: no scope holds it any more, so it can end
    assert forms.store.writes == writes + 1
    assert stored_ids(forms.store, "s") == {"W1000001", "W1000002"}
    assert forms.guard.cached_sessions() == []


@pytest.mark.parametrize("form", FORMS)
def test_the_cache_bound_holds_in_every_form(form: str) -> None:
    """Past max_cached_sessions the least recently used session is written, then let go."""
    forms = Form(form, max_cached_sessions=1)
    forms.scope("s1", lambda: forms.record("W1000001"))
    forms.ledger_for("s1").pin("order")  # a change no scope's end writes
    forms.ledger_for("s2")
    assert forms.guard.cached_sessions() == ["s2"]
    snapshot = forms.store.load("s1")
    assert snapshot is not None and [r["pinned"] for r in snapshot.records] == [True]


@pytest.mark.parametrize("form", FORMS)
def test_a_session_deleted_during_a_scope_is_dropped_in_every_form(form: str) -> None:
    """A write refused as SessionDeleted discards the cached copy: the delete wins."""
    forms = Form(form)
    forms.scope("s", lambda: forms.record("W1000001"))
    old = forms.ledger_for("s")

    def deleted_meanwhile() -> None:
        forms.record("W1000002")
        forms.store.delete("s")  # another worker ends the conversation

    with pytest.raises(SessionDeleted):
        forms.scope("s", deleted_meanwhile)
    assert forms.guard.cached_sessions() == []
    assert forms.store.load("s") is None
    fresh = forms.ledger_for("s")
    assert fresh is not old and len(fresh) == 0


class DamagedStore(FlakyStore):
    """A memory store whose whole sessions can be made to read back with a record cut short."""

    damaged = False

    def load(self, session_id: str) -> Snapshot | None:
        snapshot = super().load(session_id)
        if snapshot is None or not self.damaged:
            return snapshot
        return Snapshot(snapshot.version, [{"kind": "order"}], snapshot.meta)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("collector_on", [True, False])
def test_a_cold_load_pauses_the_collector_and_leaves_it_as_it_was(
    form: str, collector_on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild runs with the cyclic collector paused, in every form; after, it is as it was."""
    store = DamagedStore()
    forms = Form(form, store)
    forms.scope("s", lambda: forms.record("W1000001"))
    forms.end("s")
    paused = []

    def watched(records: Any) -> Any:
        paused.append(not gc.isenabled())
        return rebuilt(records)

    monkeypatch.setattr(journal, "rebuilt", watched)
    was_on = gc.isenabled()
    try:
        gc.enable() if collector_on else gc.disable()
        assert forms.ledger_for("s").get("order", "W1000001") is not None
        assert gc.isenabled() is collector_on
        forms.end("s")
        store.damaged = True
        with pytest.raises(StoreError, match="bad data"):
            forms.ledger_for("s")
        assert gc.isenabled() is collector_on
    finally:
        gc.enable() if was_on else gc.disable()
    assert paused == [True, True]


class WatchedStore(DamagedStore):
    """A memory store that notes whether the collector ran while it read a whole session."""

    def __init__(self) -> None:
        super().__init__()
        self.paused: list[bool] = []

    def load(self, session_id: str) -> Snapshot | None:
        self.paused.append(not gc.isenabled())
        return super().load(session_id)


@pytest.mark.parametrize("form", FORMS)
def test_a_synchronous_store_reads_a_whole_session_with_the_collector_paused(form: str) -> None:
    """Its read and the ledger made of it, one pause; an asynchronous store's read is awaited."""
    store = WatchedStore()
    forms = Form(form, store)
    forms.scope("s", lambda: forms.record("W1000001"))
    forms.end("s")
    store.paused.clear()
    was_on = gc.isenabled()
    try:
        gc.enable()
        assert forms.ledger_for("s").get("order", "W1000001") is not None
        assert gc.isenabled()
        forms.end("s")
        store.fail_reads = True
        with pytest.raises(StoreError, match="down"):
            forms.ledger_for("s")
        assert gc.isenabled()
    finally:
        gc.enable() if was_on else gc.disable()
    assert store.paused == [form != "async"] * 2
