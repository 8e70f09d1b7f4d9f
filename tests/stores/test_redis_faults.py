"""The Redis stores when the server misleads them: a cluster node, a write answered too late.

A cluster node is played by a server of the test's own that answers every command
with a redirect, as a node does for a key of another node's slot; a late answer by
the proxy the store tests use, stalled while a write is on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio

from guardrail.errors import StoreError
from guardrail.stores._redis import AsyncRedisStore, RedisStore
from guardrail.stores.protocol import Change

from .conformance import live, meta
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
            snapshot = direct.load("s")
            assert snapshot is not None
            assert sorted(r["key"] for r in snapshot.records) == ["W1", "W2"]
            # The writer sends the change again on its old base: merged with itself, once.
            again = store.apply("s", Change(base, [live("W2")]))
            assert not again.alone
            assert sorted(r["key"] for r in direct.load("s").records) == ["W1", "W2"]  # type: ignore[union-attr]
        finally:
            store.close()
            direct.close()
