"""RedisStore: the store conformance suite on a real Redis, and what only Redis has."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores import MemoryStore
from guardrail.stores._redis import AsyncRedisStore, RedisStore
from guardrail.stores.protocol import Change

from .conformance import *  # noqa: F403  (the suite)
from .conformance import StoreFactory, by_key, live, meta
from .conformance_processes import *  # noqa: F403  (the multi-process tests)
from .differential import same_as_memory
from .proxy import Proxy, Silent
from .redis_fixtures import age, damage  # noqa: F401  (fixtures)


@pytest.fixture
def store_factory(redis_url: str, redis_prefix: str) -> StoreFactory:
    """Stores with clients of their own, one prefix: the same sessions, in any process."""
    return StoreFactory(functools.partial(RedisStore.from_url, redis_url, prefix=redis_prefix))


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test's own."""
    made = redis.Redis.from_url(redis_url)
    yield made
    made.close()


class Counting:
    """Counts the commands a client sends: each is one round trip (no pipelines here)."""

    def __init__(self, client: redis.Redis) -> None:
        self.commands: list[str] = []
        send = client.execute_command

        def counted(*args: Any, **options: Any) -> Any:
            self.commands.append(str(args[0]))
            return send(*args, **options)  # type: ignore[no-untyped-call]

        client.execute_command = counted  # type: ignore[method-assign]


def test_a_check_and_a_record_are_one_round_trip_each(
    client: redis.Redis, redis_prefix: str
) -> None:
    """Up-to-date check: one round trip; a record: one, or two when it meets another writer."""
    store = RedisStore(client, prefix=redis_prefix)
    other = RedisStore(client, prefix=redis_prefix)
    store.load("warm-up")  # the scripts are loaded once per server, not per call
    first = store.apply("s", Change(0, [live("W1")], meta()))
    counting = Counting(client)
    assert store.changes_since("s", first.version) is None
    assert len(counting.commands) == 1
    counting.commands.clear()
    second = store.apply("s", Change(first.version, [live(f"W{n}") for n in range(2, 60)], meta()))
    assert second.alone and len(counting.commands) == 1
    other.apply("s", Change(second.version, [live("W2", turn=3, status="pending")]))
    counting.commands.clear()
    third = store.apply("s", Change(second.version, [live("W2", turn=1, pinned=True)]))
    assert not third.alone and len(counting.commands) == 2
    merged = {r["key"]: r for r in store.load("s").records}["W2"]  # type: ignore[union-attr]
    assert merged["pinned"] and merged["status"] == "pending" and merged["turn"] == 3


def test_a_write_that_meets_two_writers_in_turn_ends_as_the_memory_store_does(
    client: redis.Redis, redis_prefix: str
) -> None:
    """A writer merged once, then raced again by one who saw the first: same rows as in memory."""

    def play(store: Any, between: Callable[[Callable[[], None]], None]) -> dict[str, Any]:
        base = store.apply("s", Change(0, [live("W1")], meta())).version
        seen = store.apply("s", Change(base, [live("W1", pinned=True)], meta(counters={"o": 5})))

        def third() -> None:  # saw the pinned row, and unpins it
            store.apply("s", Change(seen.version, [live("W1", turn=1)], meta(counters={"o": 7})))

        between(third)
        store.apply("s", Change(base, [live("W1", turn=2, role="other")], meta(turn=2)))
        loaded = store.load("s")
        return {"records": by_key(loaded), "meta": dict(loaded.meta)}

    def at_once(third: Callable[[], None]) -> None:
        third()

    expected = play(MemoryStore(), at_once)
    store = RedisStore(client, prefix=redis_prefix)
    script = store._apply
    calls = []

    def once_then_third(third: Callable[[], None]) -> None:
        def apply(**kwargs: Any) -> Any:
            reply = script(**kwargs)
            calls.append(reply)
            if len(calls) == 1:  # the last writer's first attempt met the second writer
                third()
            return reply

        store._apply = apply  # type: ignore[assignment]

    assert play(store, once_then_third) == expected
    # The last write: met the second writer; the third wrote; met it too; then written.
    assert [isinstance(reply[1], list) for reply in calls] == [True, False, True, False]


def test_a_sessions_keys_share_one_cluster_slot(redis_prefix: str, client: redis.Redis) -> None:
    """All keys of one session hash to one slot (so a cluster script may touch them), braces too."""
    store = RedisStore(client, prefix=redis_prefix)

    def sent(key: str | bytes) -> bytes:
        return key if isinstance(key, bytes) else key.encode()

    for session_id in ("conv-42", "a}b{c", "{x}", "", "ü", "half \ud83d"):
        keys = store._keys(session_id)
        assert len({key_slot(sent(key)) for key in keys}) == 1
    assert len({key_slot(sent(store._keys(f"conv-{n}")[0])) for n in range(50)}) > 1


def test_ttl_drops_an_unused_session_and_use_refreshes_it(
    client: redis.Redis, redis_prefix: str
) -> None:
    """With ttl, each key of a session expires; a read starts the count again."""
    store = RedisStore(client, prefix=redis_prefix, ttl=60)
    version = store.apply("s", Change(0, [live("W1")], meta())).version
    keys = store._keys("s")[:3]
    for key in keys:
        client.pexpire(key, 5000)
    assert store.changes_since("s", version) is None
    assert all(55_000 < client.pttl(key) <= 60_000 for key in keys)
    forever = RedisStore(client, prefix=redis_prefix)
    forever.apply("t", Change(0, [live("W1")], meta()))
    assert all(client.pttl(key) == -1 for key in forever._keys("t")[:3])


def test_an_unreachable_server_is_an_error_naming_the_store() -> None:
    """A closed port: every call is a StoreError naming the store and what to check."""
    store = RedisStore.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    with pytest.raises(
        StoreError, match=r"RedisStore at 127\.0\.0\.1:1/0.*not reachable"
    ) as caught:
        store.load("s")
    assert caught.value.session_id == "s"
    with pytest.raises(StoreError, match="not reachable"):
        store.apply("s", Change(0, [live("W1")], meta()))
    store.close()


def test_a_killed_connection_reconnects_to_the_whole_session(
    client: redis.Redis, redis_prefix: str
) -> None:
    """CLIENT KILL of the store's own connection: the next call reconnects and reads it all."""
    store = RedisStore(client, prefix=redis_prefix)
    store.apply("s", Change(0, [live("W1")], meta()))
    client.client_kill_filter(_id=str(client.client_id()))
    loaded = store.load("s")
    assert loaded is not None and {r["key"] for r in loaded.records} == {"W1"}


def test_a_server_that_goes_away_is_an_error_not_an_empty_session(
    redis_prefix: str, client: redis.Redis
) -> None:
    """Redis stops answering mid-conversation: StoreError on read and write, never None."""
    with Proxy("127.0.0.1", 6379) as proxy:
        store = RedisStore.from_url(
            f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix, socket_connect_timeout=1
        )
        version = store.apply("s", Change(0, [live("W1")], meta())).version
        proxy.stop()
        with pytest.raises(StoreError, match=rf"RedisStore at 127\.0\.0\.1:{proxy.port}/0"):
            store.changes_since("s", version)
        with pytest.raises(StoreError, match="not reachable"):
            store.load("s")
        with pytest.raises(StoreError, match="not reachable"):
            store.apply("s", Change(version, [live("W2")]))
        store.close()
    held = RedisStore(client, prefix=redis_prefix).load("s")
    assert held is not None and [r["key"] for r in held.records] == ["W1"]


def test_garbage_in_a_session_is_an_error_naming_it(client: redis.Redis, redis_prefix: str) -> None:
    """A record that is not JSON, or a version that is not a number: StoreError, not a skip."""
    store = RedisStore(client, prefix=redis_prefix)
    store.apply("s", Change(0, [live("W1"), live("W2")], meta()))
    session, records, *_ = store._keys("s")
    client.hset(records, "5:orderW2", "{not json")
    with pytest.raises(StoreError, match=r"session 's' holds bad data: a record is not JSON"):
        store.load("s")
    client.hset(records, "5:orderW2", "[]")
    with pytest.raises(StoreError, match="holds bad data: a record is list"):
        store.load("s")
    client.hset(session, "version", "many")
    with pytest.raises(StoreError, match=r"damaged.*version .* is not a number"):
        store.load("s")
    with pytest.raises(StoreError, match="damaged"):
        store.apply("s", Change(0, [live("W3")]))


def _both_ways(store: RedisStore, session_id: str) -> list[Any]:
    """What load (one MULTI/EXEC) and the changes script (since 0) answer: a result or an error."""
    answers: list[Any] = []
    for read in (store.load, lambda sid: store.changes_since(sid, 0)):
        try:
            held = read(session_id)
        except StoreError as exc:
            answers.append(str(exc))
        else:
            answers.append(
                None
                if held is None
                else (held.version, sorted(map(json.dumps, held.records)), held.meta, held.complete)
            )
    return answers


def test_a_whole_session_read_in_a_transaction_answers_as_the_script_does(
    client: redis.Redis, redis_prefix: str
) -> None:
    """Missing, whole, damaged, and a ttl's count started again: the same either way."""
    store = RedisStore(client, prefix=redis_prefix, ttl=600)
    assert _both_ways(store, "s") == [None, None]
    store.apply("s", Change(0, [live("W1"), live("W2", turn=3)], meta()))
    keys = store._keys("s")[:3]
    for key in keys:
        client.pexpire(key, 1000)
    assert store.load("s") is not None
    assert all(client.pttl(key) > 500_000 for key in keys)  # the read started the count again
    first, second = _both_ways(store, "s")
    assert first == second and first is not None and len(first[1]) == 2
    session, records, *_ = keys
    client.hdel(records, min(client.hkeys(records)))
    first, second = _both_ways(store, "s")
    assert first == second and "records of" in first and "are missing" in first
    client.hset(session, "version", "many")
    first, second = _both_ways(store, "s")
    assert first == second and "version of" in first and "is not a number" in first


def test_a_change_naming_one_id_twice_is_refused(client: redis.Redis, redis_prefix: str) -> None:
    """Two records for one (kind, key) in one change is a usage error, nothing written."""
    store = RedisStore(client, prefix=redis_prefix)
    with pytest.raises(GuardrailUsageError, match="at most one record"):
        store.apply("s", Change(0, [live("W1"), live("W1", turn=2)], meta()))
    assert store.load("s") is None


def test_bad_options_are_refused_with_what_to_pass(client: redis.Redis) -> None:
    """A prefix with braces, a ttl of zero, an asyncio client: usage errors saying what to pass."""
    for prefix in ("a{b}", "app:guardrail", "", "x*"):
        with pytest.raises(GuardrailUsageError, match="hash tag"):
            RedisStore(client, prefix=prefix)
    with pytest.raises(GuardrailUsageError, match="ttl"):
        RedisStore(client, ttl=0)
    with pytest.raises(GuardrailUsageError, match="AsyncRedisStore"):
        RedisStore(redis.asyncio.Redis())  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="use RedisStore"):
        AsyncRedisStore(client)  # type: ignore[arg-type]


def test_a_client_that_decodes_responses_works_the_same(redis_url: str, redis_prefix: str) -> None:
    """A client built with decode_responses=True reads and merges what a bytes client wrote."""
    text = redis.Redis.from_url(redis_url, decode_responses=True)
    raw = RedisStore.from_url(redis_url, prefix=redis_prefix)
    try:
        store = RedisStore(text, prefix=redis_prefix)
        base = raw.apply("s", Change(0, [live("W1", role="typed")], meta())).version
        raw.apply("s", Change(base, [live("W1", turn=1, pinned=True), live("W2")], meta(turn=1)))
        assert not store.apply("s", Change(base, [live("W1", turn=2)], meta(turn=2))).alone
        loaded = store.load("s")
        assert loaded is not None and loaded.meta is not None and loaded.meta["turn"] == 2
        records = {r["key"]: r for r in loaded.records}
        assert (
            records["W1"]["pinned"] and records["W1"]["turn"] == 2 and set(records) == {"W1", "W2"}
        )
        assert store.expire(3600) == []
    finally:
        text.close()
        raw.close()


def test_a_client_passed_in_stays_open(client: redis.Redis, redis_prefix: str) -> None:
    """close() closes only a client the store made (from_url)."""
    RedisStore(client, prefix=redis_prefix).close()
    assert client.ping()


def test_without_the_extra_the_import_says_what_to_install() -> None:
    """With redis-py missing, importing RedisStore names the extra to install."""
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "try:\n    from guardrail.stores import RedisStore\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'guardrail-ids[redis]'" in out.stdout


def test_async_store_and_sync_store_share_sessions(redis_url: str, redis_prefix: str) -> None:
    """An AsyncRedisStore writes what a RedisStore with the same prefix reads, and back."""

    async def scenario() -> list[str]:
        store = AsyncRedisStore.from_url(redis_url, prefix=redis_prefix)
        try:
            written = await store.apply("s", Change(0, [live("W1")], meta()))
            assert written.alone
            sync = RedisStore.from_url(redis_url, prefix=redis_prefix)
            sync.apply("s", Change(written.version, [live("W2")]))
            sync.close()
            delta = await store.changes_since("s", written.version)
            assert delta is not None and not delta.complete
            return [r["key"] for r in delta.records]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == ["W2"]


def test_any_sequence_of_writes_ends_as_in_memory(client: redis.Redis, redis_prefix: str) -> None:
    """Writes from stale and fresh bases, deletes: the same rows as the memory store keeps."""
    same_as_memory(RedisStore(client, prefix=redis_prefix))


def test_a_server_that_never_answers_is_a_timeout_not_a_hang() -> None:
    """A server that accepts and stays silent: from_url's own timeouts end the call."""
    with Silent() as silent:
        store = RedisStore.from_url(f"redis://127.0.0.1:{silent.port}/0", socket_timeout=0.5)
        try:
            with pytest.raises(StoreError, match="did not answer within") as caught:
                store.load("s")
            assert caught.value.session_id == "s"
        finally:
            store.close()


def test_a_store_s_own_client_has_its_timeouts_set(redis_url: str) -> None:
    """from_url sets socket and connect timeouts explicitly; options passed in win."""
    store = RedisStore.from_url(redis_url)
    options = store.client.connection_pool.connection_kwargs  # type: ignore[union-attr]
    assert (options["socket_timeout"], options["socket_connect_timeout"]) == (5.0, 3.0)
    store.close()
    store = RedisStore.from_url(redis_url, socket_timeout=1.5)
    pool = store.client.connection_pool  # type: ignore[union-attr]
    assert pool.connection_kwargs["socket_timeout"] == 1.5
    store.close()


def test_the_async_store_s_own_client_has_the_same_timeouts(redis_url: str) -> None:
    """AsyncRedisStore.from_url sets the timeouts RedisStore.from_url sets; options given win."""
    cases: list[tuple[dict[str, Any], tuple[float, float]]] = [
        ({}, (5.0, 3.0)),
        ({"socket_connect_timeout": 0.5}, (5.0, 0.5)),
    ]
    for given, expected in cases:
        store = AsyncRedisStore.from_url(redis_url, **given)
        assert isinstance(store.client, redis.asyncio.Redis)
        options = store.client.connection_pool.connection_kwargs
        assert (options["socket_timeout"], options["socket_connect_timeout"]) == expected
        asyncio.run(store.close())
