"""AsyncRedisStore: the store conformance suite, run through a loop of its own."""

from __future__ import annotations

import functools

import pytest

from guardrail.stores._redis import AsyncRedisStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
from .syncover import SyncOverAsync


@pytest.fixture
def store_factory(redis_url: str, redis_prefix: str) -> StoreFactory:
    """Async stores, each on a loop thread of its own behind the sync protocol; one prefix."""
    build = functools.partial(AsyncRedisStore.from_url, redis_url, prefix=redis_prefix)
    return StoreFactory(functools.partial(SyncOverAsync, build))
