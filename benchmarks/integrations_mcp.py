"""Overhead of guardrail.integrations.mcp per tool call, beside MCP's own per-call cost.

One ``tools/call`` of a write tool, allowed, from an ``mcp.Client`` to an
``MCPServer`` over the SDK's in-memory transport: unguarded; guarded on the
server (``guard_server``); guarded on the client (``guarded_call_tool``). The
session's ledger holds 1,000 ids; logging is as a production program sets it
up (warnings only). Cases are timed in interleaved rounds; ratios are per round.

``python benchmarks/integrations_mcp.py [--quick]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic import Field
from run import production_logging

from guardrail import Guard
from guardrail.integrations.mcp import guard_server, guarded_call_tool, session_meta

Customer = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "customer"})]
Order = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "order"})]
ORDERS = [f"ord_{n:010d}" for n in range(1000)]
ARGUMENTS = {"customer_id": "cus_00000001", "order_id": ORDERS[500], "amount": 40}


def make_guard() -> Guard:
    guard = Guard(mode="reprompt", capacity=10_000, max_ids_per_call=10_000)
    guard.add_kind("customer", pattern=r"cus_\w{8}")
    guard.add_kind("order", pattern=r"ord_\w{10}")
    guard.declare("lookup", produces={"orders[*]": "order", "customer": "customer"}, effect="read")
    with guard.session("bench"):
        guard.record("lookup", {}, {"orders": ORDERS, "customer": "cus_00000001"})
    return guard


def make_server() -> MCPServer:
    server = MCPServer("bench", log_level="WARNING")

    @server.tool()
    def refund(customer_id: Customer, order_id: Order, amount: int) -> str:
        return f"refunded {amount} on {order_id}"

    return server


async def _measure(rounds: int, number: int) -> dict[str, list[float]]:
    plain, guarded = make_server(), make_server()
    server_guard, client_guard = make_guard(), make_guard()
    guard_server(guarded, server_guard)
    client_guard.declare("refund", ids={"customer_id": "customer", "order_id": "order"})
    meta = session_meta("bench")
    async with Client(plain) as to_plain, Client(guarded) as to_guarded:

        async def guarded_client() -> Any:
            async with client_guard.session("bench"):
                return await guarded_call_tool(to_plain, client_guard, "refund", ARGUMENTS)

        async def own_work() -> Any:
            with client_guard.session("bench"):
                verdict = client_guard.enforce("refund", ARGUMENTS)
                client_guard.record("refund", ARGUMENTS, "refunded 40")
            return verdict

        cases: dict[str, Callable[[], Awaitable[Any]]] = {
            "MCP call, in memory, no guard": lambda: to_plain.call_tool("refund", ARGUMENTS),
            "MCP call, guarded server (guard_server)": lambda: to_guarded.call_tool(
                "refund", ARGUMENTS, meta=meta
            ),
            "MCP call, guarded client (guarded_call_tool)": guarded_client,
            "the guard's own work: enforce + record, no MCP": own_work,
        }
        for call in cases.values():  # warm up; every case must succeed
            result = await call()
            assert not getattr(result, "is_error", False), result
        times: dict[str, list[float]] = {name: [] for name in cases}
        order = list(cases)
        for r in range(rounds):
            shift = r % len(order)
            for name in order[shift:] + order[:shift]:
                gc.collect()
                start = time.perf_counter()
                for _ in range(number):
                    await cases[name]()
                times[name].append((time.perf_counter() - start) / number)
    return times


def measure(quick: bool = False) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Rows (name, µs per call) and ratios (name, value), measured in one run."""
    with production_logging():
        times = anyio.run(_measure, 2 if quick else 15, 5 if quick else 200)
    rows = [(name, statistics.median(samples) * 1e6) for name, samples in times.items()]
    base = times["MCP call, in memory, no guard"]
    ratios = [
        (
            f"{name} / no guard",
            statistics.median(a / b for a, b in zip(times[name], base, strict=True)),
        )
        for name in list(times)[1:]
    ]
    return rows, ratios


def render(rows: list[tuple[str, float]], ratios: list[tuple[str, float]], command: str) -> str:
    lines = [f"MCP, per tool call (`{command}`)", "", "| case | µs per call |", "|---|---|"]
    lines += [f"| {name} | {value:.1f} |" for name, value in rows]
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {name} | {value:.2f}× |" for name, value in ratios]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few short rounds (a smoke test)")
    options = parser.parse_args(argv)
    command = "python benchmarks/integrations_mcp.py" + (" --quick" if options.quick else "")
    print(render(*measure(options.quick), command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
