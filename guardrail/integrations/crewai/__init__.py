"""guardrail for CrewAI: every tool of a crew checked before it runs, recorded after.

One line guards a crew::

    crew = guard_crew(Crew(agents=[support], tasks=[refund]), guard)
    with guard.session(conversation_id):
        guard.observe_user(message)
        result = crew.kickoff(inputs={"message": message})

:func:`guard_crew` puts a :class:`~crewai.tools.BaseTool` of its own in place
of each tool of the crew's agents and tasks (same name, same arguments, the
tool's own settings). When an agent calls one, it checks the call with
:meth:`Guard.enforce`, runs the tool it stands for with the arguments
the agent gave, and records the result with :meth:`Guard.record`: the
tool's own value, before CrewAI turns it into text. In ``reprompt`` mode a
refused call does not run and the agent reads the re-prompt as the tool's
result (its ``Observation``); CrewAI never caches it, so the same call made
again is checked again. In ``raise`` mode :class:`IdentifierViolation`
comes out of ``crew.kickoff()``, as :class:`RepromptLimitExceeded` does in
``reprompt`` mode when the re-prompts of one tool run out: both are also
``TimeoutError``\\s, the one exception CrewAI neither hands to the model nor
answers by running the task again.

Why tools and not CrewAI's ``before_tool_call`` hooks: a hook can only block
a call with CrewAI's fixed text ("Tool execution blocked by hook"), which
tells the model nothing of what to do, sees the result only as text, and an
exception it raises is logged and the call runs. The hooks are global to
the process, too; the guarded tools belong to the crew.

**Conversations.** The ledger is the session open around ``kickoff`` (``with
guard.session(id):``). Agents, tasks and delegations of one run share it:
they serve one conversation. A task with ``async_execution=True`` runs in a
thread CrewAI starts, where no session is open: its calls use the session
that was open when the crew was kicked off. Another crew, in another
session, never sees these ids. What an agent writes never enters the
ledger: a delegated coworker's answer, a task's output passed to the next
task as context, the task's prompt CrewAI sends as the user's message. The
program says what the user typed with :meth:`Guard.observe_user`.

**Asks.** A call whose ids wait for the user's approval (an ``ask``
verdict) is put to the user with ``ask``: :func:`human_input` asks on the
console with CrewAI's own human input; any ``ask(question, requests) ->
bool`` is the program's own channel (a web page, a chat message). Approved,
the values are approved for the session and that tool and the call runs
once; declined, the agent reads that the user declined, and the value is
refused for that tool afterwards. Without ``ask`` the agent reads that the
call waits for the user, and the program approves with
:meth:`Guard.approve` before the next run.

**The model's calls.** ``ledger_instructions=True`` puts the conversation's
ID LEDGER block at the end of each guarded agent's system prompt before
every model call; ``compact_trigger`` compacts an agent's history within a
task with :func:`guardrail.compaction.compact` once it reaches the trigger. Both run as
CrewAI's ``before_llm_call`` hook, registered while the crew runs and acting
on its own agents only.

The tools CrewAI adds to an agent while the crew runs (an agent's ``mcps``
and ``apps``, code execution) do not go through the crew's tools:
guarding such an agent is an error unless ``allow_unguarded=True``.
CrewAI's delegation tools take no ids and their answers enter no ledger;
the coworker's own tools are guarded.

Inside: ``_tools`` (the guarded tool, and the names of CrewAI's it reads
that are not its public API) and ``_crew`` (the crew's conversation, asks
and model calls).
"""

from __future__ import annotations

from typing import Any

try:
    from crewai import Agent, Crew
except ImportError as missing:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(
        "guardrail.integrations.crewai needs CrewAI: pip install 'guardrail-ids[crewai]'"
    ) from missing

from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.compaction import Trigger, check_keep, check_trigger
from guardrail.integrations._common.every_turn import DEFAULT_BLOCK_TOKENS, check_budget
from guardrail.integrations.crewai._crew import Ask, Compaction, CrewGuard, human_input

__all__ = ["Ask", "guard_crew", "human_input"]


def guard_crew(
    crew: Crew,
    guard: Guard,
    *,
    ask: Ask | None = None,
    ledger_instructions: bool = False,
    ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
    compact_trigger: Trigger | None = None,
    keep_recent: int = 2,
    keep_last_messages: int | None = None,
    summarize: Any = None,
    allow_unguarded: bool = False,
) -> Crew:
    """Guard every tool of ``crew`` with ``guard``, in place; returns the crew.

    Args:
        crew: The crew; its agents' and tasks' tools are replaced by guarded ones.
        guard: The guard whose declarations (``guard.declare``, a manifest, or
            the tools' ``Id`` annotations) say which arguments are ids.
        ask: Puts a call that waits for the user's approval to the user:
            :func:`human_input`, or ``ask(question, requests) -> bool``. None:
            the agent reads that the call waits for the user.
        ledger_instructions: Put the ID LEDGER block at the end of each agent's
            system prompt before every model call (as many entries as fit
            ``ledger_tokens``, counted as characters / 4).
        ledger_tokens: The block's budget.
        compact_trigger: Compact an agent's history within a task once it
            reaches ``("messages", n)`` or ``("tokens", n)`` (None: never).
        keep_recent: The last turns a compaction keeps raw.
        keep_last_messages: The last messages a compaction keeps raw instead
            (an agent's long loop of tool calls is one turn).
        summarize: The summariser, ``(messages, roles) -> str`` (None: guardrail's).
        allow_unguarded: Run the tools CrewAI adds while the crew runs (an
            agent's ``mcps`` and ``apps``, code execution) unchecked, rather
            than refuse to guard such an agent.

    Raises:
        GuardrailUsageError: Not a crew or not a guard, bad options, a tool
            that is no CrewAI tool, an agent with tools that cannot be guarded.
    """
    if not isinstance(crew, Crew):
        raise GuardrailUsageError(f"guard_crew takes a crewai.Crew, not {type(crew).__name__}")
    if not isinstance(guard, Guard):
        raise GuardrailUsageError(f"guard_crew needs a guardrail Guard, not {type(guard).__name__}")
    compaction = None
    if compact_trigger is not None:
        check_keep(keep_recent, keep_last_messages)
        compaction = Compaction(
            check_trigger(compact_trigger), keep_recent, keep_last_messages, summarize
        )
    if ask is not None and not callable(ask):
        raise GuardrailUsageError(
            "ask is a function (question, requests) -> bool, such as human_input, or None"
        )
    for callback in crew.before_kickoff_callbacks:
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, CrewGuard):
            if owner.guard is guard:
                return crew  # guarded already
            raise GuardrailUsageError("the crew is guarded by another guard already")
    adapter = CrewGuard(
        guard,
        ask=ask,
        ledger_tokens=check_budget(ledger_tokens) if ledger_instructions else None,
        compaction=compaction,
    )
    agents = [*crew.agents, *([crew.manager_agent] if crew.manager_agent is not None else [])]
    for agent in agents:
        if not isinstance(agent, Agent):
            raise GuardrailUsageError(
                f"guard_crew guards crewai.Agent agents, not {type(agent).__name__}"
            )
        if not allow_unguarded:
            _refuse_unguarded(agent)
        agent.tools = [adapter.wrap(tool) for tool in agent.tools or ()]
        adapter.agents[id(agent)] = agent
    for task in crew.tasks:
        if task.tools:
            task.tools = [adapter.wrap(tool) for tool in task.tools]
    crew.before_kickoff_callbacks.append(adapter.before_kickoff)
    crew.after_kickoff_callbacks.append(adapter.after_kickoff)
    return crew


def _refuse_unguarded(agent: Agent) -> None:
    """An agent whose tools CrewAI adds itself while the crew runs is a usage error."""
    added = [
        what
        for what, present in (
            ("MCP servers (mcps)", agent.mcps),
            ("apps", agent.apps),
            ("code execution", agent.allow_code_execution),
        )
        if present
    ]
    if added:
        raise GuardrailUsageError(
            f"agent {agent.role!r} has {' and '.join(added)}, whose tools CrewAI adds while "
            "the crew runs, outside the tools guardrail guards. Remove them, guard them where "
            "they are served, or pass allow_unguarded=True to run them unchecked."
        )
