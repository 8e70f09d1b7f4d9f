"""The ``damage`` and ``age`` fixtures of the Redis stores' tests, sync and async alike.

Both reach the session's keys through a client of the test's own, never through the
store under test (an async store's keys are the same as a sync store's on its prefix).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from guardrail.stores._redis import RedisStore

from . import damage as damages


def _prefix(store: Any) -> str:
    """The prefix of a store, or of the store a sync-over-async wrapper holds."""
    return str(getattr(store, "store", store).prefix)


@pytest.fixture
def damage(redis_url: str) -> Iterator[Callable[[Any, str, str], None]]:
    """Damages a session through a client of the test's own."""
    made = redis.Redis.from_url(redis_url)

    def hurt(store: Any, session_id: str, how: str) -> None:
        damages.redis(RedisStore(made, prefix=_prefix(store)), session_id, how)

    yield hurt
    made.close()


@pytest.fixture
def age(redis_url: str) -> Iterator[Callable[[Any, str, float], None]]:
    """Ages a session through a client of the test's own."""
    made = redis.Redis.from_url(redis_url)

    def older(store: Any, session_id: str, seconds: float) -> None:
        damages.age_redis(RedisStore(made, prefix=_prefix(store)), session_id, seconds)

    yield older
    made.close()
