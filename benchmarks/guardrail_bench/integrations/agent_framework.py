"""What the Guardrail provider adds to a tool call in Microsoft Agent Framework, beside its cost.

Runs ``agent.run`` with a scripted chat client (the framework's own layers, no
network) that calls one write tool ``turns`` times, one call per model turn, or
all of them in one turn, then answers; the same agent with and without the
:class:`~guardrail.integrations.agent_framework.Guardrail` context provider, and
with no tool call at all, and with a provider that adds a function middleware
and a chat middleware that do nothing, in interleaved rounds. Per tool call:

- the framework's own cost: (unguarded run with the calls - run without them) / calls;
- the adapter's cost: (guarded run - unguarded run) / calls;
- of that, the framework's middleware machinery: (run with the do-nothing
  middleware - unguarded run) / calls, so the rest is guardrail's own work;
- ratios taken per round (the figure to compare on a noisy machine).

And the function middleware alone: ``GuardrailMiddleware.process`` around the
tool's ``invoke``, against ``invoke`` alone; and the Python function calls a run
makes (cProfile's count), which load does not blur. Every id is in the ledger (the
allowed path). The audit goes to the standard library logger, as by default in a
program that did not configure structlog: this group runs under
:func:`default_logging`.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_framework import (
    Agent,
    AgentSession,
    BaseChatClient,
    ChatContext,
    ChatMiddleware,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    ContextProvider,
    FunctionInvocationContext,
    FunctionInvocationLayer,
    FunctionMiddleware,
    FunctionTool,
    Message,
    SessionContext,
    SupportsAgentRun,
    tool,
)

from guardrail import Guard
from guardrail.integrations.agent_framework import Guardrail, GuardrailMiddleware
from guardrail_bench.common import Run
from guardrail_bench.report import Row, Section
from guardrail_bench.timing import awaits, interleaved, paired_ratio

ORDERS = [f"#W{n:07d}" for n in range(1000)]
TITLE = "Agent Framework: what the Guardrail provider adds to an allowed tool call (per call)"


class LoopingClient(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """A scripted client: ``turns`` turns of ``per_turn`` refund calls each, then an answer."""

    def __init__(self, turns: int, per_turn: int) -> None:
        super().__init__()
        self.turns = turns
        self.per_turn = per_turn
        self.function_invocation_configuration["max_iterations"] = turns + 2
        self.done = 0

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **_: Any
    ) -> Any:
        if self.done == self.turns:
            contents = [Content.from_text("done")]
        else:
            contents = [
                Content.from_function_call(
                    f"c{self.done}_{n}",
                    "refund",
                    arguments={"order_id": ORDERS[(self.done * self.per_turn + n) % len(ORDERS)]},
                )
                for n in range(self.per_turn)
            ]
        self.done += 1

        async def respond() -> ChatResponse:
            return ChatResponse(messages=[Message("assistant", contents)])

        return respond()


class _Nothing(FunctionMiddleware):
    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        await call_next()


class _NothingPerCall(ChatMiddleware):
    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        await call_next()


class NothingProvider(ContextProvider):
    """Adds a function middleware and a chat middleware that do nothing: the machinery's cost."""

    def __init__(self) -> None:
        super().__init__("nothing")
        self.added: list[FunctionMiddleware | ChatMiddleware] = [_Nothing(), _NothingPerCall()]

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        context.extend_middleware(self.source_id, self.added)


def build() -> tuple[Guard, FunctionTool]:
    guard = Guard(mode="reprompt", capacity=10_000, max_ids_per_call=len(ORDERS))
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("find_orders", produces={"orders[*]": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")

    @tool
    async def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    return guard, refund


def _per_call(
    label: str,
    own: list[float],
    adapter: list[float],
    section: Section,
    machinery: list[float] | None = None,
) -> None:
    """Rows (seconds per call, per round) and their per-round ratios."""
    section.rows += [
        Row(f"{label}: the framework's own cost", own),
        Row(f"{label}: Guardrail adds", adapter),
    ]
    section.ratios.append(
        (f"{label}: Guardrail adds / the framework's own cost", f"{paired_ratio(adapter, own):.1%}")
    )
    if machinery is not None:
        guards = [a - m for a, m in zip(adapter, machinery, strict=True)]
        section.rows += [
            Row(f"{label}: of which middleware that does nothing", machinery),
            Row(f"{label}: of which guardrail's own work", guards),
        ]
        section.ratios.append(
            (
                f"{label}: guardrail's own work / the framework's own cost",
                f"{paired_ratio(guards, own):.1%}",
            )
        )


def runs(
    loop: asyncio.AbstractEventLoop, turns: int, per_turn: int, rounds: int, repeat: int
) -> tuple[list[float], list[float], list[float]]:
    """Interleaved rounds of the bare, plain, do-nothing and guarded runs, per call and round."""
    guard, refund = build()
    providers: dict[str, Any] = {"guarded": Guardrail(guard), "nothing": NothingProvider()}
    guard.record("find_orders", {}, {"orders": ORDERS}, session="bench")

    def runner(provider: str | None, calls_made: bool) -> Any:
        def one() -> Any:
            agent = Agent(
                client=LoopingClient(turns if calls_made else 0, per_turn),
                tools=[refund],
                context_providers=[providers[provider]] if provider else None,
            )
            return agent.run("refund", session=agent.create_session(session_id="bench"))

        return awaits(loop, one)

    cases = {
        "bare": runner(None, False),
        "plain": runner(None, True),
        "nothing": runner("nothing", True),
        "guarded": runner("guarded", True),
    }
    for case in cases.values():  # warm up
        case(1)
    took = interleaved(cases, rounds=rounds, number=repeat)
    assert guard.ledger_for("bench").get("order", ORDERS[0]) is not None
    calls = turns * per_turn

    def per_call(more: str, less: str) -> list[float]:
        return [(m - n) / calls for m, n in zip(took[more], took[less], strict=True)]

    return per_call("plain", "bare"), per_call("guarded", "plain"), per_call("nothing", "plain")


def call_counts(loop: asyncio.AbstractEventLoop, turns: int) -> dict[str, float]:
    """Python function calls per run of ``turns`` calls, by case (cProfile's count)."""
    guard, refund = build()
    providers: dict[str, Any] = {
        "plain": None,
        "nothing": NothingProvider(),
        "guarded": Guardrail(guard),
    }
    guard.record("find_orders", {}, {"orders": ORDERS}, session="bench")
    counts: dict[str, float] = {}
    for name, provider in providers.items():

        def one(provider: Any = provider) -> Any:
            agent = Agent(
                client=LoopingClient(turns, 1),
                tools=[refund],
                context_providers=[provider] if provider is not None else None,
            )
            return agent.run("refund", session=agent.create_session(session_id="bench"))

        loop.run_until_complete(one())  # warm
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(3):
            loop.run_until_complete(one())
        profile.disable()
        counts[name] = pstats.Stats(profile).total_calls / 3  # type: ignore[attr-defined]
    return counts


def direct(
    loop: asyncio.AbstractEventLoop, calls: int, rounds: int
) -> tuple[list[float], list[float]]:
    """The middleware's own work per call: ``process`` around ``invoke``, against ``invoke``."""
    guard, refund = build()
    middleware = GuardrailMiddleware(guard)
    arguments = [{"order_id": ORDERS[n % len(ORDERS)]} for n in range(calls)]

    async def plain() -> None:
        for given in arguments:
            await refund.invoke(arguments=given)

    async def through_the_middleware() -> None:
        for n, given in enumerate(arguments):
            context = FunctionInvocationContext(function=refund, arguments=given)
            context.metadata["call_id"] = f"c{n}"

            async def call_next(context: FunctionInvocationContext = context) -> None:
                context.result = await refund.invoke(arguments=context.arguments)

            await middleware.process(context, call_next)

    with guard.session("bench"):
        guard.record("find_orders", {}, {"orders": ORDERS})
        cases = {"plain": awaits(loop, plain), "guarded": awaits(loop, through_the_middleware)}
        cases["guarded"](1)  # warm up
        took = interleaved(cases, rounds=rounds, number=1)
    own = [p / calls for p in took["plain"]]
    adapter = [(g - p) / calls for g, p in zip(took["guarded"], took["plain"], strict=True)]
    return own, adapter


def bench_agent_framework(run: Run) -> None:
    """agent.run with calls in turns and in parallel, and the middleware's work alone."""
    rounds, repeat, turns = run.pick((15, 3, 20), (2, 1, 2))
    section = Section(TITLE)
    loop = asyncio.new_event_loop()
    try:
        alone = direct(loop, run.pick(2000, 20), rounds)
        sequential = runs(loop, turns, 1, rounds, repeat)
        parallel = runs(loop, 1, turns, rounds, repeat)
        counts = call_counts(loop, turns)
    finally:
        loop.close()
    own, adapter, machinery = sequential
    _per_call(
        f"agent.run, one call per model turn ({turns} turns)", own, adapter, section, machinery
    )
    own, adapter, machinery = parallel
    _per_call(f"agent.run, {turns} parallel calls in one turn", own, adapter, section, machinery)
    _per_call("GuardrailMiddleware.process alone, vs the tool's invoke", *alone, section)
    plain = counts["plain"]
    section.ratios.append((f"Python function calls per run of {turns} calls, unguarded",
                           f"{plain:,.0f}"))  # fmt: skip
    for name, label in (("nothing", "middleware that does nothing"), ("guarded", "Guardrail")):
        added = counts[name] - plain
        section.ratios.append(
            (f"Python function calls added per run: {label}",
             f"+{added:,.0f} ({added / turns:,.0f} a tool call)")
        )  # fmt: skip
    section.notes.append(
        "Rows are per tool call, from per-round differences of whole runs; the audit goes to "
        "the standard library logger (structlog not configured), as by default. 'Middleware "
        "that does nothing' is a provider adding a function and a chat middleware that only "
        "call the next: what the framework charges for any middleware; the rest is guardrail's."
    )
    run.report.sections.append(section)
