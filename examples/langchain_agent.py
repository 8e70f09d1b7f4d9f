"""A LangChain v1 agent guarded by guardrail, offline: a scripted model, no API key.

Run it: ``python examples/langchain_agent.py`` (needs ``pip install 'guardrail-ids[langchain]'``).

The model looks up the customer's orders, then asks for a refund with an order
id one character off. The guard refuses it and tells the model why, as an
error tool message; the model copies the id from the ledger and the refund runs,
once, on the right order. Compaction runs in between: the search result leaves
the context, and the id stays in the ID LEDGER block, verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool

from guardrail import Guard
from guardrail.integrations.langchain import GuardrailCompactionMiddleware, GuardrailMiddleware

guard = Guard(mode="reprompt", refuse_undeclared=True)
guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
guard.add_kind("customer", pattern=r"cus_\w{6}")
guard.declare(
    "search_orders",
    ids={"customer_id": "customer"},
    produces={"orders[*].order_id": "order"},
    effect="read",
    verifies="on_success",
)
guard.declare("refund", ids={"order_id": "order"}, effect="write")

refunds: list[str] = []


@tool
def search_orders(customer_id: str) -> dict[str, Any]:
    """Find a customer's orders."""
    return {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]}


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    refunds.append(order_id)
    return f"refunded {order_id}"


def ask(name: str, **args: str) -> AIMessage:
    """A model turn that calls one tool."""
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{name}_{args}"}])


def script(messages: Sequence[BaseMessage]) -> AIMessage:
    """What the model says next: search, a mutated id, then the id copied from the ledger."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        return ask("search_orders", customer_id="cus_41ZpA9")
    if isinstance(last, ToolMessage) and last.name == "search_orders":
        return ask("refund", order_id="#W2378157")  # one character off
    if isinstance(last, ToolMessage) and last.status == "error":
        print("refused:", last.text.splitlines()[0])
        ledger = next(m.text for m in messages if m.text.startswith("ID LEDGER"))
        value = next(line.split()[1] for line in ledger.splitlines() if line.startswith("order_2 "))
        return ask("refund", order_id=value)
    return AIMessage(last.text)


class ScriptedModel(BaseChatModel):
    """A chat model whose every reply is ``script(messages)``."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=script(messages))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self


agent = create_agent(
    ScriptedModel(),
    [search_orders, refund],
    middleware=[
        GuardrailCompactionMiddleware(guard, trigger=("messages", 4), keep_last_messages=1),
        GuardrailMiddleware(guard),
    ],
)
out = agent.invoke(
    {"messages": [HumanMessage("I'm cus_41ZpA9. The blender from my second order broke.")]},
    {"configurable": {"thread_id": "conversation-42"}},
)
print("agent:", out["messages"][-1].text)
print("refunds made:", refunds)
