"""Guards on the asyncio server stores: `async with` scopes, workers sharing one conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from guardrail.errors import StoreError
from guardrail.stores import AsyncStore
from guardrail.stores._postgres import AsyncPostgresStore
from guardrail.stores._redis import AsyncRedisStore
from tests.conftest import ORDERS, shop_guard

Builder = Callable[[], AsyncStore]


@pytest.fixture(params=["redis", "postgres"])
def build(request: pytest.FixtureRequest) -> Builder:
    """Makes async stores over one place on the server, Redis or PostgreSQL."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("redis_prefix")
        return lambda: AsyncRedisStore.from_url(url, prefix=prefix)
    dsn = request.getfixturevalue("postgres_dsn")
    schema = request.getfixturevalue("postgres_schema")
    return lambda: AsyncPostgresStore(dsn, schema=schema)


def run(build: Builder, body: Callable[[list[AsyncStore]], Awaitable[None]]) -> None:
    """Runs ``body`` with two stores made by ``build``, closing them afterwards."""

    async def main() -> None:
        stores = [build(), build()]
        try:
            await body(stores)
        finally:
            for store in stores:
                await store.close()

    asyncio.run(main())


def test_two_async_guards_serve_one_conversation(build: Builder) -> None:
    """Ids one guard records in `async with` scopes are allowed for another guard, and forgotten."""

    async def body(stores: list[AsyncStore]) -> None:
        one, two = shop_guard(store=stores[0]), shop_guard(store=stores[1])
        async with one.session("conv") as ledger:
            one.record("search_orders", {}, ORDERS)
            one.label("order_2", "pending_order")
        async with two.session("conv"):
            assert two.check("issue_refund", {"order_id": "W2378156"}).allowed
            assert not two.check("issue_refund", {"order_id": "W2378157"}).allowed
            two.forget("pending_order")
        async with one.session("conv") as again:
            assert again is ledger  # cached, and brought up to date with the other's write
            assert not one.check("issue_refund", {"order_id": "W2378156"}).allowed
            assert one.check("issue_refund", {"order_id": "W8855135"}).allowed
        assert await two.expire_sessions_async(0) == ["conv"]

    run(build, body)


def test_tasks_recording_at_once_lose_nothing(build: Builder) -> None:
    """Twenty tasks over two guards record into one session at once: every id is stored."""

    async def body(stores: list[AsyncStore]) -> None:
        guards = [shop_guard(store=store) for store in stores]

        async def task(n: int) -> None:
            guard = guards[n % 2]
            async with guard.session("conv"):
                await asyncio.sleep(0)
                guard.record("get_order", {}, {"order_id": f"W77{n:05d}"})

        await asyncio.gather(*(task(n) for n in range(20)))
        reader = shop_guard(store=stores[0])
        await reader.end_session_async("conv")
        async with reader.session("conv") as ledger:
            assert {entry.key for entry in ledger} == {f"W77{n:05d}" for n in range(20)}

    run(build, body)


def test_an_unreachable_async_server_is_an_error_not_an_empty_session() -> None:
    """An async store on a closed port: opening the session raises StoreError."""

    async def main() -> None:
        for store in (
            AsyncRedisStore.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1),
            AsyncPostgresStore("host=127.0.0.1 port=1 dbname=test connect_timeout=1", timeout=1),
        ):
            guard = shop_guard(store=store)
            try:
                with pytest.raises(StoreError, match="127.0.0.1:1"):
                    async with guard.session("conv"):
                        pass
            finally:
                await store.close()

    asyncio.run(main())


def test_tasks_first_using_a_postgres_store_at_once_open_it_once(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Ten tasks make a new AsyncPostgresStore's first calls at once: all are served."""

    async def main() -> list[object]:
        store = AsyncPostgresStore(postgres_dsn, schema=postgres_schema)
        try:
            return await asyncio.gather(*(store.load(f"s{n}") for n in range(10)))
        finally:
            await store.close()

    assert asyncio.run(main()) == [None] * 10
