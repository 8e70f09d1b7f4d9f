"""Where sessions live between calls: in memory (the default) or in SQLite.

A store keeps each session as one record per identifier and a little meta
(see :class:`Store`); the guard keeps the sessions it uses cached as live
ledgers and writes only what changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardrail.stores._memory import MemoryStore
from guardrail.stores._protocol import (
    AsyncStore,
    Change,
    Meta,
    Record,
    Snapshot,
    Store,
    ThreadedAsyncStore,
    first_version,
    merge_meta,
    merge_record,
)

if TYPE_CHECKING:
    from guardrail.stores._sqlite import SQLiteStore


def __getattr__(name: str) -> Any:
    # SQLiteStore on first use: sqlite3 is a C extension ``import guardrail`` need not load.
    if name != "SQLiteStore":
        raise AttributeError(f"module 'guardrail.stores' has no attribute {name!r}")
    from guardrail.stores._sqlite import SQLiteStore

    return SQLiteStore


__all__ = [
    "AsyncStore",
    "Change",
    "MemoryStore",
    "Meta",
    "Record",
    "SQLiteStore",
    "Snapshot",
    "Store",
    "ThreadedAsyncStore",
    "first_version",
    "merge_meta",
    "merge_record",
]
