"""What guard_agent adds to a tool call in the OpenAI Agents SDK, beside what the SDK costs.

Runs ``Runner.run`` with a fake model (no network) that calls one write tool ``turns``
times, one call per model turn, or all of them in one turn, then answers; the same
agent with and without :func:`guard_agent`, and with no tool call at all, in
interleaved rounds. Per tool call:

- the SDK's own cost: (unguarded run with the calls - run without them) / calls;
- the adapter's cost: (guarded run - unguarded run) / calls;
- their ratio, taken per round (the figure to compare on a noisy machine).

Every id is in the ledger (the allowed path). The audit goes to the standard library
logger, as it does by default in a program that did not configure structlog (nothing
rendered below a warning): this group runs under :func:`default_logging`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
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
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section
from guardrail_bench.timing import awaits, interleaved, paired_ratio

ORDERS = [f"#W{n:07d}" for n in range(1000)]
TITLE = "OpenAI Agents SDK: what guard_agent adds to an allowed tool call (per call)"


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


def _per_call(label: str, sdk: list[float], adapter: list[float], section: Section) -> None:
    """Two rows (seconds per call, per round) and their per-round ratio."""
    section.rows += [
        Row(f"{label}: the SDK's own cost", sdk),
        Row(f"{label}: guard_agent adds", adapter),
    ]
    section.ratios.append(
        (f"{label}: guard_agent adds / the SDK's own cost", f"{paired_ratio(adapter, sdk):.1%}")
    )


def runs(
    loop: asyncio.AbstractEventLoop, turns: int, per_turn: int, rounds: int, repeat: int
) -> tuple[list[float], list[float]]:
    """Interleaved rounds of the bare, plain and guarded runs; seconds per call, per round."""
    guard, agent = build()
    guarded = guard_agent(agent, guard)
    with guard.session("bench") as ledger:
        guard.record("find_orders", {}, {"orders": ORDERS})
        assert len(list(ledger.entries())) == len(ORDERS)

        def runner(which: Agent[Any], calls_made: int) -> Any:
            def one() -> Any:
                model = LoopingModel(turns if calls_made else 0, per_turn)
                return Runner.run(which.clone(model=model), "refund", max_turns=turns + 2)

            return awaits(loop, one)

        cases = {"bare": runner(agent, 0), "plain": runner(agent, 1), "guarded": runner(guarded, 1)}
        for case in cases.values():  # warm up
            case(1)
        took = interleaved(cases, rounds=rounds, number=repeat)
    calls = turns * per_turn
    sdk = [(p - b) / calls for p, b in zip(took["plain"], took["bare"], strict=True)]
    adapter = [(g - p) / calls for g, p in zip(took["guarded"], took["plain"], strict=True)]
    return sdk, adapter


def direct(
    loop: asyncio.AbstractEventLoop, calls: int, rounds: int
) -> tuple[list[float], list[float]]:
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

    async def through_the_adapter() -> None:
        for context in contexts:
            await enforce.run(ToolInputGuardrailData(context=context, agent=guarded))
            output = await tool.on_invoke_tool(context, context.tool_arguments)
            await record.run(ToolOutputGuardrailData(context=context, agent=guarded, output=output))

    async def plain() -> None:
        for context in contexts:
            await plain_tool.on_invoke_tool(context, context.tool_arguments)

    with guard.session("bench"):
        guard.record("find_orders", {}, {"orders": ORDERS})
        cases = {"plain": awaits(loop, plain), "guarded": awaits(loop, through_the_adapter)}
        cases["guarded"](1)  # warm up
        took = interleaved(cases, rounds=rounds, number=1)
    sdk = [p / calls for p in took["plain"]]
    adapter = [(g - p) / calls for g, p in zip(took["guarded"], took["plain"], strict=True)]
    return sdk, adapter


def bench_openai_agents(run: Run) -> None:
    """Runner.run with calls in turns and in parallel, and the adapter's work alone."""
    set_tracing_disabled(True)
    rounds, repeat, turns = run.pick((15, 3, 20), (2, 1, 2))
    section = Section(TITLE)
    loop = asyncio.new_event_loop()
    try:
        alone = direct(loop, run.pick(2000, 20), rounds)
        sequential = runs(loop, turns, 1, rounds, repeat)
        parallel = runs(loop, 1, turns, rounds, repeat)
    finally:
        loop.close()
    _per_call(f"Runner.run, one call per model turn ({turns} turns)", *sequential, section)
    _per_call(f"Runner.run, {turns} parallel calls in one turn", *parallel, section)
    _per_call("guardrails + invoker alone, vs the tool's own invoker", *alone, section)
    section.notes.append(
        "Rows are per tool call, from per-round differences of whole runs; the audit goes to "
        "the standard library logger (structlog not configured), as by default."
    )
    run.report.sections.append(section)
