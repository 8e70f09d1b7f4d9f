"""Overhead of guardrail.integrations.loops per tool call, beside a hand-written loop's own cost.

A hand-written loop answers a chat completion's tool call by parsing its
arguments, calling the function and writing a tool message with the result as
JSON. ``run_tool_calls`` does that and also validates the arguments against the
tool's schema, checks the call with the guard and records the result. Each row
is one assistant message with one allowed call of a write tool, in a session
whose ledger holds 1,000 ids, with logging as a production program sets it up
(warnings only). Cases are timed in interleaved rounds; ratios are per round.

``python benchmarks/integrations_loops.py [--quick]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import interleaved, production_logging

from guardrail import Guard
from guardrail.integrations.loops import Toolbox, run_tool_calls


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


def measure(quick: bool = False) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Rows (name, µs per call) and ratios (name, value), measured in one run."""
    guard, chat, anthropic = setup()
    tools = {"refund": refund}
    validated = Toolbox(guard, tools).compile()
    unvalidated = Toolbox(guard, tools, schemas={"refund": None}).compile()

    def runner(call: Callable[[], Any]) -> Callable[[int], float]:
        import time

        def run(number: int) -> float:
            with guard.session("bench"):
                start = time.perf_counter()
                for _ in range(number):
                    call()
                return time.perf_counter() - start

        return run

    cases = {
        "hand-written loop (parse, call, answer), no guard": runner(lambda: hand_loop(chat, tools)),
        "run_tool_calls, chat message, schema validated": runner(
            lambda: run_tool_calls(guard, chat, validated)
        ),
        "run_tool_calls, chat message, no schema": runner(
            lambda: run_tool_calls(guard, chat, unvalidated)
        ),
        "run_tool_calls, Anthropic message, schema validated": runner(
            lambda: run_tool_calls(guard, anthropic, validated)
        ),
    }
    with production_logging():
        times = interleaved(cases, rounds=2 if quick else 15, sample=0.005 if quick else 0.2)
    rows = [(name, statistics.median(samples) * 1e6) for name, samples in times.items()]
    base = times["hand-written loop (parse, call, answer), no guard"]

    def ratio(name: str) -> float:
        return statistics.median(a / b for a, b in zip(times[name], base, strict=True))

    ratios = [(f"{name} / hand-written loop", ratio(name)) for name in list(cases)[1:]]
    return rows, ratios


def render(rows: list[tuple[str, float]], ratios: list[tuple[str, float]], command: str) -> str:
    lines = [f"Plain loops, per tool call (`{command}`)", "", "| case | µs per call |", "|---|---|"]
    lines += [f"| {name} | {value:.1f} |" for name, value in rows]
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {name} | {value:.2f}× |" for name, value in ratios]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few short rounds (a smoke test)")
    options = parser.parse_args(argv)
    command = "python benchmarks/integrations_loops.py" + (" --quick" if options.quick else "")
    print(render(*measure(options.quick), command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
