"""Pydantic AI: every tool call of an agent checked against the conversation's ledger.

One line guards every tool an agent has, its own function tools, its
toolsets and MCP servers, and the toolsets given to one run::

    agent = Agent(model, tools=[...], capabilities=[Guardrail(guard)])

:class:`Guardrail` is a capability: it wraps the agent's assembled toolset in
a :class:`GuardedToolset` on every run, and observes the run's user prompt.
Before each call the guard checks its identifier arguments; a refused call
does not run, and in ``reprompt`` mode the model gets the guard's message as
a retry prompt (``ModelRetry``), which Pydantic AI sends back as the call's
``retried`` tool return. An allowed call runs with the arguments the
model sent, and its result is recorded before Pydantic AI serializes it, so
pydantic models with ``Id`` fields are harvested by their annotations. The
capability checks the arguments as the model sent them (before Pydantic AI
validates them), by the names the model sees; output functions
(``output_type=[fn]``, ``ToolOutput(fn)``) are checked like tools; a tool or
output function with ``Id`` marks and no declaration is declared by them; and
every tool definition the model is given says, on each id parameter, to copy
the value exactly.

A tool call whose ids wait for the user's approval (an ``ask`` verdict, in
any mode but ``observe``) is deferred Pydantic AI's own way: it does not
run, Pydantic AI's ``ApprovalRequired`` carries the guard's requests (with
their evidence) to ``DeferredToolRequests.metadata``, and the run ends.
:func:`answer_approvals` turns the user's answers into the
``DeferredToolResults`` to resume with; a call resumed as approved has its
values approved for that session and tool, then runs once.

:func:`guardrail_history_processor` compacts the message history with
:func:`guardrail.compact` (pass it to ``ProcessHistory``): the ledger block
and a summary replace all but the last messages (or turns), within one run
too, and a tool call never leaves its result. ``Guardrail(guard,
ledger_instructions=True)`` keeps the conversation's ID LEDGER block in the
model's instructions at every request.

Which conversation a call belongs to: the ledger of the ``with
guard.session(...)`` open around ``agent.run`` (or the guard's default
session). A ``session=`` callable taking the ``RunContext`` chooses otherwise
(a session id, or a ledger); :func:`conversation_id_session` names the
session after the run's ``conversation_id``.

Inside: ``_sessions`` (which ledger a run uses, its history compacted),
``_messages`` (message histories to and from the chat shape) and
``_approvals`` (deferred tool approvals).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

try:
    from pydantic_ai import ModelRetry, RunContext, ToolOutput
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        ToolCallPart,
        ToolReturn,
        ToolReturnPart,
    )
    from pydantic_ai.output import OutputContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset
except ImportError as missing:  # pragma: no cover - exercised with the module hidden
    raise ImportError(
        "guardrail.integrations.pydantic_ai needs Pydantic AI: "
        "pip install 'guardrail-ids[pydantic-ai]'"
    ) from missing

from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._declare.describe import describe_ids
from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common import asking
from guardrail.integrations._common.every_turn import DEFAULT_BLOCK_TOKENS, block_for, check_budget
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.pydantic_ai._approvals import answer_approvals, deferral
from guardrail.integrations.pydantic_ai._sessions import (
    SessionChooser,
    conversation,
    conversation_id_session,
    guardrail_history_processor,
)
from guardrail.ledger import Ledger

__all__ = [
    "GuardedToolset",
    "Guardrail",
    "SessionChooser",
    "answer_approvals",
    "conversation_id_session",
    "guardrail_history_processor",
]


def _function_of(tool: ToolsetTool[Any], name: str) -> Callable[..., Any] | None:
    """The Python function behind a function toolset's tool (None for any other toolset)."""
    toolset = tool.toolset
    if not isinstance(toolset, FunctionToolset):
        return None
    held = toolset.tools.get(getattr(tool, "original_name", None) or name)
    function = getattr(held, "function", None)
    return function if callable(function) else None


def _source(function: Callable[..., Any] | None) -> Any:
    """What validates a function tool's arguments: the function, or its one model parameter.

    Pydantic AI gives the model the fields of a single pydantic model
    parameter as the tool's own parameters.
    """
    if function is None:
        return None
    try:
        parameters = [
            parameter
            for parameter in inspect.signature(function).parameters.values()
            if parameter.annotation is not RunContext
            and getattr(parameter.annotation, "__origin__", None) is not RunContext
        ]
    except (TypeError, ValueError):
        return function
    if len(parameters) == 1:
        hint = parameters[0].annotation
        if isinstance(hint, type) and hasattr(hint, "model_fields"):
            return hint
    return function


@dataclass
class _Checked:
    """A call the capability checked before Pydantic AI validated it: what the record reads."""

    arguments: Mapping[str, Any]
    #: What the call waits for the user to approve (it raises ``ApprovalRequired``, not run).
    requests: tuple[ApprovalRequest, ...] = ()


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

    Its tools are bound to the guard as the model sees them: a tool with
    ``Id`` marks and no declaration is declared by them, every id parameter of
    a tool definition says to copy the value exactly, and a declared id the
    tool's schema does not have is a :class:`GuardrailUsageError`. Used alone
    (in ``toolsets=``) it checks the arguments Pydantic AI validated; inside
    the :class:`Guardrail` capability the capability checks them first, as
    the model sent them.

    The result recorded is the tool's own return value (the ``return_value``
    of a ``ToolReturn``); a failure (an exception, ``ModelRetry``) records
    nothing. Under ``Guard(secret=...)`` a successful return becomes the text
    the model reads, sealed (see :func:`_sealed`), so a server that rebuilds
    the ledger from a history its client sends trusts it. ``session`` is as
    for :class:`Guardrail`.
    """

    guard: Guard = field(kw_only=True)
    session: SessionChooser | None = field(default=None, kw_only=True)
    #: The tools bound to the guard (shared with the capability that made this toolset).
    bindings: Bindings | None = field(default=None, kw_only=True, repr=False)
    #: Calls the capability checked already, by tool call id (None: check every call here).
    checked: dict[str, _Checked] | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if self.bindings is None:
            self.bindings = Bindings(self.guard, "Pydantic AI")

    def _bound(self, name: str, tool: ToolsetTool[Any]) -> Bound:
        assert self.bindings is not None
        function = _function_of(tool, name)
        return self.bindings.get(
            name, tool.tool_def.parameters_json_schema, source=_source(function), function=function
        )

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The wrapped toolset's tools, described, each allowed ``max_reprompts`` retries."""
        tools = await self.wrapped.get_tools(ctx)
        need = self.guard.max_reprompts if self.guard.mode == "reprompt" else 0
        given: dict[str, ToolsetTool[Any]] = {}
        for name, tool in tools.items():
            bound = self._bound(name, tool)
            if bound.schema is not None and bound.schema != tool.tool_def.parameters_json_schema:
                tool = replace(
                    tool, tool_def=replace(tool.tool_def, parameters_json_schema=dict(bound.schema))
                )
            given[name] = tool if tool.max_retries >= need else replace(tool, max_retries=need)
        return given

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        """Check the call, run it with each id as the check gives it, record its result."""
        if self.session is None:
            try:
                ledger = self.guard.ledger  # the usual case: a scope is open around the run
            except GuardrailUsageError:
                pass
            else:
                return await self._guarded(name, tool_args, ctx, tool, ledger)
        with conversation(self.guard, self.session, ctx) as ledger:
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
        call_id = ctx.tool_call_id
        done = self.checked.pop(call_id, None) if self.checked and call_id else None
        if done is not None and done.requests:
            raise deferral(name, done.requests)  # the run ends with DeferredToolRequests
        if done is not None:
            recorded, arguments = done.arguments, tool_args
        else:
            bound = self._bound(name, tool)
            checked, undo = bound.to_check(tool_args)
            verdict = _verdict(guard, name, checked, ctx, ledger)
            if asking.waiting(guard, verdict):
                raise deferral(name, verdict.approvals)
            if not verdict.allowed and guard.mode == "reprompt":
                raise ModelRetry(verdict.message)
            recorded = verdict.arguments if verdict.arguments is not None else checked
            arguments = dict(bound.to_run(recorded, undo, tool_args))
        try:
            result = await self.wrapped.call_tool(name, arguments, ctx, tool)
        except (CallDeferred, ApprovalRequired):
            raise  # the tool did not run: nothing to record
        except Exception:
            guard.record(name, recorded, None, error=True, call_id=call_id, ledger=ledger)
            raise
        if isinstance(result, Rejection):
            # A function decorated with @guard.tool too, in reprompt mode, refused the
            # call itself: the model gets it as a retry, never as a result.
            raise ModelRetry(str(result))
        value = result.return_value if isinstance(result, ToolReturn) else result
        guard.record(name, recorded, value, call_id=call_id, ledger=ledger)
        if guard.seals_results and call_id:
            return _sealed(guard, result, value, name, call_id, ctx, ledger)
        return result


def _verdict(
    guard: Guard, name: str, checked: Mapping[str, Any], ctx: RunContext[Any], ledger: Ledger
) -> Verdict:
    """The call checked; one Pydantic AI resumes as approved by the user approves its asks first.

    ``tool_call_approved`` is set only from the ``DeferredToolResults`` the
    program resumes the run with, never from anything the model wrote.
    """
    call_id = ctx.tool_call_id or None
    if ctx.tool_call_approved:
        return asking.approved(guard, name, checked, ledger=ledger, call_id=call_id)
    return asking.enforce(guard, name, checked, ledger=ledger, call_id=call_id)


def _sealed(
    guard: Guard,
    result: Any,
    value: Any,
    name: str,
    call_id: str,
    ctx: RunContext[Any],
    ledger: Ledger,
) -> Any:
    """``result`` as the text the model reads, sealed (see :meth:`Guard.seal_result`).

    The return part Pydantic AI makes of it holds, and shows the model, that
    text: the value as the model would have read it, then the seal line. The
    seal covers the call as the history keeps it (the model's arguments, as
    the history processor reads them). A result with files, or a call the
    history does not show, is left as it is, unsealed.
    """
    part = ToolReturnPart(tool_name=name, content=value, tool_call_id=call_id)
    arguments = _call_arguments(ctx.messages, call_id)
    if part.files or arguments is None:
        return result
    text = guard.seal_result(
        name, arguments, part.model_response_str(), call_id=call_id, ledger=ledger
    )
    return replace(result, return_value=text) if isinstance(result, ToolReturn) else text


def _call_arguments(messages: Sequence[ModelMessage], call_id: str) -> str | None:
    """The arguments of the call ``call_id`` as the history keeps them (JSON text), or None."""
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
                    return part.args_as_json_str()
    return None


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
    refused as the guard's ``refuse_undeclared`` says, never left out. Each
    call is checked as the model sent it, before Pydantic AI validates it, so
    an id is checked under the name the model sees (an alias included).

    An output function (``output_type=[fn]``, ``ToolOutput(fn)``, native or
    prompted output with a function) runs with the model's arguments too: it
    is checked like a tool, under the function's name, before it runs; a
    refusal is a retry of the output (Pydantic AI's ``output_retries`` bound
    those, so give it at least ``max_reprompts``), and its return is recorded.
    An output type that is plain data (a model, no function) is not checked.

    ``session`` chooses the conversation from the ``RunContext`` (a session
    id, or a ledger; see :func:`conversation_id_session`); by default it is
    the ``with guard.session(...)`` open around the run, else the guard's
    default session, else the run fails with a usage error. With
    ``observe_user`` (the default) the text of the run's user prompt is
    observed (``guard.observe_user``) as the run starts, so ids the user
    typed may be looked up by ``read`` tools; do not observe it yourself as
    well.

    With ``ledger_instructions=True`` the capability adds dynamic
    instructions: the conversation's ID LEDGER block, rebuilt before every
    model request (the entries used last, as many as fit ``ledger_tokens``,
    counted as characters / 4; sealed under a guard with a ``secret``), so
    the ledger a refusal tells the model to copy from is there from the
    first tool result on. It is never read back into the ledger.
    """

    guard: Guard
    session: SessionChooser | None = None
    observe_user: bool = True
    ledger_instructions: bool = False
    ledger_tokens: int = DEFAULT_BLOCK_TOKENS
    _bindings: Bindings = field(init=False, repr=False, compare=False)
    #: This run's calls checked before validation, by tool call id (see :meth:`for_run`).
    _checked: dict[str, _Checked] = field(init=False, repr=False, compare=False)

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
        check_budget(self.ledger_tokens)
        self._bindings = Bindings(self.guard, "Pydantic AI")
        self._checked = {}

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: built from a live guard, not from an agent spec."""
        return None

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        """This capability for one run: its checked calls its own, the bindings shared."""
        run = replace(self)
        run._bindings = self._bindings
        return run

    def get_instructions(self) -> Callable[[RunContext[Any]], str] | None:
        """The ledger block as dynamic instructions, where ``ledger_instructions`` asks."""
        if not self.ledger_instructions:
            return None

        def id_ledger(ctx: RunContext[Any]) -> str:
            with self._ledger(ctx) as ledger:
                return block_for(self.guard, ledger, self.ledger_tokens)

        return id_ledger

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Observe the run's user prompt in its conversation's ledger."""
        if not self.observe_user:
            return
        text = _prompt_text(ctx.prompt)
        if text:
            with conversation(self.guard, self.session, ctx) as ledger:
                self.guard.observe_user(text, ledger=ledger)

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        """The run's whole toolset, guarded."""
        return GuardedToolset(
            toolset,
            guard=self.guard,
            session=self.session,
            bindings=self._bindings,
            checked=self._checked,
        )

    @contextlib.contextmanager
    def _ledger(self, ctx: RunContext[Any]) -> Iterator[Ledger]:
        if self.session is None:
            try:
                ledger = self.guard.ledger
            except GuardrailUsageError:
                pass
            else:
                yield ledger
                return
        with conversation(self.guard, self.session, ctx) as ledger:
            yield ledger

    def _check(
        self, ctx: RunContext[Any], name: str, bound: Bound, args: Any, *, tool: bool = False
    ) -> tuple[Any, _Checked]:
        """Check a call as the model sent it: the arguments to go on with, and as checked.

        A tool call that waits for the user goes on unchanged, its requests
        kept: the toolset defers it (an output function cannot be deferred,
        so it is re-prompted, or raises, as a refusal).
        """
        checked, undo = bound.to_check(args)
        with self._ledger(ctx) as ledger:
            if tool:
                verdict = _verdict(self.guard, name, checked, ctx, ledger)
            else:
                verdict = self.guard.enforce(name, checked, ledger=ledger)
        waiting = asking.waiting(self.guard, verdict) if tool else ()
        if waiting:
            return args, _Checked(checked, waiting)
        if not verdict.allowed and self.guard.mode == "reprompt":
            raise ModelRetry(verdict.message)
        recorded = verdict.arguments if verdict.arguments is not None else checked
        return bound.to_run(recorded, undo, args), _Checked(recorded)

    async def before_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: str | dict[str, Any],
    ) -> str | dict[str, Any]:
        """Check a function tool's call as the model sent it, by the names it sees."""
        if tool_def.kind == "output" or not call.tool_call_id:
            return args  # output tools: the output hooks; no id: the toolset checks it
        name = call.tool_name
        bound = self._bindings.latest(name) or self._bindings.get(
            name, tool_def.parameters_json_schema
        )
        run_with, self._checked[call.tool_call_id] = self._check(ctx, name, bound, args, tool=True)
        return run_with if isinstance(run_with, (str, dict)) else args

    async def prepare_output_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        """The output tools, each id parameter of an output function described for the model."""
        functions = _output_functions(getattr(ctx.agent, "output_type", None), tool_defs)
        described = []
        for tool_def in tool_defs:
            function = functions.get(tool_def.name)
            name = getattr(function, "__name__", None) if function is not None else None
            schema = tool_def.parameters_json_schema
            if name is not None:
                bound = self._bindings.get(name, schema, source=_source(function))
                schema = dict(bound.schema) if bound.schema is not None else schema
            else:
                schema = describe_ids(schema)
            described.append(
                tool_def
                if schema == tool_def.parameters_json_schema
                else replace(tool_def, parameters_json_schema=schema)
            )
        return described

    async def before_output_validate(
        self, ctx: RunContext[Any], *, output_context: OutputContext, output: str | dict[str, Any]
    ) -> str | dict[str, Any]:
        """Check an output function's arguments as the model sent them, before it may run."""
        if not output_context.has_function or ctx.partial_output:
            return output
        name = output_context.function_name
        if name is None:
            raise GuardrailUsageError(
                "guardrail cannot tell which output function this output runs (several "
                "functions in one native or prompted output), so it cannot check it: give "
                "each output function its own ToolOutput"
            )
        if output_context.tool_def is not None:
            schema: Any = output_context.tool_def.parameters_json_schema
        else:
            definition = output_context.object_def
            schema = definition.json_schema if definition is not None else None
        bound = self._bindings.latest(name) or self._bindings.get(name, schema)
        run_with, self._checked[_output_key(output_context)] = self._check(ctx, name, bound, output)
        return run_with if isinstance(run_with, (str, dict)) else output

    async def after_output_process(
        self, ctx: RunContext[Any], *, output_context: OutputContext, output: Any
    ) -> Any:
        """Record what an output function returned (its ids, as any tool's)."""
        self._record_output(ctx, output_context, output, error=False)
        return output

    async def on_output_process_error(
        self,
        ctx: RunContext[Any],
        *,
        output_context: OutputContext,
        output: Any,
        error: Exception,
    ) -> Any:
        """An output function that failed teaches nothing: recorded as a failure."""
        self._record_output(ctx, output_context, None, error=True)
        raise error

    def _record_output(
        self, ctx: RunContext[Any], output_context: OutputContext, result: Any, *, error: bool
    ) -> None:
        name = output_context.function_name
        done = self._checked.pop(_output_key(output_context), None)
        if not output_context.has_function or name is None or done is None:
            return
        call = output_context.tool_call
        with self._ledger(ctx) as ledger:
            self.guard.record(
                name,
                done.arguments,
                result,
                error=error,
                call_id=call.tool_call_id if call is not None else None,
                ledger=ledger,
            )


def _output_key(output_context: OutputContext) -> str:
    """Where a checked output waits for its record: its tool call, else the run's output."""
    call = output_context.tool_call
    return f"output:{call.tool_call_id if call is not None else ''}"


def _output_functions(
    output_type: Any, tool_defs: Sequence[ToolDefinition]
) -> dict[str, Callable[..., Any]]:
    """The output function behind each output tool, where the tool names it can tell.

    Pydantic AI names the tool of one output function ``final_result``, of
    several ``final_result_<name>``, and of a ``ToolOutput`` its ``name``.
    """
    found: dict[str, Callable[..., Any]] = {}
    items = list(output_type) if isinstance(output_type, (list, tuple)) else [output_type]
    functions: list[tuple[str | None, Callable[..., Any]]] = []
    for item in items:
        if isinstance(item, ToolOutput):
            target = item.output
            if inspect.isfunction(target) or inspect.ismethod(target):
                functions.append((item.name, target))
        elif inspect.isfunction(item) or inspect.ismethod(item):
            functions.append((None, item))
    names = {tool_def.name for tool_def in tool_defs}
    for given, function in functions:
        for candidate in (given, f"final_result_{function.__name__}"):
            if candidate in names:
                found[candidate] = function
                break
        else:
            if len(functions) == 1 and len(names) == 1:
                found[next(iter(names))] = function
    return found
