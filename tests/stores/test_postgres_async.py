"""AsyncPostgresStore: the store conformance suite, run through a loop of its own."""

from __future__ import annotations

import functools

import pytest

from guardrail.stores._postgres import AsyncPostgresStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
from .syncover import SyncOverAsync


@pytest.fixture
def store_factory(postgres_dsn: str, postgres_schema: str) -> StoreFactory:
    """Async stores, each on a loop thread of its own behind the sync protocol; one schema."""
    build = functools.partial(AsyncPostgresStore, postgres_dsn, schema=postgres_schema)
    return StoreFactory(functools.partial(SyncOverAsync, build))
