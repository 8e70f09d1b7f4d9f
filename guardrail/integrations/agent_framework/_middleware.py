"""The function middleware: each call checked before it runs, asked about, or recorded after.

Private to :mod:`guardrail.integrations.agent_framework` (its docstring says
what a guarded call does); it re-exports :class:`GuardrailMiddleware`. It
imports Agent Framework, so it is only imported from there, after the
framework's import check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeGuard

from agent_framework import (
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    FunctionTool,
    MiddlewareFailure,
)

from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._guard.facade import Guard
from guardrail.errors import (
    GuardrailUsageError,
    IdentifierViolation,
    RepromptLimitExceeded,
    StoreError,
)
from guardrail.integrations._common import asking
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.agent_framework._framework import (
    APPROVAL_RESPONSE,
    CALL_ID,
    OCCURRENCE_ID,
)
from guardrail.integrations.agent_framework._sessions import SessionOf, Sessions
from guardrail.ledger import Ledger

__all__ = ["QUESTION", "GuardrailMiddleware", "RunIdentifierViolation", "arguments_of"]

#: The key of an approval request's ``additional_properties`` that holds what the user is asked.
QUESTION = "question"


class RunIdentifierViolation(IdentifierViolation, MiddlewareFailure):
    """An :class:`IdentifierViolation` that ends the run and reaches the caller of ``agent.run``.

    The function-calling loop turns any other exception of a function
    middleware into a tool error and keeps going; as a ``MiddlewareFailure``
    this one aborts the run, fail-closed, unwrapped.
    """


class _RunRepromptLimitExceeded(RepromptLimitExceeded, MiddlewareFailure):
    """A :class:`RepromptLimitExceeded` that ends the run and reaches the caller."""


class _RunUsageError(GuardrailUsageError, MiddlewareFailure):
    """A :class:`GuardrailUsageError` (no conversation, a declaration the tool contradicts).

    The program's mistake, not the model's: it ends the run rather than
    becoming a tool error the model reads.
    """


class _RunStoreError(StoreError, MiddlewareFailure):
    """A :class:`StoreError`: the ledger could not be read or saved, so no call is checked."""


def arguments_of(given: Any) -> dict[str, Any]:
    """A call's arguments as a mapping (a pydantic model, as a custom loop may pass, dumped)."""
    dump = getattr(given, "model_dump", None)
    if callable(dump):
        dumped = dump()
        return dict(dumped) if isinstance(dumped, Mapping) else {}
    return dict(given) if isinstance(given, Mapping) else {}


class GuardrailMiddleware(FunctionMiddleware):
    """Function middleware that checks each tool call against the conversation's ledger.

    ``Agent(..., middleware=[GuardrailMiddleware(guard)])``, or added for
    every run by the :class:`~guardrail.integrations.agent_framework.Guardrail`
    context provider. Put it first among function middleware: the framework
    runs the first as the outermost, so it sees the arguments as the model
    sent them.

    An allowed call runs with the arguments the model sent, and its result
    (the text the model reads) is recorded; a call that raises records
    nothing. A refused call does not run: in ``reprompt`` mode the model reads
    the re-prompt as the call's result; in ``raise`` mode
    :class:`IdentifierViolation` (a ``MiddlewareFailure``) ends the run and
    reaches the caller; ``observe`` runs it and logs.
    :class:`RepromptLimitExceeded` ends the run too.

    A call whose ids wait for the user (an ``ask``, in any mode but
    ``observe``) does not run: its result is a ``function_approval_request``
    carrying the guard's requests (``additional_properties["guardrail"]``,
    each value with its evidence) and the question for the user
    (``additional_properties["question"]``), which the framework surfaces in
    ``response.user_input_requests``. When the user's
    ``request.to_function_approval_response(True)`` comes back in the same
    session, the framework replays the call once; the guard approves the
    values the request named, for that session and tool, and the call runs.
    """

    def __init__(self, guard: Guard, *, session: SessionOf | None = None) -> None:
        self.sessions = Sessions(guard, session)
        self.guard = guard
        self._bindings = Bindings(guard, "Agent Framework")
        #: Each tool object (kept with it): its parameter schema, input model and function.
        self._shapes: dict[int, tuple[FunctionTool, dict[str, Any], Any, Any]] = {}
        #: What the model is given for each tool: a copy where its id parameters needed describing.
        self._described: dict[int, tuple[FunctionTool, Bound, FunctionTool]] = {}

    # -- the tools ----------------------------------------------------------------------------

    def bound(self, tool: FunctionTool) -> Bound:
        """The tool bound to the guard: declared by its ``Id`` marks, held to its schema."""
        held = self._shapes.get(id(tool))
        if held is None or held[0] is not tool:
            if len(self._shapes) >= 10_000:  # tools made per run: the memory stays bounded
                self._shapes.clear()
                self._described.clear()
            function = tool.func if callable(tool.func) else None
            held = (tool, dict(tool.parameters()), tool.input_model, function)
            self._shapes[id(tool)] = held
        return self._bindings.get(tool.name, held[1], source=held[2], function=held[3])

    def described(self, tool: Any) -> Any:
        """What the model is given for ``tool``: a copy whose id parameters say to copy exactly.

        The copy is a declaration (the framework runs the tool itself, from
        its own list); a tool whose schema needs nothing added is given as it is.
        """
        if not isinstance(tool, FunctionTool):
            return tool
        bound = self.bound(tool)
        made = self._described.get(id(tool))
        if made is None or made[0] is not tool or made[1] is not bound:
            given: FunctionTool = tool
            if bound.schema is not None and bound.schema != self._shapes[id(tool)][1]:
                given = FunctionTool(
                    name=tool.name,
                    description=tool.description,
                    approval_mode=tool.approval_mode,
                    kind=tool.kind,
                    additional_properties=tool.additional_properties,
                    input_model=dict(bound.schema),
                )
            made = (tool, bound, given)
            self._described[id(tool)] = made
        return made[2]

    # -- a call -------------------------------------------------------------------------------

    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """Check the call; ask, refuse, or run it as the model sent it and record it."""
        try:
            async with self.sessions.scope(context.session) as ledger:
                await self._guarded(context, call_next, ledger)
        except MiddlewareFailure:
            raise
        except GuardrailUsageError as error:
            raise _RunUsageError(str(error), tool=error.tool, param=error.param) from error
        except StoreError as error:
            raise _RunStoreError(str(error), session_id=error.session_id) from error

    async def _guarded(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
        ledger: Ledger,
    ) -> None:
        guard = self.guard
        name = context.function.name
        sent = arguments_of(context.arguments)
        bound = self.bound(context.function)
        checked, undo = bound.to_check(sent)
        verdict = self._verdict(context, name, checked, ledger)
        waiting = asking.waiting(guard, verdict)
        if waiting:
            context.result = _approval_request(context, name, sent, waiting) or verdict.message
            return  # the framework surfaces the request; the tool does not run
        if not verdict.allowed and guard.mode != "observe":
            context.result = verdict.message  # the model reads the re-prompt as the result
            return
        recorded = verdict.arguments if verdict.arguments is not None else checked
        run_with = bound.to_run(recorded, undo, sent)
        if run_with != sent:  # one id under two names of a field: the tool gets the checked one
            context.arguments = dict(run_with)
        call_id = _text(context.metadata.get(CALL_ID))
        try:
            await call_next()
        except Exception:
            # The tool raised, or a middleware inside stopped the call (a policy blocked it,
            # asked the user): whatever it returned, nothing is harvested.
            guard.record(name, recorded, None, error=True, call_id=call_id, ledger=ledger)
            raise
        guard.record(name, recorded, _value(context.result), call_id=call_id, ledger=ledger)

    def _verdict(
        self,
        context: FunctionInvocationContext,
        name: str,
        checked: Mapping[str, Any],
        ledger: Ledger,
    ) -> Verdict:
        """The call enforced; one the user approved has the values its request named approved.

        The framework replays a call with the user's ``function_approval_response``
        only after binding it to a request it recorded in the session: nothing
        the model writes reaches it. The response must also carry the guard's
        own requests for each value the call still waits for (as
        ``to_function_approval_response`` copies them from the request): a
        response without them is asked again, with the evidence.
        """
        guard = self.guard
        answer = context.metadata.get(APPROVAL_RESPONSE)
        call_id = _text(context.metadata.get(CALL_ID)) or None
        granted = False
        if _granted(answer):
            shown = {item["token"] for item in asking.payload(answer.additional_properties)}
            waiting = asking.peek(guard, name, checked, ledger=ledger)
            granted = bool(waiting) and all(request.token in shown for request in waiting)
        try:
            if granted:
                return asking.approved(guard, name, checked, ledger=ledger, call_id=call_id)
            return asking.enforce(guard, name, checked, ledger=ledger, call_id=call_id)
        except RepromptLimitExceeded as stop:
            raise _RunRepromptLimitExceeded(stop.verdict, limit=stop.limit) from None
        except IdentifierViolation as refusal:  # raise mode
            raise RunIdentifierViolation(refusal.verdict) from None


def _granted(answer: Any) -> TypeGuard[Content]:
    """Whether ``answer`` is a ``function_approval_response`` that approves."""
    return (
        isinstance(answer, Content)
        and answer.type == "function_approval_response"
        and answer.approved is True
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _approval_request(
    context: FunctionInvocationContext,
    name: str,
    sent: Mapping[str, Any],
    requests: tuple[ApprovalRequest, ...],
) -> Content | None:
    """The framework's ``function_approval_request`` for the call, the guard's requests in it.

    None where the call came from no function-calling loop (no call id):
    nothing could carry the user's answer back.
    """
    call_id = _text(context.metadata.get(CALL_ID))
    if call_id is None:
        return None
    occurrence = _text(context.metadata.get(OCCURRENCE_ID))
    call = Content.from_function_call(call_id, name, arguments=dict(sent), id=occurrence)
    return Content.from_function_approval_request(
        occurrence or call_id,
        call,
        additional_properties={
            asking.KEY: asking.shown(requests),
            QUESTION: asking.question(name, requests),
        },
    )


def _value(result: Any) -> Any:
    """What a call returned, as the model reads it: the text of its content, else the value.

    The framework turns a tool's return value into content: text (a dict or
    model as its JSON, which the record reads back), or media, which holds no id.
    """
    if isinstance(result, Content):
        result = [result]
    if isinstance(result, list) and all(isinstance(item, Content) for item in result):
        texts = [item.text for item in result if item.type == "text" and item.text is not None]
        return "\n".join(texts) if texts else None
    return result
