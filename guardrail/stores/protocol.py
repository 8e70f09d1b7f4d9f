"""The store protocol, for writing a store: what a place that keeps sessions must do.

A program picks a store from :mod:`guardrail.stores`; this module is for
the author of a new one: the :class:`Store` (or :class:`AsyncStore`)
protocol, what a writer sends (:class:`Change`), what a store answers
(:class:`Snapshot`, :class:`Written`), and the merge rule every store
follows (:func:`merge_record`, :func:`merge_meta`). The conformance suite
in guardrail's tests holds a store to all of it.

A store keeps each session as **records**, one per identifier the session
ever held (``(kind, key)`` is the record's name), plus one **meta** mapping
(turn, counters, the user's texts, capacities, re-prompt counts). A saved
ledger (``Ledger.to_json``) is the same records and meta. A record says
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

A delete wins over every write that began before it. A ``Change.base``
above 0 names the life of the session the writer read (versions only
grow, and a session started again begins above any version it reached
before): when that session is gone, or was started again after ``base``
(its first version is above ``base``), the store writes nothing of the
change and raises :class:`~guardrail.errors.SessionDeleted`, so a worker
still holding a deleted conversation never brings it back. A change with
base 0 (a writer that found no session) starts the session, or merges
into the one another writer started meanwhile.

Stores keep records as JSON and do not check them: the guard checks every
record field by field when it rebuilds a ledger, and a record that is not
valid is a :class:`~guardrail.errors.StoreError` naming the session, never
a silently smaller ledger.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

from guardrail._data.entry import Record
from guardrail.errors import GuardrailUsageError, SessionDeleted, StoreError
from guardrail.ledger._merge import USER_TEXTS_KEPT, Meta, merge_meta, merge_record

_T = TypeVar("_T")

State = Literal["live", "evicted", "dropped", "gone"]
"""The states a record gives an id (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One atomic unit of writes to one session: records, and the meta if it changed.

    ``base`` is the version of the session the writer's ledger had caught up
    with (0: none, a writer that never read the session): rows written
    after it are merged with this change's, rows written before it are
    replaced. A change holds at most one record per ``(kind, key)``.

    ``pruned`` names the ids whose tombstone or drop mark the writer's ledger
    let go past its bound: the store deletes their rows, unless written after
    ``base`` (another writer's newer state of the id stays). So a session
    keeps about ``capacity`` live rows and ``tombstone_capacity`` of each kind
    of mark, however many ids passed through it.
    """

    base: int
    records: Sequence[Record] = ()
    meta: Meta | None = None
    pruned: Sequence[tuple[str, str]] = ()

    def __bool__(self) -> bool:
        return bool(self.records) or self.meta is not None or bool(self.pruned)


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

    def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None when the store does not hold it."""

    def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows written since ``change.base``."""

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """What was written since ``version``; None when the session is still at it."""

    def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""

    def close(self) -> None:
        """Release what the store holds open (its client, connections, files)."""


@runtime_checkable
class AsyncStore(Protocol):
    """:class:`Store` with coroutine methods, for a store with an asyncio client."""

    async def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None when the store does not hold it."""

    async def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows written since ``change.base``."""

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """What was written since ``version``; None when the session is still at it."""

    async def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""

    async def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""

    async def close(self) -> None:
        """Release what the store holds open (its client, connections, files)."""


async def _in_thread(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` in a worker thread, awaited."""
    import asyncio  # here, not at import: `import guardrail` does not load asyncio

    return await asyncio.to_thread(function, *args)


class ThreadedAsyncStore:
    """A synchronous :class:`Store` used from asyncio: each call runs in a worker thread."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None when the store does not hold it."""
        return await _in_thread(self.store.load, session_id)

    async def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows written since ``change.base``."""
        return await _in_thread(self.store.apply, session_id, change)

    async def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """What was written since ``version``; None when the session is still at it."""
        return await _in_thread(self.store.changes_since, session_id, version)

    async def delete(self, session_id: str) -> None:
        """Forget a session (waiting for a write to it in progress to end)."""
        await _in_thread(self.store.delete, session_id)

    async def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        return await _in_thread(self.store.expire, max_idle)

    async def close(self) -> None:
        """Release what the store holds open (its client, connections, files)."""
        await _in_thread(self.store.close)


def first_version() -> int:
    """The version a new session starts at: the wall clock in microseconds.

    Each write adds one, and a write takes longer than a microsecond, so a
    session deleted and started again always starts above any version the
    old one reached: a reader holding an old version sees it as new.
    """
    return time.time_ns() // 1000


def checked_ttl(ttl: object, counted_from: str = "no one wrote") -> float | None:
    """A store's ``ttl`` argument as seconds (None: sessions are kept until deleted).

    ``counted_from`` says what starts a session's count again, for the error.
    """
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < math.inf:
        raise GuardrailUsageError(
            f"ttl is how many seconds a session {counted_from} is kept (> 0), or None, not {ttl!r}"
        )
    return float(ttl)


def stale_base(base: int, created: int | None) -> bool:
    """Whether a change based on ``base`` was read from a session since deleted.

    ``created`` is the held session's creation mark (its first version less
    one), None when the store holds no session: a base above 0 names a
    session that existed, so either means it was deleted after the read.
    """
    return base > 0 and (created is None or created >= base)


def deleted(where: str, session_id: str) -> SessionDeleted:
    """The error for a change based on a session deleted (or expired) since it was read."""
    return SessionDeleted(
        f"{where}: session {session_id!r} was deleted (or expired) after this writer read it; "
        "nothing of the change was written, and the ids it held stay gone. Open the session "
        "again to start it anew",
        session_id=session_id,
    )


def damaged(where: str, session_id: str, problem: str) -> StoreError:
    """The error for a session whose stored data a server store cannot read, saying what to do."""
    return StoreError(
        f"{where}: session {session_id!r} holds bad data: {problem}. Delete the session "
        "(store.delete(session_id)) or restore it from a backup",
        session_id=session_id,
    )


__all__ = [
    "USER_TEXTS_KEPT",
    "AsyncStore",
    "Change",
    "Meta",
    "Record",
    "Snapshot",
    "State",
    "Store",
    "ThreadedAsyncStore",
    "Written",
    "damaged",
    "deleted",
    "first_version",
    "merge_meta",
    "merge_record",
    "stale_base",
]
