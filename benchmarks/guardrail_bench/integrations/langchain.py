"""What GuardrailMiddleware costs a LangChain v1 agent, per tool call, beside LangChain's own cost.

Two sections, each measured in interleaved rounds:

- one tool call: ``tool.invoke(call)`` (what LangChain's tool node does per call)
  against ``GuardrailMiddleware.wrap_tool_call`` around that same invoke, with the
  ids in a ledger of 1,000 entries: the guard's own cost per call, and the ratio;
- one agent run of ``create_agent`` with a scripted model (a user message, one
  model turn that calls the write tool, the tool, a final model turn), with and
  without the middleware: what a run pays in all (the check, the record, reading
  the user's message, opening the session).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from guardrail_bench.common import CUSTOMER, ORDER, Run, fill, ids, make_guard
from guardrail_bench.report import Row, Section, difference, ratio
from guardrail_bench.timing import calls, interleaved, single

TITLE_CALL = "LangChain: one tool call through GuardrailMiddleware (per call)"
TITLE_RUN = "LangChain: one create_agent run with one tool call (per run)"


def bench_langchain(run: Run) -> None:
    """Both sections into the report; a note instead where LangChain is not installed."""
    sizes, report, rng = run.sizes, run.report, run.rng
    try:
        from langchain.agents import create_agent
        from langchain_core.language_models import BaseChatModel, LanguageModelInput
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.runnables import Runnable
        from langchain_core.tools import tool
        from langgraph.prebuilt.tool_node import ToolCallRequest

        from guardrail.integrations.langchain import GuardrailMiddleware
    except ImportError as missing:
        why = f"LangChain is not installed ({missing}): pip install 'guardrail-ids[langchain]'"
        section = Section(TITLE_CALL, rows=[Row("GuardrailMiddleware", skipped=why)])
        report.sections.append(section)
        return

    guard = make_guard(mode="reprompt")
    guard.declare("refund", ids={"customer_id": CUSTOMER, "order_id": ORDER}, effect="write")
    customers = ids(rng, "cus_", 8, 500)
    orders = ids(rng, "ord_", 10, 500)
    ledger = fill(guard, customers, orders)
    customer, order = customers[7], orders[11]
    arguments = {"customer_id": customer, "order_id": order}

    @tool
    def refund(customer_id: str, order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    middleware = GuardrailMiddleware(guard)
    config = {"configurable": {"thread_id": "bench"}}
    call = {"name": "refund", "args": arguments, "id": "call_1", "type": "tool_call"}
    request = ToolCallRequest(
        tool_call=call,  # type: ignore[arg-type]
        tool=refund,
        state={},
        runtime=SimpleNamespace(config=config),  # type: ignore[arg-type]
    )

    def handler(req: Any) -> Any:
        return refund.invoke(req.tool_call)

    with guard.session("bench", ledger=ledger):
        pass  # the ledger becomes the session's: every call below finds its ids there
    ready = refund.invoke(call)  # a tool's answer, made once: the middleware alone, no tool

    def answered(req: Any) -> Any:
        return ready

    cases = {
        "tool.invoke(call)": calls(lambda: handler(request)),
        "GuardrailMiddleware around tool.invoke": calls(
            lambda: middleware.wrap_tool_call(request, handler)
        ),
        "a handler returning a ready ToolMessage": calls(lambda: answered(request)),
        "GuardrailMiddleware around that handler": calls(
            lambda: middleware.wrap_tool_call(request, answered)
        ),
    }
    times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    rows = {name: Row(name, samples) for name, samples in times.items()}
    plain, guarded, bare_handler, guarded_handler = rows.values()
    section = Section(TITLE_CALL, rows=list(rows.values()))
    section.ratios = [
        ("around tool.invoke / tool.invoke", f"{ratio(guarded, plain):.2f}×"),
        (
            "the middleware's own cost per call (around the ready handler − the handler)",
            f"{difference(guarded_handler, bare_handler) * 1e6:.1f} µs",
        ),
        (
            "LangChain's tool.invoke / the middleware's own cost",
            f"{plain.median / difference(guarded_handler, bare_handler):.1f}×",
        ),
    ]
    section.notes = [
        (
            "The ids are in a session ledger of 1,000 entries; structlog filters below WARNING. "
            "The middleware's cost is the check, the run of the handler, and the record of its "
            "result, inside `with guard.session(thread_id)`."
        )
    ]
    report.sections.append(section)

    class Scripted(BaseChatModel):
        """Calls refund once, then answers."""

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
            if isinstance(messages[-1], HumanMessage):
                reply = AIMessage("", tool_calls=[{**call, "id": f"c{len(messages)}"}])
            else:
                reply = AIMessage("done")
            return ChatResult(generations=[ChatGeneration(message=reply)])

        def bind_tools(
            self, tools: Sequence[Any], **kwargs: Any
        ) -> Runnable[LanguageModelInput, AIMessage]:
            return self

    # The agents' invoke() overloads want typed state and config; the scripted run needs neither.
    bare: Any = create_agent(Scripted(), [refund])
    with_guard: Any = create_agent(Scripted(), [refund], middleware=[middleware])
    user = {"messages": [HumanMessage(f"refund {order} for {customer}")]}
    runs: dict[str, Callable[[], Any]] = {
        "create_agent run, no middleware": lambda: bare.invoke(user, config),
        "create_agent run, GuardrailMiddleware": lambda: with_guard.invoke(user, config),
    }
    for agent_run in runs.values():
        agent_run()  # warm up: the first run compiles what LangChain caches
    cases = {name: single(agent_run) for name, agent_run in runs.items()}
    samples = interleaved(cases, rounds=sizes.slow_rounds * 3, number=1)
    run_rows = [Row(name, samples[name], unit="ms") for name in runs]
    agent_bare, agent_guarded = run_rows
    extra = difference(agent_guarded, agent_bare)
    runs_section = Section(TITLE_RUN, rows=run_rows)
    runs_section.ratios = [
        ("with the middleware / without", f"{ratio(agent_guarded, agent_bare):.3f}×"),
        ("what the middleware adds to a run (one call)", f"{extra * 1e3:.2f} ms"),
    ]
    runs_section.notes = [
        (
            "A run pays for the check and record of its call, and for the `before_agent` hook "
            "that reads the user's message: LangGraph runs a hook as a node of its own."
        )
    ]
    report.sections.append(runs_section)
