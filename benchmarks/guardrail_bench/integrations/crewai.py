"""What guard_crew adds to a tool call in CrewAI, beside what CrewAI's own call costs.

Two measurements, in interleaved rounds, every id in the ledger (the allowed path):

- the tool alone: ``structured.invoke(arguments)``, the call CrewAI's tool runner makes
  (argument validation, the tool), for the plain tool and for the guarded one (the check,
  the tool, the record, and the cache question CrewAI asks after it);
- a whole run: ``crew.kickoff()`` with a scripted model (a ``BaseLLM``, no network) that
  calls the write tool ``turns`` times, one call per model turn, then answers; the crew
  with and without :func:`guard_crew`, and with no tool call at all. CrewAI's own cost per
  call is (plain run - run without calls) / calls; the adapter's, (guarded - plain) / calls.

CrewAI's telemetry and tracing are switched off for the run, and restored after it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from guardrail import Guard
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section
from guardrail_bench.timing import calls, interleaved, paired_ratio, single

ORDERS = [f"#W{n:07d}" for n in range(1000)]
TITLE = "CrewAI: what guard_crew adds to an allowed tool call (per call)"
OFFLINE = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_TESTING": "true",
}


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """CrewAI's telemetry, tracing and first-run questions off while the group runs."""
    before = {name: os.environ.get(name) for name in OFFLINE}
    os.environ.update(OFFLINE)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def bench_crewai(run: Run) -> None:
    """The tool alone and whole runs; a note instead where CrewAI is not installed."""
    with offline():
        try:
            from crewai import Agent, BaseLLM, Crew, Task
            from crewai.tools import tool

            from guardrail.integrations.crewai import guard_crew
        except ImportError as missing:
            why = f"CrewAI is not installed ({missing}): pip install 'guardrail-ids[crewai]'"
            run.report.sections.append(Section(TITLE, rows=[Row("guard_crew", skipped=why)]))
            return
        rounds, repeat, turns = run.pick((9, 2, 20), (2, 1, 2))
        number = run.pick(2000, 20)

        def build() -> tuple[Guard, Any]:
            guard = Guard(mode="reprompt", capacity=10_000, max_ids_per_call=len(ORDERS))
            guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
            guard.declare("find_orders", produces={"orders[*]": "order"}, effect="read")
            guard.declare("refund", ids={"order_id": "order"}, effect="write")

            @tool("refund")
            def refund(order_id: str) -> str:
                """Refund an order."""
                return f"refunded {order_id}"

            return guard, refund

        class Looping(BaseLLM):
            """``turns`` refund calls, one per model turn, then a final answer."""

            def __init__(self, turns: int) -> None:
                super().__init__(model="scripted")
                self.turns = turns
                self.done = 0

            def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
                if self.done == self.turns:
                    return "Thought: done\nFinal Answer: done"
                order = ORDERS[self.done % len(ORDERS)]
                self.done += 1
                return (
                    f"Thought: go\nAction: refund\nAction Input: {json.dumps({'order_id': order})}"
                )

        def crew_of(guard: Guard | None, refund: Any, turns: int) -> Any:
            agent = Agent(role="support", goal="refunds", backstory="a shop",
                          llm=Looping(turns), tools=[refund], max_iter=turns + 5)  # fmt: skip
            task = Task(description="Refund", expected_output="done", agent=agent)
            crew = Crew(agents=[agent], tasks=[task], cache=False)
            return guard_crew(crew, guard) if guard is not None else crew

        guard, refund = build()
        guarded_refund = crew_of(guard, refund, 0).agents[0].tools[0]
        plain_tool, guarded_tool = refund.to_structured_tool(), guarded_refund.to_structured_tool()
        hook = guarded_tool.cache_function
        arguments = {"order_id": ORDERS[7]}

        def guarded_call() -> None:
            hook(arguments, guarded_tool.invoke(input=arguments))

        with guard.session("bench"):
            guard.record("find_orders", {}, {"orders": ORDERS})
            took = interleaved(
                {
                    "plain": calls(lambda: plain_tool.invoke(input=arguments)),
                    "guarded": calls(guarded_call),
                },
                rounds=rounds,
                number=number,
            )

            def kickoff(which: Guard | None, turns_made: int) -> Any:
                built: list[Any] = []  # each run's crew, built untimed before it runs
                return single(
                    lambda: built.pop().kickoff(),
                    setup=lambda: built.append(crew_of(which, refund, turns_made)),
                )

            whole = interleaved(
                {"bare": kickoff(None, 0), "plain": kickoff(None, turns),
                 "guarded": kickoff(guard, turns)},
                rounds=rounds,
                number=repeat,
            )  # fmt: skip
    own = took["plain"]
    adds = [g - p for g, p in zip(took["guarded"], took["plain"], strict=True)]
    crew_own = [(p - b) / turns for p, b in zip(whole["plain"], whole["bare"], strict=True)]
    crew_adds = [(g - p) / turns for g, p in zip(whole["guarded"], whole["plain"], strict=True)]
    section = Section(TITLE)
    section.rows += [
        Row("the tool alone: CrewAI's structured tool invoke", own),
        Row("the tool alone: guard_crew adds", adds),
        Row(f"crew.kickoff, {turns} calls: CrewAI's own cost per call", crew_own),
        Row(f"crew.kickoff, {turns} calls: guard_crew adds per call", crew_adds),
    ]
    section.ratios += [
        ("the tool alone: guard_crew adds / CrewAI's invoke", f"{paired_ratio(adds, own):.1%}"),
        (
            "crew.kickoff: guard_crew adds / CrewAI's own cost per call",
            f"{paired_ratio(crew_adds, crew_own):.1%}",
        ),
    ]
    section.notes.append(
        "Per tool call; whole runs are per-round differences (a run with the calls, without "
        "them, guarded), the crew's cache off so that every call runs."
    )
    run.report.sections.append(section)
