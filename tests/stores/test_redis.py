"""RedisStore: the store conformance suite on a real Redis, and what only Redis has."""

from __future__ import annotations

import functools

import pytest

from guardrail.stores._redis import RedisStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory


@pytest.fixture
def store_factory(redis_url: str, redis_prefix: str) -> StoreFactory:
    """Stores with clients of their own, one prefix: the same sessions, in any process."""
    return StoreFactory(functools.partial(RedisStore.from_url, redis_url, prefix=redis_prefix))
