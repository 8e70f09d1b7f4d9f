"""What GuardrailPlugin adds to a tool call in Google's ADK, beside what ADK costs.

Runs ``runner.run_async`` with a model scripted on ADK's ``BaseLlm`` (no network) that
calls one write tool ``turns`` times, one call per model turn, or all of them in one
turn, then answers; the same app with and without :class:`GuardrailPlugin`, and with no
tool call at all, in interleaved rounds. Per tool call:

- ADK's own cost: (unguarded run with the calls - run without them) / calls;
- the adapter's cost: (guarded run - unguarded run) / calls;
- their ratio, taken per round (the figure to compare on a noisy machine).

Every id is in the ledger (the allowed path): every run's ADK session maps to one guard
session (``session_id=``) that holds the orders. The audit goes to the standard library
logger, as it does by default in a program that did not configure structlog (nothing
rendered below a warning): this group runs under :func:`default_logging`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from guardrail import Guard
from guardrail.integrations.google_adk import GuardrailPlugin
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section
from guardrail_bench.timing import awaits, interleaved, paired_ratio

ORDERS = [f"#W{n:07d}" for n in range(1000)]
TITLE = "Google ADK: what GuardrailPlugin adds to an allowed tool call (per call)"
SESSION = "bench"


class LoopingModel(BaseLlm):
    """A scripted model: ``turns`` turns of ``per_turn`` refund calls each, then an answer.

    It counts the responses its request holds, so one model serves every run.
    """

    model: str = "looping"
    turns: int = 0
    per_turn: int = 1
    tool: str = "refund"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        answered = sum(
            part.function_response is not None
            for content in llm_request.contents
            for part in content.parts or ()
        )
        done = answered // self.per_turn
        if done >= self.turns:
            parts = [types.Part(text="done")]
        else:
            parts = [
                types.Part(
                    function_call=types.FunctionCall(
                        name=self.tool,
                        args={"order_id": ORDERS[(done * self.per_turn + n) % len(ORDERS)]},
                        id=f"c{done}_{n}",
                    )
                )
                for n in range(self.per_turn)
            ]
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=1)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


async def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


def build() -> Guard:
    guard = Guard(mode="reprompt", capacity=10_000, max_ids_per_call=len(ORDERS))
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("find_orders", produces={"orders[*]": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


def runner_of(turns: int, per_turn: int, plugins: list[BasePlugin]) -> InMemoryRunner:
    agent = LlmAgent(
        name="support", model=LoopingModel(turns=turns, per_turn=per_turn), tools=[refund]
    )
    return InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=plugins))


async def one_run(runner: InMemoryRunner) -> None:
    session = await runner.session_service.create_session(app_name="bench", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="refund")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        pass


def _per_call(label: str, adk: list[float], adapter: list[float], section: Section) -> None:
    """Two rows (seconds per call, per round) and their per-round ratio."""
    section.rows += [
        Row(f"{label}: ADK's own cost", adk),
        Row(f"{label}: GuardrailPlugin adds", adapter),
    ]
    section.ratios.append(
        (f"{label}: GuardrailPlugin adds / ADK's own cost", f"{paired_ratio(adapter, adk):.1%}")
    )


def runs(
    loop: asyncio.AbstractEventLoop, turns: int, per_turn: int, rounds: int, repeat: int
) -> tuple[list[float], list[float]]:
    """Interleaved rounds of the bare, plain and guarded runs; seconds per call, per round."""
    guard = build()
    plugin = GuardrailPlugin(guard, session_id=lambda _: SESSION)
    with guard.session(SESSION) as ledger:
        guard.record("find_orders", {}, {"orders": ORDERS})
        assert len(list(ledger.entries())) == len(ORDERS)
    runners = {
        "bare": runner_of(0, per_turn, []),
        "plain": runner_of(turns, per_turn, []),
        "guarded": runner_of(turns, per_turn, [plugin]),
    }
    cases = {
        name: awaits(loop, functools.partial(one_run, runner)) for name, runner in runners.items()
    }
    for case in cases.values():  # warm up
        case(1)
    took = interleaved(cases, rounds=rounds, number=repeat)
    calls = turns * per_turn
    adk = [(p - b) / calls for p, b in zip(took["plain"], took["bare"], strict=True)]
    adapter = [(g - p) / calls for g, p in zip(took["guarded"], took["plain"], strict=True)]
    return adk, adapter


def direct(
    loop: asyncio.AbstractEventLoop, calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """The plugin's own work per call, without the runner: its callbacks around the tool.

    Per round: ``calls`` allowed calls as ADK makes them (before_tool_callback, the
    tool's ``run_async``, after_tool_callback), against the same calls of the tool's
    ``run_async`` alone; the ADK column is the tool's own run. The tool context is a
    real one, taken from a run.
    """
    guard = build()
    plugin = GuardrailPlugin(guard, session_id=lambda _: SESSION)
    contexts: list[ToolContext] = []

    async def capture(order_id: str, tool_context: ToolContext) -> str:
        """Refund an order, keeping the context ADK gave the call."""
        contexts.append(tool_context)
        return "refunded"

    agent = LlmAgent(name="support", model=LoopingModel(turns=1, tool="capture"), tools=[capture])
    loop.run_until_complete(one_run(InMemoryRunner(app=App(name="bench", root_agent=agent))))
    context = contexts[0]
    tool = FunctionTool(refund)
    arguments = [{"order_id": ORDERS[n % len(ORDERS)]} for n in range(calls)]

    async def through_the_adapter() -> None:
        for given in arguments:
            args = dict(given)
            await plugin.before_tool_callback(tool=tool, tool_args=args, tool_context=context)
            result = await tool.run_async(args=args, tool_context=context)
            await plugin.after_tool_callback(
                tool=tool, tool_args=args, tool_context=context, result=result
            )

    async def plain() -> None:
        for given in arguments:
            await tool.run_async(args=dict(given), tool_context=context)

    with guard.session(SESSION):
        guard.record("find_orders", {}, {"orders": ORDERS})
    cases = {"plain": awaits(loop, plain), "guarded": awaits(loop, through_the_adapter)}
    cases["guarded"](1)  # warm up
    took = interleaved(cases, rounds=rounds, number=1)
    adk = [p / calls for p in took["plain"]]
    adapter = [(g - p) / calls for g, p in zip(took["guarded"], took["plain"], strict=True)]
    return adk, adapter


def bench_google_adk(run: Run) -> None:
    """run_async with calls in turns and in parallel, and the plugin's work alone."""
    rounds, repeat, turns = run.pick((15, 3, 20), (2, 1, 2))
    section = Section(TITLE)
    adk_logger = logging.getLogger("google_adk")
    level = adk_logger.level
    adk_logger.setLevel(logging.ERROR)  # ADK warns of each run's telemetry; the table is the point
    loop = asyncio.new_event_loop()
    try:
        alone = direct(loop, run.pick(2000, 20), rounds)
        sequential = runs(loop, turns, 1, rounds, repeat)
        parallel = runs(loop, 1, turns, rounds, repeat)
    finally:
        loop.close()
        adk_logger.setLevel(level)
    _per_call(f"run_async, one call per model turn ({turns} turns)", *sequential, section)
    _per_call(f"run_async, {turns} parallel calls in one turn", *parallel, section)
    _per_call("the callbacks alone, vs the tool's own run_async", *alone, section)
    section.notes.append(
        "Rows are per tool call, from per-round differences of whole runs; the audit goes to "
        "the standard library logger (structlog not configured), as by default."
    )
    run.report.sections.append(section)
