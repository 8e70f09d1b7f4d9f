"""Where sessions live between calls: in memory (the default) or in SQLite."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guardrail.stores._memory import MemoryStore
from guardrail.stores._protocol import Store

if TYPE_CHECKING:
    from guardrail.stores._sqlite import SQLiteStore


def __getattr__(name: str) -> Any:
    # SQLiteStore on first use: sqlite3 is a C extension ``import guardrail`` need not load.
    if name != "SQLiteStore":
        raise AttributeError(f"module 'guardrail.stores' has no attribute {name!r}")
    from guardrail.stores._sqlite import SQLiteStore

    return SQLiteStore


__all__ = ["MemoryStore", "SQLiteStore", "Store"]
