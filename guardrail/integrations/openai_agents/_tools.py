"""The OpenAI Agents SDK: a function tool's two guardrails, and what a call carries between them.

Private to :mod:`guardrail.integrations.openai_agents` (its docstring says
what a guarded tool does). :class:`ToolGuard` checks a call in the tool's
input guardrail, records the result in its output guardrail, seals what the
model reads, and tells a failure the SDK wrote from a result. It imports the
SDK, so it is only imported from there, after the SDK's import check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import agents.tool as agents_tool
from agents import (
    Agent,
    AgentsException,
    FunctionTool,
    GuardrailFunctionOutput,
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
from agents.tool_context import ToolContext

from guardrail._check.approvals import Scope
from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._guard.facade import Guard
from guardrail._transcript.messages import unsuccessful
from guardrail._transcript.result_text import failure_text
from guardrail.errors import GuardrailUsageError, IdentifierViolation, RepromptLimitExceeded
from guardrail.integrations._common import asking
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.openai_agents._sdk import (
    CONVERT_OUTPUT,
    DEFAULT_FAILURE,
    FAILURE_FORMATTER,
    SET_FAILURE_FORMATTER,
)
from guardrail.integrations.openai_agents._sessions import SessionId

# What a call carries from its input guardrail to its output guardrail, kept on the
# SDK's ToolContext (one per call, shared by both guardrails and the tool's invoker).
_RUN_WITH: Final = "_guardrail_run_with"  # the arguments the tool runs with (a mapping)
# That mapping as JSON, only where it is not what the model sent: an id sent under two names
# of one field, of which the tool gets the one the check read.
_RENAMED: Final = "_guardrail_renamed"
_SUCCEEDED: Final = "_guardrail_succeeded"  # set by the invoker when the tool returned normally
_FAILED: Final = "_guardrail_failed"  # set by a tool's own failure formatter
_RESULT: Final = "_guardrail_result"  # what the tool returned, where the model reads it sealed
# The SDK marks a result its default failure formatter wrote in place of a raised exception.
_SDK_DEFAULT_FAILURE: Final = "_function_tool_default_failure_handled"

_ALLOW: Final = GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


class RunIdentifierViolation(IdentifierViolation, AgentsException):
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


class ToolGuard:
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

    def scope(self, context: Any) -> contextlib.AbstractContextManager[Any]:
        """The conversation of a run: its ``session_id``'s, else the session open around it."""
        if self.session_id is None:
            return contextlib.nullcontext()
        return self.guard.session(self.session_id(context))

    def requests(self, name: str, arguments: Any, context: Any) -> tuple[ApprovalRequest, ...]:
        """What a call would wait for the user to approve (nothing counted or logged)."""
        checked, _ = self.bound(name).to_check(arguments)
        with self.scope(context):
            return asking.peek(self.guard, name, checked)

    def check(
        self,
        name: str,
        arguments: Any,
        context: Any,
        *,
        call_id: str | None = None,
        approved: Scope | None = None,
    ) -> tuple[Verdict, Any, Any]:
        """Enforce one call as the model sent it: the verdict, the arguments to run, as checked.

        ``approved``: the user approved this call through the SDK, so the
        values it waits for are approved first, with that scope. With
        ``call_id`` a held call runs once per answer. A call that waits is a
        verdict in every mode. Raises the SDK-friendly
        :class:`IdentifierViolation` and :class:`RepromptLimitExceeded`,
        which reach the program unwrapped.
        """
        bound = self.bound(name)
        checked, undo = bound.to_check(arguments)
        try:
            with self.scope(context):
                if approved is not None:
                    verdict = asking.approved(
                        self.guard, name, checked, call_id=call_id, scope=approved
                    )
                else:
                    verdict = asking.enforce(self.guard, name, checked, call_id=call_id)
        except RepromptLimitExceeded as stop:
            raise _RunRepromptLimitExceeded(stop.verdict, limit=stop.limit) from None
        except IdentifierViolation as refusal:  # raise mode
            raise RunIdentifierViolation(refusal.verdict) from None
        recorded = verdict.arguments if verdict.arguments is not None else checked
        return verdict, bound.to_run(recorded, undo, arguments), recorded

    def _enforce(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """Check a call before it runs; refuse it with the re-prompt as the tool's output."""
        context = data.context
        arguments: Any = context.tool_arguments
        # Text that is not JSON goes to the check as it is: it reports what it cannot read.
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments) if arguments else {}
        call_id = context.tool_call_id or None
        verdict, run_with, recorded = self.check(
            context.tool_name, arguments, context.context, call_id=call_id
        )
        # A call that waits and that the SDK reports approved: RunState.approve, which the
        # program calls on the user's word, let it through needs_approval.
        asks = asking.waiting(self.guard, verdict)
        if asks and context.is_tool_approved(context.tool_name, context.tool_call_id):
            verdict, run_with, recorded = self.check(
                context.tool_name,
                arguments,
                context.context,
                call_id=call_id,
                approved=approval_scope(context, context.tool_name),
            )
        if verdict.allowed or self.guard.mode == "observe":
            if verdict.arguments is not None:
                state = context.__dict__
                state[_RUN_WITH] = recorded
                if run_with is not arguments:  # renamed back (see _RENAMED)
                    state[_RENAMED] = json.dumps(run_with, ensure_ascii=False)
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
        state.pop(_RENAMED, None)
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
        text = getattr(ItemHelpers, CONVERT_OUTPUT)(result)  # the SDK's own conversion
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
        """Whether ``tool`` is already guarded by this guard (by this or another ``ToolGuard``)."""
        return any(guard_of(item) is self.guard for item in tool.tool_input_guardrails or ())

    def wrap(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` with this guard's guardrails, run with the arguments the model sent.

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
        guarded.needs_approval = self._needs_approval(tool.name, tool.needs_approval)
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
        formatter = getattr(guarded, FAILURE_FORMATTER)
        if formatter is not None and not getattr(guarded, DEFAULT_FAILURE):
            # A tool's own failure formatter turns an exception into text the model reads;
            # mark the call failed so that text is never harvested as a result.
            getattr(agents_tool, SET_FAILURE_FORMATTER)(guarded, _marking(formatter))
        if guarded.timeout_error_function is not None:
            guarded.timeout_error_function = _timed_out(guarded.timeout_error_function)
        # The tool's own input guardrails may refuse a call too: the tool does not run, and
        # the model reads their message as the call's output.
        guarded.tool_input_guardrails[1:] = [
            item if guard_of(item) is not None else _marking_rejections(item)
            for item in guarded.tool_input_guardrails[1:]
        ]
        return guarded

    def _needs_approval(self, name: str, own: Any) -> Callable[..., Awaitable[bool]]:
        """The tool's ``needs_approval``: its own policy, or a call that waits for the user."""

        async def needs_approval(
            context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
        ) -> bool:
            if own is True:
                return True
            if callable(own):
                answer = own(context, arguments, call_id)
                if await answer if inspect.isawaitable(answer) else answer:
                    return True
            if not self.requests(name, arguments, context.context):
                return False  # the input guardrail checks it, and logs it
            checked, _ = self.bound(name).to_check(arguments)
            with self.scope(context.context):
                self.guard.check(name, checked)  # the ask, logged; the run stops here
            return True

        return needs_approval


def approval_scope(context: Any, tool_name: str) -> Scope:
    """The guard's scope for the SDK's approval of a call: ``always_approve`` maps to ``"value"``.

    ``RunState.approve(item, always_approve=True)`` approves the tool's
    later calls too, which the SDK reports as approved for any call id (a
    made-up one is asked here); ``always_approve=False`` (its default)
    approves that call alone: ``"call"``.
    """
    sticky = context.is_tool_approved(tool_name, f"guardrail-probe-{secrets.token_hex(8)}")
    return "value" if sticky is True else "call"


def tool_guard(tool: Any) -> ToolGuard | None:
    """The :class:`ToolGuard` that guards a function tool (None: no guard of guardrail's)."""
    for item in getattr(tool, "tool_input_guardrails", None) or ():
        owner = getattr(item.guardrail_function, "__self__", None)
        if isinstance(owner, ToolGuard):
            return owner
    return None


def guard_of(guardrail: ToolInputGuardrail[Any] | InputGuardrail[Any]) -> Guard | None:
    """The guard whose adapter made ``guardrail`` (None: someone else's guardrail)."""
    owner = getattr(guardrail.guardrail_function, "__self__", None)
    return owner.guard if isinstance(owner, ToolGuard) else None


def _invoker(
    inner: Callable[[ToolContext[Any], str], Awaitable[Any]],
    seal: Callable[[ToolContext[Any], Any], Any] | None,
) -> Callable[[ToolContext[Any], str], Awaitable[Any]]:
    """Run the tool with the arguments the check read; mark a normal return as a success.

    The text a failure formatter gave in place of a result is marked as a
    failure (see :func:`_failure`); a success is sealed where ``seal`` is given.
    """

    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        state = context.__dict__
        state.pop(_FAILED, None)
        state.pop(_RESULT, None)
        result = await inner(context, state.get(_RENAMED, arguments))
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
    :mod:`guardrail._transcript.failures`); any other text (a tool's formatter, the
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
