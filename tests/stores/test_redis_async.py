"""AsyncRedisStore: the store conformance suite, run through a loop of its own."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from guardrail.stores._redis import AsyncRedisStore, RedisStore

from . import damage as damages
from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
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


@pytest.fixture
def damage(redis_url: str) -> Iterator[Callable[[Any, str, str], None]]:
    """Damages a session through a client of the test's own."""
    made = redis.Redis.from_url(redis_url)

    def hurt(store: Any, session_id: str, how: str) -> None:
        damages.redis(
            RedisStore(made, prefix=getattr(store, "store", store).prefix), session_id, how
        )

    yield hurt
    made.close()


@pytest.fixture
def age(redis_url: str) -> Iterator[Callable[[Any, str, float], None]]:
    """Ages a session through a client of the test's own."""
    made = redis.Redis.from_url(redis_url)

    def older(store: Any, session_id: str, seconds: float) -> None:
        prefix = getattr(store, "store", store).prefix
        damages.age_redis(RedisStore(made, prefix=prefix), session_id, seconds)

    yield older
    made.close()
