"""The longest store call during a silent network outage (python benchmarks/outage.py).

A PostgresStore (and an AsyncPostgresStore) with its default timeouts reaches the
server through a proxy on loopback (the one the store tests use). One worker calls
the store in a loop, a check of a cached session and a record by turns; after a
second, the proxy holds every byte both ways for ``--outage`` seconds (8 unless
told), as a firewall dropping packets or a dead peer would, then forwards again.
Prints each store's longest call, how many calls failed with a StoreError, and
whether the store went on after. Needs PostgreSQL at 127.0.0.1:5432 (database
``test``); uses a schema of its own and drops it.

To compare with another checkout, run this file with that checkout first on
``PYTHONPATH``: the proxy is read from this file's repository, the store from
wherever ``guardrail`` imports.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from guardrail.errors import StoreError
from guardrail.stores._postgres import AsyncPostgresStore, PostgresStore
from guardrail.stores.protocol import Change

_PROXY = Path(__file__).resolve().parents[1] / "tests" / "stores" / "proxy.py"
_spec = importlib.util.spec_from_file_location("outage_proxy", _PROXY)
assert _spec is not None
assert _spec.loader is not None
proxy_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(proxy_module)

DSN = "host=127.0.0.1 port=5432 dbname=test"


def _record(n: int) -> dict[str, Any]:
    return {
        "kind": "order",
        "key": f"W{n:07d}",
        "state": "evicted",
        "turn": n,
    }


class Log:
    """Each call's duration and outcome, as the worker made them."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self.failed = 0
        self.after = 0  # calls that succeeded once the outage was over

    def report(self, name: str, outage: float) -> str:
        return (
            f"| {name} | {max(self.durations):.2f} s | {self.failed} | "
            f"{'yes' if self.after else 'no'} |"
        )


def _sync(port: int, schema: str, outage: float) -> Log:
    store = PostgresStore(f"host=127.0.0.1 port={port} dbname=test", schema=schema)
    log = Log()
    base = store.apply("s", Change(0, [_record(0)])).version
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < outage + 4:
        n += 1
        began = time.monotonic()
        try:
            if n % 2:
                store.changes_since("s", base)
            else:
                base = store.apply("s", Change(base, [_record(n)])).version
        except StoreError:
            log.failed += 1
        else:
            if began > start + outage + 1:
                log.after += 1
        log.durations.append(time.monotonic() - began)
        time.sleep(0.01)
    store.close()
    return log


async def _async(port: int, schema: str, outage: float) -> Log:
    store = AsyncPostgresStore(f"host=127.0.0.1 port={port} dbname=test", schema=schema)
    log = Log()
    base = (await store.apply("s", Change(0, [_record(0)]))).version
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < outage + 4:
        n += 1
        began = time.monotonic()
        try:
            if n % 2:
                await store.changes_since("s", base)
            else:
                base = (await store.apply("s", Change(base, [_record(n)]))).version
        except StoreError:
            log.failed += 1
        else:
            if began > start + outage + 1:
                log.after += 1
        log.durations.append(time.monotonic() - began)
        await asyncio.sleep(0.01)
    await store.close()
    return log


def _with_outage(proxy: Any, outage: float) -> threading.Thread:
    def cut() -> None:
        time.sleep(1.0)
        proxy.stall()
        time.sleep(outage)
        proxy.resume()

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    return thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=8.0, help="seconds of silence")
    outage = parser.parse_args().outage
    schema = f"guardrail_outage_{uuid.uuid4().hex[:8]}"
    rows = []
    try:
        runs: list[tuple[str, Callable[[int], Log]]] = [
            ("PostgresStore", lambda port: _sync(port, schema, outage)),
            ("AsyncPostgresStore", lambda port: asyncio.run(_async(port, schema, outage))),
        ]
        for name, run in runs:
            proxy: Any
            with proxy_module.Proxy("127.0.0.1", 5432) as proxy:
                cutting = _with_outage(proxy, outage)
                log = run(proxy.port)
                cutting.join()
            rows.append(log.report(name, outage))
    finally:
        with psycopg.connect(DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    print(f"A silent outage of {outage:g} s on an open connection, default timeouts:\n")
    print("| store | longest call | calls failed (StoreError) | went on after |")
    print("|---|---:|---:|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
