"""AsyncRedisStore: the store conformance suite, run through a loop of its own."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

from guardrail.stores._redis import AsyncRedisStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
from .redis_fixtures import age, damage  # noqa: F401  (fixtures)
from .syncover import SyncOverAsync


@pytest.fixture
def store_factory(redis_url: str, redis_prefix: str) -> Iterator[StoreFactory]:
    """Async stores, each on a loop thread of its own behind the sync protocol, closed after.

    The suite's tests with worker processes run on the sync store: these stores run
    threads, which a forked worker must not inherit, and they keep the same data.
    """
    built: list[SyncOverAsync] = []

    def build() -> SyncOverAsync:
        store = SyncOverAsync(
            functools.partial(AsyncRedisStore.from_url, redis_url, prefix=redis_prefix)
        )
        built.append(store)
        return store

    yield StoreFactory(build)
    for store in built:
        store.close()
