"""Fixtures for the server stores: Redis and PostgreSQL on this machine, one namespace a test.

Each test gets a key prefix (Redis) or a schema (PostgreSQL) of its own, unique to
this run and naming the pytest-xdist worker that made it, and drops it afterwards. A
server that is not reachable skips the test with a message naming it, unless
``GUARDRAIL_REQUIRE_SERVICES=1`` (as in CI): then the test fails, so a CI machine
without the services cannot pass by skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import NoReturn

import pytest

REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
POSTGRES_DSN = "host=127.0.0.1 port=5432 dbname=test connect_timeout=3"


def unavailable(message: str) -> NoReturn:
    """Skip the test, or fail it where the services are required."""
    if os.environ.get("GUARDRAIL_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message} (GUARDRAIL_REQUIRE_SERVICES=1: the services are required)")
    pytest.skip(message)


def unique(stem: str) -> str:
    """A name no other test, worker or run uses: ``stem_gw1_<random>`` on pytest-xdist's gw1."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{stem}_{worker}_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_url() -> str:
    """The URL of the Redis server the tests use (checked reachable)."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        unavailable(f"redis-py is not installed ({exc}): pip install -e '.[dev]'")
    client = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis is not reachable at {REDIS_HOST}:{REDIS_PORT}: {exc}")
    finally:
        client.close()
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/0"


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; every key under it is deleted afterwards."""
    import redis

    prefix = unique("guardrail-test")
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        # Keys are written "{prefix:session}..." (a hash tag) or "prefix..."; both start so.
        for pattern in (f"{{{prefix}*", f"{prefix}*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def postgres_dsn() -> str:
    """The connection string of the PostgreSQL database the tests use (checked reachable)."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        unavailable(f"psycopg is not installed ({exc}): pip install -e '.[dev]'")
    try:
        with psycopg.connect(POSTGRES_DSN) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL is not reachable at 127.0.0.1:5432 (database test): {exc}")
    return POSTGRES_DSN


@pytest.fixture
def postgres_schema(postgres_dsn: str) -> Iterator[str]:
    """A schema name of this test's own (not created here); dropped afterwards."""
    import psycopg
    from psycopg import sql

    schema = unique("guardrail_test")
    yield schema
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
