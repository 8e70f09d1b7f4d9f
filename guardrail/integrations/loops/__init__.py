"""Guarded tool calls for a hand-written loop over the OpenAI or Anthropic APIs.

A loop that calls a model's API itself gets back an assistant message with
tool calls and owes the model one result per call. :func:`run_tool_calls`
(and :func:`arun_tool_calls`, for async tools) answers them all::

    messages.extend(run_tool_calls(guard, reply, tools, session=conversation_id))

It reads the calls of an OpenAI chat completion message, of the output items
of an OpenAI Responses call (``function_call`` items) or of an Anthropic
message (``tool_use`` blocks). For each call, in order: it parses the
arguments, validates them against the tool's input schema (from the
function's signature, or one given), checks them with the guard, and only
then runs the tools, with the arguments as the model wrote them, and
records what each returned. It returns the results in the message's own
shape: ``role: "tool"`` messages, ``function_call_output`` items, or one
Anthropic ``user`` message of ``tool_result`` blocks. Every call is answered
exactly once, whatever happens to it; a refusal and a failure are marked as
errors where the shape can say so (Anthropic's ``is_error``, Responses'
``status: "incomplete"``), and their text says so in every shape (a
refusal's begins ``guardrail refused``, a failure's ``guardrail:``), so
guardrail's own readers (compaction, replay) never harvest anything from
them, in chat completions too, which has no error field. A guard with a
``secret`` seals every successful result on its last line (see
:meth:`guardrail.Guard.seal_result`), so a server that rebuilds its ledger
from the transcript a client sends trusts the results it produced, and no
others.

Every call of the message is checked before any runs: the model wrote them
all at once, so none of them may lean on an id another of them is about to
return, and in ``raise`` mode the refusal of one call raises before a single
tool of the message ran (nothing half-done to undo).

A call whose ids need the user's approval (its verdict's outcome is
``"ask"``) holds the whole message: no tool runs, and the list returned is
empty, its ``approvals`` (:class:`ToolResults`) naming what to ask, each with
its evidence. The loop asks the user (the model is not asked: nothing it
writes approves), passes each answer to ``guard.approve(request)`` or
``guard.deny(request)``, and answers the same message again: an approved
call runs, once (answered again, the same call id is refused: one answer
runs a held call once); a declined one is refused, the model told that the
user declined. So in every mode but ``observe``: an ask is not a refusal, and
``raise`` mode raises for refusals only.

The tools are bound to the guard as every adapter binds a runtime's tools
(:mod:`guardrail.integrations._common.tools`): a function whose parameters are
marked ``Id(...)`` is declared by the marks; each id is checked under the name
the model sent it by (a parameter's alias included); a declared id parameter
the tool's input schema does not have is a usage error at its first use; and
:meth:`Toolbox.definitions` gives the tool definitions to send to the API,
each id parameter telling the model to copy the value exactly.

:func:`ledger_instructions` gives the system prompt to send with each model
call: yours, then the current ID LEDGER block (the entries used last, within
a token budget), so the ledger a refusal points at is in front of the model
from the first tool result on. Build it at every call; never store it in the
history.

Inside: ``_toolbox`` (a plain loop's tools: the function, its input schema
compiled once, its definition).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import ApprovalRequest, Verdict
from guardrail._transcript.messages import SHAPES, Call, Shape, read, result_message
from guardrail._transcript.result_text import failure_text, is_refusal
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common import asking
from guardrail.integrations._common.every_turn import DEFAULT_BLOCK_TOKENS, block_for, with_block
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.loops._toolbox import LoopTool, ToolResults, input_schemas, unwrapped

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

__all__ = ["ToolResults", "Toolbox", "arun_tool_calls", "ledger_instructions", "run_tool_calls"]

#: The types of Responses output items this loop answers; the API runs the others itself.
_RESPONSES_CALLS = frozenset({"function_call"})
#: Anthropic blocks this loop answers (``server_tool_use`` blocks are run by the API).
_ANTHROPIC_CALLS = frozenset({"tool_use"})


class Toolbox:
    """The tools a loop may run, by name, each with the input schema its arguments must match.

    ``tools`` is a mapping of name to function, or a list of functions (named
    by ``__name__``, or by the name ``@guard.tool`` gave them). A function
    decorated with ``@guard.tool`` of this guard is run undecorated: the
    toolbox checks and records the call itself, once, with its call id.

    ``schemas`` gives input schemas, by name or as the tool definitions you
    send to the API; a tool without one is validated against the schema
    pydantic builds from its signature (``None`` as a tool's schema turns
    validation off for it). Schemas are compiled on first use and kept:
    build the toolbox once and pass it to every :func:`run_tool_calls`.

    Every tool that is not declared to a guard built with
    ``refuse_undeclared=True`` (by the guard, or by its ``Id`` marks) is a
    usage error here, before any call: it could never run.

    Each tool is bound to the guard on first use, as every adapter binds a
    runtime's tools: a function the guard does not know whose parameters (or
    return type) carry ``Id`` marks is declared by them, as a ``write``; each
    id is checked under the name the model sent it by (the name the input
    schema gives it, a parameter's alias included); and a declared id
    parameter the input schema does not have is a
    :class:`~guardrail.GuardrailUsageError`, raised before any tool of the
    message runs. :meth:`definitions` gives the tool definitions to send to
    the API.
    """

    def __init__(
        self,
        guard: Guard,
        tools: Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]],
        *,
        schemas: Mapping[str, Any] | Iterable[Any] | None = None,
    ) -> None:
        self.guard = guard
        self._bindings = Bindings(guard, "plain loop")
        descriptions: dict[str, str] = {}
        given = input_schemas(schemas, descriptions)
        pairs: list[tuple[str | None, Callable[..., Any]]]
        if isinstance(tools, Mapping):
            pairs = list(tools.items())
        elif isinstance(tools, Sequence) and not isinstance(tools, (str, bytes)):
            pairs = [(None, function) for function in tools]
        else:
            raise GuardrailUsageError(
                "tools is a mapping of tool name to function, or a list of functions; "
                f"not {type(tools).__name__}"
            )
        self._tools: dict[str, LoopTool] = {}
        for key, function in pairs:
            if not callable(function):
                raise GuardrailUsageError(f"tool {key!r} is not callable: {function!r}", tool=key)
            spec_name, runnable = unwrapped(guard, function)
            if spec_name is not None and key is not None and key != spec_name:
                # Run undecorated under another name, it would meet no spec: unchecked.
                raise GuardrailUsageError(
                    f"tool {key!r} is the guarded function declared as {spec_name!r}; "
                    f"give it that name in tools (or list the function alone)",
                    tool=key,
                )
            name = key or spec_name or getattr(function, "__name__", None)
            if not isinstance(name, str) or not name:
                raise GuardrailUsageError(
                    f"{function!r} has no name; pass the tools as a mapping of name to function"
                )
            if name in self._tools:
                raise GuardrailUsageError(f"two tools are named {name!r}", tool=name)
            is_async = inspect.iscoroutinefunction(runnable) or inspect.iscoroutinefunction(
                getattr(runnable, "__call__", None)  # noqa: B004 - an async callable object
            )
            tool = LoopTool(name, runnable, is_async, given.pop(name, None), descriptions.get(name))
            self._tools[name] = tool
            if guard.refuse_undeclared and name not in guard.specs:
                with contextlib.suppress(GuardrailUsageError):
                    self._bound(tool)  # its Id marks may declare it
                if name not in guard.specs:
                    raise GuardrailUsageError(
                        f"{name} is not declared to the guard, which refuses undeclared tools: "
                        "every call of it would be refused. Declare it (guard.declare, "
                        "@guard.tool or Id marks on its parameters), or leave it out of the tools",
                        tool=name,
                    )
        if given:
            raise GuardrailUsageError(
                f"schemas= names tools that are not in tools: {', '.join(sorted(given))}"
            )

    @property
    def names(self) -> list[str]:
        """The names of the tools, in the order given."""
        return list(self._tools)

    def compile(self) -> Toolbox:
        """Build every tool's validator now (else each on first use); returns the toolbox."""
        for tool in self._tools.values():
            tool.compile()
        return self

    def definitions(self, shape: Shape = "openai_chat") -> list[dict[str, Any]]:
        """The tool definitions to send to the API, in ``shape``: each id parameter described.

        Each tool's input schema (the one given, else the one built from its
        signature) with, on every declared id parameter, the instruction to
        copy the value exactly from a tool result or the ID LEDGER; and its
        description (the given definition's, else the function's docstring).
        OpenAI chat: ``{"type": "function", "function": {...}}``; Responses:
        ``{"type": "function", "name", ...}``; Anthropic: ``{"name",
        "input_schema", ...}``. Binding may raise
        :class:`~guardrail.GuardrailUsageError`, as a call would (see the class).
        """
        if shape not in SHAPES:
            raise GuardrailUsageError(f"unknown shape {shape!r}; use one of {', '.join(SHAPES)}")
        found = []
        for tool in self._tools.values():
            bound = self._bound(tool)
            schema = bound.schema if bound.schema is not None else tool.shown
            parameters = dict(schema) if schema is not None else {"type": "object"}
            description = tool.description or inspect.getdoc(tool.function)
            function: dict[str, Any] = {"name": tool.name}
            if description:
                function["description"] = description
            if shape == "anthropic":
                found.append({**function, "input_schema": parameters})
            elif shape == "openai_responses":
                found.append({"type": "function", **function, "parameters": parameters})
            else:
                found.append(
                    {"type": "function", "function": {**function, "parameters": parameters}}
                )
        return found

    def _bound(self, tool: LoopTool) -> Bound:
        """``tool`` bound to the guard as the model is given it (see the class docstring)."""
        tool.compile()
        return self._bindings.get(
            tool.name, tool.shown, source=tool.function, function=tool.function
        )

    def run(
        self, message: Any, *, session: str | None = None, shape: Shape | None = None
    ) -> ToolResults:
        """Answer every tool call of ``message``; see :func:`run_tool_calls`."""
        if session is not None:
            with self.guard.session(session):
                return self._run(message, shape)
        return self._run(message, shape)

    async def arun(
        self, message: Any, *, session: str | None = None, shape: Shape | None = None
    ) -> ToolResults:
        """Answer every tool call of ``message``; see :func:`arun_tool_calls`."""
        if session is not None:
            async with self.guard.session(session):
                return await self._arun(message, shape)
        return await self._arun(message, shape)

    # -- the three steps: check every call, run, record -----------------------------------

    def _run(self, message: Any, shape: Shape | None) -> ToolResults:
        shape, calls = _calls(message, shape)
        answers = self._check(shape, calls)
        if any(answer.requests for answer in answers):
            return _waiting(answers)
        for answer in answers:
            if answer.tool is not None and answer.tool.is_async:
                raise GuardrailUsageError(
                    f"{answer.tool.name} is async: answer this message with "
                    "arun_tool_calls (or Toolbox.arun)",
                    tool=answer.tool.name,
                )
        for answer in answers:
            if answer.tool is not None:
                try:
                    answer.result = answer.tool.function(**answer.arguments)
                except Exception as exc:
                    answer.failure = exc
                if inspect.iscoroutine(answer.result):
                    answer.result.close()  # a sync function that returned a coroutine
                    answer.result = None
                    answer.failure = TypeError(
                        "the tool returned a coroutine: answer with arun_tool_calls"
                    )
                self._record(shape, answer)
        return _messages(shape, answers)

    async def _arun(self, message: Any, shape: Shape | None) -> ToolResults:
        shape, calls = _calls(message, shape)
        answers = self._check(shape, calls)
        if any(answer.requests for answer in answers):
            return _waiting(answers)
        running = [answer for answer in answers if answer.tool is not None]

        async def run(answer: _Answer) -> None:
            assert answer.tool is not None
            try:
                result = answer.tool.function(**answer.arguments)
                if inspect.isawaitable(result):
                    result = await result
                answer.result = result
            except Exception as exc:
                answer.failure = exc

        # The calls of one message run at once, as the model asked; each is recorded in the
        # order the model wrote it, so roles are numbered the same way on every run.
        await asyncio.gather(*(run(answer) for answer in running))
        for answer in running:
            self._record(shape, answer)
        return _messages(shape, answers)

    def _check(self, shape: Shape, calls: list[Call]) -> list[_Answer]:
        """Every call's answer-to-be, each checked (this may raise, before any tool runs)."""
        guard = self.guard
        guard.ledger  # noqa: B018 - outside any session: a usage error before anything runs
        answers = []
        for call in calls:
            answer = _Answer(call)
            answers.append(answer)
            tool = self._tools.get(call.name)
            if tool is None:
                known = ", ".join(self._tools) or "none"
                answer.text = failure_text(
                    f"there is no tool named {call.name!r}; the tools are: {known}. "
                    "The call did not run."
                )
                continue
            arguments = call.arguments
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, Mapping):
                answer.text = failure_text(
                    f"the arguments of {call.name} are not a JSON object ({_shorten(arguments)}); "
                    "the tool did not run. Call it again with its arguments as one JSON object."
                )
                continue
            problem = tool.invalid(arguments)
            if problem is not None:
                answer.text = failure_text(
                    f"invalid arguments for {call.name}: {problem}. The tool did not run; call "
                    "it again with arguments that match its parameters."
                )
                continue
            # Checked by the names the guard declares, whatever names the model sent.
            bound = self._bound(tool)
            checked, undo = bound.to_check(arguments)
            # An ask, in any mode; a held call brought back after it ran is refused.
            verdict = asking.enforce(guard, call.name, checked, call_id=call.id, runs=False)
            answer.verdict = verdict
            if not verdict.allowed and guard.mode != "observe":
                if verdict.approvals:  # the call waits for the user: the loop asks them
                    answer.requests = verdict.approvals
                    continue
                answer.refusal = Rejection(verdict).result_message(shape, call.id)
                continue
            answer.tool = tool
            recorded = verdict.arguments if verdict.arguments is not None else checked
            answer.recorded = dict(recorded)
            answer.arguments = dict(bound.to_run(recorded, undo, arguments))
        return answers

    def _record(self, shape: Shape, answer: _Answer) -> None:
        """Record what one call returned (a failure records nothing) and write its text."""
        name, call_id = answer.call.name, answer.call.id
        asking.ran(self.guard, call_id)  # it ran: held before, it does not run again
        if answer.failure is not None:
            exc = answer.failure
            answer.text = failure_text(f"{name} failed: {type(exc).__name__}: {exc}")
            self.guard.record(name, answer.recorded, None, error=True, call_id=call_id)
            return
        result = answer.result
        answer.text = _result_text(result)
        # A failure in success's clothing ("Error: ..." text by the tool's failure rule, a
        # Rejection, a refusal's text, {"error": ...}) is marked as the failure it is, where
        # the shape has a flag for it, and recorded as one: the one rule (Guard.failed).
        answer.ok = not (self.guard.failed(name, result) or is_refusal(answer.text))
        guard = self.guard
        guard.record(name, answer.recorded, result, error=not answer.ok, call_id=call_id)
        if answer.ok and guard.seals_results:
            # Sealed over the call as the model wrote it: what the transcript will show.
            answer.text = guard.seal_result(
                name, answer.call.arguments, answer.text, call_id=call_id
            )


@dataclass(eq=False)
class _Answer:
    """What happens to one call: refused, failed, not run (``text`` says why), or its result."""

    call: Call
    tool: LoopTool | None = None
    #: What the tool runs with: the arguments as the model wrote them, by its names.
    arguments: dict[str, Any] = field(default_factory=dict)
    #: The same, by the names the guard declares: what the record reads.
    recorded: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    #: What the user must approve before the call may run (the message waits for them).
    requests: tuple[ApprovalRequest, ...] = ()
    refusal: dict[str, Any] | None = None
    result: Any = None
    failure: Exception | None = None
    text: str = ""
    ok: bool = False


def _calls(message: Any, shape: Shape | None) -> tuple[Shape, list[Call]]:
    """The shape of ``message`` and the calls in it this loop answers, in order."""
    if hasattr(message, "model_dump") and not isinstance(message, Mapping):
        message = message.model_dump(mode="json", exclude_none=True)  # an SDK's object
    if isinstance(message, Mapping) and isinstance(message.get("output"), list):
        message = message["output"]  # a whole Responses response
    items: list[Any]
    if isinstance(message, Mapping):
        items = [message]
        if shape is None:
            shape = _shape_of(message)
    elif isinstance(message, Sequence) and not isinstance(message, (str, bytes)):
        items = list(message)
        shape = shape or "openai_responses"
    else:
        raise GuardrailUsageError(
            "pass the assistant message (OpenAI chat or Anthropic) or the Responses output "
            f"items, as the API returned them; not {type(message).__name__}"
        )
    transcript = read(items, shape)
    calls = []
    for call in transcript.calls():
        raw = transcript.messages[call.index].raw
        if shape == "openai_responses" and raw.get("type") not in _RESPONSES_CALLS:
            continue
        if shape == "anthropic" and not _anthropic_call(raw, call.id):
            continue
        calls.append(call)
    return shape, calls


def _shape_of(message: Mapping[str, Any]) -> Shape:
    """The shape of one assistant message (or one Responses item)."""
    if "tool_calls" in message:
        return "openai_chat"
    if "role" not in message and isinstance(message.get("type"), str):
        return "openai_responses"  # a single output item
    content = message.get("content")
    if isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") in ("tool_use", "text", "thinking")
        for block in content
    ):
        return "anthropic"
    return "openai_chat"


def _anthropic_call(raw: Mapping[str, Any], call_id: str) -> bool:
    """Whether ``call_id`` is a ``tool_use`` block of the message (not a server tool's)."""
    return any(
        isinstance(block, Mapping)
        and block.get("type") in _ANTHROPIC_CALLS
        and block.get("id") == call_id
        for block in raw.get("content") or ()
    )


def _result_text(result: Any) -> str:
    """A tool's result as the text a model reads: text as it is, anything else as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, Rejection):
        return str(result)
    from pydantic_core import to_jsonable_python

    try:
        return json.dumps(to_jsonable_python(result), ensure_ascii=False)
    except Exception:  # not JSON-like: its text
        return str(result)


def _shorten(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _waiting(answers: list[_Answer]) -> ToolResults:
    """No answers yet: the requests of every call that waits for the user, each value once."""
    requests: dict[str, ApprovalRequest] = {}
    for answer in answers:
        for request in answer.requests:
            requests.setdefault(request.token, request)
    return ToolResults((), requests.values())


def _messages(shape: Shape, answers: list[_Answer]) -> ToolResults:
    """The answers in ``shape``: one message (or item) per call; Anthropic's in one message."""
    out = [
        answer.refusal
        if answer.refusal is not None
        else result_message(shape, answer.call.id, answer.text, error=not answer.ok)
        for answer in answers
    ]
    if shape == "anthropic" and out:
        blocks = [block for message in out for block in message["content"]]
        return ToolResults([{"role": "user", "content": blocks}])
    return ToolResults(out)


def _toolbox(
    guard: Guard,
    tools: Toolbox | Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]],
    schemas: Mapping[str, Any] | Iterable[Any] | None,
) -> Toolbox:
    if isinstance(tools, Toolbox):
        if tools.guard is not guard:
            raise GuardrailUsageError("this toolbox was built for another guard")
        if schemas is not None:
            raise GuardrailUsageError("give schemas= to the Toolbox, not to each run")
        return tools
    return Toolbox(guard, tools, schemas=schemas)


def run_tool_calls(
    guard: Guard,
    message: Any,
    tools: Toolbox | Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]],
    *,
    session: str | None = None,
    shape: Shape | None = None,
    schemas: Mapping[str, Any] | Iterable[Any] | None = None,
) -> ToolResults:
    """Run the tool calls of an assistant message, guarded; return the messages answering them.

    ``message`` is an OpenAI chat completion message (``{"role": "assistant",
    "tool_calls": [...]}``), the output items of a Responses call (or the
    response), or an Anthropic message (``tool_use`` blocks); dicts, or the
    SDKs' objects. ``tools`` maps names to functions (or is a list of
    functions, or a :class:`Toolbox`). ``session`` opens that conversation's
    session for the calls (else the current one is used). ``shape`` forces
    the reading where a message is ambiguous.

    Returns, in the message's shape and in the order of the calls, one answer
    per call: the tool's result (text as it is, anything else as JSON), or an
    error: no such tool, arguments that are not an object or do not match the
    tool's schema, the guard's refusal (``reprompt`` mode), or the exception
    the tool raised (recorded as a failure). A call that waits for the user's
    approval holds the message: nothing runs, the list is empty, and its
    ``approvals`` list the requests (see :class:`ToolResults`); answer them
    with ``guard.approve`` or ``guard.deny`` and pass the same message again.
    In ``raise`` mode a refusal
    raises :class:`~guardrail.IdentifierViolation`, and
    :class:`~guardrail.RepromptLimitExceeded` ends a loop that keeps sending
    bad ids; both are raised before any tool of the message ran. An async
    tool needs :func:`arun_tool_calls`.
    """
    return _toolbox(guard, tools, schemas).run(message, session=session, shape=shape)


async def arun_tool_calls(
    guard: Guard,
    message: Any,
    tools: Toolbox | Mapping[str, Callable[..., Any]] | Sequence[Callable[..., Any]],
    *,
    session: str | None = None,
    shape: Shape | None = None,
    schemas: Mapping[str, Any] | Iterable[Any] | None = None,
) -> ToolResults:
    """:func:`run_tool_calls` for async loops: the calls of one message run concurrently.

    Sync tools run in the event loop's thread, one after another (wrap a
    blocking one in ``asyncio.to_thread`` yourself); async tools are awaited
    together. The results are recorded, and returned, in the order of the calls.
    """
    return await _toolbox(guard, tools, schemas).arun(message, session=session, shape=shape)


def ledger_instructions(
    guard: Guard,
    instructions: str | None = None,
    *,
    session: str | None = None,
    max_tokens: int = DEFAULT_BLOCK_TOKENS,
    tokens: Callable[[str], int] | None = None,
) -> str:
    """Your system prompt, then the conversation's ID LEDGER block: send it with every call.

    The block lists the entries used last (pinned ones first), as many as
    fit ``max_tokens`` (counted as characters / 4, or by ``tokens``), and
    says how many it leaves out; a guard with a ``secret`` seals it. Build
    it anew before each model call (OpenAI: the first ``system`` message
    of the request; Anthropic: ``system=``) and keep it out of the
    history you store: it is the model's copy of the ledger, never read
    back into it. ``session`` names the conversation (else the current
    session's ledger is used).
    """
    ledger = guard.ledger_for(session) if session is not None else guard.ledger
    return with_block(instructions, block_for(guard, ledger, max_tokens, tokens))
