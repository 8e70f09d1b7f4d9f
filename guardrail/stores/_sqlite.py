"""A SQLite store: sessions that survive the process, embedded, no server."""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref

from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.ledger import Ledger

_PRIVATE = ("", ":memory:")  # names of databases no other connection can see


class SQLiteStore:
    """Ledgers saved as JSON rows in one SQLite file (``":memory:"`` for a private database).

    A ledger is read when a session opens and written when a scope ends.
    Saving never loses what another writer saved: in one write transaction
    the row is read back, and if someone else wrote it since this ledger
    was read, the two are merged (:meth:`Ledger.merge`) before writing.
    So several processes (or guards) serving one conversation at once lose
    no entry, though two of them naming new ids at the same moment may see
    one of those ids renamed (``order_3`` becomes ``order_4``, say). With no
    other writer the row is simply replaced, so forgetting and unpinning
    persist. A file deleted or replaced while the store is open, or a
    database locked past ``timeout`` seconds, is a :class:`StoreError`.
    """

    def __init__(
        self, path: str | os.PathLike[str] = "guardrail-sessions.sqlite3", *, timeout: float = 5.0
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise GuardrailUsageError(
                f"timeout is how many seconds to wait for a locked database (>= 0), not {timeout!r}"
            )
        self.path = os.fspath(path)
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        #: id(ledger) -> {session id: the row version that ledger was read from or wrote}.
        self._versions: dict[int, dict[str, int]] = {}
        try:
            self._db = sqlite3.connect(
                self.path, timeout=self.timeout, check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS guardrail_sessions ("
                " session_id TEXT PRIMARY KEY, ledger TEXT NOT NULL,"
                " updated REAL NOT NULL DEFAULT (julianday('now')),"
                " version INTEGER NOT NULL DEFAULT 0)"
            )
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(guardrail_sessions)")}
            if "version" not in columns:  # a file written before versions were kept
                self._db.execute(
                    "ALTER TABLE guardrail_sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0"
                )
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot open the session database {self.path!r}: {exc}; check the path and "
                "its permissions"
            ) from exc
        self._identity = self._stat()

    # -- the protocol -------------------------------------------------------------------------

    def load(self, session_id: str) -> Ledger | None:
        """The saved ledger of ``session_id``, checked field by field, or None."""
        with self._lock:
            self._check_file(session_id, "load")
            try:
                row = self._db.execute(
                    "SELECT ledger, version FROM guardrail_sessions WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
            except sqlite3.Error as exc:
                raise self._failed("load", session_id, exc) from exc
        if row is None:
            return None
        ledger = self._parse(session_id, row[0])
        with self._lock:
            self._remember(ledger, session_id, row[1])
        return ledger

    def save(self, session_id: str, ledger: Ledger) -> None:
        """Write ``ledger``, merged with the saved row if another writer changed it since."""
        text = ledger.to_json()  # before the write lock: the longest step holds no one up
        with self._lock:
            self._check_file(session_id, "save")
            seen = self._versions.get(id(ledger), {}).get(session_id)
            try:
                version, merged = self._write(session_id, ledger, text, seen)
            except sqlite3.Error as exc:
                raise self._failed("save", session_id, exc) from exc
            if merged:
                # The row now holds more than this ledger: its next save must merge again.
                self._versions.get(id(ledger), {}).pop(session_id, None)
            else:
                self._remember(ledger, session_id, version)

    def delete(self, session_id: str) -> None:
        """Forget a session."""
        with self._lock:
            self._check_file(session_id, "delete")
            try:
                self._db.execute(
                    "DELETE FROM guardrail_sessions WHERE session_id = ?", (session_id,)
                )
            except sqlite3.Error as exc:
                raise self._failed("delete", session_id, exc) from exc

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # -- internals ----------------------------------------------------------------------------

    def _write(
        self, session_id: str, ledger: Ledger, text: str, seen: int | None
    ) -> tuple[int, bool]:
        """One write transaction: the row's new version, and whether it was merged."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")  # the write lock first: nobody writes between read and write
        try:
            row = db.execute(
                "SELECT version FROM guardrail_sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
            merged = False
            if row is None:
                version = 1
                db.execute(
                    "INSERT INTO guardrail_sessions (session_id, ledger, version) VALUES (?, ?, ?)",
                    (session_id, text, version),
                )
            else:
                version = row[0] + 1
                if row[0] != seen:  # written by someone else since this ledger was read
                    (stored_text,) = db.execute(
                        "SELECT ledger FROM guardrail_sessions WHERE session_id = ?",
                        (session_id,),
                    ).fetchone()
                    stored = self._parse(session_id, stored_text, ledger)
                    stored.merge(ledger)
                    text = stored.to_json()
                    merged = True
                db.execute(
                    "UPDATE guardrail_sessions SET ledger = ?, version = ?,"
                    " updated = julianday('now') WHERE session_id = ?",
                    (text, version, session_id),
                )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return version, merged

    def _parse(self, session_id: str, text: str, like: Ledger | None = None) -> Ledger:
        """A stored row as a ledger; a row that is not a valid ledger names its session."""
        try:
            return Ledger.from_json(text, kinds=like._kinds if like is not None else None)
        except GuardrailUsageError as exc:
            raise GuardrailUsageError(
                f"session {session_id!r} in {self.path!r}: {exc}", tool=exc.tool, param=exc.param
            ) from None

    def _remember(self, ledger: Ledger, session_id: str, version: int) -> None:
        """Note the row version ``ledger`` matches, forgotten when the ledger is."""
        key = id(ledger)
        versions = self._versions.get(key)
        if versions is None:
            versions = self._versions[key] = {}
            weakref.finalize(ledger, self._versions.pop, key, None)
        versions[session_id] = version

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
        """Refuse to read or write through a connection whose file is gone or was replaced."""
        if self._identity is None:
            return
        now = self._stat()
        if now == self._identity:
            return
        what = "deleted" if now is None else "replaced by another file"
        raise StoreError(
            f"session {session_id!r} was not {action}d: the database {self.path!r} was {what} "
            "while the store was open, and writing to it would lose the session. Restore the "
            "file or open a new SQLiteStore on the path, then save the ledger again "
            "(store.save(session_id, ledger)).",
            session_id=session_id,
        )

    def _failed(self, action: str, session_id: str, exc: sqlite3.Error) -> StoreError:
        """A database error as a StoreError that names the session and says what to do."""
        if "locked" in str(exc) or "busy" in str(exc):
            advice = (
                f"the database {self.path!r} stayed locked by another connection for "
                f"{self.timeout:g}s; retry, or build the store with a longer timeout "
                "(SQLiteStore(path, timeout=...))"
            )
        else:
            advice = f"the database {self.path!r} failed: {exc}; check the file and its disk"
        return StoreError(
            f"session {session_id!r} was not {action}d: {advice}", session_id=session_id
        )
