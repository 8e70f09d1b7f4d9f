"""One merge rule on every path: ledger objects, records, and each store give one answer.

Two copies of one conversation's ledger grow apart from a common saved copy
(admissions, uses, pins and unpins, forgets, relabels, drops, re-prompts,
turns), then meet: ``Ledger.merge`` in either order, the records merged by
``merge_record`` / ``merge_meta`` and loaded, and each store holding one copy
written over by the other (a concurrent write it merges). Each path must
give the same ids in the same states; the stores must hold exactly the
records the rule gives. And the answer must keep the principle: an id the
program let go is refused as evicted unless the other copy used it later.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import GuardrailUsageError, Ledger, Source
from guardrail._data.batch import Batch
from guardrail._guard.journal import checked
from guardrail.ledger._ledger import state_of
from guardrail.ledger._records import fill, meta_of, records
from guardrail.stores import MemoryStore, SQLiteStore, Store
from guardrail.stores.protocol import Change, merge_meta, merge_record

Name = tuple[str, str]

SOURCE = Source("get_order", "c1", "order_id", 0)
USER = Source("user", None, "text", 0)

OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "turn",
                "user",
                "read",
                "read",
                "use",
                "pin",
                "unpin",
                "forget",
                "label",
                "flood",
                "refuse",
            ]
        ),
        st.integers(min_value=0, max_value=9),
    ),
    max_size=18,
)


def run(ledger: Ledger, ops: list[tuple[str, int]]) -> Ledger:
    """Play a short program of a conversation's events on ``ledger``."""
    state = state_of(ledger)
    for op, n in ops:
        value = f"W{n}"
        entry = ledger.get("order", value)
        if op == "turn":
            state.next_turn()
        elif op == "user":
            state.observe_text(f"about {value}")
            state.admit([Batch.one("order", value, value, "text")], source=USER, verified=False)
        elif op == "read":
            batch = Batch.one("order", value, value, "order_id", f"s{n % 3}")
            state.admit([batch], source=SOURCE)
        elif op == "flood":  # named beyond what one call may add: drop marks
            batch = Batch("order", "orders", None, [value, f"W{n + 1}"], [value, f"W{n + 1}"], None)
            state.admit([batch], source=SOURCE, limit=0, tool="search")
        elif op == "refuse":
            state.reprompts.add(f"t{n % 2}", state.turn)
        elif entry is None:
            continue
        elif op == "use":
            state.touch(entry)
        elif op in ("pin", "unpin"):
            ledger.pin(entry.role, op == "pin")
        elif op == "forget":
            ledger.forget(entry.role)
        elif op == "label":
            try:
                ledger.label(entry.role, f"named_{n}")
            except GuardrailUsageError:
                continue  # the name is taken: a relabel that did not happen
    return ledger


def copies(shared: list[Any], left: list[Any], right: list[Any]) -> tuple[Ledger, Ledger]:
    """Two copies of one ledger: a common saved copy, each grown apart by its own program."""
    base = run(Ledger(capacity=60, tombstones=60, session_id="s"), shared)
    saved = base.to_json()
    return run(Ledger.from_json(saved), left), run(Ledger.from_json(saved), right)


def by_name(found: Any) -> dict[Name, dict[str, Any]]:
    return {(r["kind"], r["key"]): dict(r) for r in found}


def merged_records(mine: Ledger, theirs: Ledger) -> tuple[dict[Name, Any], Mapping[str, Any]]:
    """The records path: each of ``theirs`` merged over ``mine``'s by the rule, and the meta."""
    held = by_name(records(state_of(mine)))
    for name, record in by_name(records(state_of(theirs))).items():
        held[name] = dict(merge_record(held.get(name), record, concurrent=True))
    meta = merge_meta(meta_of(state_of(mine)), meta_of(state_of(theirs)), concurrent=True)
    return held, meta


def loaded(found: Any, meta: Mapping[str, Any]) -> Ledger:
    """A ledger the one loader rebuilds from records and meta, as a store's session loads."""
    ledger = Ledger(capacity=meta["capacity"], tombstones=meta["tombstone_capacity"])
    fill(state_of(ledger), list(found), meta)
    return ledger


def content(ledger: Ledger) -> tuple[dict[Name, Any], dict[str, Any]]:
    """What a ledger knows of each id and of the session, without the names it gives them.

    Roles are names: two copies that each gave one away may number them apart.
    """
    data = ledger.to_dict()
    ids = {}
    for name, record in by_name(data["records"]).items():
        for field in ("role", "aliases", "epoch"):
            record.pop(field, None)
        ids[name] = record
    meta = {key: data["meta"][key] for key in ("turn", "refusals", "capacity")}
    meta["kinds"] = sorted(data["meta"]["kinds"])
    meta["user_texts"] = sorted(set(data["meta"]["user_texts"]))
    return ids, meta


def objects(mine: Ledger, theirs: Ledger) -> Ledger:
    """The objects path: a copy of ``mine`` takes in a copy of ``theirs`` (Ledger.merge)."""
    merged = Ledger.from_json(mine.to_json())
    merged.merge(Ledger.from_json(theirs.to_json()))
    return merged


def keeps_the_principle(mine: Ledger, theirs: Ledger, merged: Ledger) -> None:
    """An id let go stays gone unless the other copy used it at a later turn; no new trust."""
    sides = [by_name(records(state_of(copy))) for copy in (mine, theirs)]
    result = by_name(records(state_of(merged)))
    for name in sides[0].keys() | sides[1].keys():
        found = [side.get(name) for side in sides]
        live = [r for r in found if r is not None and r["state"] == "live"]
        removed = [r["turn"] for r in found if r is not None and r["state"] in ("evicted", "gone")]
        got = result.get(name)
        if got is not None and got["state"] == "live":
            assert live, f"{name} is live though no copy held it"
            assert all(max(r["turn"] for r in live) > turn for turn in removed), name
            assert got["verified"] == any(r["verified"] for r in live), name
            assert got["pinned"] == any(r["pinned"] for r in live), name
            assert got["last_used"] == max(r["last_used"] for r in live), name
        elif live and not removed:
            pytest.fail(f"{name} was live in a copy and let go in none, yet is not live")


def same_on_every_path(store: Callable[[], Store], examples: int) -> None:
    """Plays random pairs of copies through objects, records and ``store``: one answer."""
    sessions = itertools.count()

    @settings(max_examples=examples, deadline=None, derandomize=True)
    @given(OPS, OPS, OPS)
    def same(shared: list[Any], left: list[Any], right: list[Any]) -> None:
        mine, theirs = copies(shared, left, right)
        merged = objects(mine, theirs)
        keeps_the_principle(mine, theirs, merged)
        assert content(merged) == content(objects(theirs, mine))  # whichever is merged into
        found, meta = merged_records(mine, theirs)
        assert content(loaded(found.values(), meta)) == content(merged)
        # A store holding one copy, written over by the other as a concurrent writer.
        session = f"merge-{next(sessions)}"
        target = store()
        try:
            for copy in (mine, theirs):
                state = state_of(copy)
                target.apply(session, Change(0, records(state), meta_of(state)))
            snapshot = target.load(session)
            assert snapshot is not None
            assert by_name(snapshot.records) == found
            assert snapshot.meta == meta
            stored, stored_meta = checked(snapshot, session, target)
            assert content(loaded(stored, stored_meta or {})) == content(merged)
        finally:
            target.delete(session)
            target.close()

    same()


def test_merge_paths_agree_in_memory() -> None:
    """Objects, records and the memory store give one answer (and keep the principle)."""
    shared = MemoryStore()
    same_on_every_path(lambda: shared, examples=150)


def test_merge_paths_agree_in_sqlite(tmp_path: Path) -> None:
    """Objects, records and SQLite give one answer."""
    path = tmp_path / "merge.sqlite3"
    same_on_every_path(functools.partial(SQLiteStore, path), examples=60)


def test_merge_paths_agree_in_redis(redis_url: str, redis_prefix: str) -> None:
    """Objects, records and Redis give one answer."""
    from guardrail.stores import RedisStore

    same_on_every_path(lambda: RedisStore.from_url(redis_url, prefix=redis_prefix), examples=40)


@pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning"
)
def test_merge_paths_agree_in_postgres(postgres_dsn: str, postgres_schema: str) -> None:
    """Objects, records and PostgreSQL give one answer."""
    from guardrail.stores import PostgresStore

    stores: list[Any] = []

    def store() -> Store:
        if not stores:
            stores.append(_Kept(PostgresStore(postgres_dsn, schema=postgres_schema)))
        return stores[0]  # type: ignore[no-any-return]

    try:
        same_on_every_path(store, examples=40)
    finally:
        for kept in stores:
            kept.store.close()


class _Kept:
    """A store whose close does nothing: one pool for every example of a run."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def close(self) -> None:
        return None
