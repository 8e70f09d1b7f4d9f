"""guardrail for the OpenAI Agents SDK: every function tool checked before it runs, recorded after.

One line guards an agent::

    agent = guard_agent(agent, guard)
    with guard.session(conversation_id):
        result = await Runner.run(agent, "Refund my blender order")

:func:`guard_agent` returns a copy of the agent (``agent.clone``) in which
every function tool carries two of the SDK's own tool guardrails: an input
guardrail that checks the call with :meth:`Guard.enforce` and an output
guardrail that records the tool's raw output with :meth:`Guard.record`. The
agents it hands off to are guarded the same way, each tool object once
however many agents share it, and a handoff that carries input
(``handoff(..., input_type=...)``) is checked like a tool call before its
``on_handoff`` runs. A tool guardrail cannot see (a hosted tool, an
MCP server's tools) is an error, not a gap, unless named in
``allow_unguarded``. A tool (or handoff input) whose parameters are marked
``Id(...)`` is declared by the mark; each id is checked under the name the
model sent it by; and the schema the model is sent says, on every id
parameter, to copy the value exactly.

A refusal in ``reprompt`` mode is the SDK's ``reject_content``: the tool does
not run, the model gets the re-prompt as the call's output, and the run goes
on. It comes from a guardrail, not from the tool, so the SDK's tool error
handler (which would turn it into "An error occurred while running the
tool") never sees it. In ``raise`` mode :class:`IdentifierViolation`
propagates out of ``Runner.run``; :class:`RepromptLimitExceeded` does in
``reprompt`` mode when the re-prompts of one tool run out.

The SDK writes a failed call's output item with no status, so the history
shows a failure by its text alone: guardrail's readers know the SDK's own
sentences, and any other failure text the model reads (a formatter's, a
timeout's, a tool's own guardrail's) gets guardrail's failure mark in front.
Under ``Guard(secret=...)`` each successful output is sealed (the text the SDK
writes for it, then the seal line), so a worker that rebuilds the ledger from
the items trusts it, and no output a client wrote.

A call whose ids wait for the user's approval (an ``ask`` verdict, in any
mode but ``observe``) uses the SDK's tool approvals: each guarded tool's
``needs_approval`` asks the guard (as well as the tool's own policy), so the
run is interrupted and ``result.interruptions`` lists the call.
:func:`approval_requests` gives what to show the user for it (each value,
its kind and its evidence). ``state.approve(item)`` approves it: when the
resumed run gets to the call, the guard approves those values for that
session and tool, then the call runs once. :func:`decline` records the
user's no and rejects the call, the model told the user declined. Nothing
the model writes approves: only ``RunState.approve`` does.

:class:`GuardedSession` wraps any SDK ``Session`` and compacts its history with
:func:`guardrail.compaction.compact` once it reaches its trigger, also while a
long run saves into it; its :meth:`~GuardedSession.model_input_filter` compacts
the model's input with the same options. ``guard_agent(...,
ledger_instructions=True)`` keeps the conversation's ID LEDGER block in the
agent's instructions at every model call.

Inside: ``_tools`` (a function tool's two guardrails), ``_sessions`` (the SDK's
sessions and model input, compacted), ``_approvals`` (the SDK's tool
approvals) and ``_sdk`` (every private SDK name the adapter reads, in one
place).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import weakref
from collections.abc import Collection, Mapping
from typing import Any

try:
    from agents import (
        Agent,
        FunctionTool,
        Handoff,
        RunContextWrapper,
    )
except ImportError as missing:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(
        "guardrail.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'guardrail-ids[openai-agents]'"
    ) from missing

from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.every_turn import (
    DEFAULT_BLOCK_TOKENS,
    block_for,
    check_budget,
    with_block,
)
from guardrail.integrations.openai_agents._approvals import approval_requests, decline
from guardrail.integrations.openai_agents._sdk import AGENT_INSTANCE, AGENT_REF, IS_AGENT_TOOL
from guardrail.integrations.openai_agents._sessions import (
    GuardedSession,
    SessionId,
    compact_model_input,
)
from guardrail.integrations.openai_agents._tools import RunIdentifierViolation, ToolGuard, guard_of

__all__ = [
    "GuardedSession",
    "SessionId",
    "approval_requests",
    "compact_model_input",
    "decline",
    "guard_agent",
    "guard_tool",
]

#: Marks the instructions that add a guard's ledger block (the guard is its value).
_LEDGER_OF = "__guardrail_ledger_of__"

# -- agents -------------------------------------------------------------------------------


class _Guarding:
    """One walk over an agent graph: each agent and each tool object guarded once."""

    def __init__(
        self, tools: ToolGuard, allow_unguarded: Collection[str], ledger_tokens: int | None
    ) -> None:
        self.tools = tools
        self.allow_unguarded = frozenset(allow_unguarded)
        self.ledger_tokens = ledger_tokens  # None: the instructions are left as they are
        self.agents: dict[int, Agent[Any]] = {}
        self.guarded_tools: dict[int, FunctionTool] = {}
        self.keep: list[object] = []  # originals whose ids key the memos stay alive

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        if not isinstance(agent, Agent):
            raise GuardrailUsageError(
                f"guard_agent takes an agents.Agent, not {type(agent).__name__}"
            )
        done = self.agents.get(id(agent))
        if done is not None:
            return done
        clone = agent.clone()
        self.agents[id(agent)] = clone
        self.keep.append(agent)
        servers = [
            server.name for server in agent.mcp_servers if server.name not in self.allow_unguarded
        ]
        if servers:
            raise GuardrailUsageError(
                f"agent {agent.name!r} lists tools from the MCP server {servers[0]!r}, which "
                "the SDK fetches while the agent runs, outside its tool list: guardrail cannot "
                "guard them here. Guard the server itself, or pass "
                f"allow_unguarded={{{servers[0]!r}}} to run its tools unchecked."
            )
        clone.tools = [self.tool(agent, tool) for tool in agent.tools]
        clone.handoffs = [self.handoff(item) for item in agent.handoffs]
        if self.ledger_tokens is not None:
            clone.instructions = self.with_ledger(agent.instructions, self.ledger_tokens)
        return clone

    def with_ledger(self, given: Any, budget: int) -> Any:
        """Dynamic instructions: the agent's own, then the ledger block, built at each call."""
        tools = self.tools
        if getattr(given, _LEDGER_OF, None) is tools.guard:
            return given  # an agent guarded twice shows the ledger once

        async def instructions(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
            own = given(context, agent) if callable(given) else given
            if inspect.isawaitable(own):
                own = await own
            guard = tools.guard
            if tools.session_id is None:
                ledger = guard.ledger
            else:
                ledger = await guard.ledger_for_async(tools.session_id(context.context))
            return with_block(own, block_for(guard, ledger, budget))

        setattr(instructions, _LEDGER_OF, tools.guard)
        return instructions

    def tool(self, owner: Agent[Any], tool: Any) -> Any:
        if not isinstance(tool, FunctionTool):
            name = getattr(tool, "name", type(tool).__name__)
            if name in self.allow_unguarded:
                return tool
            raise GuardrailUsageError(
                f"agent {owner.name!r} has the tool {name!r} ({type(tool).__name__}), which the "
                "SDK runs without tool guardrails (a hosted or built-in tool), so guardrail "
                "cannot check its arguments. Remove it, or pass "
                f"allow_unguarded={{{name!r}}} to run it unchecked."
            )
        done = self.guarded_tools.get(id(tool))
        if done is not None:
            return done
        inner_agent = getattr(tool, AGENT_INSTANCE, None)
        if getattr(tool, IS_AGENT_TOOL, False) and isinstance(inner_agent, Agent):
            unguarded = self.unguarded(inner_agent, set())
            if unguarded:
                raise GuardrailUsageError(
                    f"the tool {tool.name!r} of agent {owner.name!r} runs the agent "
                    f"{inner_agent.name!r}, whose {unguarded} is not guarded. The SDK's "
                    "as_tool() binds the agent it was called on, so build that tool from a "
                    "guarded agent: guard_agent(sub_agent, guard).as_tool(...)."
                )
        guarded = self.tools.wrap(tool)
        self.guarded_tools[id(tool)] = guarded
        self.keep.append(tool)
        return guarded

    def unguarded(self, agent: Agent[Any], seen: set[int]) -> str | None:
        """What in an agent tool's agent is not guarded by this guard (None: nothing)."""
        if id(agent) in seen:
            return None
        seen.add(id(agent))
        for server in agent.mcp_servers:
            if server.name not in self.allow_unguarded:
                return f"MCP server {server.name!r}"
        for tool in agent.tools:
            if isinstance(tool, FunctionTool):
                if not self.tools.guards(tool):
                    return f"tool {tool.name!r}"
                runs = getattr(tool, AGENT_INSTANCE, None)
                if getattr(tool, IS_AGENT_TOOL, False) and isinstance(runs, Agent):
                    inner = self.unguarded(runs, seen)
                    if inner:
                        return inner
            elif getattr(tool, "name", None) not in self.allow_unguarded:
                return f"tool {getattr(tool, 'name', type(tool).__name__)!r}"
        for item in agent.handoffs:
            target = item if isinstance(item, Agent) else _handoff_target(item)
            if target is not None:
                inner = self.unguarded(target, seen)
                if inner:
                    return inner
        return None

    def handoff(self, item: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | Handoff[Any, Any]:
        if isinstance(item, Agent):
            return self.agent(item)
        target = _handoff_target(item)
        guarded_target = self.agent(target) if target is not None else None
        invoke = item.on_invoke_handoff
        tools = self.tools
        name = item.tool_name
        schema = item.input_json_schema
        takes_input = bool(schema.get("properties")) if isinstance(schema, Mapping) else False
        if takes_input:
            tools.shapes[name] = (dict(schema), None)
            bound = tools.bound(name)
            if bound.schema is not None and bound.schema != schema:
                schema = dict(bound.schema)

        async def on_invoke_handoff(context: RunContextWrapper[Any], given: str) -> Any:
            # A handoff's input runs its on_handoff: checked first, as a tool call's would be.
            # The SDK gives a handoff no output to carry a re-prompt, so a refusal ends the run.
            recorded: Any = None
            if takes_input:
                arguments: Any = given
                with contextlib.suppress(ValueError):
                    arguments = json.loads(given) if given else {}
                verdict, run_with, recorded = tools.check(name, arguments, context.context)
                if not verdict.allowed and tools.guard.mode != "observe":
                    raise RunIdentifierViolation(verdict)
                if run_with is not arguments:
                    given = json.dumps(run_with, ensure_ascii=False)
            try:
                agent = await invoke(context, given)
            except Exception:
                if takes_input:
                    tools.record_handoff(name, recorded, context.context, error=True)
                raise
            if takes_input:
                tools.record_handoff(name, recorded, context.context, error=False)
            # The handoff's own function picks the agent; the run goes on in its guarded copy.
            return self.agent(agent)

        guarded = dataclasses.replace(
            item, on_invoke_handoff=on_invoke_handoff, input_json_schema=schema
        )
        if guarded_target is not None:
            setattr(guarded, AGENT_REF, weakref.ref(guarded_target))
        return guarded


def _handoff_target(item: Handoff[Any, Any]) -> Agent[Any] | None:
    """The agent a ``handoff()`` object was built for, where the SDK kept it."""
    reference = getattr(item, AGENT_REF, None)
    target = reference() if reference is not None else None
    return target if isinstance(target, Agent) else None


def guard_agent(
    agent: Agent[Any],
    guard: Guard,
    *,
    session_id: SessionId | None = None,
    allow_unguarded: Collection[str] = (),
    ledger_instructions: bool = False,
    ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> Agent[Any]:
    """A copy of ``agent`` whose every function tool is checked by ``guard``.

    Each function tool gets an input guardrail that enforces the guard's
    check (a refusal is the SDK's ``reject_content``: the model reads the
    re-prompt as the call's output) and an output guardrail that records the
    tool's raw output; an allowed call runs with the arguments the model
    sent. The original agent and its tools are not changed. Agents it hands
    off to are guarded too (a cycle of handoffs stays a cycle of copies); a
    tool object shared by several agents is guarded once, and a tool this
    guard already guards is left as it is. The copy observes
    the user's new messages at the start of each run (ids typed by the user
    enter the ledger unverified).

    A tool the guardrails cannot reach is a :class:`GuardrailUsageError`,
    not a silent gap: a hosted or built-in tool (web search, code
    interpreter, computer, shell), an MCP server's tools, and an
    ``as_tool()`` agent whose own tools are not guarded (build it from
    ``guard_agent(sub_agent, guard)``). Name a tool or MCP server in
    ``allow_unguarded`` to run it unchecked.

    The ledger is the current session's (``with guard.session(id):`` around
    ``Runner.run``), or, with ``session_id``, the one that function names
    for the context given to ``Runner.run(..., context=...)``
    (``lambda context: context.conversation_id``).

    With ``ledger_instructions=True`` each copy's instructions become
    dynamic: its own, then the conversation's ID LEDGER block, built before
    every model call (the entries used last, as many as fit
    ``ledger_tokens``, counted as characters / 4; sealed under a guard with
    a ``secret``). The block is never read back into the ledger.
    """
    tools = ToolGuard(guard, session_id)
    budget = check_budget(ledger_tokens) if ledger_instructions else None
    guarding = _Guarding(tools, allow_unguarded, budget)
    guarded = guarding.agent(agent)
    if not any(guard_of(item) is guard for item in guarded.input_guardrails):
        guarded.input_guardrails = [tools.observe_guardrail, *guarded.input_guardrails]
    return guarded


def guard_tool(
    tool: FunctionTool, guard: Guard, *, session_id: SessionId | None = None
) -> FunctionTool:
    """A copy of one function tool checked by ``guard`` (see :func:`guard_agent`).

    For an agent built by hand; :func:`guard_agent` guards every tool of an
    agent and observes the user's messages, which this does not.
    """
    if not isinstance(tool, FunctionTool):
        raise GuardrailUsageError(
            f"guard_tool takes an agents.FunctionTool, not {type(tool).__name__}: the SDK "
            "runs tool guardrails on function tools only"
        )
    return ToolGuard(guard, session_id).wrap(tool)
