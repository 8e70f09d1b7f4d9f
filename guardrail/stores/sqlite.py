"""A SQLite store: sessions that survive the process, embedded, no server."""

from __future__ import annotations

import os
import sqlite3
import threading

from guardrail.ledger import Ledger


class SQLiteStore:
    """Ledgers saved as JSON rows in one SQLite file (``":memory:"`` for a private database).

    A ledger is read when a session scope opens and written when it ends,
    so one conversation served by several processes in turn sees one
    ledger. Concurrent scopes of one session in different processes are
    last-writer-wins; use one worker per conversation at a time.
    """

    def __init__(self, path: str | os.PathLike[str] = "guardrail-sessions.sqlite3") -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS guardrail_sessions ("
            " session_id TEXT PRIMARY KEY, ledger TEXT NOT NULL,"
            " updated REAL NOT NULL DEFAULT (julianday('now')))"
        )

    def load(self, session_id: str) -> Ledger | None:
        with self._lock:
            row = self._db.execute(
                "SELECT ledger FROM guardrail_sessions WHERE session_id = ?", (session_id,)
            ).fetchone()
        return None if row is None else Ledger.from_json(row[0])

    def save(self, session_id: str, ledger: Ledger) -> None:
        text = ledger.to_json()
        with self._lock:
            self._db.execute(
                "INSERT INTO guardrail_sessions (session_id, ledger) VALUES (?, ?) "
                "ON CONFLICT(session_id) DO UPDATE SET ledger = excluded.ledger, "
                "updated = julianday('now')",
                (session_id, text),
            )

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM guardrail_sessions WHERE session_id = ?", (session_id,))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
