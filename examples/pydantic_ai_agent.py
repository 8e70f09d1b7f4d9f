"""A Pydantic AI agent guarded by guardrail, offline: a scripted model stands in for the LLM.

The model lists the customer's orders, then asks for a refund with an order id
one character off. The guard refuses the call and the model gets the reason as
a retry prompt, which says to copy the value from the ID LEDGER: the capability
keeps that block in the model's instructions at every request
(``ledger_instructions=True``), so the model copies ``order_2`` from it, and the
refund runs once, on the right order. A second run of the same conversation compacts the history
first, and the model copies the id from the ledger block compaction wrote.

Run it with ``python examples/pydantic_ai_agent.py`` (needs ``guardrail-ids[pydantic-ai]``).
"""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from guardrail import Guard
from guardrail.integrations.pydantic_ai import Guardrail, guardrail_history_processor

guard = Guard(mode="reprompt")
guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
guard.declare("list_orders", produces={"orders[*]": "order"}, effect="read")
guard.declare("refund", ids={"order_id": "order"}, effect="write")


def ledger_value(texts: list[str], role: str) -> str:
    """What the model copies from an ID LEDGER block among ``texts`` for ``role``."""
    for text in texts:
        for line in text.splitlines():
            if line.split(" ", 1)[0] == role:
                return line.split()[1]
    raise LookupError(f"no {role} in the ledger block")


def compacted(messages: list[ModelMessage]) -> list[str]:
    """The texts of the compacted messages (the ledger block, then the summary)."""
    return [
        part.content
        for message in messages
        for part in message.parts
        if isinstance(part, CompactionPart) and part.content
    ]


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: what it says next, given the conversation so far."""
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart) and last.outcome == "retried":
        print("model was told:", str(last.content).splitlines()[1][:72], "...")
        order = ledger_value([info.instructions or ""], "order_2")
        print("model copies order_2 from the ID LEDGER in its instructions:", order)
        return call("refund", order_id=order)
    if isinstance(last, ToolReturnPart) and last.tool_name == "list_orders":
        return call("refund", order_id="#W2378157")  # one character off
    if isinstance(last, ToolReturnPart):
        return ModelResponse(parts=[TextPart(f"Done: {last.content}.")])
    if compacted(messages):
        print("model reads the ledger block: order =", ledger_value(compacted(messages), "order"))
        return call("refund", order_id=ledger_value(compacted(messages), "order"))
    return call("list_orders")


def call(tool: str, **arguments: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(tool, arguments)])


agent = Agent(
    FunctionModel(scripted_model),
    capabilities=[
        # The one line that guards every tool of the agent, the ledger in every request.
        Guardrail(guard, ledger_instructions=True),
        ProcessHistory(guardrail_history_processor(guard, max_messages=6, keep_recent=1)),
    ],
)


@agent.tool_plain
def list_orders() -> dict[str, list[str]]:
    """The customer's orders, newest last."""
    return {"orders": ["#W8855135", "#W2378156"]}


@agent.tool_plain
def refund(order_id: str) -> str:
    """Refund one order."""
    print("refund ran on", order_id)
    return f"refunded {order_id}"


async def main() -> None:
    async with guard.session("conversation-42"):
        first = await agent.run("Please refund my second order.")
        print(first.output)
        second = await agent.run(
            "And refund the first one too.", message_history=first.all_messages()
        )
        print(second.output)


if __name__ == "__main__":
    asyncio.run(main())
