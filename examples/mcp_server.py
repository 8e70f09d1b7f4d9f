"""An MCP server whose tools are guarded, and a scripted client talking to it in memory.

The server marks its identifier fields in its tools' schemas
(``x-guardrail-kind``) and adds one line, ``guard_server(server, guard)``: every
``tools/call`` is checked before the tool runs, and a refusal comes back as an
``isError`` result the model reads. The client names its conversation in each
request's ``_meta``, and forwards the user's message there too: the server takes
the order id the user typed to a lookup, and would refuse one the model made up.
Run ``python examples/mcp_server.py`` for the scripted conversation, or
``python examples/mcp_server.py --stdio`` to serve over stdio.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import anyio
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from guardrail import Guard
from guardrail.integrations.mcp import guard_server, session_meta

#: An order id, marked for the guard in the tools' JSON schemas.
OrderId = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "order"})]
ORDERS = {"#W8855135": "blender", "#W8855153": "toaster"}  # one swap apart: two customers
REFUNDS: list[str] = []


class Order(BaseModel):
    order_id: OrderId
    item: str


def build_server(*, reads_introduce_ids: bool = False) -> MCPServer:
    """The shop's MCP server, guarded (the conversation runs the same either way)."""
    server = MCPServer("shop", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_order(order_id: OrderId) -> Order:
        """Look an order up by its id."""
        key = "#" + order_id.lstrip("#")
        if key not in ORDERS:
            raise ToolError(f"no order {order_id}")
        return Order(order_id=key, item=ORDERS[key])

    @server.tool()
    def issue_refund(order_id: OrderId, amount: int) -> str:
        """Refund ``amount`` on an order."""
        REFUNDS.append(order_id)
        return f"refunded {amount} on {order_id}"

    guard = Guard(mode="reprompt", refuse_undeclared=True)
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    # The one line: every tool of the server is guarded.
    guard_server(server, guard, reads_introduce_ids=reads_introduce_ids)
    return server


USER = "My blender order #W8855135 arrived broken, please refund the 40 I paid."


async def conversation(server: MCPServer) -> None:
    """A scripted model: a lookup, a refund with two digits swapped, then the right one."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_order", {"order_id": "#W8855135"}),
        ("issue_refund", {"order_id": "#W8855153", "amount": 40}),
        ("issue_refund", {"order_id": "#W8855135", "amount": 40}),
    ]
    async with Client(server) as client:
        for name, arguments in calls:
            meta = session_meta("conversation-42", user_text=USER)
            result = await client.call_tool(name, arguments, meta=meta)
            block = result.content[0]
            shown = block.text.splitlines()[0] if isinstance(block, TextContent) else ""
            if shown.startswith("{") and result.structured_content is not None:
                shown = json.dumps(result.structured_content)
            print(f"{name}: {'error' if result.is_error else 'ok'}: {shown}")
    print(f"refunds: {REFUNDS}")


if __name__ == "__main__":
    shop = build_server()
    if "--stdio" in sys.argv:
        shop.run("stdio")
    else:
        anyio.run(conversation, shop)
