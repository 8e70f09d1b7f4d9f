"""MemoryStore passes the store conformance suite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guardrail.stores import MemoryStore

from . import damage as damages
from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory


@pytest.fixture
def store_factory() -> StoreFactory:
    """Every store of a test is the same MemoryStore: memory is not shared between processes."""
    shared = MemoryStore()
    return StoreFactory(lambda: shared)


@pytest.fixture
def damage() -> Callable[[Any, str, str], None]:
    """Damages a session in the store's own dict of rows."""
    return damages.memory


@pytest.fixture
def age() -> Callable[[Any, str, float], None]:
    """Ages a session in the store's own dict."""
    return damages.age_memory
