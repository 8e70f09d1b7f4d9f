"""What guardrail.integrations.mcp adds per tool call, beside MCP's own per-call cost.

One ``tools/call`` of a write tool, allowed, from an ``mcp.Client`` to an
``MCPServer`` over the SDK's in-memory transport: unguarded; guarded on the
server (``guard_server``); guarded on the client (``guarded_call_tool``); and the
guard's own work alone. The session's ledger holds 1,000 ids.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from guardrail import Guard
from guardrail.integrations.mcp import guard_server, guarded_call_tool, session_meta
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section, ratio
from guardrail_bench.timing import all_of, awaits, held_open, interleaved

Customer = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "customer"})]
Order = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "order"})]
ORDERS = [f"ord_{n:010d}" for n in range(1000)]
ARGUMENTS = {"customer_id": "cus_00000001", "order_id": ORDERS[500], "amount": 40}
TITLE = "MCP: one allowed tools/call over the in-memory transport (per call)"
BASE = "MCP call, in memory, no guard"


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


def bench_mcp(run: Run) -> None:
    """The three ways through MCP, and the guard's own work, in interleaved rounds."""
    plain, guarded = make_server(), make_server()
    server_guard, client_guard = make_guard(), make_guard()
    guard_server(guarded, server_guard)
    client_guard.declare("refund", ids={"customer_id": "customer", "order_id": "order"})
    meta = session_meta("bench")
    loop = asyncio.new_event_loop()
    try:
        with held_open(loop, all_of(Client(plain), Client(guarded))) as (to_plain, to_guarded):

            async def guarded_client() -> Any:
                async with client_guard.session("bench"):
                    return await guarded_call_tool(to_plain, client_guard, "refund", ARGUMENTS)

            async def own_work() -> Any:
                with client_guard.session("bench"):
                    verdict = client_guard.enforce("refund", ARGUMENTS)
                    client_guard.record("refund", ARGUMENTS, "refunded 40")
                return verdict

            cases = {
                BASE: lambda: to_plain.call_tool("refund", ARGUMENTS),
                "MCP call, guarded server (guard_server)": lambda: to_guarded.call_tool(
                    "refund", ARGUMENTS, meta=meta
                ),
                "MCP call, guarded client (guarded_call_tool)": guarded_client,
                "the guard's own work: enforce + record, no MCP": own_work,
            }
            for call in cases.values():  # warm up; every case must succeed
                result = loop.run_until_complete(call())
                assert not getattr(result, "is_error", False), result
            times = interleaved(
                {name: awaits(loop, call) for name, call in cases.items()},
                rounds=run.pick(15, 2),
                number=run.pick(200, 5),
            )
    finally:
        loop.close()
    rows = {name: Row(name, samples) for name, samples in times.items()}
    section = Section(TITLE, rows=list(rows.values()))
    section.ratios = [
        (f"{name} / no guard", f"{ratio(rows[name], rows[BASE]):.2f}×") for name in list(rows)[1:]
    ]
    section.notes.append("The session's ledger holds 1,000 ids.")
    run.report.sections.append(section)
