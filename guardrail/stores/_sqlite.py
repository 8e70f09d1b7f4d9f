"""A SQLite store: sessions that survive the process, embedded, no server."""

from __future__ import annotations

import itertools
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from operator import itemgetter

from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._json import (
    decode,
    decode_record,
    decode_rows,
    encode,
    encode_record,
    has_surrogates,
)
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
#: The layout of the tables this code writes (``PRAGMA user_version``): 2, a table row per
#: record; 3, records written as rows (:mod:`guardrail._data.rows`), which code of layout 2 refuses.
SCHEMA_VERSION = 3
#: A row's one column, in C: a cold load reads every record row.
_FIRST = itemgetter(0)
_PRIVATE = ("", ":memory:")  # names of databases no other connection can see
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS guardrail_session ("
    " session_id TEXT PRIMARY KEY, created INTEGER NOT NULL, version INTEGER NOT NULL,"
    " meta TEXT, meta_version INTEGER NOT NULL DEFAULT 0, written REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS guardrail_record ("
    " session_id TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,"
    " version INTEGER NOT NULL, record TEXT NOT NULL,"
    " PRIMARY KEY (session_id, kind, key)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS guardrail_record_version ON guardrail_record (session_id, version)",
    "CREATE INDEX IF NOT EXISTS guardrail_session_written ON guardrail_session (written)",
)


class SQLiteStore:
    """Sessions in one SQLite file: a row per identifier, written in WAL mode.

    ``path`` is the database file (``":memory:"`` for a private database
    that lives as long as the store). Each write is one transaction: all of
    a scope's changes (a result's ids and the evictions they caused) or
    none, so a process killed mid-write leaves the session as it was. Any
    number of threads, guards and processes of one machine may share the
    file; rows written since a writer last read are merged, not overwritten
    (see :func:`~guardrail.stores.protocol.merge_record`). A file deleted or replaced
    while the store is open, or locked past ``timeout`` seconds, is a
    :class:`StoreError`, as is any other failure, naming the store. Text a
    JSON request gave (a lone surrogate in an id, a status or the user's
    text) is stored so that it reads back as given. A file written by an
    earlier version (one JSON row per session) is converted the first time
    it is opened.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 5.0, ttl: float | None = None
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise GuardrailUsageError(
                f"path is the database file (a str or os.PathLike), not {type(path).__name__}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise GuardrailUsageError(
                f"timeout is how many seconds to wait for a locked database (>= 0), not {timeout!r}"
            )
        self.path = os.fspath(path)
        self.timeout = float(timeout)
        self.ttl = checked_ttl(ttl)
        self._lock = threading.Lock()
        self._missing: str | None = None
        try:
            self._db = sqlite3.connect(
                self.path, timeout=self.timeout, check_same_thread=False, isolation_level=None
            )
        except sqlite3.Error as exc:
            raise StoreError(
                f"{self!r}: cannot open the session database: {exc}; check the path and "
                "its permissions"
            ) from exc
        try:
            self._open()
        except sqlite3.Error as exc:
            self._db.close()
            if _busy(exc):
                raise StoreError(
                    f"{self!r}: cannot open the session database: it stayed locked by other "
                    f"connections for {self.timeout:g}s while this store set it up ({exc}): "
                    "other processes are creating or converting it, or one holds a long "
                    "write. Retry, or build the store with a longer timeout "
                    "(SQLiteStore(path, timeout=...))"
                ) from exc
            raise StoreError(
                f"{self!r}: cannot open the session database: {exc}; check the path and "
                "its permissions"
            ) from exc
        self._identity = self._stat()

    def _open(self) -> None:
        """Set the file up (WAL, tables), retrying while other connections hold it, up to timeout.

        Switching a new file to WAL takes an exclusive lock and gives up at once, without
        the busy timeout, when another process is setting up the same file: several
        processes opening one new file at the same moment must take turns here.
        """
        deadline = time.monotonic() + self.timeout
        for attempt in itertools.count(1):
            try:
                # A new file gives the pages of deleted sessions back to the file system
                # (incremental_vacuum after expiry); a file with tables already keeps its mode.
                self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self._db.execute("PRAGMA journal_mode=WAL")
                # Durable at checkpoints, atomic always.
                self._db.execute("PRAGMA synchronous=NORMAL")
                with self._transaction():
                    self._missing = self._install()
            except sqlite3.OperationalError as exc:
                left = deadline - time.monotonic()
                if not _busy(exc) or left <= 0:
                    raise
                time.sleep(min(left, 0.002 * attempt, 0.05))
            else:
                return

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- the protocol -------------------------------------------------------------------------

    def load(self, session_id: str) -> Snapshot | None:
        """The whole session, or None."""
        with self._lock:
            self._check_file(session_id, "load")
            try:
                with self._transaction(write=False):
                    head = self._head(session_id)
                    snapshot = (
                        None if head is None else self._read(session_id, head, 0, complete=True)
                    )
                if snapshot is None:
                    self._drop_expired(session_id)
            except sqlite3.Error as exc:
                raise self._failed("load", session_id, exc) from exc
            except ValueError as exc:
                raise damaged(
                    repr(self), session_id, f"a stored row is not one JSON record ({exc})"
                ) from exc
            return snapshot

    def apply(self, session_id: str, change: Change) -> Written:
        """Write ``change`` in one transaction, merging rows written since ``change.base``."""
        # Every record as text before the transaction: a bad one changes nothing.
        try:
            rows = [
                (_column(r["kind"]), _column(r["key"]), encode_record(r)) for r in change.records
            ]
            meta_text = None if change.meta is None else encode(change.meta)
        except (TypeError, ValueError, KeyError) as exc:
            raise StoreError(
                f"{self!r}: session {session_id!r} was not written: a record or the meta "
                f"cannot be stored as JSON ({exc}); nothing of the change was written",
                session_id=session_id,
            ) from exc
        with self._lock:
            self._check_file(session_id, "write")
            try:
                with self._transaction():
                    return self._apply(session_id, change, rows, meta_text)
            except sqlite3.Error as exc:
                raise self._failed("write", session_id, exc) from exc
            except ValueError as exc:  # a stored row it had to merge with
                raise damaged(
                    repr(self), session_id, f"a stored row is not one JSON record ({exc})"
                ) from exc

    def changes_since(self, session_id: str, version: int) -> Snapshot | None:
        """None if the session is still at ``version``; else what was written since."""
        with self._lock:
            self._check_file(session_id, "read")
            try:
                head = self._head(session_id)  # the usual answer: one indexed look-up
                if head is None:
                    self._drop_expired(session_id)
                    return None if version == 0 else Snapshot(0)
                if head[1] == version:
                    return None
                with self._transaction(write=False):
                    head = self._head(session_id)
                    if head is None:
                        return Snapshot(0)
                    if head[0] >= version:  # started (again) after that version
                        return self._read(session_id, head, 0, complete=True)
                    return self._read(session_id, head, version, complete=False)
            except sqlite3.Error as exc:
                raise self._failed("read", session_id, exc) from exc
            except ValueError as exc:
                raise damaged(
                    repr(self), session_id, f"a stored row is not one JSON record ({exc})"
                ) from exc

    def delete(self, session_id: str) -> None:
        """Forget a session."""
        with self._lock:
            self._check_file(session_id, "delete")
            try:
                with self._transaction():
                    self._delete(session_id)
            except sqlite3.Error as exc:
                raise self._failed("delete", session_id, exc) from exc

    def expire(self, max_idle: float) -> list[str]:
        """Delete the sessions no one wrote for ``max_idle`` seconds; their ids."""
        cutoff = time.time() - max_idle
        with self._lock:
            self._check_file("*", "expire")
            try:
                with self._transaction():
                    idle = [
                        _text(row[0])
                        for row in self._db.execute(
                            "SELECT session_id FROM guardrail_session WHERE written <= ?"
                            " ORDER BY written",
                            (cutoff,),
                        )
                    ]
                    for session_id in idle:
                        self._delete(session_id)
                if idle:
                    self._vacuum()
            except sqlite3.Error as exc:
                raise self._failed("expire", "*", exc) from exc
        return idle

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def stored_bytes(self) -> int:
        """The size of the database file and its write-ahead log, in bytes (0 for ":memory:")."""
        if self.path in _PRIVATE:
            return 0
        return sum(
            os.path.getsize(name)
            for name in (self.path, self.path + "-wal")
            if os.path.exists(name)
        )

    # -- internals ----------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[None]:
        """One transaction; a write one takes the write lock first, so no one writes in between."""
        db = self._db
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _head(self, session_id: str) -> tuple[int, int] | None:
        """``(created, version)`` of a session, or None (for one past its ttl too)."""
        row = self._db.execute(
            "SELECT created, version, written FROM guardrail_session WHERE session_id = ?",
            (_column(session_id),),
        ).fetchone()
        if row is None or (self.ttl is not None and row[2] <= time.time() - self.ttl):
            return None
        return (row[0], row[1])

    def _drop_expired(self, session_id: str) -> bool:
        """Delete a session past its ttl (in a write transaction); whether it was one."""
        if self.ttl is None:
            return False
        with self._transaction():
            row = self._db.execute(
                "SELECT written FROM guardrail_session WHERE session_id = ?",
                (_column(session_id),),
            ).fetchone()
            if row is None or row[0] > time.time() - self.ttl:
                return False
            self._delete(session_id)
        return True

    def _sweep(self) -> int:
        """Delete a few sessions past their ttl (the oldest; a write's bounded share of them)."""
        if self.ttl is None:
            return 0
        idle = [
            _text(row[0])
            for row in self._db.execute(
                "SELECT session_id FROM guardrail_session WHERE written <= ?"
                " ORDER BY written LIMIT ?",
                (time.time() - self.ttl, _SWEPT_PER_WRITE),
            )
        ]
        for session_id in idle:
            self._delete(session_id)
        return len(idle)

    def _vacuum(self) -> None:
        """Give the pages of deleted sessions back to the file system (auto_vacuum files)."""
        self._db.execute("PRAGMA incremental_vacuum")

    def _read(
        self, session_id: str, head: tuple[int, int], since: int, *, complete: bool
    ) -> Snapshot:
        db = self._db
        sid = _column(session_id)
        # A whole session is read in key order, along the table's own primary key: five times
        # faster at 10,000 rows than through the version index, which looks up every row again.
        rows = (
            db.execute("SELECT record FROM guardrail_record WHERE session_id = ?", (sid,))
            if since == 0
            else db.execute(
                "SELECT record FROM guardrail_record WHERE session_id = ? AND version > ?",
                (sid, since),
            )
        )
        records = decode_rows(list(map(_FIRST, rows)))
        meta_text, meta_version = db.execute(
            "SELECT meta, meta_version FROM guardrail_session WHERE session_id = ?", (sid,)
        ).fetchone()
        meta: Meta | None = None
        if meta_text is not None and meta_version > since:
            meta = decode(meta_text)
        return Snapshot(head[1], records, meta, complete)

    def _apply(
        self,
        session_id: str,
        change: Change,
        rows: list[tuple[str | bytes, str | bytes, str]],
        meta_text: str | None,
    ) -> Written:
        db = self._db
        sid = _column(session_id)
        head = self._head(session_id)
        if head is None and self.ttl is not None:
            self._delete(session_id)  # past its ttl: gone, as if expired by a sweep
        if stale_base(change.base, None if head is None else head[0]):
            raise deleted(repr(self), session_id)
        if head is None:
            created = first_version() - 1
            version = created + 1
            alone = True
            db.execute(
                "INSERT INTO guardrail_session (session_id, created, version, written)"
                " VALUES (?, ?, ?, ?)",
                (sid, created, created, time.time()),
            )
        else:
            version = head[1] + 1
            alone = head[1] == change.base
        if not alone:  # rows someone else wrote since the writer's base: merged, not replaced
            newer = {
                (kind, key): text
                for kind, key, text in db.execute(
                    "SELECT kind, key, record FROM guardrail_record"
                    " WHERE session_id = ? AND version > ?",
                    (sid, change.base),
                )
            }
            if newer:
                by_name = {(_column(r["kind"]), _column(r["key"])): r for r in change.records}
                merged_rows = []
                for kind, key, text in rows:
                    held = newer.get((kind, key))
                    if held is not None:
                        old = decode_record(held)
                        merged = merge_record(old, by_name[kind, key], concurrent=True)
                        text = encode_record(merged)
                    merged_rows.append((kind, key, text))
                rows = merged_rows
        if change.pruned:  # past the writer's bound; a row written since its base stays
            db.executemany(
                "DELETE FROM guardrail_record"
                " WHERE session_id = ? AND kind = ? AND key = ? AND version <= ?",
                [(sid, _column(kind), _column(key), change.base) for kind, key in change.pruned],
            )
        db.executemany(
            "INSERT OR REPLACE INTO guardrail_record (session_id, kind, key, version, record)"
            " VALUES (?, ?, ?, ?, ?)",
            [(sid, kind, key, version, text) for kind, key, text in rows],
        )
        if change.meta is not None and meta_text is not None:
            held_meta = db.execute(
                "SELECT meta FROM guardrail_session WHERE session_id = ? AND meta_version > ?",
                (sid, change.base),
            ).fetchone()
            if held_meta is not None and held_meta[0] is not None:
                merged_meta = merge_meta(decode(held_meta[0]), change.meta, concurrent=True)
                meta_text = encode(merged_meta)
            db.execute(
                "UPDATE guardrail_session SET meta = ?, meta_version = ? WHERE session_id = ?",
                (meta_text, version, sid),
            )
        db.execute(
            "UPDATE guardrail_session SET version = ?, written = ? WHERE session_id = ?",
            (version, time.time(), sid),
        )
        self._sweep()
        return Written(version, alone)

    def _delete(self, session_id: str) -> None:
        sid = _column(session_id)
        self._db.execute("DELETE FROM guardrail_record WHERE session_id = ?", (sid,))
        self._db.execute("DELETE FROM guardrail_session WHERE session_id = ?", (sid,))

    def _install(self) -> str | None:
        """Create the tables of a new file, or check those of a used one; what is missing.

        The file's ``user_version`` is its layout (:data:`SCHEMA_VERSION`; 0 in a
        new file and in files of versions that did not number it). A file of a
        newer layout is refused; tables missing from a used file are damage, never
        created anew empty (which would open every session as new): the name of
        the missing table is returned, and every call raises a StoreError naming it.
        """
        db = self._db
        installed = db.execute("PRAGMA user_version").fetchone()[0]
        if installed > SCHEMA_VERSION:
            raise StoreError(
                f"{self!r}: the database was written by a newer guardrail (layout "
                f"{installed}; this one knows {SCHEMA_VERSION}): upgrade guardrail-ids in this "
                "program, or open another file"
            )
        tables = {
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        ours = {"guardrail_session", "guardrail_record"}
        if installed or tables & ours:  # a used file: its tables must all be there
            missing = sorted(ours - tables)
            if missing:
                return ", ".join(missing)
        for statement in _SCHEMA:
            db.execute(statement)
        self._migrate()
        if installed != SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return None

    def _migrate(self) -> None:
        """Convert the one-JSON-row-per-session table of earlier versions, once, then drop it."""
        db = self._db
        old = db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'guardrail_sessions'"
        ).fetchone()
        if old is None:
            return
        from guardrail.ledger import Ledger  # the ledger's own conversion: only for old files
        from guardrail.ledger._ledger import state_of
        from guardrail.ledger._records import meta_of, records

        for session_id, text in db.execute(
            "SELECT session_id, ledger FROM guardrail_sessions"
        ).fetchall():
            try:
                ledger = Ledger.from_json(text)
            except GuardrailUsageError as exc:
                raise StoreError(
                    f"session {session_id!r} in {self.path!r} (a file of an earlier version, "
                    f"being converted) is not a saved ledger: {exc}. Delete that row "
                    "(DELETE FROM guardrail_sessions WHERE session_id = ...) or fix it, "
                    "then open the store again; nothing was converted",
                    session_id=session_id,
                ) from None
            state = state_of(ledger)
            found, meta = records(state), meta_of(state)
            rows = [(_column(r["kind"]), _column(r["key"]), encode_record(r)) for r in found]
            self._apply(session_id, Change(0, found, meta), rows, encode(meta))
        db.execute("DROP TABLE guardrail_sessions")

    def _stat(self) -> tuple[int, int] | None:
        """The file's device and inode, or None for a private database or a missing file."""
        if self.path in _PRIVATE:
            return None
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return (info.st_dev, info.st_ino)

    def _check_file(self, session_id: str, action: str) -> None:
        """Refuse to read or write a file that lost a table, is gone or was replaced."""
        if self._missing is not None:
            raise StoreError(
                f"{self!r}: session {session_id!r} could not {action}: the table "
                f"{self._missing} is missing from the database (dropped, or the file is "
                "damaged), and the sessions it held are lost. Restore the file from a backup, "
                "or delete it to start with no sessions",
                session_id=session_id,
            )
        if self._identity is None:
            return
        now = self._stat()
        if now == self._identity:
            return
        what = "deleted" if now is None else "replaced by another file"
        raise StoreError(
            f"{self!r}: session {session_id!r} could not {action}: the database was {what} "
            "while the store was open, and using it would lose the session. Restore the file, "
            "or open a new SQLiteStore on the path; the guard's cached ledgers keep what "
            "was not written, and the next scope's end writes it.",
            session_id=session_id,
        )

    def _failed(self, action: str, session_id: str, exc: sqlite3.Error) -> StoreError:
        """A database error as a StoreError that names the store and session and says what to do."""
        if _busy(exc):
            advice = (
                "the database stayed locked by another connection for "
                f"{self.timeout:g}s; retry, or build the store with a longer timeout "
                "(SQLiteStore(path, timeout=...))"
            )
        else:
            advice = f"the database failed: {exc}; check the file and its disk"
        return StoreError(
            f"{self!r}: session {session_id!r} could not {action}: {advice}",
            session_id=session_id,
        )


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite failed because another connection held the database."""
    return "locked" in str(exc) or "busy" in str(exc)


def _column(text: str) -> str | bytes:
    """A session id, kind or key as the database holds it.

    Text, as a rule; text holding a lone surrogate, which SQLite's UTF-8 cannot
    hold, as its bytes (``surrogatepass``): a BLOB, which no TEXT value equals,
    so it names no other id.
    """
    return text.encode("utf-8", "surrogatepass") if has_surrogates(text) else text


def _text(value: str | bytes) -> str:
    """A session id as :func:`_column` stored it."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value
