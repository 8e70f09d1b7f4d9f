"""The ways each store's data gets damaged, for the conformance suite's ``damage`` fixture.

Each function damages one stored session as :data:`tests.stores.conformance.DAMAGES`
names it, reaching into the store's data the way a failing disk, an operator or an
attacker with access to the database would: never through the store's own methods.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from typing import Any

import pytest

from guardrail._data.rows import from_row

from .conformance import FORGED, live

#: A record of no state the protocol knows, as valid JSON.
HAUNTED = {"kind": "order", "key": "W8855135", "state": "haunted", "turn": 0}


def _row(text: str, how: str) -> str:
    """One record row's JSON text after the damage ``how`` (a damage of one row)."""
    row = json.loads(text)
    assert row[0] == "live", "the first row of the damaged session is an entry's"
    return {
        "row not json": "{not json",
        "two records in a row": text + "," + json.dumps(live(FORGED)),
        "row not an object": "[1]",
        "unknown state": json.dumps(HAUNTED),
        "row of the wrong length": json.dumps(row[:-1]),
        "row of a mark's state with an entry's values": json.dumps(["evicted", *row[1:]]),
        # The fields only some entries have come last, in an object: never the value.
        "row whose extra fields name the value": json.dumps([*row, {"value": FORGED}]),
        "row as an object": json.dumps(from_row(row)),  # not damage: layout 2's way
    }[how]


def memory(store: Any, session_id: str, how: str) -> None:
    """Damage a MemoryStore's session (its rows are short JSON text in a dict)."""
    held = store._sessions[session_id]
    if how == "records gone":
        pytest.skip("a MemoryStore has no table or key that can be dropped apart")
    if how == "meta gone":
        held.meta = None
        return
    name, (version, text) = next(iter(held.rows.items()))
    held.rows[name] = (version, _row(text, how))


def sqlite(store: Any, session_id: str, how: str) -> None:
    """Damage a SQLiteStore's session through a connection of its own."""
    with closing(sqlite3.connect(store.path)) as db, db:
        if how == "records gone":
            db.execute("DROP TABLE guardrail_record")
        elif how == "meta gone":
            db.execute(
                "UPDATE guardrail_session SET meta = NULL WHERE session_id = ?", (session_id,)
            )
        else:
            key, text = db.execute(
                "SELECT key, record FROM guardrail_record WHERE session_id = ? ORDER BY key",
                (session_id,),
            ).fetchone()
            db.execute(
                "UPDATE guardrail_record SET record = ? WHERE session_id = ? AND key = ?",
                (_row(text, how), session_id, key),
            )


def redis(store: Any, session_id: str, how: str) -> None:
    """Damage a RedisStore's session through the store's client."""
    client = store.client
    session, records, *_ = store._keys(session_id)
    if how == "records gone":
        client.delete(records)
    elif how == "meta gone":
        client.hdel(session, "meta")
    else:
        name = min(client.hkeys(records))
        text = client.hget(records, name).decode()
        client.hset(records, name, _row(text, how))


def postgres(dsn: str, schema: str, session_id: str, how: str) -> None:
    """Damage a PostgresStore's session through a connection of its own."""
    import psycopg
    from psycopg import sql

    records, sessions = sql.Identifier(schema, "records"), sql.Identifier(schema, "sessions")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if how == "records gone":
            conn.execute(sql.SQL("DROP TABLE {}").format(records))
        elif how == "meta gone":
            conn.execute(
                sql.SQL("UPDATE {} SET meta = NULL WHERE session_id = %s").format(sessions),
                (session_id,),
            )
        else:
            row = conn.execute(
                sql.SQL("SELECT name, record FROM {} WHERE session_id = %s ORDER BY name").format(
                    records
                ),
                (session_id,),
            ).fetchone()
            assert row is not None
            conn.execute(
                sql.SQL("UPDATE {} SET record = %s WHERE session_id = %s AND name = %s").format(
                    records
                ),
                (_row(row[1], how), session_id, row[0]),
            )


# -- ageing: a session made to look idle for longer, with no clock to wait for ---------------


def age_memory(store: Any, session_id: str, seconds: float) -> None:
    """Make a MemoryStore session's last write ``seconds`` older, its place in order kept."""
    sessions = store._sessions
    sessions[session_id].written -= seconds
    ordered = sorted(sessions.items(), key=lambda item: item[1].written)
    sessions.clear()
    sessions.update(ordered)


def age_sqlite(store: Any, session_id: str, seconds: float) -> None:
    """Make a SQLiteStore session's last write ``seconds`` older."""
    with closing(sqlite3.connect(store.path)) as db, db:
        db.execute(
            "UPDATE guardrail_session SET written = written - ? WHERE session_id = ?",
            (seconds, session_id),
        )


def age_redis(store: Any, session_id: str, seconds: float) -> None:
    """Make a RedisStore session's last write ``seconds`` older (``written`` is microseconds)."""
    session, *_ = store._keys(session_id)
    store.client.hincrby(session, "written", -round(seconds * 1_000_000))


def age_postgres(dsn: str, schema: str, session_id: str, seconds: float) -> None:
    """Make a PostgresStore session's last write ``seconds`` older."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "UPDATE {} SET written = written - make_interval(secs => %s) WHERE session_id = %s"
            ).format(sql.Identifier(schema, "sessions")),
            (seconds, session_id),
        )
