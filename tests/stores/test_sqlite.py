"""SQLiteStore passes the store conformance suite, over a file shared by processes."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from guardrail.errors import StoreError
from guardrail.stores import SQLiteStore
from guardrail.stores._sqlite import SCHEMA_VERSION
from guardrail.stores.protocol import Change

from . import damage as damages
from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory, live, meta
from .conformance_processes import *  # noqa: F403  (the multi-process tests)
from .conformance_ttl import *  # noqa: F403  (the ttl tests)


@pytest.fixture
def store_factory(tmp_path: Path) -> StoreFactory:
    """Stores on one file: each call is a new connection, in this process or another."""
    return StoreFactory(functools.partial(SQLiteStore, tmp_path / "sessions.sqlite3"))


@pytest.fixture
def ttl_store_factory(tmp_path: Path) -> StoreFactory:
    """Stores with ttl=60 on the file store_factory uses."""
    return StoreFactory(functools.partial(SQLiteStore, tmp_path / "sessions.sqlite3", ttl=60))


@pytest.fixture
def damage() -> Callable[[Any, str, str], None]:
    """Damages a session through a connection of the test's own to the file."""
    return damages.sqlite


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


def test_a_file_of_layout_2_is_taken_over_and_its_object_records_still_read(
    tmp_path: Path,
) -> None:
    """Layout 2 wrote records as JSON objects: they read the same, and the file says 3."""
    path = tmp_path / "sessions.sqlite3"
    store = SQLiteStore(path)
    store.apply("s", Change(0, [live("W1"), live("W2", turn=2)], meta()))
    written = store.load("s")
    store.close()
    assert written is not None
    with closing(sqlite3.connect(path)) as db, db:
        for record in written.records:
            db.execute(
                "UPDATE guardrail_record SET record = ? WHERE key = ?",
                (json.dumps(dict(record)), record["key"]),
            )
        db.execute("PRAGMA user_version = 2")
    upgraded = SQLiteStore(path)
    read = upgraded.load("s")
    assert read is not None
    assert sorted(map(json.dumps, read.records)) == sorted(map(json.dumps, written.records))
    upgraded.close()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert db.execute("SELECT record FROM guardrail_record").fetchone()[0].startswith("{")


def test_a_file_of_a_newer_layout_is_refused(tmp_path: Path) -> None:
    """A file a newer release wrote (user_version above this code's) is a StoreError saying so."""
    path = tmp_path / "sessions.sqlite3"
    SQLiteStore(path).close()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    newer = rf"newer guardrail \(layout {SCHEMA_VERSION + 1}; this one knows {SCHEMA_VERSION}\)"
    with pytest.raises(StoreError, match=newer):
        SQLiteStore(path)


def test_a_dropped_table_is_never_created_anew_empty(tmp_path: Path) -> None:
    """A used file missing a table: every call is a StoreError naming it, nothing recreated."""
    path = tmp_path / "sessions.sqlite3"
    store = SQLiteStore(path)
    store.apply("s", Change(0, [live("W1")], meta()))
    store.close()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TABLE guardrail_session")
    reopened = SQLiteStore(path)
    with pytest.raises(StoreError, match="the table guardrail_session is missing") as caught:
        reopened.load("s")
    assert caught.value.session_id == "s"
    with pytest.raises(StoreError, match="missing"):
        reopened.apply("t", Change(0, [live("W1")], meta()))
    reopened.close()
    with closing(sqlite3.connect(path)) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert "guardrail_session" not in tables


@pytest.fixture
def age() -> Callable[[Any, str, float], None]:
    """Ages a session through a connection of the test's own to the file."""
    return damages.age_sqlite


def _open_fresh_files(folder: str, files: int, barrier: Any, errors: Any) -> None:
    """Open each of ``files`` new files as the other processes open it, at the same moment."""
    failed = []
    for n in range(files):
        barrier.wait()
        try:
            SQLiteStore(f"{folder}/fresh-{n}.sqlite3").close()
        except StoreError as exc:
            failed.append(str(exc))
    errors.put(failed)


def test_processes_opening_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """8 processes open each of 6 new files together: every open succeeds (the WAL switch races)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    barrier, errors = context.Barrier(8), context.Queue()
    procs = [
        context.Process(target=_open_fresh_files, args=(str(tmp_path), 6, barrier, errors))
        for _ in range(8)
    ]
    for proc in procs:
        proc.start()
    failed = [message for _ in procs for message in errors.get(timeout=60)]
    for proc in procs:
        proc.join(timeout=60)
    assert failed == []


class _Locked:
    """A connection whose set-up statements find the file locked ``times`` times, as in the race."""

    def __init__(self, db: sqlite3.Connection, times: int) -> None:
        self._db, self.times = db, times

    def execute(self, statement: str, *args: Any) -> sqlite3.Cursor:
        if statement.startswith("PRAGMA journal_mode") and self.times:
            self.times -= 1
            raise sqlite3.OperationalError("database is locked")
        return self._db.execute(statement, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_wal_switch_found_locked_is_retried_within_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked at once (no busy wait) a few times: the store tries again and opens."""
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: _Locked(connect(*a, **k), 3))
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.apply("s", Change(0, [live("W1")], meta()))
    assert store.load("s") is not None
    store.close()


def test_a_file_locked_past_the_timeout_while_opening_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked for longer than timeout: the error says other connections held it, not the path."""
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: _Locked(connect(*a, **k), 10**6))
    with pytest.raises(StoreError, match=r"stayed locked by other connections for 0\.2s") as caught:
        SQLiteStore(tmp_path / "s.sqlite3", timeout=0.2)
    assert "permissions" not in str(caught.value)
