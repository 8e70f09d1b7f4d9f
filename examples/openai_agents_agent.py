"""A support agent on the OpenAI Agents SDK, guarded by guardrail, with a scripted model.

Runs offline: the SDK's own ScriptedModel plays the model, so no API key and no network.
The model finds the customer's orders, then asks for a refund with an order id one
character off. The guard refuses that call and the model reads the re-prompt as the
tool's output. Its context is compacted before its next call; it copies the id from
the ledger block at the top, and the refund runs once, on the right order.

    python examples/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from guardrail import Guard
from guardrail.integrations.openai_agents import GuardedSession, guard_agent

guard = Guard(mode="reprompt", refuse_undeclared=True)
guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
guard.add_kind("customer", pattern=r"cus_\w{6}")
guard.declare(
    "search_orders",
    ids={"customer_id": "customer"},
    produces={"orders[*].order_id": "order"},
    effect="read",
)
guard.declare("issue_refund", ids={"order_id": "order"}, effect="write")

REFUNDS: list[str] = []


@function_tool
async def search_orders(customer_id: str) -> dict[str, Any]:
    """The customer's orders, newest last."""
    return {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]}


@function_tool
def issue_refund(order_id: str, amount: int) -> str:
    """Refund part of an order."""
    REFUNDS.append(order_id)
    return f"refunded {amount} on {order_id}"


def refund_from_the_ledger(call: ModelCall) -> list[Any]:
    """The model's second try: it copies [order_2] from the ID LEDGER block it was given."""
    for item in call.input:
        text = item.get("content") if isinstance(item, dict) else None
        if isinstance(text, str) and text.startswith("ID LEDGER"):
            value = next(line.split()[1] for line in text.splitlines() if line[:8] == "order_2 ")
            return [function_call("issue_refund", {"order_id": value, "amount": 40}, call_id="c3")]
    raise AssertionError("the model was given no ID LEDGER block")


model = ScriptedModel(
    [
        [function_call("search_orders", {"customer_id": "cus_41ZpA9"}, call_id="c1")],
        [assistant_message("You have two orders. Which one broke?")],
        [function_call("issue_refund", {"order_id": "#W2378157", "amount": 40}, call_id="c2")],
        ModelStep.respond(refund_from_the_ledger),
        [assistant_message("Done: 40 refunded on your second order.")],
    ]
)
agent = guard_agent(
    Agent(name="support", instructions="Help with orders.", model=model,
          tools=[search_orders, issue_refund]),
    guard,
)  # fmt: skip


async def main() -> None:
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as folder:
        # The stored history is compacted once it holds five items, as the run saves them;
        # mid-run, the model's input is compacted with the same options.
        history = SQLiteSession("conversation-42", str(Path(folder) / "history.db"))
        session = GuardedSession(history, guard, trigger=("messages", 5), keep_recent=1)
        config = RunConfig(call_model_input_filter=session.model_input_filter())
        with guard.session(session.session_id):
            for text in ["Hi, I'm cus_41ZpA9. The blender broke.", "The second order."]:
                print(f"user: {text}")
                result = await Runner.run(agent, text, session=session, run_config=config)
                for item in result.new_items:
                    if item.type == "tool_call_output_item":
                        print(f"  tool -> {str(item.output).splitlines()[0]}")
                print(f"agent: {result.final_output}")
    print(f"refunds that ran: {REFUNDS}")


if __name__ == "__main__":
    asyncio.run(main())
