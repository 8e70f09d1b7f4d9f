"""What GuardrailMiddleware costs a LangChain v1 agent, per tool call, beside LangChain's own cost.

Two sections, each measured in interleaved rounds in one process:

- one tool call: ``tool.invoke(call)`` (what LangChain's tool node does per call)
  against ``GuardrailMiddleware.wrap_tool_call`` around that same invoke, with the
  ids in a ledger of 1,000 entries: the guard's own cost per call, and the ratio;
- one agent run of ``create_agent`` with a scripted model (a user message, one
  model turn that calls the write tool, the tool, a final model turn), with and
  without the middleware: what a run pays in all (the check, the record, reading
  the user's message, opening the session).

Called by ``python benchmarks/run.py --only integrations``, or run on its own:
``python benchmarks/integrations_langchain.py [--quick]``.
"""

from __future__ import annotations

import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    CUSTOMER,
    FULL,
    ORDER,
    QUICK,
    Report,
    Row,
    Section,
    Sizes,
    _ratio,
    fill,
    ids,
    interleaved,
    make_guard,
    once,
    production_logging,
    render,
)

TITLE_CALL = "LangChain: one tool call through GuardrailMiddleware (per call)"
TITLE_RUN = "LangChain: one create_agent run with one tool call (per run)"


def bench(sizes: Sizes, report: Report, rng: random.Random) -> None:
    """Both sections into ``report``; a note instead where LangChain is not installed."""
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
        "tool.invoke(call)": lambda n: _loop(n, lambda: handler(request)),
        "GuardrailMiddleware around tool.invoke": lambda n: _loop(
            n, lambda: middleware.wrap_tool_call(request, handler)
        ),
        "a handler returning a ready ToolMessage": lambda n: _loop(n, lambda: answered(request)),
        "GuardrailMiddleware around that handler": lambda n: _loop(
            n, lambda: middleware.wrap_tool_call(request, answered)
        ),
    }
    times = interleaved(cases, rounds=sizes.rounds, sample=sizes.sample)
    rows = {name: Row(name, samples) for name, samples in times.items()}
    plain, guarded, bare_handler, guarded_handler = rows.values()
    section = Section(TITLE_CALL, rows=list(rows.values()))
    section.ratios = [
        ("around tool.invoke / tool.invoke", f"{_ratio(guarded, plain):.2f}×"),
        (
            "the middleware's own cost per call (around the ready handler − the handler)",
            f"{_difference(guarded_handler, bare_handler) * 1e6:.1f} µs",
        ),
        (
            "LangChain's tool.invoke / the middleware's own cost",
            f"{plain.median / _difference(guarded_handler, bare_handler):.1f}×",
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

    bare = create_agent(Scripted(), [refund])
    with_guard = create_agent(Scripted(), [refund], middleware=[middleware])
    user = {"messages": [HumanMessage(f"refund {order} for {customer}")]}
    runs = {
        "create_agent run, no middleware": lambda: bare.invoke(user, config),
        "create_agent run, GuardrailMiddleware": lambda: with_guard.invoke(user, config),
    }
    for run in runs.values():
        run()  # warm up: the first run compiles what LangChain caches
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(sizes.slow_rounds * 3):
        for name in list(runs)[r % 2 :] + list(runs)[: r % 2]:
            samples[name] += once(runs[name], rounds=1)
    run_rows = [Row(name, samples[name], unit="ms") for name in runs]
    agent_bare, agent_guarded = run_rows
    extra = _difference(agent_guarded, agent_bare)
    runs_section = Section(TITLE_RUN, rows=run_rows)
    runs_section.ratios = [
        ("with the middleware / without", f"{_ratio(agent_guarded, agent_bare):.3f}×"),
        ("what the middleware adds to a run (one call)", f"{extra * 1e3:.2f} ms"),
    ]
    runs_section.notes = [
        (
            "A run pays for the check and record of its call, and for the `before_agent` hook "
            "that reads the user's message: LangGraph runs a hook as a node of its own."
        )
    ]
    report.sections.append(runs_section)


def _difference(a: Row, b: Row) -> float:
    """The median of the per-round differences ``a - b`` (seconds): paired, as ratios are."""
    return statistics.median(x - y for x, y in zip(a.samples, b.samples, strict=True))


def _loop(number: int, fn: Any) -> float:
    import time

    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    """Print the LangChain sections as markdown."""
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    report = Report()
    with production_logging():
        bench(QUICK if quick else FULL, report, random.Random(1234))
    command = "python benchmarks/integrations_langchain.py" + (" --quick" if quick else "")
    print(render(report, command, quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
