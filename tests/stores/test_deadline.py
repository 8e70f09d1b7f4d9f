"""The call deadline: a PostgreSQL store on an open connection the network went silent on.

A proxy the test starts stands between the store and the server; stalled, it holds
every byte without a word to either end, as a firewall dropping packets or a dead
peer does. The stall lasts longer than the test could wait, and is lifted by a
timer: a call with no deadline of its own would answer once the outage ends, so
only a store that cuts the call off raises inside it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from guardrail.errors import StoreError
from guardrail.stores._deadline import Watchdog
from guardrail.stores._postgres import AsyncPostgresStore, PostgresStore
from guardrail.stores.protocol import Change

from .conformance import live, meta
from .proxy import Proxy

#: How long an outage lasts: far past the store's call_timeout, so a test never waits it out.
OUTAGE = 20.0


@pytest.fixture
def proxy(postgres_dsn: str) -> Iterator[Proxy]:
    """A proxy to the test database; stall() starts an outage that ends by itself."""
    with Proxy("127.0.0.1", 5432) as made:
        yield made


def _outage(proxy: Proxy) -> threading.Timer:
    """Stall the proxy now, and resume it when the outage is over."""
    proxy.stall()
    timer = threading.Timer(OUTAGE, proxy.resume)
    timer.daemon = True
    timer.start()
    return timer


def _dsn(proxy: Proxy) -> str:
    return f"host=127.0.0.1 port={proxy.port} dbname=test connect_timeout=2"


def test_a_silent_network_cuts_a_check_and_a_record_off_at_call_timeout(
    proxy: Proxy, postgres_schema: str
) -> None:
    """Stalled traffic on an open connection: each call is a StoreError naming call_timeout."""
    store = PostgresStore(_dsn(proxy), schema=postgres_schema, call_timeout=0.5, max_connections=1)
    try:
        base = store.apply("s", Change(0, [live("W1")], meta())).version
        timer = _outage(proxy)
        try:
            with pytest.raises(StoreError, match=r"call_timeout: no answer within 0\.5s") as read:
                store.changes_since("s", base)
            assert read.value.session_id == "s"
            assert "PostgresStore at 127.0.0.1" in str(read.value)
        finally:
            proxy.resume()
            timer.cancel()
        # The cut connection was discarded: the next call opens a new one and goes on.
        assert store.changes_since("s", base) is None
        timer = _outage(proxy)
        try:
            with pytest.raises(StoreError, match="call_timeout: .*may have been applied or not"):
                store.apply("s", Change(base, [live("W2")]))
        finally:
            proxy.resume()
            timer.cancel()
    finally:
        store.close()


def test_a_write_cut_off_is_settled_by_the_next_write_and_read(
    proxy: Proxy, postgres_dsn: str, postgres_schema: str
) -> None:
    """A write whose answer never came, sent again on its old base: applied once, nothing lost."""
    store = PostgresStore(_dsn(proxy), schema=postgres_schema, call_timeout=0.5, max_connections=1)
    direct = PostgresStore(postgres_dsn, schema=postgres_schema)
    try:
        base = store.apply("s", Change(0, [live("W1")], meta())).version
        timer = _outage(proxy)
        try:
            with pytest.raises(StoreError, match="may have been applied or not"):
                store.apply("s", Change(base, [live("W2")]))
        finally:
            proxy.resume()
            timer.cancel()
        store.apply("s", Change(base, [live("W2")]))
        snapshot = direct.load("s")
        assert snapshot is not None
        assert sorted(r["key"] for r in snapshot.records) == ["W1", "W2"]
    finally:
        store.close()
        direct.close()


def test_the_async_store_cuts_a_silent_call_off_too(proxy: Proxy, postgres_schema: str) -> None:
    """AsyncPostgresStore: the same StoreError, from a timer on the running loop."""

    async def scenario() -> None:
        store = AsyncPostgresStore(
            _dsn(proxy), schema=postgres_schema, call_timeout=0.5, max_connections=1
        )
        try:
            base = (await store.apply("s", Change(0, [live("W1")], meta()))).version
            timer = _outage(proxy)
            try:
                with pytest.raises(StoreError, match=r"call_timeout: no answer within 0\.5s"):
                    await store.changes_since("s", base)
            finally:
                proxy.resume()
                timer.cancel()
            assert await store.changes_since("s", base) is None
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_block_that_outlives_its_deadline_has_its_socket_cut_and_closed() -> None:
    """The watchdog shuts the socket down past the deadline; a block that ends well closes it."""
    near, far = socket.socketpair()
    closed: list[bool] = []
    watchdog = Watchdog("test-deadline")
    try:
        with watchdog.watching(0.05, near.fileno, lambda: closed.append(True)) as watch:
            assert near.recv(1) == b""  # woken by the cut: the socket reads its end
        assert watch.fired
        assert closed == [True]
        with watchdog.watching(5.0, near.fileno, lambda: closed.append(False)) as watch:
            pass
        assert not watch.fired
        assert closed == [True]
    finally:
        watchdog.stop()
        near.close()
        far.close()


def test_a_write_is_allowed_a_second_more_per_10000_records(postgres_dsn: str) -> None:
    """The bound of a call grows with the records a write carries, from call_timeout."""
    store = PostgresStore(postgres_dsn, call_timeout=2.0)
    try:
        assert store._bound(0) == 2.0
        assert store._bound(100_000) == 12.0
    finally:
        store.close()
