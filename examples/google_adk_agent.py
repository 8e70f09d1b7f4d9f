"""A support agent on Google's Agent Development Kit, guarded by guardrail, with a scripted model.

Runs offline: a model scripted on ADK's own BaseLlm plays the model, so no API key and no
network. The model finds the customer's orders, then asks for a refund with an order id
one character off. The guard refuses that call and the model reads the re-prompt as the
tool's response; it copies the id from the ID LEDGER block at the end of its system
instruction, and the refund runs once, on the right order.

    python examples/google_adk_agent.py
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from guardrail import Guard
from guardrail.integrations.google_adk import GuardrailPlugin

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


async def search_orders(customer_id: str) -> dict[str, Any]:
    """The customer's orders, newest last."""
    return {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]}


def issue_refund(order_id: str, amount: int) -> str:
    """Refund part of an order."""
    REFUNDS.append(order_id)
    return f"refunded {amount} on {order_id}"


def call(name: str, arguments: dict[str, Any], call_id: str) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=arguments, id=call_id))


def refund_from_the_ledger(request: LlmRequest) -> types.Part:
    """The model's second try: it copies [order_2] from the ID LEDGER block it was given."""
    instruction = str(request.config.system_instruction)
    block = instruction[instruction.index("ID LEDGER") :]
    value = next(line.split()[1] for line in block.splitlines() if line[:8] == "order_2 ")
    return call("issue_refund", {"order_id": value, "amount": 40}, "c3")


class ScriptedModel(BaseLlm):
    """ADK's model interface, answering from a script: one turn per request."""

    model: str = "scripted"
    turns: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.turns += 1
        part = {
            1: lambda: call("search_orders", {"customer_id": "cus_41ZpA9"}, "c1"),
            2: lambda: types.Part(text="You have two orders. Which one broke?"),
            3: lambda: call("issue_refund", {"order_id": "#W2378157", "amount": 40}, "c2"),
            4: lambda: refund_from_the_ledger(llm_request),
        }.get(self.turns, lambda: types.Part(text="Done: 40 refunded on your second order."))()
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


agent = LlmAgent(
    name="support",
    model=ScriptedModel(),
    instruction="Help with orders.",
    tools=[search_orders, issue_refund],
)
app = App(name="shop", root_agent=agent, plugins=[GuardrailPlugin(guard, ledger_instructions=True)])


async def main() -> None:
    logging.getLogger("google_adk").setLevel(logging.ERROR)  # a script's model counts no tokens
    runner = InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name="shop", user_id="cus_41ZpA9")
    for text in ["Hi, I'm cus_41ZpA9. The blender broke.", "The second order."]:
        print(f"user: {text}")
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for event in runner.run_async(
            user_id=session.user_id, session_id=session.id, new_message=message
        ):
            for response in event.get_function_responses():
                answer = response.response or {}
                said = answer.get("result", answer.get("error", answer))
                print(f"  tool -> {str(said).splitlines()[0]}")
            if event.is_final_response() and event.content and event.content.parts:
                print(f"agent: {event.content.parts[0].text}")
    print(f"refunds that ran: {REFUNDS}")


if __name__ == "__main__":
    asyncio.run(main())
