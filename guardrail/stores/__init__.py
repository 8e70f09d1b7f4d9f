"""Where sessions live between calls: in memory (the default) or in SQLite."""

from guardrail.stores._memory import MemoryStore
from guardrail.stores._protocol import Store
from guardrail.stores._sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store"]
