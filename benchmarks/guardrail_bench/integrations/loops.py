"""What guardrail.integrations.loops adds per tool call, beside a hand-written loop's own cost.

A hand-written loop answers a chat completion's tool call by parsing its
arguments, calling the function and writing a tool message with the result as
JSON. ``run_tool_calls`` does that and also validates the arguments against the
tool's schema, checks the call with the guard and records the result. Each case
is one assistant message with one allowed call of a write tool, in a session
whose ledger holds 1,000 ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from guardrail import Guard
from guardrail.integrations.loops import Toolbox, run_tool_calls
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section, ratio
from guardrail_bench.timing import Runner, calls, interleaved

TITLE = "Plain loops: one assistant message with one allowed tool call (per message)"
BASE = "hand-written loop (parse, call, answer), no guard"


def refund(customer_id: str, order_id: str, amount: int) -> str:
    return f"refunded {amount} on {order_id}"


def setup() -> tuple[Guard, dict[str, Any], dict[str, Any]]:
    """A guard whose session ledger holds 1,000 orders, and one call in two shapes."""
    guard = Guard(mode="reprompt", capacity=10_000, max_ids_per_call=10_000)
    guard.add_kind("customer", pattern=r"cus_\w{8}")
    guard.add_kind("order", pattern=r"ord_\w{10}")
    guard.declare("lookup", produces={"orders[*]": "order", "customer": "customer"}, effect="read")
    guard.declare("refund", ids={"customer_id": "customer", "order_id": "order"})
    orders = [f"ord_{n:010d}" for n in range(1000)]
    with guard.session("bench"):
        guard.record("lookup", {}, {"orders": orders, "customer": "cus_00000001"})
    arguments = {"customer_id": "cus_00000001", "order_id": orders[500], "amount": 40}
    chat = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "refund", "arguments": json.dumps(arguments)},
            }
        ],
    }
    anthropic = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "refund", "input": arguments}],
    }
    return guard, chat, anthropic


def hand_loop(
    message: dict[str, Any], tools: dict[str, Callable[..., Any]]
) -> list[dict[str, Any]]:
    """What a loop does without guardrail: parse, call, answer."""
    answers = []
    for call in message["tool_calls"]:
        function = call["function"]
        result = tools[function["name"]](**json.loads(function["arguments"]))
        content = result if isinstance(result, str) else json.dumps(result)
        answers.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return answers


def bench_loops(run: Run) -> None:
    """``run_tool_calls`` in three shapes of one call, beside the hand-written loop."""
    guard, chat, anthropic = setup()
    tools = {"refund": refund}
    validated = Toolbox(guard, tools).compile()
    unvalidated = Toolbox(guard, tools, schemas={"refund": None}).compile()

    def in_session(call: Callable[[], Any]) -> Runner:
        return calls(call, lambda: guard.session("bench"))

    cases = {
        BASE: in_session(lambda: hand_loop(chat, tools)),
        "run_tool_calls, chat message, schema validated": in_session(
            lambda: run_tool_calls(guard, chat, validated)
        ),
        "run_tool_calls, chat message, no schema": in_session(
            lambda: run_tool_calls(guard, chat, unvalidated)
        ),
        "run_tool_calls, Anthropic message, schema validated": in_session(
            lambda: run_tool_calls(guard, anthropic, validated)
        ),
    }
    times = interleaved(cases, rounds=run.pick(15, 2), sample=run.pick(0.2, 0.005))
    rows = {name: Row(name, samples) for name, samples in times.items()}
    section = Section(TITLE, rows=list(rows.values()))
    section.ratios = [
        (f"{name} / hand-written loop", f"{ratio(rows[name], rows[BASE]):.2f}×")
        for name in list(rows)[1:]
    ]
    section.notes.append(
        "The session's ledger holds 1,000 ids; each case runs inside it (opened once a sample)."
    )
    run.report.sections.append(section)
