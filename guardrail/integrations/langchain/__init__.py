"""LangChain v1 agents: every tool call checked, every result recorded, history compacted.

Two middlewares for :func:`langchain.agents.create_agent`::

    agent = create_agent(model, tools, middleware=[GuardrailMiddleware(guard)])

:class:`GuardrailMiddleware` checks each tool call before it runs (in the
guard's mode), runs the tool with the arguments the model sent,
records the result, and sends a refused call back to the model as a
``ToolMessage`` with ``status="error"``. It reads what the user said at the
start of every run (ids the user typed enter the ledger, unverified). A tool
whose parameters are marked ``Annotated[str, Id("order")]`` is declared by
that mark; the check reads each id under the name the model sent it by
(an alias included); and the tools the model is given say, on every id
parameter, to copy the value exactly. With ``ledger_instructions=True`` the system message of every
model call ends with the conversation's ID LEDGER block (the entries used
last, within ``ledger_tokens``), the ledger a refusal tells the model to copy from.
:class:`GuardrailCompactionMiddleware` compacts the history before a model
call with :func:`guardrail.compact`, so the ids survive the summary verbatim.

A call whose ids wait for the user's approval (an ``ask`` verdict, in any
mode but ``observe``) interrupts the run as LangChain's
``HumanInTheLoopMiddleware`` does in ``per_call`` mode: LangGraph's
``interrupt()`` with a ``"tool_approval"`` request whose ``description``
shows each value and its evidence (the requests themselves under
``"guardrail"``). Resume with ``Command(resume={"type": "approve"})``: the
values are approved for that session and tool and the call runs once; or
``{"type": "reject"}``: the guard keeps the no and the model is told the user
declined. The agent needs a checkpointer, as for any interrupt.

Under ``Guard(secret=...)`` the middleware seals each successful tool
message's text, so a server that rebuilds the ledger from a history its
client sends back trusts it, and no tool message the client wrote.

The conversation is the run's ``config["configurable"]["thread_id"]`` (or
what ``session=`` makes of the run's config); each is its own ledger.
Needs the ``langchain`` extra: ``pip install 'guardrail-ids[langchain]'``.

Inside: ``_approvals`` (LangGraph interrupts for calls that wait for the user)
and ``_messages`` (LangChain messages to and from the chat shape compaction
reads).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest
    from langchain.agents.middleware.types import ModelCallResult, ModelResponse
    from langchain_core.messages import (
        AnyMessage,
        BaseMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
    )
    from langchain_core.messages.tool import ToolCall
    from langchain_core.messages.utils import count_tokens_approximately
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
    from pydantic import BaseModel
except ImportError as missing:  # pragma: no cover - exercised by a test that hides langchain
    raise ImportError(
        "guardrail.integrations.langchain needs LangChain v1: "
        f"pip install 'guardrail-ids[langchain]' ({missing})"
    ) from missing

from guardrail._check.reprompt import Rejection
from guardrail._data.verdict import Verdict
from guardrail.compaction import DEFAULT_KEEP_RECENT, Summarizer, compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common import asking
from guardrail.integrations._common.compaction import Trigger, check_keep, check_trigger, reached
from guardrail.integrations._common.every_turn import (
    DEFAULT_BLOCK_TOKENS,
    block_for,
    check_budget,
    with_block,
)
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.langchain._approvals import ask
from guardrail.integrations.langchain._messages import (
    from_chat,
    marked_tool_content,
    new_user_texts,
    to_chat,
    tool_result,
    with_tool_message,
)

if TYPE_CHECKING:
    from guardrail import Guard
    from guardrail.ledger import Ledger

__all__ = [
    "GuardrailCompactionMiddleware",
    "GuardrailMiddleware",
    "SessionOf",
    "Trigger",
    "thread_id",
]

SessionOf = Callable[[RunnableConfig], "str | None"]
"""What names a run's conversation: the run's config in, a session id (or None) out."""

_ToolResponse = ToolMessage | Command[Any]


def thread_id(config: RunnableConfig) -> str | None:
    """The run's ``config["configurable"]["thread_id"]`` as text, or None: the default session."""
    configurable = config.get("configurable") or {}
    value = configurable.get("thread_id")
    return None if value is None or value == "" else str(value)


class _Sessions:
    """Which session a run belongs to: ``session(config)``, else the guard's default session."""

    __slots__ = ("guard", "session")

    def __init__(self, guard: Guard, session: SessionOf | None) -> None:
        if session is not None and not callable(session):
            raise GuardrailUsageError(
                "session= takes a function of the run's config that returns the session id, "
                f"e.g. lambda config: config['configurable']['user_id'], not {session!r}"
            )
        self.guard = guard
        self.session: SessionOf = session if session is not None else thread_id

    def of(self, config: RunnableConfig | None, runtime: Runtime[Any] | None = None) -> str:
        """The session id of a run with ``config`` (else the run's own, read where it runs)."""
        if config is None:
            config = _run_config(runtime)
        found = self.session(config)
        if found:
            return found
        default = self.guard.default_session
        if default:
            return default
        raise GuardrailUsageError(
            "guardrail cannot tell which conversation this run belongs to: invoke the agent "
            "with config={'configurable': {'thread_id': conversation_id}}, or pass session= "
            "to the middleware, or build the Guard with default_session="
        )


def _run_config(runtime: Runtime[Any] | None) -> RunnableConfig:
    """The config of the run a hook belongs to.

    LangGraph keeps it in a context variable; an async hook on Python 3.10
    cannot read that, and gets the thread id from the runtime's execution
    info instead (set where the agent has a checkpointer).
    """
    try:
        return get_config()
    except RuntimeError:
        info = runtime.execution_info if runtime is not None else None
        thread = info.thread_id if info is not None else None
        return {"configurable": {"thread_id": thread}} if thread else {}


def _tool_config(request: ToolCallRequest) -> RunnableConfig | None:
    """The config of the run a tool call belongs to (None: read it where the call runs)."""
    config: RunnableConfig | None = getattr(request.runtime, "config", None)
    return config


class GuardrailMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Checks every tool call of a LangChain agent against the conversation's ledger.

    Before a tool runs, :meth:`Guard.enforce` checks its identifier
    arguments. An allowed call runs with the arguments the model sent; its
    result (the tool message's ``artifact`` where the tool gave one, else its
    content) is recorded, and a result with ``status="error"`` records
    nothing. A refused call does not run: in ``reprompt`` mode the model gets
    a ``ToolMessage`` with ``status="error"``, the re-prompt as its content
    and ``Rejection.to_dict()`` as its artifact; in ``raise`` mode
    :class:`IdentifierViolation` propagates out of ``agent.invoke`` (LangChain
    turns only its own argument errors into tool messages); ``observe`` mode
    runs it and logs. :class:`RepromptLimitExceeded` always propagates: the
    run stops instead of looping. A tool the guard does not declare follows
    the guard's policy (``refuse_undeclared=True`` refuses it).

    At the start of each run the user messages after the model's last
    message go to :meth:`Guard.observe_user` (``observe_user=False`` turns
    that off). The session is ``config["configurable"]["thread_id"]``, or
    what ``session(config)`` returns, else the guard's default session.

    A tool the guard does not declare but whose parameters (or return type)
    carry ``Id`` marks is declared by them, as a ``write`` (declare a read
    yourself, with the same ids). Each id is checked under the name the model
    sent it by: an alias of the tool's ``args_schema`` is read as the field
    it names, and a declared id the tool's schema does not have is a
    :class:`GuardrailUsageError` at its first use. Before each model call,
    every tool the model is given says, on each id parameter, to copy the
    value exactly.

    With ``ledger_instructions=True``, every model call's system message
    ends with the session's ID LEDGER block: the entries used last, as many
    as fit ``ledger_tokens`` (characters / 4), sealed under a guard with a
    ``secret``. It is added to the request only, never to the agent's
    messages, so nothing in it is read back into the ledger.

    Put it last in ``middleware=[...]``: LangChain runs the first as the
    outermost wrapper, so the last one sees the arguments the tool will run
    with, after any other middleware changed them.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        session: SessionOf | None = None,
        observe_user: bool = True,
        ledger_instructions: bool = False,
        ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
    ) -> None:
        super().__init__()
        self.guard = guard
        self.ledger_instructions = ledger_instructions
        self.ledger_tokens = check_budget(ledger_tokens)
        self._sessions = _Sessions(guard, session)
        self._observe = observe_user
        self._bindings = Bindings(guard, "LangChain")
        #: Each tool object (kept with it): the parameter schema it is sent to the model
        #: with, and the model and function that validate and run its arguments.
        self._schemas: dict[int, tuple[BaseTool, dict[str, Any], Any, Any]] = {}
        #: What the model is given in place of a tool whose ids needed describing.
        self._sent: dict[int, tuple[BaseTool, Bound, dict[str, Any]]] = {}

    # -- what the model is given ------------------------------------------------------------

    def _bound(self, tool: BaseTool | None, name: str) -> Bound:
        """The tool bound to the guard (declared by its marks, held to its schema)."""
        if tool is None:
            return self._bindings.get(name, None)
        held = self._schemas.get(id(tool))
        if held is None or held[0] is not tool:
            if len(self._schemas) >= 10_000:  # tools made per run: the memory stays bounded
                self._schemas.clear()
                self._sent.clear()
            parameters = convert_to_openai_tool(tool)["function"].get("parameters") or {}
            schema = tool.args_schema
            source = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None
            function = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
            held = (tool, parameters, source, function if callable(function) else None)
            self._schemas[id(tool)] = held
        return self._bindings.get(name, held[1], source=held[2], function=held[3])

    def _described(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with every tool's id parameters described for the model."""
        tools: list[BaseTool | dict[str, Any]] = []
        changed = False
        for tool in request.tools:
            if not isinstance(tool, BaseTool):
                tools.append(tool)
                continue
            bound = self._bound(tool, tool.name)
            given = self._schemas[id(tool)][1]
            if bound.schema is None or bound.schema == given:
                tools.append(tool)
                continue
            made = self._sent.get(id(tool))
            if made is None or made[0] is not tool or made[1] is not bound:
                function = dict(convert_to_openai_tool(tool)["function"])
                function["parameters"] = dict(bound.schema)
                made = (tool, bound, {"type": "function", "function": function})
                self._sent[id(tool)] = made
            tools.append(made[2])
            changed = True
        return request.override(tools=tools) if changed else request

    def _with_block(self, request: ModelRequest[Any], ledger: Ledger) -> ModelRequest[Any]:
        """The request, its system message ending with the ledger's block."""
        block = block_for(self.guard, ledger, self.ledger_tokens)
        given = request.system_message
        if given is None:
            system = SystemMessage(content=block)
        elif isinstance(given.content, str):
            system = SystemMessage(content=with_block(given.content, block))
        else:  # content blocks (cache marks): the block goes after them, as one more
            system = SystemMessage(content=[*given.content, {"type": "text", "text": block}])
        return request.override(system_message=system)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Give the model its tools with each id parameter described ("copy it exactly").

        With ``ledger_instructions``, its system message ends with the ledger block.
        """
        request = self._described(request)
        if self.ledger_instructions:
            session = self._sessions.of(None, request.runtime)
            request = self._with_block(request, self.guard.ledger_for(session))
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """As :meth:`wrap_model_call`, for ``ainvoke`` and ``astream``."""
        request = self._described(request)
        if self.ledger_instructions:
            session = self._sessions.of(None, request.runtime)
            request = self._with_block(request, await self.guard.ledger_for_async(session))
        return await handler(request)

    # -- the user's words -------------------------------------------------------------------

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Read what the user just said into the ledger (unverified) as the run starts."""
        self._observe_user(state["messages"], runtime)
        return None

    async def abefore_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """As :meth:`before_agent`, for ``ainvoke`` and ``astream``."""
        self._observe_user(state["messages"], runtime)
        return None

    def _observe_user(self, messages: Sequence[AnyMessage], runtime: Runtime[Any]) -> None:
        if not self._observe:
            return
        texts = new_user_texts(messages)
        if not texts:
            return
        with self.guard.session(self._sessions.of(None, runtime)) as ledger:
            for text in texts:
                self.guard.observe_user(text, ledger=ledger)

    # -- tool calls -------------------------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], _ToolResponse],
    ) -> _ToolResponse:
        """Check the call, run it with each id as the check gives it, record the result."""
        with self.guard.session(self._sessions.of(_tool_config(request))) as ledger:
            sent = request.tool_call
            request, refusal, checked = self._before(request, ledger)
            if refusal is not None:
                return refusal
            try:
                response = marked_tool_content(handler(request))
            except Exception:
                self._failed(request, ledger, checked)
                raise
            self._after(request, response, ledger, checked)
            return self._sealed(sent, response, ledger)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[_ToolResponse]],
    ) -> _ToolResponse:
        """As :meth:`wrap_tool_call`, for async tools and ``ainvoke``."""
        async with self.guard.session(self._sessions.of(_tool_config(request))) as ledger:
            sent = request.tool_call
            request, refusal, checked = self._before(request, ledger)
            if refusal is not None:
                return refusal
            try:
                response = marked_tool_content(await handler(request))
            except Exception:
                self._failed(request, ledger, checked)
                raise
            self._after(request, response, ledger, checked)
            return self._sealed(sent, response, ledger)

    def _before(
        self, request: ToolCallRequest, ledger: Ledger
    ) -> tuple[ToolCallRequest, ToolMessage | None, Mapping[str, Any]]:
        """The request to run (as the model sent it), or the refusal to answer with.

        Also the arguments as checked (by their declared names), which the record reads.
        """
        call = request.tool_call
        bound = self._bound(request.tool, call["name"])
        checked, undo = bound.to_check(call["args"])
        call_id = call["id"] or None
        verdict = asking.enforce(self.guard, call["name"], checked, ledger=ledger, call_id=call_id)
        waiting = asking.waiting(self.guard, verdict)
        if waiting:  # interrupted until the user answers (Command(resume=decision))
            answer = ask(self.guard, call, waiting, ledger)
            if answer is not None:
                return request, answer, checked
            verdict = asking.approved(
                self.guard, call["name"], checked, ledger=ledger, call_id=call_id
            )
        if not verdict.allowed:
            if self.guard.mode == "observe":
                return request, None, checked  # runs as sent; the record learns nothing
            return request, _refusal_message(verdict, call["id"]), checked
        run_with = verdict.arguments if verdict.arguments is not None else checked
        sent = bound.to_run(run_with, undo, call["args"])
        if sent is not call["args"]:
            request = request.override(tool_call={**call, "args": dict(sent)})
        return request, None, run_with

    def _after(
        self,
        request: ToolCallRequest,
        response: _ToolResponse,
        ledger: Ledger,
        checked: Mapping[str, Any],
    ) -> None:
        call = request.tool_call
        found = tool_result(response, call["id"] or "")
        if found is None:
            return  # a Command that answers with no tool message: nothing to read
        result, error, text = found
        # The tool's failure rule reads the artifact and the text the model reads alike.
        error = error or (result is not text and self.guard.failed(call["name"], text))
        self.guard.record(
            call["name"], checked, result, error=error, call_id=call["id"], ledger=ledger
        )

    def _sealed(self, call: ToolCall, response: _ToolResponse, ledger: Ledger) -> _ToolResponse:
        """The response, its tool message's text sealed where the guard seals its results.

        The seal covers the call as the model wrote it (as the history keeps
        it) and the text the model reads; a
        failed result, and content that is not one text, are left unsealed.
        """
        if not self.guard.seals_results or not call["id"]:
            return response
        return with_tool_message(
            response,
            call["id"],
            lambda text: self.guard.seal_result(
                call["name"], call["args"], text, call_id=call["id"] or "", ledger=ledger
            ),
        )

    def _failed(self, request: ToolCallRequest, ledger: Ledger, checked: Mapping[str, Any]) -> None:
        call = request.tool_call
        self.guard.record(
            call["name"], checked, None, error=True, call_id=call["id"], ledger=ledger
        )


def _refusal_message(verdict: Verdict, call_id: str | None) -> ToolMessage:
    """The tool message a refused call answers with: the re-prompt, ``status="error"``."""
    return ToolMessage(
        content=verdict.message,
        tool_call_id=call_id or "",
        name=verdict.tool,
        status="error",
        artifact=Rejection(verdict).to_dict(),
    )


class GuardrailCompactionMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Compacts a LangChain agent's history with :func:`guardrail.compact` before a model call.

    When ``trigger`` is reached (``("messages", n)``: n messages or more;
    ``("tokens", n)``: n tokens or more, counted approximately), the history
    is compacted: the last ``keep_last_messages`` messages stay raw (or, with
    ``keep_last_messages=None``, the last ``keep_recent`` turns), moved back
    so a tool call keeps its result, and everything before them becomes one
    message holding the sealed ID LEDGER block and a summary in which ids
    appear only as ``[role]``. The cut is compaction's own, as in every
    runtime, so an agent's long loop of tool calls within one user turn is
    shortened too; the messages kept are the very ones the history had. The
    ledger is the session's (as for :class:`GuardrailMiddleware`), so the
    block lists every id the conversation's tools returned, verbatim.

    ``summarize`` is any ``(messages, roles) -> str`` (the extractive
    summarizer by default; :func:`guardrail.compaction.model_summarizer`
    wraps a model). ``role`` is the compacted message's role: ``"system"``,
    or ``"user"`` for a provider that takes one system message only.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        trigger: Trigger = ("messages", 40),
        keep_last_messages: int | None = 6,
        keep_recent: int = DEFAULT_KEEP_RECENT,
        summarize: Summarizer | None = None,
        role: Literal["system", "user"] = "system",
        session: SessionOf | None = None,
    ) -> None:
        super().__init__()
        kind, limit = check_trigger(trigger)
        check_keep(keep_recent, keep_last_messages)
        if role not in ("system", "user"):
            raise GuardrailUsageError(f"role must be 'system' or 'user', not {role!r}")
        self.guard = guard
        self.trigger: Trigger = (kind, limit)
        self.keep_last_messages = keep_last_messages
        self.keep_recent = keep_recent
        self.summarize = summarize
        self.role = role
        self._sessions = _Sessions(guard, session)

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Compact the history when the trigger is reached; else leave it as it is."""
        messages = state["messages"]
        if not self._due(messages):
            return None
        with self.guard.session(self._sessions.of(None, runtime)) as ledger:
            return self._compacted(messages, ledger)

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """As :meth:`before_model`, for ``ainvoke`` and ``astream``."""
        messages = state["messages"]
        if not self._due(messages):
            return None
        async with self.guard.session(self._sessions.of(None, runtime)) as ledger:
            return self._compacted(messages, ledger)

    def _due(self, messages: Sequence[AnyMessage]) -> bool:
        if self.trigger[0] == "messages":
            return reached(self.trigger, messages)
        return reached(self.trigger, messages, tokens=count_tokens_approximately(messages))

    def _compacted(self, messages: Sequence[BaseMessage], ledger: Ledger) -> dict[str, Any] | None:
        chat, origin = to_chat(messages)
        keep = self.keep_last_messages
        if keep is not None:
            # Counted in the agent's messages: the chat dicts of the last ``keep`` of them.
            last = {id(message) for message in messages[max(0, len(messages) - keep) :]}
            keep = sum(id(origin[id(item)]) in last for item in chat)
        result = compact(
            chat,
            ledger,
            guard=self.guard,
            keep_recent=self.keep_recent,
            keep_last_messages=keep,
            summarize=self.summarize,
            shape="openai_chat",
            role=self.role,
        )
        if not result.report.summarized:
            return None
        return {
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *from_chat(result.messages, origin)]
        }
