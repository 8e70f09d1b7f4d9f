"""SQLiteStore passes the store conformance suite, over a file shared by processes."""

from __future__ import annotations

import functools
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from guardrail.errors import StoreError
from guardrail.stores import Change, SQLiteStore

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory, live, meta
from .conformance_processes import *  # noqa: F403  (the multi-process tests)


@pytest.fixture
def store_factory(tmp_path: Path) -> StoreFactory:
    """Stores on one file: each call is a new connection, in this process or another."""
    return StoreFactory(functools.partial(SQLiteStore, tmp_path / "sessions.sqlite3"))


def test_a_row_that_is_not_json_is_a_store_error_naming_the_store(tmp_path: Path) -> None:
    """A damaged record row stops the session with a StoreError naming the file, not a crash."""
    path = tmp_path / "sessions.sqlite3"
    store = SQLiteStore(path)
    store.apply("s", Change(0, [live("W1")], meta()))
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE guardrail_record SET record = '{not json' WHERE session_id = 's'")
    with pytest.raises(StoreError, match=r"SQLiteStore\('.*'\): session 's' holds bad data"):
        store.load("s")
    with pytest.raises(StoreError, match="holds bad data"):
        store.changes_since("s", 0)
    with pytest.raises(StoreError, match="holds bad data"):  # a write that must merge with it
        store.apply("s", Change(0, [live("W1", turn=3)]))
    store.close()
