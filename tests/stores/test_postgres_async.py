"""AsyncPostgresStore: the store conformance suite, run through a loop of its own."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from guardrail.stores._postgres import AsyncPostgresStore

from . import damage as damages
from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
from .conformance_ttl import *  # noqa: F403  (the ttl tests)
from .syncover import SyncOverAsync


@pytest.fixture
def store_factory(postgres_dsn: str, postgres_schema: str) -> Iterator[StoreFactory]:
    """Async stores, each on a loop thread of its own behind the sync protocol, closed after.

    The suite's tests with worker processes run on the sync store: these stores run
    threads, which a forked worker must not inherit, and they keep the same data.
    """
    built: list[SyncOverAsync] = []

    def build() -> SyncOverAsync:
        store = SyncOverAsync(
            functools.partial(AsyncPostgresStore, postgres_dsn, schema=postgres_schema)
        )
        built.append(store)
        return store

    yield StoreFactory(build)
    for store in built:
        store.close()


@pytest.fixture
def ttl_store_factory(postgres_dsn: str, postgres_schema: str) -> StoreFactory:
    """Async stores with ttl=60, on the schema store_factory uses (closed by the suite)."""
    return StoreFactory(
        lambda: SyncOverAsync(
            functools.partial(AsyncPostgresStore, postgres_dsn, schema=postgres_schema, ttl=60)
        )
    )


@pytest.fixture
def damage(postgres_dsn: str, postgres_schema: str) -> Callable[[Any, str, str], None]:
    """Damages a session through a connection of the test's own."""
    return lambda store, session_id, how: damages.postgres(
        postgres_dsn, postgres_schema, session_id, how
    )


@pytest.fixture
def age(postgres_dsn: str, postgres_schema: str) -> Callable[[Any, str, float], None]:
    """Ages a session through a connection of the test's own."""
    return lambda store, session_id, seconds: damages.age_postgres(
        postgres_dsn, postgres_schema, session_id, seconds
    )
