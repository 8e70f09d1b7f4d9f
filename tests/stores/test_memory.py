"""MemoryStore passes the store conformance suite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guardrail.stores import MemoryStore

from . import damage as damages
from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
from .conformance_ttl import *  # noqa: F403  (the ttl tests)


@pytest.fixture
def store_factory() -> StoreFactory:
    """Every store of a test is the same MemoryStore: memory is not shared between processes."""
    shared = MemoryStore()
    return StoreFactory(lambda: shared)


@pytest.fixture
def ttl_store_factory(store_factory: StoreFactory) -> StoreFactory:
    """A MemoryStore with ttl=60 over the sessions store_factory's store holds.

    Memory is one process's: the two stores share the one dict of sessions and its lock.
    """
    plain = store_factory()
    assert isinstance(plain, MemoryStore)

    def build() -> MemoryStore:
        store = MemoryStore(ttl=60)
        store._sessions, store._lock = plain._sessions, plain._lock
        return store

    return StoreFactory(build)


@pytest.fixture
def damage() -> Callable[[Any, str, str], None]:
    """Damages a session in the store's own dict of rows."""
    return damages.memory


@pytest.fixture
def age() -> Callable[[Any, str, float], None]:
    """Ages a session in the store's own dict."""
    return damages.age_memory
