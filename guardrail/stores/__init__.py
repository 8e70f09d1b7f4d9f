"""Where sessions live between calls: in memory (the default) or in SQLite."""

from guardrail.stores.memory import MemoryStore, Store
from guardrail.stores.sqlite import SQLiteStore

__all__ = ["MemoryStore", "SQLiteStore", "Store"]
