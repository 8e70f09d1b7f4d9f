"""The store protocol and the in-memory store."""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from guardrail.ledger import Ledger


@runtime_checkable
class Store(Protocol):
    """Keeps ledgers by session id.

    ``load`` returns the saved ledger or ``None``; ``save`` is called when a
    session scope ends (and after each change to a guard's default session);
    ``delete`` forgets a session. A ``save`` must not lose what the store
    already holds for that id from another writer: merge the two
    (:meth:`Ledger.merge`) when the held one is not the one being saved.
    """

    def load(self, session_id: str) -> Ledger | None: ...

    def save(self, session_id: str, ledger: Ledger) -> None: ...

    def delete(self, session_id: str) -> None: ...


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
