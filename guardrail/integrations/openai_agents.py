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

:class:`GuardedSession` wraps any SDK ``Session`` and compacts its history with
:func:`guardrail.compaction.compact` once it grows past ``max_items``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Final

try:
    from agents import (
        Agent,
        AgentsException,
        FunctionTool,
        GuardrailFunctionOutput,
        Handoff,
        InputGuardrail,
        ItemHelpers,
        RunContextWrapper,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
    )
    from agents.items import TResponseInputItem
    from agents.memory import Session, SessionSettings
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool import set_function_tool_failure_error_function
    from agents.tool_context import ToolContext
except ImportError as missing:  # pragma: no cover - exercised by simulating the missing module
    raise ImportError(
        "guardrail.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'guardrail-ids[openai-agents]'"
    ) from missing

from guardrail._guard import Guard
from guardrail._reprompt import failure_text
from guardrail._verdict import Rejection, Verdict
from guardrail.compaction import CompactionReport, Summarizer, compact
from guardrail.compaction._messages import unsuccessful
from guardrail.errors import GuardrailUsageError, IdentifierViolation, RepromptLimitExceeded
from guardrail.integrations._tools import Bindings, Bound

__all__ = ["GuardedSession", "SessionId", "compact_model_input", "guard_agent", "guard_tool"]

#: Where a run's guardrail session comes from: the context object given to ``Runner.run``
#: (``context=``) in, the conversation's session id out.
SessionId = Callable[[Any], str]

# What a call carries from its input guardrail to its output guardrail, kept on the
# SDK's ToolContext (one per call, shared by both guardrails and the tool's invoker).
_RUN_WITH: Final = "_guardrail_run_with"  # the arguments the tool runs with (a mapping)
_REWRITTEN: Final = "_guardrail_rewritten"  # that mapping as JSON, where the ids were respelled
_SUCCEEDED: Final = "_guardrail_succeeded"  # set by the invoker when the tool returned normally
_FAILED: Final = "_guardrail_failed"  # set by a tool's own failure formatter
_RESULT: Final = "_guardrail_result"  # what the tool returned, where the model reads it sealed
# The SDK marks a result its default failure formatter wrote in place of a raised exception.
_SDK_DEFAULT_FAILURE: Final = "_function_tool_default_failure_handled"

_ALLOW: Final = GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


class _RunIdentifierViolation(IdentifierViolation, AgentsException):
    """An :class:`IdentifierViolation` the SDK lets through ``Runner.run`` as it is.

    The SDK wraps any other exception of a tool's guardrail in a ``UserError``;
    as one of its own exceptions this one reaches the program unwrapped (an
    ``except IdentifierViolation`` catches it) and carries the SDK's
    ``run_data``.
    """

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict)
        self.run_data = None


class _RunRepromptLimitExceeded(RepromptLimitExceeded, AgentsException):
    """A :class:`RepromptLimitExceeded` the SDK lets through ``Runner.run`` as it is."""

    def __init__(self, verdict: Verdict, *, limit: int) -> None:
        super().__init__(verdict, limit=limit)
        self.run_data = None


class _ToolGuard:
    """The two tool guardrails of one guard, and the invoker that runs a call as allowed.

    One per :func:`guard_agent` call (or :func:`guard_tool`), shared by every
    tool it guards: a tool whose guardrails belong to the same guard is left
    as it is.
    """

    def __init__(self, guard: Guard, session_id: SessionId | None) -> None:
        if not isinstance(guard, Guard):
            raise GuardrailUsageError(
                f"guard_agent needs a guardrail Guard, not {type(guard).__name__}"
            )
        if session_id is not None and not callable(session_id):
            raise GuardrailUsageError(
                "session_id is a function of the context given to Runner.run that returns the "
                "conversation id (e.g. lambda context: context.conversation_id), or None to use "
                "the session open around Runner.run"
            )
        self.guard = guard
        self.session_id = session_id
        self.bindings = Bindings(guard, "OpenAI Agents SDK")
        #: Each guarded tool's schema as the SDK made it, and its function, by tool name.
        self.shapes: dict[str, tuple[dict[str, Any] | None, Any]] = {}
        self.enforce_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._enforce, name="guardrail_enforce"
        )
        self.record_guardrail: ToolOutputGuardrail[Any] = ToolOutputGuardrail(
            guardrail_function=self._record, name="guardrail_record"
        )
        self.observe_guardrail: InputGuardrail[Any] = InputGuardrail(
            guardrail_function=self._observe, name="guardrail_observe_user", run_in_parallel=False
        )

    # -- the guardrails -------------------------------------------------------------------

    def bound(self, name: str) -> Bound:
        """A guarded tool (or handoff), bound to the guard as the SDK sends it to the model."""
        schema, function = self.shapes.get(name, (None, None))
        return self.bindings.get(name, schema, source=function, function=function)

    def check(self, name: str, arguments: Any, context: Any) -> tuple[Verdict, Any, Any]:
        """Enforce one call as the model sent it: the verdict, the arguments to run, as checked.

        Raises the SDK-friendly :class:`IdentifierViolation` and
        :class:`RepromptLimitExceeded`, which reach the program unwrapped.
        """
        bound = self.bound(name)
        checked, undo = bound.to_check(arguments)
        try:
            if self.session_id is None:
                verdict = self.guard.enforce(name, checked)
            else:
                with self.guard.session(self.session_id(context)):
                    verdict = self.guard.enforce(name, checked)
        except RepromptLimitExceeded as stop:
            raise _RunRepromptLimitExceeded(stop.verdict, limit=stop.limit) from None
        except IdentifierViolation as refusal:  # raise mode
            raise _RunIdentifierViolation(refusal.verdict) from None
        recorded = verdict.arguments if verdict.arguments is not None else checked
        return verdict, bound.to_run(recorded, undo, arguments), recorded

    def _enforce(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Check a call before it runs; refuse it with the re-prompt as the tool's output."""
        context = data.context
        arguments: Any = context.tool_arguments
        # Text that is not JSON goes to the check as it is: it reports what it cannot read.
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments) if arguments else {}
        verdict, run_with, recorded = self.check(context.tool_name, arguments, context.context)
        if verdict.allowed or self.guard.mode == "observe":
            if verdict.arguments is not None:
                state = context.__dict__
                state[_RUN_WITH] = recorded
                if run_with is not arguments:  # an id respelled as the ledger has it
                    state[_REWRITTEN] = json.dumps(run_with, ensure_ascii=False)
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content(
            verdict.message, output_info=Rejection(verdict).to_dict()
        )

    def _record(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Record the tool's raw output; a failure (raised, timed out) records nothing."""
        context = data.context
        state = context.__dict__
        succeeded = state.pop(_SUCCEEDED, False)
        arguments = state.pop(_RUN_WITH, None)
        output = state.pop(_RESULT, data.output)  # the tool's own value, not the sealed text
        state.pop(_REWRITTEN, None)
        if arguments is None:
            arguments = context.tool_arguments
        if self.session_id is None:
            self.guard.record(
                context.tool_name,
                arguments,
                output,
                error=not succeeded,
                call_id=context.tool_call_id,
            )
        else:
            with self.guard.session(self.session_id(context.context)):
                self.guard.record(
                    context.tool_name,
                    arguments,
                    output,
                    error=not succeeded,
                    call_id=context.tool_call_id,
                )
        return ToolGuardrailFunctionOutput.allow()

    def seal(self, context: ToolContext[Any], result: Any) -> Any:
        """What a successful call returned, as the text its output item holds, sealed.

        The SDK writes a tool's return value as ``str()`` of it (text as it
        is); that text, with the seal on a last line, is what the model reads
        and the history keeps. The seal covers the call as the model wrote it
        (its ``function_call`` item). Structured outputs (images, files) and
        calls made by a hosted program are left as they are, unsealed; the
        tool's own output guardrails and the record still see the value it
        returned.
        """
        if _programmatic(context):
            return result
        text = ItemHelpers._convert_tool_output(result)  # the SDK's own conversion
        if not isinstance(text, str):
            return result
        session = self.session_id(context.context) if self.session_id is not None else None
        context.__dict__[_RESULT] = result
        return self.guard.seal_result(
            context.tool_name,
            context.tool_arguments,
            text,
            call_id=context.tool_call_id,
            session=session,
        )

    def record_handoff(self, name: str, arguments: Any, context: Any, *, error: bool) -> None:
        """Record a handoff that ran (its ``mints``, a read's confirmation), or that failed."""
        if arguments is None:
            return
        if self.session_id is None:
            self.guard.record(name, arguments, None, error=error)
        else:
            with self.guard.session(self.session_id(context)):
                self.guard.record(name, arguments, None, error=error)

    def _observe(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        given: str | list[TResponseInputItem],
    ) -> GuardrailFunctionOutput:
        """Observe the user's new messages as a run starts (ids of a kind's shape, unverified)."""
        texts = _user_texts(given)
        if texts:
            if self.session_id is None:
                for text in texts:
                    self.guard.observe_user(text)
            else:
                with self.guard.session(self.session_id(context.context)):
                    for text in texts:
                        self.guard.observe_user(text)
        return _ALLOW

    # -- tools ----------------------------------------------------------------------------

    def guards(self, tool: FunctionTool) -> bool:
        """Whether ``tool`` is already guarded by this guard (by this or another ``_ToolGuard``)."""
        return any(_guard_of(item) is self.guard for item in tool.tool_input_guardrails or ())

    def wrap(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` with this guard's guardrails, run with the ledger's spelling.

        The copy is bound to the guard (declared by its ``Id`` marks where the
        guard does not know it, held to its schema), and its schema says, on
        every id parameter, to copy the value exactly.
        """
        if self.guards(tool):
            return tool
        function = getattr(tool, "__wrapped__", None)
        self.shapes[tool.name] = (tool.params_json_schema, function if callable(function) else None)
        bound = self.bound(tool.name)
        guarded = tool.__copy__()  # the SDK's copy rebinds the failure handling to the copy
        if bound.schema is not None and bound.schema != tool.params_json_schema:
            guarded.params_json_schema = dict(bound.schema)
        guarded.tool_input_guardrails = [
            self.enforce_guardrail,
            *(tool.tool_input_guardrails or ()),
        ]
        guarded.tool_output_guardrails = [
            *(tool.tool_output_guardrails or ()),
            self.record_guardrail,
        ]
        # A tool with an output schema has its output validated as JSON by the SDK: a seal
        # line would fail that, so such a tool's results stay unsealed.
        sealing = self.guard.seals_results and guarded.output_json_schema is None
        guarded.on_invoke_tool = _invoker(guarded.on_invoke_tool, self.seal if sealing else None)
        if sealing:
            guarded.tool_output_guardrails[:-1] = [
                _given_the_result(item) for item in guarded.tool_output_guardrails[:-1]
            ]
        formatter = guarded._failure_error_function
        if formatter is not None and not guarded._use_default_failure_error_function:
            # A tool's own failure formatter turns an exception into text the model reads;
            # mark the call failed so that text is never harvested as a result.
            set_function_tool_failure_error_function(guarded, _marking(formatter))
        if guarded.timeout_error_function is not None:
            guarded.timeout_error_function = _timed_out(guarded.timeout_error_function)
        # The tool's own input guardrails may refuse a call too: the tool does not run, and
        # the model reads their message as the call's output.
        guarded.tool_input_guardrails[1:] = [
            item if _guard_of(item) is not None else _marking_rejections(item)
            for item in guarded.tool_input_guardrails[1:]
        ]
        return guarded


def _guard_of(guardrail: ToolInputGuardrail[Any] | InputGuardrail[Any]) -> Guard | None:
    """The guard whose adapter made ``guardrail`` (None: someone else's guardrail)."""
    owner = getattr(guardrail.guardrail_function, "__self__", None)
    return owner.guard if isinstance(owner, _ToolGuard) else None


def _invoker(
    inner: Callable[[ToolContext[Any], str], Awaitable[Any]],
    seal: Callable[[ToolContext[Any], Any], Any] | None,
) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    """Run the tool with the ids as the ledger spells them; mark a normal return as a success.

    The text a failure formatter gave in place of a result is marked as a
    failure (see :func:`_failure`); a success is sealed where ``seal`` is given.
    """

    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        state = context.__dict__
        state.pop(_FAILED, None)
        state.pop(_RESULT, None)
        result = await inner(context, state.get(_REWRITTEN, arguments))
        if state.pop(_FAILED, False) or state.get(_SDK_DEFAULT_FAILURE, False):
            return _failure(context.tool_name, "failed", result)
        state[_SUCCEEDED] = True
        return seal(context, result) if seal is not None else result

    return invoke


def _programmatic(context: ToolContext[Any]) -> bool:
    """Whether a hosted program made the call (the SDK writes its output as JSON, not text)."""
    call = getattr(context, "tool_call", None)
    caller = call.get("caller") if isinstance(call, Mapping) else getattr(call, "caller", None)
    kind = caller.get("type") if isinstance(caller, Mapping) else getattr(caller, "type", None)
    return kind == "program"


def _given_the_result(guardrail: ToolOutputGuardrail[Any]) -> ToolOutputGuardrail[Any]:
    """A tool's own output guardrail, shown what the tool returned rather than the sealed text."""
    function = guardrail.guardrail_function

    def check(data: ToolOutputGuardrailData) -> Any:
        returned = data.context.__dict__.get(_RESULT, data.output)
        return function(dataclasses.replace(data, output=returned))

    return ToolOutputGuardrail(guardrail_function=check, name=guardrail.get_name())


def _failure(tool: str, what: str, text: Any) -> Any:
    """The text the model reads for a call that failed, marked so wherever it is read back.

    The SDK writes its items with no status, so a transcript shows a failure
    by its text alone: the SDK's own sentences are known as they are (see
    :mod:`guardrail._failures`); any other text (a tool's formatter, the
    run's ``tool_error_formatter``, a timeout or a guardrail's message) gets
    guardrail's failure mark in front, so compaction and replay never read it
    as the tool's result.
    """
    if not isinstance(text, str) or unsuccessful(text):
        return text
    return failure_text(f"{tool} {what}: {text}")


def _timed_out(formatter: Callable[..., Any]) -> Callable[[RunContextWrapper[Any], Exception], Any]:
    """A tool's ``timeout_error_function``, its message marked as a failure."""

    def timed_out(context: RunContextWrapper[Any], error: Exception) -> Any:
        name = getattr(context, "tool_name", None) or "the tool"
        given = formatter(context, error)
        if inspect.isawaitable(given):

            async def later() -> Any:
                return _failure(name, "timed out", await given)

            return later()
        return _failure(name, "timed out", given)

    return timed_out


def _marking_rejections(guardrail: ToolInputGuardrail[Any]) -> ToolInputGuardrail[Any]:
    """A tool's own input guardrail, its refusal's message marked as a failure."""
    function = guardrail.guardrail_function

    async def check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        out = function(data)
        if inspect.isawaitable(out):
            out = await out
        behavior = out.behavior
        if behavior["type"] == "reject_content":
            name = data.context.tool_name
            message = _failure(name, "did not run", behavior["message"])
            if message is not behavior["message"]:
                out = dataclasses.replace(out, behavior={**behavior, "message": message})
        return out

    return ToolInputGuardrail(guardrail_function=check, name=guardrail.get_name())


def _marking(formatter: Callable[..., Any]) -> Callable[[RunContextWrapper[Any], Exception], Any]:
    """``formatter``, marking the call it formats as failed."""

    def failure(context: RunContextWrapper[Any], error: Exception) -> Any:
        context.__dict__[_FAILED] = True
        return formatter(context, error)

    return failure


def _user_texts(given: str | list[TResponseInputItem]) -> list[str]:
    """The texts of the user's new messages in a run's input: a string, or Responses items.

    In a list, the user messages at its end, after the last item of any other
    kind: a history passed back in (``result.to_input_list()`` plus the next
    message) was observed when it was new, and each observation starts a turn.
    """
    if isinstance(given, str):
        return [given]
    texts: list[str] = []
    for item in reversed(given):
        if not isinstance(item, Mapping) or item.get("role") != "user":
            break
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(
                part["text"]
                for part in reversed(content)
                if isinstance(part, Mapping) and isinstance(part.get("text"), str)
            )
    texts.reverse()
    return texts


# -- agents -------------------------------------------------------------------------------


class _Guarding:
    """One walk over an agent graph: each agent and each tool object guarded once."""

    def __init__(self, tools: _ToolGuard, allow_unguarded: Collection[str]) -> None:
        self.tools = tools
        self.allow_unguarded = frozenset(allow_unguarded)
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
        return clone

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
        if tool._is_agent_tool and isinstance(tool._agent_instance, Agent):
            unguarded = self.unguarded(tool._agent_instance, set())
            if unguarded:
                raise GuardrailUsageError(
                    f"the tool {tool.name!r} of agent {owner.name!r} runs the agent "
                    f"{tool._agent_instance.name!r}, whose {unguarded} is not guarded. The SDK's "
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
                if tool._is_agent_tool and isinstance(tool._agent_instance, Agent):
                    inner = self.unguarded(tool._agent_instance, seen)
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
                    raise _RunIdentifierViolation(verdict)
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
            guarded._agent_ref = weakref.ref(guarded_target)
        return guarded


def _handoff_target(item: Handoff[Any, Any]) -> Agent[Any] | None:
    """The agent a ``handoff()`` object was built for, where the SDK kept it."""
    reference = item._agent_ref
    target = reference() if reference is not None else None
    return target if isinstance(target, Agent) else None


def guard_agent(
    agent: Agent[Any],
    guard: Guard,
    *,
    session_id: SessionId | None = None,
    allow_unguarded: Collection[str] = (),
) -> Agent[Any]:
    """A copy of ``agent`` whose every function tool is checked by ``guard``.

    Each function tool gets an input guardrail that enforces the guard's
    check (a refusal is the SDK's ``reject_content``: the model reads the
    re-prompt as the call's output) and an output guardrail that records the
    tool's raw output; an allowed call runs with each id as the ledger spells
    it. The original agent and its tools are not changed. Agents it hands
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
    """
    tools = _ToolGuard(guard, session_id)
    guarding = _Guarding(tools, allow_unguarded)
    guarded = guarding.agent(agent)
    if not any(_guard_of(item) is guard for item in guarded.input_guardrails):
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
    return _ToolGuard(guard, session_id).wrap(tool)


# -- sessions -----------------------------------------------------------------------------


class GuardedSession:
    """An SDK ``Session`` whose history is compacted with :func:`compact` once it grows.

    Wraps any session (``SQLiteSession``, a Redis or database one): reads
    and writes go to it. After ``add_items`` leaves more than ``max_items``
    items, the history is rebuilt as the ledger block, a summary of the older
    turns and the last ``keep_recent`` turns raw (or the last
    ``keep_last_messages`` items), and stored in place of the old one. The
    ledger is the guard's session named by this session's ``session_id``:
    run the agent inside ``with guard.session(session.session_id):`` so the
    tools check against the same one.
    """

    def __init__(
        self,
        session: Session,
        guard: Guard,
        *,
        max_items: int = 60,
        keep_recent: int = 2,
        keep_last_messages: int | None = None,
        summarize: Summarizer | None = None,
    ) -> None:
        if not isinstance(max_items, int) or max_items < 1:
            raise GuardrailUsageError(f"max_items must be a positive integer, not {max_items!r}")
        self.session = session
        self.guard = guard
        self.max_items = max_items
        self.keep_recent = keep_recent
        self.keep_last_messages = keep_last_messages
        self.summarize = summarize
        self.session_id: str = session.session_id
        self.session_settings: SessionSettings | None = getattr(session, "session_settings", None)
        #: The report of the last compaction (None before the first).
        self.last_report: CompactionReport | None = None

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history, or its last ``limit`` items."""
        return await self.session.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Add items; compact the history when it holds more than ``max_items``."""
        await self.session.add_items(items)
        if len(await self.session.get_items()) > self.max_items:
            await self.compact()

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the last item."""
        return await self.session.pop_item()

    async def clear_session(self) -> None:
        """Remove every item."""
        await self.session.clear_session()

    async def compact(self) -> CompactionReport:
        """Compact the history now and store the compacted list; returns the report."""
        items = await self.session.get_items()
        with self.guard.session(self.session_id) as ledger:
            result = compact(
                items,
                ledger,
                guard=self.guard,
                keep_recent=self.keep_recent,
                keep_last_messages=self.keep_last_messages,
                summarize=self.summarize,
                shape="openai_responses",
            )
        if result.messages != items:
            await self.session.clear_session()
            await self.session.add_items(list(result.messages))
        self.last_report = result.report
        return result.report


def compact_model_input(
    guard: Guard,
    *,
    max_items: int = 60,
    keep_recent: int = 2,
    keep_last_messages: int | None = None,
    summarize: Summarizer | None = None,
    session_id: SessionId | None = None,
) -> Callable[[CallModelData[Any]], ModelInputData]:
    """A ``RunConfig.call_model_input_filter`` that compacts what the model reads, mid-run.

    Before each model call whose input holds more than ``max_items`` items,
    the input is compacted with :func:`compact` against the conversation's
    ledger: the model reads the ledger block, a summary of the older turns
    and the last ``keep_recent`` turns raw (or, with ``keep_last_messages``,
    the last that many items: a run's loop of tool calls is one long turn), so
    the ids it copies next come from the block, verbatim. Only the model's input changes: the run's
    items, its result and a session keep the whole history (compact those
    with :class:`GuardedSession`). The ledger is the current session's, or
    the one ``session_id`` names for the context given to ``Runner.run``.

    ``RunConfig(call_model_input_filter=compact_model_input(guard))``.
    """
    if not isinstance(max_items, int) or max_items < 1:
        raise GuardrailUsageError(f"max_items must be a positive integer, not {max_items!r}")

    def compact_input(data: CallModelData[Any]) -> ModelInputData:
        given = data.model_data
        if len(given.input) <= max_items:
            return given
        if session_id is None:
            result = compact(
                given.input,
                guard.ledger,
                guard=guard,
                keep_recent=keep_recent,
                keep_last_messages=keep_last_messages,
                summarize=summarize,
                shape="openai_responses",
            )
        else:
            with guard.session(session_id(data.context)) as ledger:
                result = compact(
                    given.input,
                    ledger,
                    guard=guard,
                    keep_recent=keep_recent,
                    keep_last_messages=keep_last_messages,
                    summarize=summarize,
                    shape="openai_responses",
                )
        return ModelInputData(input=list(result.messages), instructions=given.instructions)

    return compact_input
