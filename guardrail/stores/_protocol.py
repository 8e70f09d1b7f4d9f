"""The store protocol: what a place that keeps ledgers between calls must do."""

from __future__ import annotations

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
