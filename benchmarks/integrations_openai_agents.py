"""What guard_agent adds to a tool call in the OpenAI Agents SDK, beside what the SDK costs.

Runs ``Runner.run`` with a fake model (no network) that calls one write tool ``calls``
times, one call per model turn, or all of them in one turn, then answers; the same
agent with and without :func:`guard_agent`, and with no tool call at all, in
interleaved rounds. Per tool call:

- the SDK's own cost: (unguarded run with the calls - run without them) / calls;
- the adapter's cost: (guarded run - unguarded run) / calls;
- their ratio, taken per round (the figure to compare on a noisy machine).

Every id is in the ledger (the allowed path), the audit goes to the standard library
logger as it does by default (nothing rendered below a warning).

    python benchmarks/integrations_openai_agents.py           # the full run
    python benchmarks/integrations_openai_agents.py --quick   # a check that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    ModelResponse,
    Runner,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.tool_context import ToolContext

from guardrail import Guard
from guardrail.integrations.openai_agents import guard_agent

ORDERS = [f"#W{n:07d}" for n in range(1000)]


class LoopingModel(Model):
    """A fake model: ``turns`` turns of ``per_turn`` refund calls each, then a final answer."""

    def __init__(self, turns: int, per_turn: int) -> None:
        self.turns = turns
        self.per_turn = per_turn
        self.done = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        if self.done == self.turns:
            output: list[Any] = [assistant_message("done")]
        else:
            output = [
                function_call(
                    "refund",
                    {"order_id": ORDERS[(self.done * self.per_turn + n) % len(ORDERS)]},
                    call_id=f"c{self.done}_{n}",
                )
                for n in range(self.per_turn)
            ]
        self.done += 1
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the benchmark does not stream")


def build() -> tuple[Guard, Agent[Any]]:
    guard = Guard(mode="reprompt", capacity=10_000, max_ids_per_call=len(ORDERS))
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("find_orders", produces={"orders[*]": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")

    @function_tool
    async def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    return guard, Agent(name="support", tools=[refund])


@dataclass
class Result:
    """Per-call microseconds, per round."""

    sdk: list[float]
    adapter: list[float]

    def line(self, label: str) -> str:
        sdk, adapter = statistics.median(self.sdk), statistics.median(self.adapter)
        ratio = statistics.median(a / s for a, s in zip(self.adapter, self.sdk, strict=True))
        return (
            f"| {label} | {sdk:,.0f} µs | {adapter:,.1f} µs "
            f"(min {min(self.adapter):,.1f}, max {max(self.adapter):,.1f}) | {ratio:.1%} |"
        )


async def measure(turns: int, per_turn: int, rounds: int, repeat: int) -> Result:
    """Interleaved rounds of the bare, plain and guarded runs; per-call costs per round."""
    guard, agent = build()
    guarded = guard_agent(agent, guard)
    with guard.session("bench") as ledger:
        guard.record("find_orders", {}, {"orders": ORDERS})
        assert len(list(ledger.entries())) == len(ORDERS)

        async def timed(which: Agent[Any], calls_made: int) -> float:
            t0 = time.perf_counter()
            for _ in range(repeat):
                model = LoopingModel(turns if calls_made else 0, per_turn)
                await Runner.run(which.clone(model=model), "refund", max_turns=turns + 2)
            return (time.perf_counter() - t0) / repeat

        cases: dict[str, Callable[[], Any]] = {
            "bare": lambda: timed(agent, 0),
            "plain": lambda: timed(agent, 1),
            "guarded": lambda: timed(guarded, 1),
        }
        for run in cases.values():  # warm up
            await run()
        calls = turns * per_turn
        sdk: list[float] = []
        adapter: list[float] = []
        names = list(cases)
        for r in range(rounds):
            order = names[r % 3 :] + names[: r % 3]
            took = {name: await cases[name]() for name in order}
            sdk.append((took["plain"] - took["bare"]) / calls * 1e6)
            adapter.append((took["guarded"] - took["plain"]) / calls * 1e6)
    return Result(sdk, adapter)


async def measure_direct(calls: int, rounds: int) -> Result:
    """The adapter's own work per call, without the runner: guardrails and invoker around the tool.

    Per round: ``calls`` allowed calls as the SDK makes them (the input guardrail, the
    tool's invoker, the output guardrail) through the guarded copy, against the same
    calls of the plain tool's invoker; the SDK column is the plain invoker's cost.
    """
    guard, agent = build()
    guarded = guard_agent(agent, guard)
    plain_tool, tool = agent.tools[0], guarded.tools[0]
    assert isinstance(plain_tool, FunctionTool)
    assert isinstance(tool, FunctionTool)
    enforce, record = (tool.tool_input_guardrails or [])[0], (tool.tool_output_guardrails or [])[0]
    contexts = [
        ToolContext(None, tool_name="refund", tool_call_id=f"c{n}",
                    tool_arguments=f'{{"order_id": "{ORDERS[n % len(ORDERS)]}"}}')
        for n in range(calls)
    ]  # fmt: skip

    async def through_the_adapter() -> float:
        t0 = time.perf_counter()
        for context in contexts:
            await enforce.run(ToolInputGuardrailData(context=context, agent=guarded))
            output = await tool.on_invoke_tool(context, context.tool_arguments)
            await record.run(ToolOutputGuardrailData(context=context, agent=guarded, output=output))
        return time.perf_counter() - t0

    async def plain() -> float:
        t0 = time.perf_counter()
        for context in contexts:
            await plain_tool.on_invoke_tool(context, context.tool_arguments)
        return time.perf_counter() - t0

    sdk: list[float] = []
    adapter: list[float] = []
    with guard.session("bench"):
        guard.record("find_orders", {}, {"orders": ORDERS})
        await through_the_adapter()
        for r in range(rounds):
            if r % 2:
                guarded_took, plain_took = await through_the_adapter(), await plain()
            else:
                plain_took, guarded_took = await plain(), await through_the_adapter()
            sdk.append(plain_took / calls * 1e6)
            adapter.append((guarded_took - plain_took) / calls * 1e6)
    return Result(sdk, adapter)


async def main(quick: bool) -> list[str]:
    set_tracing_disabled(True)
    rounds, repeat, turns = (2, 1, 2) if quick else (15, 3, 20)
    direct = await measure_direct(20 if quick else 2000, rounds)
    sequential = await measure(turns, 1, rounds, repeat)
    parallel = await measure(1, turns, rounds, repeat)
    return [
        "| per tool call, allowed | the SDK's own cost | guard_agent adds | ratio (per round) |",
        "|---|---:|---:|---:|",
        sequential.line(f"Runner.run, one call per model turn ({turns} turns)"),
        parallel.line(f"Runner.run, {turns} parallel calls in one turn"),
        direct.line("guardrails + invoker alone, vs the tool's own invoker"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: only a harness check")
    quick = parser.parse_args().quick
    lines = asyncio.run(main(quick))
    if quick:
        lines.insert(0, "Quick mode: only a check that the benchmark runs. Not numbers.")
    print("\n".join(lines))
    sys.exit(0)
