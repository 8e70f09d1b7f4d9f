"""CrewAI: one guarded crew, its conversation's ledger, the user's answers and its model calls.

Private to :mod:`guardrail.integrations.crewai`. :class:`CrewGuard` is made
once per :func:`~guardrail.integrations.crewai.guard_crew`: it knows the
crew's agents, finds the ledger of the conversation a call belongs to, puts
the calls that wait to the user, and, while the crew runs, is CrewAI's
``before_llm_call`` hook for those agents (the ledger block, the in-run
compaction). It imports CrewAI, so it is only imported from there.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

from crewai.hooks import (
    LLMCallHookContext,
    ToolCallHookContext,
    register_before_llm_call_hook,
    unregister_before_llm_call_hook,
)
from crewai.tools import BaseTool

from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._guard.facade import Guard, internals
from guardrail.compaction import compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common import asking
from guardrail.integrations._common.compaction import Trigger, reached
from guardrail.integrations._common.every_turn import block_for, with_block
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.crewai._tools import GuardedTool, described
from guardrail.ledger import Ledger

#: Asks the user about a call that waits: the question to show, the requests; True approves.
Ask = Callable[[str, Sequence[ApprovalRequest]], bool]


def human_input(question: str, requests: Sequence[ApprovalRequest]) -> bool:
    """Ask on the console, with CrewAI's own human input (its live display paused meanwhile).

    ``yes`` (or ``y``) approves; anything else declines.
    """
    tool = requests[0].tool if requests else ""
    context = ToolCallHookContext(tool_name=tool, tool_input={}, tool=None)  # type: ignore[arg-type]
    answer = context.request_human_input(
        prompt=question, default_message="Type 'yes' to allow it, anything else to refuse:"
    )
    return answer.strip().lower() in ("y", "yes")


class Compaction:
    """The in-run compaction options of a guarded crew (checked by ``guard_crew``)."""

    __slots__ = ("keep_last_messages", "keep_recent", "summarize", "trigger")

    def __init__(
        self,
        trigger: Trigger,
        keep_recent: int,
        keep_last_messages: int | None,
        summarize: Callable[..., str] | None,
    ) -> None:
        self.trigger = trigger
        self.keep_recent = keep_recent
        self.keep_last_messages = keep_last_messages
        self.summarize = summarize


class CrewGuard:
    """The adapter of one guarded crew: its agents, tools, conversation, asks and model calls."""

    def __init__(
        self,
        guard: Guard,
        *,
        ask: Ask | None,
        ledger_tokens: int | None,
        compaction: Compaction | None,
    ) -> None:
        self.guard = guard
        self.ask = ask
        self.ledger_tokens = ledger_tokens  # None: the agents' prompts are left as they are
        self.compaction = compaction
        self.bindings = Bindings(guard, "CrewAI")
        #: Each tool's argument model and the JSON schema pydantic wrote for it, by tool name.
        self._schemas: dict[str, tuple[Any, dict[str, Any]]] = {}
        #: The agents of the crew, by id: the model calls this adapter's hook acts on.
        self.agents: dict[int, Any] = {}
        #: The ledger of the conversation the crew runs in now, for the threads CrewAI starts
        #: itself (a task with async_execution=True), where no session scope is open.
        self._kickoff: Ledger | None = None
        #: Each executor's own system prompt, without the block this hook added to it.
        self._prompts: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    # -- tools ----------------------------------------------------------------------------------

    def wrap(self, tool: BaseTool) -> BaseTool:
        """``tool`` guarded by this adapter (a tool guarded already is given back as it is)."""
        if isinstance(tool, GuardedTool):
            if tool.crew_guard is self:
                return tool
            if tool.crew_guard.guard is not self.guard:
                raise GuardrailUsageError(
                    f"the tool {tool.name!r} is guarded by another guard already; guard each "
                    "crew with one guard"
                )
            tool = tool.guarded  # an agent of another crew of this guard: guarded for this one
        if not isinstance(tool, BaseTool):
            raise GuardrailUsageError(
                f"guard_crew guards CrewAI tools (crewai.tools.BaseTool, what @tool makes), "
                f"not {type(tool).__name__}"
            )
        guarded = GuardedTool(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            result_as_answer=tool.result_as_answer,
            max_usage_count=tool.max_usage_count,
            guarded=tool,
            crew_guard=self,
        )
        # BaseTool writes "Tool Name/Arguments/Description" around the description it is given;
        # the guarded tool reads as the tool it stands for, its id arguments described.
        guarded.description = described(tool, self.bound(guarded))
        return guarded

    def bound(self, tool: GuardedTool) -> Bound:
        """The tool bound to the guard: declared by its ``Id`` marks, held to its arguments."""
        held = self._schemas.get(tool.name)
        if held is None or held[0] is not tool.args_schema:  # pydantic writes a schema slowly
            if len(self._schemas) >= 10_000:  # tools made per run: the memory stays bounded
                self._schemas.clear()
            held = (tool.args_schema, tool.args_schema.model_json_schema())
            self._schemas[tool.name] = held
        schema = held[1]
        function = getattr(tool.guarded, "func", None)
        return self.bindings.get(
            tool.name,
            schema,
            source=tool.args_schema,
            function=function if callable(function) else None,
        )

    # -- the conversation -----------------------------------------------------------------------

    def ledger(self) -> Ledger:
        """The ledger of the conversation a call belongs to.

        The session open where the call runs; else, in a thread CrewAI started
        for an async task, the one open when the crew was kicked off; else the
        guard's default session (or the usage error that says to open one).
        """
        state = internals(self.guard).sessions.var.get()
        if state is not None:
            return self.guard.ledger
        kickoff = self._kickoff
        return kickoff if kickoff is not None else self.guard.ledger

    def before_kickoff(self, inputs: dict[str, Any] | None) -> dict[str, Any] | None:
        """CrewAI's ``before_kickoff_callbacks``: the run's conversation, and the model hook."""
        state = internals(self.guard).sessions.var.get()
        self._kickoff = self.guard.ledger if state is not None else None
        if self.ledger_tokens is not None or self.compaction is not None:
            unregister_before_llm_call_hook(self.before_llm_call)
            register_before_llm_call_hook(self.before_llm_call)
        return inputs

    def after_kickoff(self, output: Any) -> Any:
        """CrewAI's ``after_kickoff_callbacks``: the hook leaves with the run."""
        unregister_before_llm_call_hook(self.before_llm_call)
        self._kickoff = None
        return output

    # -- the user's answer ----------------------------------------------------------------------

    def answer(
        self,
        name: str,
        arguments: Any,
        verdict: Verdict,
        ledger: Ledger,
    ) -> Verdict | str:
        """Put a call that waits to the user: the verdict to run it by, or the text the agent reads.

        Without ``ask`` the agent reads that the call waits for the user (the
        program approves with ``guard.approve`` before the next run).
        """
        ask = self.ask
        if ask is None:
            return verdict.message
        requests = verdict.approvals
        with self._lock:  # one question at a time, also from the threads of async tasks
            approved = ask(asking.question(name, requests), requests)
        if approved:
            return asking.approved(self.guard, name, arguments, ledger=ledger)
        return asking.declined(self.guard, requests, ledger=ledger)

    # -- the model's calls ----------------------------------------------------------------------

    def before_llm_call(self, context: LLMCallHookContext) -> None:
        """CrewAI's ``before_llm_call`` hook: compact the history, then give the ledger block."""
        if id(context.agent) not in self.agents:
            return
        messages = context.messages
        ledger = self.ledger()
        compaction = self.compaction
        if compaction is not None and reached(compaction.trigger, messages):
            # guard=None: CrewAI's messages hold no tool results of their own (an agent's
            # observations are in its own text, recorded as they ran), and its user message is
            # the task's prompt with other agents' outputs: never read as the user's words.
            chat: list[object] = list(messages)
            result = (
                compact(
                    chat,
                    ledger,
                    keep_recent=compaction.keep_recent,
                    keep_last_messages=compaction.keep_last_messages,
                    summarize=compaction.summarize,
                )
                if compaction.summarize is not None
                else compact(
                    chat,
                    ledger,
                    keep_recent=compaction.keep_recent,
                    keep_last_messages=compaction.keep_last_messages,
                )
            )
            if result.report.summarized:
                messages[:] = cast(Any, result.messages)  # in place: the executor keeps its list
        if self.ledger_tokens is None:
            return
        block = block_for(self.guard, ledger, self.ledger_tokens)
        first = messages[0] if messages else None
        executor = context.executor
        if first is not None and first.get("role") == "system":
            own = self._prompts.get(executor)
            if own is None:
                own = str(first.get("content") or "")
                self._prompts[executor] = own
            messages[0] = {**first, "content": with_block(own, block)}
        else:
            messages.insert(0, {"role": "system", "content": block})
            self._prompts[executor] = ""
