"""A hand-written tool-calling loop, guarded: run_tool_calls answers every call of a reply.

The model is scripted (no network, no key): it looks the customer's orders up,
sends a refund for an order id one character off, reads the re-prompt, and
sends the id the ledger holds. Halfway, the conversation is compacted, and the
id still arrives verbatim. Run it: ``python examples/plain_loop.py``.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from guardrail import Guard, Id
from guardrail.compaction import compact
from guardrail.integrations.loops import Toolbox, run_tool_calls

guard = Guard(mode="reprompt", refuse_undeclared=True)
guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
guard.add_kind("customer", pattern=r"cus_\w{6}")
REFUNDS: list[str] = []


@guard.tool(produces={"orders[*].order_id": "order"}, effect="read")
def search_orders(customer_id: Annotated[str, Id("customer")]) -> dict[str, Any]:
    """The customer's orders, newest first."""
    return {"orders": [{"order_id": "#W8855135", "item": "blender"}, {"order_id": "#W2378156"}]}


@guard.tool(effect="write")
def issue_refund(order_id: Annotated[str, Id("order")], amount: int) -> str:
    """Refund ``amount`` on an order."""
    REFUNDS.append(order_id)
    return f"refunded {amount} on {order_id}"


TOOLS = Toolbox(guard, [search_orders, issue_refund])  # schemas from the signatures


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """An assistant message making one call, as the chat completions API returns it."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def scripted_model(step: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What a model replies at ``step``, reading ``messages``; the last reply is plain text."""
    if step == 0:
        return tool_call("c1", "search_orders", customer_id="cus_41ZpA9")
    if step == 1:
        return tool_call(
            "c2", "issue_refund", order_id="#W8855153", amount=40
        )  # two digits swapped
    if step == 2:
        # After the compaction, the order is in the ledger block that opens the context.
        order = re.search(r"#W\d{7}", messages[0]["content"])
        assert order is not None, "the compacted context lost the order id"
        return tool_call("c3", "issue_refund", order_id=order.group(), amount=40)
    return {"role": "assistant", "content": "Your blender is refunded."}


def main() -> None:
    user = "Hi, I'm cus_41ZpA9. The blender from my last order broke."
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    with guard.session("conversation-42"):
        guard.observe_user(user)
        for step in range(4):
            reply = scripted_model(step, messages)
            messages.append(reply)
            results = run_tool_calls(guard, reply, TOOLS)
            for result in results:
                print(f"{result['tool_call_id']}: {result['content'].splitlines()[0]}")
            messages.extend(results)
            if step == 1:  # compact the history: the order id must survive it verbatim
                messages = compact(messages, guard.ledger, guard=guard, keep_recent=0).messages
        print(f"final: {messages[-1]['content']} (refunds: {REFUNDS})")


if __name__ == "__main__":
    main()
