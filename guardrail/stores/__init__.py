"""Where sessions live between calls: in memory (the default), SQLite, Redis or PostgreSQL.

A store keeps each session as one record per identifier and a little meta;
the guard keeps the sessions it uses cached as live ledgers and writes only
what changed. Writing a store of one's own: :mod:`guardrail.stores.protocol`.

Inside: ``protocol`` (public, for store authors), ``_json`` (records as
JSON text), ``_memory``, ``_sqlite``, ``_redis`` (its scripts in
``_redis_lua``) and ``_postgres`` (on ``_postgres_base``, its SQL in
``_postgres_sql``); ``_steps`` runs a sequence the sync and the asyncio
class of a server store share; ``_deadline`` cuts off a call the network
leaves waiting past its bound.

Imports: :mod:`guardrail.ledger` and the plain data below it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from guardrail.stores._memory import MemoryStore
from guardrail.stores.protocol import AsyncStore, Store, ThreadedAsyncStore

if TYPE_CHECKING:
    from guardrail.stores._postgres import AsyncPostgresStore, PostgresStore
    from guardrail.stores._redis import AsyncRedisStore, RedisStore
    from guardrail.stores._sqlite import SQLiteStore

#: Stores imported on first use: sqlite3 is a C extension ``import guardrail`` need not load,
#: and the server stores need their client, an optional extra.
_LAZY = {
    "SQLiteStore": "guardrail.stores._sqlite",
    "RedisStore": "guardrail.stores._redis",
    "AsyncRedisStore": "guardrail.stores._redis",
    "PostgresStore": "guardrail.stores._postgres",
    "AsyncPostgresStore": "guardrail.stores._postgres",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'guardrail.stores' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "AsyncStore",
    "MemoryStore",
    "PostgresStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "ThreadedAsyncStore",
]
