"""AsyncPostgresStore: the store conformance suite, run through a loop of its own."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from guardrail.stores._postgres import AsyncPostgresStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
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
