"""A Microsoft Agent Framework agent guarded by guardrail, offline: a scripted client is the LLM.

The model lists the customer's orders, then asks for a refund with an order id
one character off. The guard refuses the call and the model reads the reason as
the call's result, which says to copy the value from the ID LEDGER: the
``Guardrail`` context provider keeps that block in the model's instructions at
every model call (``ledger_instructions=True``), so the model copies ``order_2``
from it, and the refund runs once, on the right order. A second run of the same
session pages through twelve more lookups; ``GuardrailCompaction`` compacts the
run as it goes, and the model copies ``order_2`` from the block the compaction
wrote. The framework has no test client of its own: ``ScriptedClient`` is built
from its layers as its provider clients are.

Run it with ``python examples/agent_framework_agent.py`` (needs
``guardrail-ids[agent-framework]``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

from guardrail import Guard
from guardrail.compaction import BLOCK_HEADER
from guardrail.integrations.agent_framework import Guardrail, GuardrailCompaction

guard = Guard(mode="reprompt")
guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
guard.declare("list_orders", produces={"orders[*]": "order"}, effect="read")
guard.declare("refund", ids={"order_id": "order"}, effect="write")
refunds: list[str] = []


@tool
def list_orders(page: int = 0) -> dict[str, Any]:
    """The customer's orders, a page at a time."""
    if page:
        return {"orders": [f"#W{7000000 + page}"]}
    return {"orders": ["#W8855135", "#W2378156"]}


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    refunds.append(order_id)
    return f"refunded {order_id}"


def ledger_value(text: str, role: str) -> str:
    """What the model copies from the ID LEDGER block in ``text`` for ``role``."""
    block = text[text.index(BLOCK_HEADER) :]
    return next(line.split()[1] for line in block.splitlines() if line.split()[:1] == [role])


class ScriptedClient(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """Stands in for the LLM: decides each reply from what it is sent, and prints it."""

    def __init__(self) -> None:
        super().__init__()
        self.function_invocation_configuration["max_iterations"] = 30
        self.ids = itertools.count(1)

    async def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **_: Any
    ) -> ChatResponse:
        contents = self.reply(list(messages), str(options.get("instructions") or ""))
        return ChatResponse(messages=[Message("assistant", contents)])

    def reply(self, messages: list[Message], instructions: str) -> list[Content]:
        last = messages[-1].contents[-1]
        result = str(last.result) if last.type == "function_result" else ""
        asked = messages[-1].text if messages[-1].role == "user" else ""
        if asked.startswith("Refund"):
            return self.call("list_orders")
        if asked.startswith("Page"):
            return self.call("list_orders", page=1)
        if result.startswith('{"orders": ["#W7'):
            page = int(json.loads(result)["orders"][0][2:]) - 7000000 + 1
            if page <= 12:
                return self.call("list_orders", page=page)
            texts = " ".join(m.text or "" for m in messages if BLOCK_HEADER in (m.text or ""))
            print(f"model: refund order_2 again, copied from the compacted block: {texts != ''}")
            return self.call("refund", order_id=ledger_value(texts, "order_2"))
        if result.startswith('{"orders"'):
            return self.call("refund", order_id="#W2378157")  # one character off
        if result.startswith("guardrail refused"):
            print(f"tool -> {result.splitlines()[0]}")
            return self.call("refund", order_id=ledger_value(instructions, "order_2"))
        return [Content.from_text(f"Done: {result}")]

    def call(self, name: str, **arguments: Any) -> list[Content]:
        print(f"model: {name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})")
        return [Content.from_function_call(f"c{next(self.ids)}", name, arguments=arguments)]


agent = Agent(
    client=ScriptedClient(),
    instructions="You are the shop's support agent.",
    tools=[list_orders, refund],
    context_providers=[Guardrail(guard, ledger_instructions=True)],
    compaction_strategy=GuardrailCompaction(guard, trigger=("messages", 12), keep_last_messages=4),
)


async def main() -> None:
    session = agent.create_session(session_id="conversation-42")
    response = await agent.run("Refund my second order, please.", session=session)
    print(response.messages[-1].text)
    response = await agent.run(
        "Page through my older orders, then refund it again.", session=session
    )
    print(response.messages[-1].text)
    print(f"refunds that ran: {refunds}")


if __name__ == "__main__":
    asyncio.run(main())
