"""PostgresStore: the store conformance suite on a real PostgreSQL, and what only it has."""

from __future__ import annotations

import functools

import pytest

from guardrail.stores._postgres import PostgresStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory


@pytest.fixture
def store_factory(postgres_dsn: str, postgres_schema: str) -> StoreFactory:
    """Stores with pools of their own, one schema: the same sessions, in any process."""
    return StoreFactory(functools.partial(PostgresStore, postgres_dsn, schema=postgres_schema))
