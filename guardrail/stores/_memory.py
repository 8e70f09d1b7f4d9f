"""The in-memory store: live ledger objects, shared by every scope of a session."""

from __future__ import annotations

import threading

from guardrail.ledger import Ledger


class MemoryStore:
    """Ledgers kept as live objects in this process (the default).

    Two scopes of the same session id, in any thread or task, share one
    ledger object. Saving a different ledger object for a held session (one
    passed as ``ledger=``, or a second guard's) merges it into the held one.
    """

    def __init__(self) -> None:
        self._ledgers: dict[str, Ledger] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str) -> Ledger | None:
        return self._ledgers.get(session_id)

    def save(self, session_id: str, ledger: Ledger) -> None:
        with self._lock:
            held = self._ledgers.setdefault(session_id, ledger)
        if held is not ledger:
            held.merge(ledger)

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._ledgers.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._ledgers)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._ledgers
