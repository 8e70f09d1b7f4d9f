"""MemoryStore passes the store conformance suite."""

from __future__ import annotations

import pytest

from guardrail.stores import MemoryStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory


@pytest.fixture
def store_factory() -> StoreFactory:
    """Every store of a test is the same MemoryStore: memory is not shared between processes."""
    shared = MemoryStore()
    return StoreFactory(lambda: shared)
