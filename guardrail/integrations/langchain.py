"""LangChain v1 agents: every tool call checked, every result recorded, history compacted.

Two middlewares for :func:`langchain.agents.create_agent`::

    agent = create_agent(model, tools, middleware=[GuardrailMiddleware(guard)])

:class:`GuardrailMiddleware` checks each tool call before it runs (in the
guard's mode), runs the tool with each identifier as the ledger spells it,
records the result, and sends a refused call back to the model as a
``ToolMessage`` with ``status="error"``. It reads what the user said at the
start of every run (ids the user typed enter the ledger, unverified).
:class:`GuardrailCompactionMiddleware` compacts the history before a model
call with :func:`guardrail.compact`, so the ids survive the summary verbatim.

The conversation is the run's ``config["configurable"]["thread_id"]`` (or
what ``session=`` makes of the run's config); each is its own ledger.
Needs the ``langchain`` extra: ``pip install 'guardrail-ids[langchain]'``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, ToolMessage
    from langchain_core.messages.utils import count_tokens_approximately
    from langchain_core.runnables import RunnableConfig
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as missing:  # pragma: no cover - exercised by a test that hides langchain
    raise ImportError(
        "guardrail.integrations.langchain needs LangChain v1: "
        f"pip install 'guardrail-ids[langchain]' ({missing})"
    ) from missing

from guardrail._verdict import Rejection, Verdict
from guardrail.compaction import Summarizer, compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._langchain_messages import (
    from_chat,
    new_user_texts,
    tail_start,
    to_chat,
    tool_result,
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

Trigger = tuple[Literal["messages", "tokens"], int]
"""When to compact: ``("messages", n)``, n messages or more; ``("tokens", n)``, n tokens or more."""

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
    arguments. An allowed call runs with each id as the ledger spells it; its
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

    Put it last in ``middleware=[...]``: LangChain runs the first as the
    outermost wrapper, so the last one sees the arguments the tool will run
    with, after any other middleware changed them.
    """

    def __init__(
        self, guard: Guard, *, session: SessionOf | None = None, observe_user: bool = True
    ) -> None:
        super().__init__()
        self.guard = guard
        self._sessions = _Sessions(guard, session)
        self._observe = observe_user

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
        """Check the call, run it with the ledger's spelling of each id, record the result."""
        with self.guard.session(self._sessions.of(_tool_config(request))) as ledger:
            request, refusal = self._before(request, ledger)
            if refusal is not None:
                return refusal
            try:
                response = handler(request)
            except Exception:
                self._failed(request, ledger)
                raise
            self._after(request, response, ledger)
            return response

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[_ToolResponse]],
    ) -> _ToolResponse:
        """As :meth:`wrap_tool_call`, for async tools and ``ainvoke``."""
        async with self.guard.session(self._sessions.of(_tool_config(request))) as ledger:
            request, refusal = self._before(request, ledger)
            if refusal is not None:
                return refusal
            try:
                response = await handler(request)
            except Exception:
                self._failed(request, ledger)
                raise
            self._after(request, response, ledger)
            return response

    def _before(
        self, request: ToolCallRequest, ledger: Ledger
    ) -> tuple[ToolCallRequest, ToolMessage | None]:
        """The request to run (ids as the ledger spells them), or the refusal to answer with."""
        call = request.tool_call
        verdict = self.guard.enforce(call["name"], call["args"], ledger=ledger)
        if not verdict.allowed:
            if self.guard.mode == "observe":
                return request, None  # runs as the model wrote it; the record learns nothing
            return request, _refusal_message(verdict, call["id"])
        arguments = verdict.arguments
        if arguments is not None and arguments is not call["args"]:
            request = request.override(tool_call={**call, "args": dict(arguments)})
        return request, None

    def _after(self, request: ToolCallRequest, response: _ToolResponse, ledger: Ledger) -> None:
        call = request.tool_call
        found = tool_result(response, call["id"] or "")
        if found is None:
            return  # a Command that answers with no tool message: nothing to read
        result, error = found
        self.guard.record(
            call["name"], call["args"], result, error=error, call_id=call["id"], ledger=ledger
        )

    def _failed(self, request: ToolCallRequest, ledger: Ledger) -> None:
        call = request.tool_call
        self.guard.record(
            call["name"], call["args"], None, error=True, call_id=call["id"], ledger=ledger
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
    ``("tokens", n)``: n tokens or more, counted approximately), everything
    but the last ``keep_last_messages`` messages (moved back so a tool result
    keeps its call) is replaced by one message holding the sealed ID LEDGER
    block and a summary in which ids appear only as ``[role]``; the messages
    kept are the very ones the history had. The ledger is the session's (as
    for :class:`GuardrailMiddleware`), so the block lists every id the
    conversation's tools returned, verbatim.

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
        keep_last_messages: int = 6,
        summarize: Summarizer | None = None,
        role: Literal["system", "user"] = "system",
        session: SessionOf | None = None,
    ) -> None:
        super().__init__()
        kind, limit = _trigger(trigger)
        if isinstance(keep_last_messages, bool) or not isinstance(keep_last_messages, int):
            raise GuardrailUsageError(
                f"keep_last_messages must be an integer >= 0, not {keep_last_messages!r}"
            )
        if keep_last_messages < 0:
            raise GuardrailUsageError(
                f"keep_last_messages must be an integer >= 0, not {keep_last_messages}"
            )
        if role not in ("system", "user"):
            raise GuardrailUsageError(f"role must be 'system' or 'user', not {role!r}")
        self.guard = guard
        self.trigger: Trigger = (kind, limit)
        self.keep_last_messages = keep_last_messages
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
        kind, limit = self.trigger
        if kind == "messages":
            return len(messages) >= limit
        return count_tokens_approximately(messages) >= limit

    def _compacted(self, messages: Sequence[BaseMessage], ledger: Ledger) -> dict[str, Any] | None:
        start = tail_start(messages, self.keep_last_messages)
        if start == 0:
            return None
        chat, origin = to_chat(messages[:start])
        result = compact(
            chat,
            ledger,
            guard=self.guard,
            keep_recent=0,
            summarize=self.summarize,
            shape="openai_chat",
            role=self.role,
        )
        if not result.report.summarized:
            return None
        head = from_chat(result.messages, origin)
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *head, *messages[start:]]}


def _trigger(trigger: Any) -> Trigger:
    """A valid trigger, or a usage error that shows the two forms."""
    if (
        isinstance(trigger, tuple)
        and len(trigger) == 2
        and trigger[0] in ("messages", "tokens")
        and type(trigger[1]) is int
        and trigger[1] > 0
    ):
        return trigger[0], trigger[1]
    raise GuardrailUsageError(
        f"trigger must be ('messages', n) or ('tokens', n) with n a positive integer, "
        f"not {trigger!r}"
    )
