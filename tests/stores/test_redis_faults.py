"""The Redis stores when the server misleads them: a cluster node, a late answer, lost writes.

A cluster node is played by a server of the test's own that answers every command
with a redirect, as a node does for a key of another node's slot; a late answer by
the proxy the store tests use, stalled while a write is on its way; a server that
forgets what it acknowledged by a redis-server the test starts without persistence
and restarts (the shared server is never restarted).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from guardrail import Guard
from guardrail.errors import GuardrailUsageError, StoreError
from guardrail.stores._redis import AsyncRedisStore, RedisStore
from guardrail.stores.protocol import Change, Snapshot

from .conformance import live, meta
from .conftest import unavailable
from .proxy import Proxy


class ClusterNode:
    """Answers every command with ``-MOVED <slot> <another node>``, as a cluster node does."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @staticmethod
    def _serve(client: socket.socket) -> None:
        reader = client.makefile("rb")
        with contextlib.suppress(OSError), client, reader:
            while line := reader.readline():  # "*<n>": a command of n bulk strings
                for _ in range(int(line[1:])):
                    length = int(reader.readline()[1:])
                    reader.read(length + 2)
                client.sendall(b"-MOVED 3999 127.0.0.1:7001\r\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()


@pytest.fixture
def node() -> Iterator[ClusterNode]:
    """A fake cluster node on loopback."""
    made = ClusterNode()
    yield made
    made.close()


def test_a_plain_client_on_a_cluster_node_is_told_to_use_redis_cluster(node: ClusterNode) -> None:
    """A redirect reply: a StoreError naming redis.RedisCluster, not a bare "retry"."""
    store = RedisStore(redis.Redis(port=node.port, socket_timeout=2), prefix="p")
    try:
        for call in (lambda: store.load("s"), lambda: store.apply("s", Change(0, [live("W1")]))):
            with pytest.raises(StoreError, match=r"cluster.*redis\.RedisCluster") as caught:
                call()
            assert caught.value.session_id == "s"
            assert "MovedError: 3999" in str(caught.value)
    finally:
        store.client.close()


def test_the_async_store_gives_the_same_hint(node: ClusterNode) -> None:
    """AsyncRedisStore on a plain asyncio client: the hint names redis.asyncio.RedisCluster."""

    async def scenario() -> None:
        client = redis.asyncio.Redis(port=node.port, socket_timeout=2)
        try:
            with pytest.raises(StoreError, match=r"redis\.asyncio\.RedisCluster"):
                await AsyncRedisStore(client, prefix="p").load("s")
        finally:
            await client.aclose()

    asyncio.run(scenario())


def _keys_of(store: RedisStore) -> list[str]:
    """The keys of the ids session ``s`` holds."""
    snapshot = store.load("s")
    return [] if snapshot is None else sorted(r["key"] for r in snapshot.records)


def _eventually(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether ``condition()`` holds within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_write_answered_too_late_is_reported_as_possibly_applied(
    redis_url: str, redis_prefix: str
) -> None:
    """The write reaches Redis after the client gave up: the error says it may be applied."""
    with Proxy("127.0.0.1", 6379) as proxy:
        store = RedisStore.from_url(
            f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix, socket_timeout=0.5
        )
        direct = RedisStore.from_url(redis_url, prefix=redis_prefix)
        try:
            base = store.apply("s", Change(0, [live("W1")], meta())).version
            proxy.stall()
            with pytest.raises(StoreError, match="may have been applied or not") as caught:
                store.apply("s", Change(base, [live("W2")]))
            assert caught.value.session_id == "s"
            proxy.resume()  # the held write reaches the server now, and is applied
            assert _eventually(lambda: _keys_of(direct) == ["W1", "W2"])
            # The writer sends the change again on its old base: merged with itself, once.
            again = store.apply("s", Change(base, [live("W2")]))
            assert not again.alone
            assert _keys_of(direct) == ["W1", "W2"]
        finally:
            store.close()
            direct.close()


# -- a server that forgets acknowledged writes ---------------------------------------------


class OwnRedis:
    """A redis-server of the test's own on a free loopback port, without persistence."""

    def __init__(self, folder: str, replica_of: int | None = None) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        Path(folder).mkdir(parents=True, exist_ok=True)
        self._folder = folder
        self._replica_of = replica_of
        self._process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        assert REDIS_SERVER is not None
        arguments = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1"]
        arguments += ["--save", "", "--appendonly", "no", "--dir", self._folder]
        if self._replica_of is not None:
            arguments += ["--replicaof", "127.0.0.1", str(self._replica_of)]
        self._process = subprocess.Popen(
            arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        try:
            assert _eventually(lambda: _pings(client)), "the test's redis-server did not start"
        finally:
            client.close()

    def restart(self) -> None:
        """Stop the server and start it again: with no persistence, it comes back empty."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


REDIS_SERVER = shutil.which("redis-server")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    """A redis-server this test starts, restarts and stops; skipped without the binary."""
    if REDIS_SERVER is None:
        unavailable("redis-server is not installed: the test starts a Redis server of its own")
    server = OwnRedis(str(tmp_path))
    yield server
    server.stop()


def test_a_server_restarted_without_persistence_reports_lost_writes_everywhere(
    own_redis: OwnRedis,
) -> None:
    """Gone with no delete mark: "writes were lost" for every worker, no new conversation."""
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    worker, other = RedisStore.from_url(url), RedisStore.from_url(url)
    try:
        version = worker.apply("s", Change(0, [live("W1"), live("W2")], meta())).version
        worker.apply("t", Change(0, [live("W3")], meta()))
        worker.delete("t")  # deleted on purpose: a delete mark, so not taken for a loss
        own_redis.restart()
        with pytest.raises(StoreError, match="writes were lost") as caught:
            worker.changes_since("s", version)
        assert caught.value.session_id == "s"
        # Every other worker refuses it too, even one that never read it: nothing starts anew.
        for call in (
            lambda: other.load("s"),
            lambda: other.changes_since("s", 0),
            lambda: other.apply("s", Change(0, [live("W9")], meta())),
            lambda: worker.apply("s", Change(version, [live("W9")])),
        ):
            with pytest.raises(StoreError, match="writes were lost"):
                call()
        # The operator acknowledges the loss by deleting the session: it starts over.
        other.delete("s")
        assert worker.changes_since("s", version) == Snapshot(0)
        assert other.apply("s", Change(0, [live("W9")], meta())).alone
    finally:
        worker.close()
        other.close()


def test_a_restarted_server_stops_a_guard_recording_into_its_cached_session(
    own_redis: OwnRedis,
) -> None:
    """A guard with the session cached: the next call raises; nothing is recorded as new."""
    store = RedisStore.from_url(f"redis://127.0.0.1:{own_redis.port}/0")
    guard = Guard(store=store)
    guard.add_kind("order", pattern=r"#?W\d{7}")
    guard.declare("get_order", produces={"order_id": "order"}, effect="read")
    guard.declare("issue_refund", ids={"order_id": "order"})
    try:
        guard.record("get_order", {}, {"order_id": "#W8855135"}, session="s")
        own_redis.restart()
        with pytest.raises(StoreError, match="writes were lost"):
            guard.check("issue_refund", {"order_id": "#W8855135"}, session="s")
        with pytest.raises(StoreError, match="writes were lost"):
            guard.record("get_order", {}, {"order_id": "#W0000001"}, session="s")
        assert store.client.keys("*:r") == []  # no records: nothing started anew
    finally:
        store.close()


def test_a_session_behind_what_a_worker_read_reports_lost_writes(
    redis_url: str, redis_prefix: str
) -> None:
    """A failover to a replica that was behind: the session is at an older version of its life."""
    store = RedisStore.from_url(redis_url, prefix=redis_prefix)
    client = store.client
    try:
        first = store.apply("s", Change(0, [live("W1")], meta())).version
        keys = store._keys("s")[:3]
        before = [client.dump(key) for key in keys]
        assert all(isinstance(dumped, bytes) for dumped in before)
        second = store.apply("s", Change(first, [live("W2")])).version
        for key, dumped in zip(keys, before, strict=True):  # the replica had only the first
            client.restore(key, 0, dumped, replace=True)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="writes were lost"):
            store.changes_since("s", second)
        # Marked: a worker that had only read the first version is told too.
        with pytest.raises(StoreError, match="writes were lost"):
            store.changes_since("s", first)
    finally:
        store.close()


def _replicas_of(client: redis.Redis | redis.RedisCluster) -> int:
    return int(client.info("replication")["connected_slaves"])


def test_a_write_waits_for_the_replicas_asked_for(own_redis: OwnRedis, tmp_path: Path) -> None:
    """replicas=1: done once the replica holds it; without the replica, a StoreError."""
    replica = OwnRedis(str(tmp_path / "replica"), replica_of=own_redis.port)
    store = RedisStore.from_url(
        f"redis://127.0.0.1:{own_redis.port}/0", replicas=1, replica_timeout=0.5
    )
    try:
        follower = redis.Redis(port=replica.port)
        try:  # synced: the replica's link to the master is up
            assert _eventually(
                lambda: follower.info("replication").get("master_link_status") == "up"
            )
        finally:
            follower.close()
        version = store.apply("s", Change(0, [live("W1")], meta())).version
        replica.stop()
        assert _eventually(lambda: _replicas_of(store.client) == 0)
        with pytest.raises(StoreError, match=r"only 0 of the 1 replicas .* within 0\.5s") as caught:
            store.apply("s", Change(version, [live("W2")]))
        assert caught.value.session_id == "s"

        async def in_asyncio() -> None:
            url = f"redis://127.0.0.1:{own_redis.port}/0"
            waiting = AsyncRedisStore.from_url(url, replicas=1, replica_timeout=0.5)
            try:
                with pytest.raises(StoreError, match="only 0 of the 1 replicas"):
                    await waiting.apply("a", Change(0, [live("W1")], meta()))
            finally:
                await waiting.close()

        asyncio.run(in_asyncio())
    finally:
        replica.stop()
        store.close()


def test_replicas_options_are_checked() -> None:
    """A negative count or a zero timeout is a usage error saying what to pass."""
    client = redis.Redis()
    bad: list[dict[str, Any]] = [{"replicas": -1}, {"replicas": True}, {"replica_timeout": 0}]
    for options in bad:
        with pytest.raises(GuardrailUsageError, match="replica"):
            RedisStore(client, **options)
