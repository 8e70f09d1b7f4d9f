"""What the Pydantic AI adapter adds to a tool call, beside what Pydantic AI itself costs.

Two views, each measured in interleaved rounds:

- an agent run with a scripted ``FunctionModel`` that makes ``CALLS`` tool calls, one
  per model step, then answers: the agent bare, with a capability that does nothing
  (what Pydantic AI's hooks cost any capability), with a ``GuardedToolset`` in
  ``toolsets=``, and with ``Guardrail(guard)``; the difference from bare divided by
  ``CALLS`` is the cost per call, inside everything a real run does per step;
- one ``call_tool`` of the toolset: the ``FunctionToolset`` bare, and wrapped in a
  ``GuardedToolset`` (check, run, record; the ledger holds 1,000 orders).

Both call a ``write`` tool taking one order id, allowed (a ledger value). The tool and
the model are coroutines, so no thread hand-off (which Pydantic AI uses for sync
functions, and which costs far more than either on a busy machine) blurs the numbers.
It also counts Python function calls per run (cProfile's count), which load does not blur.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage

from guardrail import Guard
from guardrail.integrations.pydantic_ai import GuardedToolset, Guardrail
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section, ratio
from guardrail_bench.timing import awaits, interleaved, paired_difference

CALLS = 20
ORDER = "#W0000500"


def make_guard() -> Guard:
    guard = Guard(mode="reprompt")
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("list_orders", produces={"orders[*]": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


def fill(guard: Guard, session: str) -> None:
    """A ledger of 1,000 orders, as one lookup that returned them would leave it."""
    orders = [f"#W{n:07d}" for n in range(1000)]
    with guard.session(session):
        for start in range(0, len(orders), 100):
            guard.record("list_orders", {}, {"orders": orders[start : start + 100]})


def toolset() -> FunctionToolset[Any]:
    tools: FunctionToolset[Any] = FunctionToolset()

    @tools.tool_plain
    async def refund(order_id: str) -> str:
        """Refund one order (async: a sync tool would time the thread hand-off instead)."""
        return order_id

    return tools


async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls the refund tool CALLS times, one call a step, then answers."""
    if len(messages) > 2 * CALLS:
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[ToolCallPart("refund", {"order_id": ORDER})])


@dataclass
class NoOp(AbstractCapability[Any]):
    """A capability that does nothing: what Pydantic AI charges for any capability's hooks."""


def agents(guard: Guard) -> dict[str, Agent[Any, str]]:
    return {
        "bare": Agent(FunctionModel(model), toolsets=[toolset()]),
        "a capability that does nothing": Agent(
            FunctionModel(model), toolsets=[toolset()], capabilities=[NoOp()]
        ),
        "GuardedToolset in toolsets=": Agent(
            FunctionModel(model), toolsets=[GuardedToolset(toolset(), guard=guard)]
        ),
        "Guardrail(guard)": Agent(
            FunctionModel(model), toolsets=[toolset()], capabilities=[Guardrail(guard)]
        ),
    }


def agent_cases(loop: asyncio.AbstractEventLoop, guard: Guard) -> dict[str, Any]:
    session = guard.session("bench")

    def runner(agent: Agent[Any, str]) -> Any:
        async def one() -> None:
            await agent.run("go")

        return awaits(loop, one, lambda: session)

    return {
        f"agent run, {CALLS} tool calls, {name}": runner(agent)
        for name, agent in agents(guard).items()
    }


def call_counts(loop: asyncio.AbstractEventLoop, guard: Guard) -> dict[str, float]:
    """Python function calls per agent run (cProfile's count), which load does not blur."""
    counts = {}
    with guard.session("bench"):
        for name, agent in agents(guard).items():
            loop.run_until_complete(agent.run("go"))  # warm
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(3):
                loop.run_until_complete(agent.run("go"))
            profile.disable()
            counts[name] = pstats.Stats(profile).total_calls / 3  # type: ignore[attr-defined]
    return counts


def toolset_cases(loop: asyncio.AbstractEventLoop, guard: Guard) -> dict[str, Any]:
    tools = toolset()
    guarded = GuardedToolset(tools, guard=guard)
    ctx = RunContext[Any](deps=None, model=TestModel(), usage=RunUsage())
    plain_tool = loop.run_until_complete(tools.get_tools(ctx))["refund"]
    guarded_tool = loop.run_until_complete(guarded.get_tools(ctx))["refund"]
    arguments = {"order_id": ORDER}

    def call_bare() -> Any:
        return tools.call_tool("refund", arguments, ctx, plain_tool)

    def call_guarded() -> Any:
        return guarded.call_tool("refund", arguments, ctx, guarded_tool)

    session = guard.session("bench")
    return {
        "FunctionToolset.call_tool, bare": awaits(loop, call_bare),
        "GuardedToolset.call_tool": awaits(loop, call_guarded, lambda: session),
    }


def bench_pydantic_ai(run: Run) -> None:
    """Agent runs and toolset calls, bare and guarded, and the function calls each makes."""
    rounds, sample = run.pick((15, 0.2), (2, 0.002))
    guard = make_guard()
    fill(guard, "bench")
    loop = asyncio.new_event_loop()
    try:
        runs = interleaved(agent_cases(loop, guard), rounds=rounds, sample=sample)
        calls = interleaved(toolset_cases(loop, guard), rounds=rounds, sample=sample)
        counts = call_counts(loop, guard)
    finally:
        loop.close()
    rows = {name: Row(name, samples) for name, samples in {**runs, **calls}.items()}
    title = f"Pydantic AI: an agent run of {CALLS} tool calls, and one call_tool"
    section = Section(title, rows=list(rows.values()))
    bare_name, *others = runs
    bare = rows[bare_name]
    own = statistics.median(runs[bare_name]) / CALLS
    section.ratios.append(("Pydantic AI's own cost per step", f"{own * 1e6:,.1f} µs"))
    for name in others:
        extra = paired_difference(runs[name], runs[bare_name]) / CALLS
        section.ratios.append(
            (
                f"{name} / bare",
                f"{ratio(rows[name], bare):.3f}× ({extra * 1e6:,.1f} µs a tool call)",
            )
        )
    bare_call, guarded_call = (rows[name] for name in calls)
    section.ratios.append(
        ("GuardedToolset.call_tool / bare call_tool", f"{ratio(guarded_call, bare_call):.2f}×")
    )
    bare_count = counts.pop("bare")
    section.ratios.append(("Python function calls per run, bare", f"{bare_count:,.0f}"))
    for name, count in counts.items():
        added = count - bare_count
        section.ratios.append(
            (f"Python function calls added per run: {name}",
             f"+{added:,.0f} ({added / CALLS:,.0f} a tool call)")
        )  # fmt: skip
    run.report.sections.append(section)
