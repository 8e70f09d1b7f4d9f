"""SQLiteStore passes the store conformance suite, over a file shared by processes."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from guardrail.stores import SQLiteStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory
from .conformance_processes import *  # noqa: F403  (the multi-process tests)


@pytest.fixture
def store_factory(tmp_path: Path) -> StoreFactory:
    """Stores on one file: each call is a new connection, in this process or another."""
    return StoreFactory(functools.partial(SQLiteStore, tmp_path / "sessions.sqlite3"))
