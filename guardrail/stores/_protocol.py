"""The store protocol: what a place that keeps sessions between calls must do.

A store keeps each session as **records**, one per identifier the session
ever held (``(kind, key)`` is the record's name), plus one **meta** mapping
(turn, counters, the user's texts, capacities, the seal key). A record says
what the session knows of that id now: ``"live"`` (an entry: every field of
:meth:`~guardrail.ledger.Entry.to_dict`), ``"evicted"`` (a tombstone),
``"dropped"`` (a drop mark: a result named it but the ledger did not keep
it) or ``"gone"`` (removed, nothing kept). Every record has ``kind``,
``key``, ``state`` and ``turn`` (the turn of its last use, eviction or
drop). A ledger grows by adding live records and moves by rewriting them
(a touch is a live record with a later ``turn``); eviction, forgetting and
tombstones are records too, so a store never deletes a row to forget one id.

Writers send one :class:`Change` at a time; a store applies it atomically
(all of its records and its meta, or none) and stamps every row it writes
with the session's new **version**. A writer names in ``Change.base`` the
version its ledger had caught up with: a row written after that is a
*concurrent* change the writer never saw, and the two are merged by
:func:`merge_record` / :func:`merge_meta` (union of entries, latest use,
verified and pinned if either says so, a removal wins over a use no later
than it); a row the writer had seen is simply replaced, so forgetting,
unpinning and relabelling persist. Nothing a writer sends is ever lost to
another writer's save.

Stores keep records as JSON and do not check them: the guard checks every
record field by field when it rebuilds a ledger, and a record that is not
valid is a :class:`~guardrail.errors.StoreError` naming the session, never
a silently smaller ledger.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

from guardrail.errors import StoreError

_T = TypeVar("_T")

#: One id's state in one session: a JSON-safe mapping with at least ``kind``, ``key``,
#: ``state`` and ``turn`` (see the module docstring for the fields of each state).
Record = Mapping[str, Any]

#: A session's meta: ``capacity``, ``tombstone_capacity``, ``seal_key``, ``turn``,
#: ``epoch``, ``kinds``, ``counters``, ``user_texts``, ``refusals`` (JSON-safe).
Meta = Mapping[str, Any]

State = Literal["live", "evicted", "dropped", "gone"]

USER_TEXTS_KEPT = 16  # as many as a ledger keeps


@dataclass(frozen=True, slots=True)
class Change:
    """One atomic unit of writes to one session: records, and the meta if it changed.

    ``base`` is the version of the session the writer's ledger had caught up
    with (0: none, a writer that never read the session): rows written
    after it are merged with this change's, rows written before it are
    replaced. A change holds at most one record per ``(kind, key)``.
    """

    base: int
    records: Sequence[Record] = ()
    meta: Meta | None = None

    def __bool__(self) -> bool:
        return bool(self.records) or self.meta is not None


class Written(NamedTuple):
    """What :meth:`Store.apply` did: the session's new version, and whether it was alone.

    ``alone`` is True when no one else wrote the session since the
    change's ``base`` (a write that creates the session is alone): the
    writer's ledger is then exactly what the store holds, at ``version``.
    """

    version: int
    alone: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session as a store holds it, or what changed in it since a version.

    ``version`` is the session's version when read (0 for a session the
    store does not hold). ``complete`` is True for a whole session (what
    :meth:`Store.load` returns, and what :meth:`Store.changes_since` returns
    when the session was deleted or started anew since that version): a
    reader replaces its copy with it. Else ``records`` are the rows written
    since the version asked about and ``meta`` is None unless it changed.
    """

    version: int
    records: Sequence[Record] = ()
    meta: Meta | None = None
    complete: bool = True


@runtime_checkable
class Store(Protocol):
    """Keeps sessions as records, by session id; every method may be called from any thread.

    ``load`` returns the whole session or None. ``apply`` writes one
    :class:`Change` atomically, merging rows other writers wrote since
    ``change.base`` (:func:`merge_record`, :func:`merge_meta`), and returns
    the session's new version and whether anyone else wrote it since
    ``base`` (:class:`Written`). ``changes_since`` is the cheap
    check a cached session makes before each use: None when the session is
    still at ``version``. ``delete`` forgets a session; ``expire`` deletes
    the sessions no one wrote for ``max_idle`` seconds and returns their ids.
    A store that cannot be read or written raises
    :class:`~guardrail.errors.StoreError` naming itself and the session.
    """

    def load(self, session_id: str) -> Snapshot | None: ...

    def apply(self, session_id: str, change: Change) -> Written: ...

    def changes_since(self, session_id: str, version: int) -> Snapshot | None: ...

    def delete(self, session_id: str) -> None: ...

    def expire(self, max_idle: float) -> list[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncStore(Protocol):
    """:class:`Store` with coroutine methods, for a store with an asyncio client."""

    async def load(self, session_id: str) -> Snapshot | None: ...

    async def apply(self, session_id: str, change: Change) -> Written: ...

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None: ...

    async def delete(self, session_id: str) -> None: ...

    async def expire(self, max_idle: float) -> list[str]: ...

    async def close(self) -> None: ...


async def _in_thread(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` in a worker thread, awaited."""
    import asyncio  # here, not at import: `import guardrail` does not load asyncio

    return await asyncio.to_thread(function, *args)


class ThreadedAsyncStore:
    """A synchronous :class:`Store` used from asyncio: each call runs in a worker thread."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def load(self, session_id: str) -> Snapshot | None:
        return await _in_thread(self.store.load, session_id)

    async def apply(self, session_id: str, change: Change) -> Written:
        return await _in_thread(self.store.apply, session_id, change)

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        return await _in_thread(self.store.changes_since, session_id, version)

    async def delete(self, session_id: str) -> None:
        await _in_thread(self.store.delete, session_id)

    async def expire(self, max_idle: float) -> list[str]:
        return await _in_thread(self.store.expire, max_idle)

    async def close(self) -> None:
        await _in_thread(self.store.close)


def first_version() -> int:
    """The version a new session starts at: the wall clock in microseconds.

    Each write adds one, and a write takes longer than a microsecond, so a
    session deleted and started again always starts above any version the
    old one reached: a reader holding an old version sees it as new.
    """
    return time.time_ns() // 1000


# -- the merge rule ------------------------------------------------------------------------------

_REMOVED = {"evicted": 2, "gone": 1, "dropped": 0}  # ties between marks: the most informative


def merge_record(held: Record | None, new: Record, *, concurrent: bool) -> Record:
    """What a store keeps when ``new`` is written over the ``held`` row of the same id.

    Not ``concurrent`` (the writer had seen ``held``): ``new``. Else:

    - two live entries become one: verified if either is (the value and
      source of the verified copy), first seen at the earlier turn, last
      used at the later (its status with it), pinned if either is, the
      held role kept and the other's names added as aliases;
    - an eviction or removal (``evicted``, ``gone``) wins over a live entry
      used no later than it; a live entry used later wins over it;
    - a live entry wins over a drop mark;
    - between marks, the later turn wins (an eviction over a drop mark on
      a tie).
    """
    if held is None or not concurrent:
        return new
    held_live = held["state"] == "live"
    new_live = new["state"] == "live"
    if held_live and new_live:
        return _combine(held, new)
    if held_live or new_live:
        live, mark = (held, new) if held_live else (new, held)
        if mark["state"] != "dropped" and mark["turn"] >= live["turn"]:
            return mark
        return live
    order = (held["turn"], _REMOVED.get(held["state"], 0))
    return new if (new["turn"], _REMOVED.get(new["state"], 0)) > order else held


def _combine(held: Record, new: Record) -> Record:
    """Two live copies of one entry as one, whichever order they come in (but the role)."""
    merged = dict(held)
    if new["verified"] and not held["verified"]:
        merged["verified"] = True
        merged["value"] = new["value"]
        merged["source"] = new["source"]
    merged["first_seen"] = min(held["first_seen"], new["first_seen"])
    if _status_order(new) > _status_order(held):
        merged["status"] = new["status"]
    merged["last_used"] = merged["turn"] = max(held["turn"], new["turn"])
    merged["epoch"] = max(held["epoch"], new["epoch"])
    merged["pinned"] = bool(held["pinned"] or new["pinned"])
    names = [held["role"], *held["aliases"]]
    merged["aliases"] = list(held["aliases"]) + [
        name for name in (new["role"], *new["aliases"]) if name not in names
    ]
    return merged


def _status_order(record: Record) -> tuple[int, bool, str]:
    status = record["status"]
    return (record["turn"], status is not None, status or "")


def merge_meta(held: Meta | None, new: Meta, *, concurrent: bool) -> Meta:
    """What a store keeps when ``new`` meta is written over ``held``.

    Not ``concurrent``: ``new``. Else turn, epoch and counters take the
    larger; the user's texts are united in order (the newest kept); the
    kinds are united; re-prompt counts are those of the later turn (the
    larger of each on a tie); capacities and the seal key stay the held
    ones (the first writer's).
    """
    if held is None or not concurrent:
        return new
    merged = dict(held)
    merged["turn"] = max(held["turn"], new["turn"])
    merged["epoch"] = max(held["epoch"], new["epoch"])
    counters = dict(held["counters"])
    for name, number in new["counters"].items():
        counters[name] = max(number, counters.get(name, 0))
    merged["counters"] = counters
    texts = list(held["user_texts"])
    texts += [text for text in new["user_texts"] if text not in texts]
    merged["user_texts"] = texts[-USER_TEXTS_KEPT:]
    merged["kinds"] = list(dict.fromkeys([*held["kinds"], *new["kinds"]]))
    # Re-prompt counts start again each turn: those of the later turn, else the larger of each.
    if new["turn"] > held["turn"]:
        merged["refusals"] = dict(new["refusals"])
    elif new["turn"] == held["turn"]:
        refusals = dict(held["refusals"])
        for tool, count in new["refusals"].items():
            refusals[tool] = max(count, refusals.get(tool, 0))
        merged["refusals"] = refusals
    return merged


def damaged(where: str, session_id: str, problem: str) -> StoreError:
    """The error for a session whose stored data a server store cannot read, saying what to do."""
    return StoreError(
        f"{where}: session {session_id!r} holds bad data: {problem}. Delete the session "
        "(store.delete(session_id)) or restore it from a backup",
        session_id=session_id,
    )
