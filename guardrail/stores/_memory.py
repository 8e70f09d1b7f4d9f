"""The in-memory store: sessions as JSON records in this process (the default)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import islice

from guardrail.errors import StoreError
from guardrail.stores._json import decode, decode_record, decode_rows, encode, encode_record
from guardrail.stores.protocol import (
    Change,
    Meta,
    Snapshot,
    Written,
    checked_ttl,
    damaged,
    deleted,
    first_version,
    merge_meta,
    merge_record,
    stale_base,
)

#: How many sessions past their ttl a write deletes besides its own (a bounded sweep).
_SWEPT_PER_WRITE = 8


@dataclass(slots=True)
class _Session:
    created: int
    version: int
    written: float  # time.monotonic() of the last write
    meta: tuple[int, str] | None = None  # (version, JSON)
    rows: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)


class MemoryStore:
    """Sessions kept in this process, as the records any store keeps (the default store).

    Records are held as the JSON text of their rows (their values without
    the field names, see :mod:`guardrail._data.rows`), so what a guard reads back
    is a copy that nothing else changes, and an ended conversation costs
    about what that text does. Several guards sharing one MemoryStore merge
    their writes as they would over SQLite. It is lost when the process ends.

    With ``ttl`` (seconds), a session no one wrote for that long is deleted
    when it is next used (it reads as gone, and a write based on it is
    refused with :class:`~guardrail.errors.SessionDeleted`) and, a few of
    the oldest at a time, by every write: a long-running process serving
    many conversations does not keep the finished ones.
    """

    def __init__(self, *, ttl: float | None = None) -> None:
        self.ttl = checked_ttl(ttl)
        #: In order of last write, oldest first: a write's sweep looks at the front only.
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        with self._lock:
            held = self._held(session_id)
            if held is None:
                return None
            return self._read(session_id, held, 0, complete=True)

    def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` atomically, merging rows written since ``change.base``."""
        # Every record as text before anything is written: a bad one changes nothing.
        try:
            texts = [((r["kind"], r["key"]), r, encode_record(r)) for r in change.records]
            meta_text = None if change.meta is None else encode(change.meta)
        except (TypeError, ValueError, KeyError) as exc:
            raise StoreError(
                f"{self!r}: session {session_id!r} was not written: a record or the meta "
                f"cannot be stored as JSON ({exc}); nothing of the change was written",
                session_id=session_id,
            ) from exc
        with self._lock:
            held = self._held(session_id)
            self._sweep()
            if stale_base(change.base, None if held is None else held.created):
                raise deleted(repr(self), session_id)
            if held is None:
                start = first_version()
                held = self._sessions[session_id] = _Session(start - 1, start - 1, 0.0)
                alone = True
            else:
                alone = held.version == change.base
            version = held.version + 1
            rows = held.rows
            for name in change.pruned:
                row = rows.get((name[0], name[1]))
                if row is not None and row[0] <= change.base:
                    del rows[(name[0], name[1])]
            for name, record, text in texts:
                row = rows.get(name)
                if row is not None and row[0] > change.base:
                    merged = merge_record(decode_record(row[1]), record, concurrent=True)
                    text = encode_record(merged)
                rows[name] = (version, text)
            if change.meta is not None and meta_text is not None:
                if held.meta is not None and held.meta[0] > change.base:
                    merged_meta = merge_meta(decode(held.meta[1]), change.meta, concurrent=True)
                    meta_text = encode(merged_meta)
                held.meta = (version, meta_text)
            held.version = version
            held.written = time.monotonic()
            self._sessions[session_id] = self._sessions.pop(session_id)  # the newest write, last
            return Written(version, alone)

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        with self._lock:
            held = self._held(session_id)
            if held is None:
                return None if version == 0 else Snapshot(0)
            if held.version == version:
                return None
            if held.created >= version:  # started (again) after that version
                return self._read(session_id, held, 0, complete=True)
            return self._read(session_id, held, version, complete=False)

    def delete(self, session_id: str) -> None:
        """Forget a session."""
        with self._lock:
            self._sessions.pop(session_id, None)

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        cutoff = time.monotonic() - max_idle
        with self._lock:
            idle = [sid for sid, held in self._sessions.items() if held.written <= cutoff]
            for sid in idle:
                del self._sessions[sid]
        return idle

    def close(self) -> None:
        """Nothing to close: the sessions stay until the store is dropped."""

    def __repr__(self) -> str:
        ttl = "" if self.ttl is None else f", ttl={self.ttl:g}"
        return f"MemoryStore({len(self._sessions)} sessions{ttl})"

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def _held(self, session_id: str) -> _Session | None:
        """A session, or None (deleted now if it is past its ttl); the lock is held."""
        held = self._sessions.get(session_id)
        if held is not None and self._expired(held):
            del self._sessions[session_id]
            return None
        return held

    def _expired(self, held: _Session) -> bool:
        return self.ttl is not None and held.written <= time.monotonic() - self.ttl

    def _sweep(self) -> None:
        """Delete a few of the sessions past their ttl, the oldest; the lock is held."""
        if self.ttl is None:
            return
        for session_id, held in list(islice(self._sessions.items(), _SWEPT_PER_WRITE)):
            if not self._expired(held):
                break  # written later than this one: every session after it too
            del self._sessions[session_id]

    def _read(self, session_id: str, held: _Session, since: int, *, complete: bool) -> Snapshot:
        """:meth:`_snapshot`, with rows that cannot be read a StoreError naming the session."""
        try:
            return self._snapshot(held, since, complete=complete)
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise damaged(repr(self), session_id, f"a stored row is not a record ({exc})") from None

    @staticmethod
    def _snapshot(held: _Session, since: int, *, complete: bool) -> Snapshot:
        records = decode_rows([text for v, text in held.rows.values() if v > since])
        meta: Meta | None = None
        if held.meta is not None and held.meta[0] > since:
            meta = decode(held.meta[1])
        return Snapshot(held.version, records, meta, complete)
