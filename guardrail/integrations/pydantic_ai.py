"""Pydantic AI: every tool call of an agent checked against the conversation's ledger.

One line guards every tool an agent has, its own function tools, its
toolsets and MCP servers, and the toolsets given to one run::

    agent = Agent(model, tools=[...], capabilities=[Guardrail(guard)])

:class:`Guardrail` is a capability: it wraps the agent's assembled toolset in
a :class:`GuardedToolset` on every run, and observes the run's user prompt.
Before each call the guard checks its identifier arguments; a refused call
does not run, and in ``reprompt`` mode the model gets the guard's message as
a retry prompt (``ModelRetry``), which Pydantic AI sends back as the call's
``retried`` tool return. An allowed call runs with each id as the ledger
spells it, and its result is recorded before Pydantic AI serializes it, so
pydantic models with ``Id`` fields are harvested by their annotations.

:func:`guardrail_history_processor` compacts the message history with
:func:`guardrail.compact` (pass it to ``ProcessHistory``): the ledger block
and a summary replace the older turns, and a tool call never leaves its
result.

Which conversation a call belongs to: the ledger of the ``with
guard.session(...)`` open around ``agent.run`` (or the guard's default
session). A ``session=`` callable taking the ``RunContext`` chooses otherwise
(a session id, or a ledger); :func:`conversation_id_session` names the
session after the run's ``conversation_id``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

try:
    from pydantic_ai import ModelRetry, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
    from pydantic_ai.messages import ModelMessage, ToolReturn
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
except ImportError as missing:  # pragma: no cover - exercised with the module hidden
    raise ImportError(
        "guardrail.integrations.pydantic_ai needs Pydantic AI: "
        "pip install 'guardrail-ids[pydantic-ai]'"
    ) from missing

from guardrail._guard import Guard
from guardrail._verdict import Rejection
from guardrail.compaction import Summarizer, compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._pydantic_ai_messages import from_chat, to_chat
from guardrail.ledger import Ledger

__all__ = [
    "GuardedToolset",
    "Guardrail",
    "SessionChooser",
    "conversation_id_session",
    "guardrail_history_processor",
]

#: Chooses a run's session: a session id (opened around each call) or a ledger.
SessionChooser = Callable[[RunContext[Any]], "str | Ledger"]

_HistoryProcessor = Callable[[RunContext[Any], list[ModelMessage]], Any]


@contextlib.contextmanager
def _conversation(
    guard: Guard, choose: SessionChooser | None, ctx: RunContext[Any]
) -> Iterator[Ledger]:
    """The ledger of the conversation ``ctx`` belongs to, current for the ``with`` block."""
    if choose is not None:
        chosen = choose(ctx)
        if isinstance(chosen, Ledger):
            yield chosen
            return
        if not isinstance(chosen, str) or not chosen:
            raise GuardrailUsageError(
                "session= returns the conversation's session id (a non-empty str) or its "
                f"Ledger, not {chosen!r}"
            )
        with guard.session(chosen) as ledger:
            yield ledger
        return
    try:
        ledger = guard.ledger  # the open `with guard.session(...)`, or the default session
    except GuardrailUsageError:
        raise GuardrailUsageError(_NO_SESSION) from None
    yield ledger


_NO_SESSION = (
    "a guarded Pydantic AI run started outside any session. Run the agent inside "
    "`async with guard.session(conversation_id):` (or `with`), or give the capability a "
    "session chooser: Guardrail(guard, session=lambda ctx: ...), e.g. "
    "session=conversation_id_session where the message history is your own"
)


def conversation_id_session(ctx: RunContext[Any]) -> str:
    """The run's ``conversation_id`` as its session id: ``Guardrail(guard, session=...)``.

    Pydantic AI takes the ``conversation_id`` from the run's argument or from the
    message history given to the run, so two runs of one conversation share a
    ledger with no code at all. Use it only where that history is the program's
    own: a history sent by a client could name another conversation's id, and
    with it that conversation's ledger.
    """
    if not ctx.conversation_id:
        raise GuardrailUsageError("this run has no conversation_id to name its session after")
    return ctx.conversation_id


def _arguments(verdict_arguments: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The arguments to run with: the verdict's (each id as the ledger spells it), if any."""
    if verdict_arguments is None or verdict_arguments is given:
        return given
    return dict(verdict_arguments)


@dataclass
class GuardedToolset(WrapperToolset[Any]):
    """A toolset whose every call is checked by ``guard`` before it runs and recorded after.

    A refused call does not run: in ``reprompt`` mode it raises
    ``ModelRetry`` with the guard's message (the model sees it as the retry
    prompt of that call); in ``raise`` mode the ``IdentifierViolation``
    propagates out of the run; ``observe`` mode runs it and records nothing.
    When re-prompts of one tool run out, ``RepromptLimitExceeded`` ends the
    run. Each tool's ``max_retries`` is raised to the guard's
    ``max_reprompts`` where it is lower, so the model gets every re-prompt the
    guard allows before Pydantic AI gives up on the tool.

    The result recorded is the tool's own return value (the ``return_value``
    of a ``ToolReturn``); a failure (an exception, ``ModelRetry``) records
    nothing. ``session`` is as for :class:`Guardrail`.
    """

    guard: Guard = field(kw_only=True)
    session: SessionChooser | None = field(default=None, kw_only=True)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The wrapped toolset's tools, each allowed at least ``max_reprompts`` retries."""
        tools = await self.wrapped.get_tools(ctx)
        need = self.guard.max_reprompts
        if self.guard.mode != "reprompt" or all(t.max_retries >= need for t in tools.values()):
            return tools
        return {
            name: tool if tool.max_retries >= need else replace(tool, max_retries=need)
            for name, tool in tools.items()
        }

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        """Check the call, run it with the ledger's spelling of each id, record its result."""
        if self.session is None:
            try:
                ledger = self.guard.ledger  # the usual case: a scope is open around the run
            except GuardrailUsageError:
                pass
            else:
                return await self._guarded(name, tool_args, ctx, tool, ledger)
        with _conversation(self.guard, self.session, ctx) as ledger:
            return await self._guarded(name, tool_args, ctx, tool, ledger)

    async def _guarded(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
        ledger: Ledger,
    ) -> Any:
        guard = self.guard
        verdict = guard.enforce(name, tool_args, ledger=ledger)
        if not verdict.allowed and guard.mode == "reprompt":
            raise ModelRetry(verdict.message)
        arguments = _arguments(verdict.arguments, tool_args)
        call_id = ctx.tool_call_id
        try:
            result = await self.wrapped.call_tool(name, arguments, ctx, tool)
        except (CallDeferred, ApprovalRequired):
            raise  # the tool did not run: nothing to record
        except Exception:
            guard.record(name, arguments, None, error=True, call_id=call_id, ledger=ledger)
            raise
        if isinstance(result, Rejection):
            # A function decorated with @guard.tool too, in reprompt mode, refused the
            # call itself: the model gets it as a retry, never as a result.
            raise ModelRetry(str(result))
        value = result.return_value if isinstance(result, ToolReturn) else result
        guard.record(name, arguments, value, call_id=call_id, ledger=ledger)
        return result


def _prompt_text(prompt: str | Sequence[Any] | None) -> str:
    """The text of a run's user prompt (its text parts, where it has several)."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(part for part in prompt if isinstance(part, str))


@dataclass
class Guardrail(AbstractCapability[Any]):
    """The capability that guards every tool of an agent: ``capabilities=[Guardrail(guard)]``.

    Each run's assembled toolset (the agent's function tools, its toolsets
    and MCP servers, and the toolsets passed to the run) is wrapped in a
    :class:`GuardedToolset`; a tool the guard does not declare is allowed or
    refused as the guard's ``refuse_undeclared`` says, never left out.

    ``session`` chooses the conversation from the ``RunContext`` (a session
    id, or a ledger; see :func:`conversation_id_session`); by default it is
    the ``with guard.session(...)`` open around the run, else the guard's
    default session, else the run fails with a usage error. With
    ``observe_user`` (the default) the text of the run's user prompt is
    observed (``guard.observe_user``) as the run starts, so ids the user
    typed may be looked up by ``read`` tools; do not observe it yourself as
    well.
    """

    guard: Guard
    session: SessionChooser | None = None
    observe_user: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.guard, Guard):
            raise GuardrailUsageError(
                f"Guardrail(guard) takes a guardrail Guard, not {type(self.guard).__name__}"
            )
        if self.defer_loading:
            # A deferred capability applies only once the model loads it: every call
            # before that would run unchecked.
            raise GuardrailUsageError(
                "Guardrail cannot be deferred (defer_loading=True): it must check every tool "
                "call from the first; leave defer_loading off"
            )

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: built from a live guard, not from an agent spec."""
        return None

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Observe the run's user prompt in its conversation's ledger."""
        if not self.observe_user:
            return
        text = _prompt_text(ctx.prompt)
        if text:
            with _conversation(self.guard, self.session, ctx) as ledger:
                self.guard.observe_user(text, ledger=ledger)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        """The run's whole toolset, guarded."""
        return GuardedToolset(toolset, guard=self.guard, session=self.session)


def guardrail_history_processor(
    guard: Guard,
    *,
    max_messages: int,
    keep_recent: int = 1,
    summarize: Summarizer | None = None,
    session: SessionChooser | None = None,
    role: Literal["system"] = "system",
) -> _HistoryProcessor:
    """A history processor that compacts the history once it is longer than ``max_messages``.

    Pass it to Pydantic AI's ``ProcessHistory`` capability:
    ``capabilities=[Guardrail(guard), ProcessHistory(guardrail_history_processor(guard,
    max_messages=40))]``. The messages before the last ``keep_recent`` turns
    (a turn starts at a user prompt) become one ``ModelRequest`` holding a
    ``CompactionPart``: the sealed ID LEDGER block, then the summary
    (``summarize`` as for :func:`guardrail.compact`; the extractive summarizer
    by default). The messages kept are the very objects given; a request
    split by the cut keeps its own fields with the parts kept. A tool call
    never leaves its result. ``session`` is as for :class:`Guardrail`.
    """
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 1:
        raise GuardrailUsageError(f"max_messages must be a positive integer, not {max_messages!r}")
    if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 1:
        # The last turn holds the request about to be sent: it is never summarized.
        raise GuardrailUsageError(f"keep_recent must be an integer >= 1, not {keep_recent!r}")

    async def guardrail_compaction(
        ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        if len(messages) <= max_messages:
            return messages
        chat, origins = to_chat(messages)
        with _conversation(guard, session, ctx) as ledger:
            done = compact(
                chat,
                ledger,
                guard=guard,
                keep_recent=keep_recent,
                summarize=summarize,
                shape="openai_chat",
                role=role,
            )
        return from_chat(done.messages, origins, messages)

    return guardrail_compaction
