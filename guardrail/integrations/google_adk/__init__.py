"""Google's Agent Development Kit: every tool call of a runner checked, every result recorded.

One plugin guards every agent a runner runs (its sub-agents, and the agents
of its ``AgentTool`` tools)::

    app = App(name="shop", root_agent=agent, plugins=[GuardrailPlugin(guard)])
    runner = InMemoryRunner(app=app)

:class:`GuardrailPlugin` is an ADK plugin, and must be the app's first.
Its ``before_tool_callback`` checks each call as the model sent it; a refused
call does not run, and in ``reprompt`` mode its response is ``{"error":
<re-prompt>}``, which the model reads as the tool's response. An allowed call
runs with its arguments as the model sent them, and ``after_tool_callback``
records what the tool returned. ``on_user_message_callback`` observes the
user's text (ids the user typed enter unverified). A tool whose parameters
are marked ``Annotated[str, Id("order")]`` is declared by its marks, and the
declarations the model is given say, on each id parameter, to copy the value
exactly. With ``ledger_instructions=True`` every model request ends its
system instruction with the conversation's ID LEDGER block.

The conversation is ADK's session: each (app, user, session id) is its own
ledger (:func:`session_key` names it), kept in the guard's store, so a runner
started anew, by a guard with the same ``secret`` and store, goes on where the
last one stopped. An ``AgentTool``'s agent runs in a session ADK makes for
that one call: its own ledger, dropped with it; the request the calling model
wrote is not the user's text.

A call whose ids wait for the user's approval (an ``ask`` verdict, in any
mode but ``observe``) asks through ADK's tool confirmation
(``ToolContext.request_confirmation``): the run pauses on an
``adk_request_confirmation`` call whose hint shows each value and its
evidence. :func:`pending_approvals` lists them, :func:`answer_approvals`
writes the user's answer as the message that resumes the run; on a yes the
values are approved for that session and tool and the call runs once, on a
no the guard keeps the no and the model reads that the user declined.

:class:`GuardrailSummarizer` is ADK's events summarizer built on
:func:`guardrail.compaction.compact_text`: ADK compacts the session within a
run (``EventsCompactionConfig``), and the compacted content holds the sealed
ID LEDGER block and a summary in which every id is its role.

In ``raise`` mode ADK wraps what a plugin raises in a ``RuntimeError``: the
:class:`IdentifierViolation` (or :class:`RepromptLimitExceeded`) is its
``__cause__``. Needs the ``google-adk`` extra: ``pip install
'guardrail-ids[google-adk]'``.

Inside: ``_conversations`` (one ledger per ADK session, and the context a
callback cannot be handed), ``_tools`` (a tool's function declaration bound to
the guard), ``_approvals`` (ADK's tool confirmation) and ``_compaction``
(ADK's events as chat messages, and the summarizer).
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

try:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.sessions import Session
    from google.adk.tools.agent_tool import AgentTool
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ImportError as missing:  # pragma: no cover - exercised with the module hidden
    raise ImportError(
        "guardrail.integrations.google_adk needs Google's Agent Development Kit: "
        f"pip install 'guardrail-ids[google-adk]' ({missing})"
    ) from missing

from guardrail._check.reprompt import Rejection
from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common import asking
from guardrail.integrations._common.every_turn import DEFAULT_BLOCK_TOKENS, block_for, check_budget
from guardrail.integrations._common.tools import Bindings
from guardrail.integrations.google_adk._approvals import (
    PendingApproval,
    answer_approvals,
    ask,
    asked_by_guard,
    pending_approvals,
)
from guardrail.integrations.google_adk._compaction import GuardrailSummarizer
from guardrail.integrations.google_adk._conversations import Calling, Scopes, session_key
from guardrail.integrations.google_adk._tools import bind_request, bound_tool

__all__ = [
    "GuardrailPlugin",
    "GuardrailSummarizer",
    "PendingApproval",
    "answer_approvals",
    "pending_approvals",
    "session_key",
]

#: What the model reads for a call the user declined when the guard had nothing left to ask.
DECLINED = "The user declined this call; it did not run. Ask the user how to go on."


@dataclass(frozen=True)
class _Call:
    """A call the plugin let through: where to record it, and the arguments it checked.

    ``scope`` is the token that ends the call's :class:`Calling` scope.
    """

    conversation: str
    arguments: Any
    scope: contextvars.Token[Calling | None]


def _user_text(message: types.Content) -> str:
    """The text the user typed in a message (its text parts; an answer to a call has none)."""
    return "\n".join(part.text for part in message.parts or () if part.text and not part.thought)


class GuardrailPlugin(BasePlugin):
    """The ADK plugin that guards every tool call of a runner: ``App(..., plugins=[plugin])``.

    It must be the app's first plugin (the run fails with a usage error
    otherwise): it checks each call as the model sent it, before another
    plugin answers or changes it, and it sees each tool's return and each
    failure before another plugin replaces them.

    - **Before a tool runs** the call is checked (``guard.enforce``, in the
      conversation's ledger): a refusal answers the call with ``{"error":
      <re-prompt>}`` (``reprompt`` mode), and the tool does not run; an
      allowed call runs with its arguments as the model sent them. A call that
      waits for the user asks through ADK's tool confirmation (see
      :func:`pending_approvals`). A tool the guard does not know is allowed
      and logged, or refused under ``refuse_undeclared=True``.
    - **After it ran** its return value is recorded (``guard.record``); a
      failure (the tool raised, or its response has an ``"error"``) records
      nothing. Where the tool raised and another plugin (or an agent
      callback) answers in its place, that answer gets an ``"error"`` too,
      so compaction reads it as a failure. An agent's own
      ``before_tool_callback`` that answers a call the plugin let through
      stands for the tool: what it returns is recorded.
    - **Each user message**'s text is observed (``observe_user=False``: not);
      a message answering a call carries no text and is not.
    - **Before each model request** the tools it declares are bound (a tool
      the guard does not know is declared by its ``Id`` marks; a declared id
      the schema does not hold is a usage error) and described (each id
      parameter tells the model to copy the value exactly). With
      ``ledger_instructions=True`` the system instruction then ends with the
      conversation's ID LEDGER block: the entries used last, as many as fit
      ``ledger_tokens`` (characters / 4), sealed under a guard with a
      ``secret``, rebuilt for every request and never read back.

    The ledger of a call is its ADK session's, named :func:`session_key`;
    ``session_id`` names it otherwise (a function of the ADK ``Session``
    that must tell users apart). An ``AgentTool`` built with
    ``include_plugins=False`` runs its agent without this plugin, so its
    tools would run unchecked: calling it is a usage error unless its name
    is in ``allow_unguarded``.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        name: str = "guardrail",
        observe_user: bool = True,
        ledger_instructions: bool = False,
        ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
        allow_unguarded: Collection[str] = (),
        session_id: Callable[[Session], str] | None = None,
    ) -> None:
        if not isinstance(guard, Guard):
            raise GuardrailUsageError(
                f"GuardrailPlugin(guard) takes a guardrail Guard, not {type(guard).__name__}"
            )
        if session_id is not None and not callable(session_id):
            raise GuardrailUsageError(
                "session_id is a function of the ADK Session that returns the guard's session "
                "id for it (e.g. lambda session: f'{session.user_id}/{session.id}'), or None "
                "for session_key"
            )
        if isinstance(allow_unguarded, str):
            raise GuardrailUsageError(
                "allow_unguarded is a collection of tool names, e.g. {'research_agent'}, "
                "not one string"
            )
        super().__init__(name=name)
        self.guard = guard
        self.observe_user = observe_user
        self.ledger_instructions = ledger_instructions
        self.ledger_tokens = check_budget(ledger_tokens)
        self.allow_unguarded = frozenset(allow_unguarded)
        self.session_id = session_id or session_key
        self.scopes = Scopes()
        self._bindings = Bindings(guard, "Google ADK")
        #: The calls let through, until their record (one ToolContext per call).
        self._calls: weakref.WeakKeyDictionary[ToolContext, _Call] = weakref.WeakKeyDictionary()
        #: The calls let through that raised, until the answer given in their place.
        self._failures: weakref.WeakKeyDictionary[ToolContext, str] = weakref.WeakKeyDictionary()

    # -- the run and the user ---------------------------------------------------------------

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        """Check the plugin's place; the run's conversation, for ADK's compaction."""
        plugins = invocation_context.plugin_manager.plugins
        if not plugins or plugins[0] is not self:
            names = [plugin.name for plugin in plugins]
            raise GuardrailUsageError(
                f"the GuardrailPlugin {self.name!r} must be the runner's first plugin (they are "
                f"{names}): it checks each tool call before another plugin answers or changes "
                "it, and sees each result and failure first. Put it first in plugins=[...]"
            )
        self.scopes.conversation.set(self.session_id(invocation_context.session))
        return None

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        """Observe the user's text in the conversation's ledger (a turn starts).

        A run started inside a tool call (an ``AgentTool``'s agent) is given
        the text the calling model wrote: not the user's, not observed.
        """
        if not self.observe_user or self.scopes.calling.get() is not None:
            return None
        text = _user_text(user_message)
        if text:
            async with self.guard.session(self.session_id(invocation_context.session)) as ledger:
                self.guard.observe_user(text, ledger=ledger)
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """A run in a session ADK drops when its tool call returns: its ledger goes too."""
        calling = self.scopes.calling.get()
        if calling is not None and calling.discards_nested:
            key = self.session_id(invocation_context.session)
            if key != calling.conversation:
                await self.guard.end_session_async(key, delete=True)

    # -- the model request --------------------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Bind and describe the request's tools; the ledger block, where asked."""
        bind_request(self._bindings, llm_request)
        conversation = self.session_id(callback_context.session)
        self.scopes.conversation.set(conversation)
        if self.ledger_instructions:
            async with self.guard.session(conversation) as ledger:
                block = block_for(self.guard, ledger, self.ledger_tokens)
            llm_request.append_instructions([block])
        return None

    # -- the tool call --------------------------------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Check the call; refuse it, ask the user, or let it run as the model sent it."""
        name = tool.name
        if (
            isinstance(tool, AgentTool)
            and not tool.include_plugins
            and name not in self.allow_unguarded
        ):
            raise GuardrailUsageError(
                f"the tool {name!r} runs the agent {tool.agent.name!r} without the runner's "
                "plugins (AgentTool(include_plugins=False)), so its tools would run unchecked. "
                f"Build it with include_plugins=True, or pass allow_unguarded={{{name!r}}}"
            )
        guard = self.guard
        conversation = self.session_id(tool_context.session)
        bound = await bound_tool(self._bindings, tool, tool_context)
        checked, undo = bound.to_check(tool_args)
        confirmation = tool_context.tool_confirmation
        call_id = tool_context.function_call_id or None
        async with guard.session(conversation) as ledger:
            if confirmation is not None and asked_by_guard(tool_context):
                # ADK resumes the call with the user's answer to the guard's question.
                if not confirmation.confirmed:
                    asked = asking.peek(guard, name, checked, ledger=ledger)
                    text = asking.declined(guard, asked, ledger=ledger) if asked else DECLINED
                    return {"error": text}
                verdict = asking.approved(guard, name, checked, ledger=ledger, call_id=call_id)
            else:
                verdict = await asking.enforce_async(
                    guard, name, checked, ledger=ledger, call_id=call_id
                )
        if asking.waiting(guard, verdict):
            return ask(tool_context, name, verdict)
        if not verdict.allowed and guard.mode != "observe":
            return {"error": verdict.message}
        recorded = verdict.arguments if verdict.arguments is not None else checked
        run_with = bound.to_run(recorded, undo, tool_args)
        if run_with is not tool_args:  # one value under two names: the tool gets the checked one
            tool_args.clear()
            tool_args.update(run_with)
        # The tool runs in this call's task: a run it starts is nested (see _conversations).
        calling = Calling(conversation, discards_nested=isinstance(tool, AgentTool))
        self._calls[tool_context] = _Call(conversation, recorded, self.scopes.calling.set(calling))
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """Record what the tool returned, for a call the plugin let through."""
        failure = self._failures.pop(tool_context, None)
        call = self._done(tool_context)
        if failure is not None:
            # The tool raised and another plugin answered in its place: the history says it
            # failed, so compaction reads that answer as this plugin did (recording nothing).
            marked = dict(result) if isinstance(result, dict) else {"result": result}
            return marked if marked.get("error") else {**marked, "error": failure}
        if call is None:
            return None  # refused, waiting, or answered before the plugin saw it
        if isinstance(result, Rejection):
            # A function decorated with @guard.tool too refused the call itself.
            return {"error": str(result)}
        async with self.guard.session(call.conversation) as ledger:
            self.guard.record(
                tool.name,
                call.arguments,
                result,
                call_id=tool_context.function_call_id,
                ledger=ledger,
            )
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """A tool that raised teaches nothing: recorded as a failure, the error left to ADK.

        Another plugin (or an agent callback) may answer the call in the tool's
        place; :meth:`after_tool_callback` then marks that answer failed.
        """
        call = self._done(tool_context)
        if call is not None:
            self._failures[tool_context] = f"{tool.name} raised {type(error).__name__}"
            async with self.guard.session(call.conversation) as ledger:
                self.guard.record(
                    tool.name,
                    call.arguments,
                    None,
                    error=True,
                    call_id=tool_context.function_call_id,
                    ledger=ledger,
                )
        return None

    def _done(self, tool_context: ToolContext) -> _Call | None:
        """The call let through with this context, its :class:`Calling` scope ended."""
        call = self._calls.pop(tool_context, None)
        if call is not None:
            with contextlib.suppress(ValueError):  # a context other than the call's own
                self.scopes.calling.reset(call.scope)
        return call
