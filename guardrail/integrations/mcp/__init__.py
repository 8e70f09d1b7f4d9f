"""MCP: guarded tool calls on the client (the host) and on the server.

On the client, the host application sees the conversation: it calls
:func:`guarded_call_tool` (or uses a :class:`GuardedClientSession`) instead
of ``session.call_tool``. A refused call does not reach the server; it comes
back as a ``CallToolResult`` with ``isError`` set and the re-prompt as its
text, like any tool error the model reads. A successful result is harvested
from its ``structuredContent`` (else its text, read as JSON where it is).
:func:`declare_tools` declares the server's tools to the guard from their
listing: ``x-guardrail-kind`` in the input and output schemas, and the
``readOnlyHint`` annotation for a ``read``.

On the server, :func:`guard_server` adds a middleware to an ``MCPServer``
(or a low-level ``Server``) that checks every ``tools/call`` before the tool
runs and records its result after, answering a refusal with an ``isError``
result that carries the re-prompt (never an exception whose text the
server's error handler would replace). Each call's ledger is its
conversation's: named by the client in the request's ``_meta``
(``"guardrail/session"``), else the transport's session id, scoped by the
authenticated client where there is one (see :func:`request_session`).
A server never sees the user's messages: the host may forward them in the
request's ``_meta`` (``"guardrail/user_text"``, see :func:`session_meta`), so
the server can tell an id the user typed from one the model made up.

A call that waits for the user's approval is the host's to ask about: on
the client it comes back as an ``isError`` result that ran nothing, whose
``_meta`` carries the requests (:func:`approval_requests`); the host shows
them to the user, answers each with ``guard.approve`` or ``guard.deny``, and
calls again. A guarded server asks through the client itself (elicitation).

A host keeps the conversation's ID LEDGER block in its model's instructions
with :meth:`GuardedClientSession.ledger_instructions` and compacts its
transcript with :meth:`GuardedClientSession.compact`; a guarded server offers
the block as the ``guardrail_ledger`` prompt (``ledger_prompt=True``) to hosts
that run no guard.

Under ``Guard(secret=...)`` a result whose content is one text is sealed for
the model's call it answers: by the host, given the call id
(``call_tool(..., call_id=...)``), and by the server, when the request's
``_meta`` names it (``"guardrail/call_id"``), so a ledger rebuilt from the
host's transcript trusts it, and no tool message a client wrote.

Needs the MCP SDK: ``pip install 'guardrail-ids[mcp]'``. Audit events never go to
stdout (which a stdio server's protocol owns); note that ``MCPServer``
configures the root logger to print INFO records to stderr, guardrail's
included.

Inside: ``_server`` (the server's middleware), ``_listing`` (a server's
listing declared to a guard), ``_results`` (the ``_meta`` keys, a refusal's
result, a seal) and ``_approvals`` (server-side elicitation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

try:
    from mcp.types import CallToolResult, ListToolsResult, RequestParamsMeta
except ImportError as exc:  # pragma: no cover - tested with the module hidden
    raise ImportError(
        "guardrail.integrations.mcp needs the MCP SDK: pip install 'guardrail-ids[mcp]'"
    ) from exc

from guardrail._check.plan import undeclared_verdict
from guardrail._check.reprompt import refusal_head
from guardrail._data.verdict import Verdict
from guardrail._guard.facade import internals
from guardrail._transcript.messages import Shape
from guardrail.compaction import DEFAULT_KEEP_RECENT, CompactionReport, Summarizer, compact
from guardrail.errors import GuardrailUsageError, IdentifierViolation
from guardrail.integrations._common import asking
from guardrail.integrations._common.compaction import Trigger, check_keep, check_trigger, reached
from guardrail.integrations._common.every_turn import DEFAULT_BLOCK_TOKENS, block_for, with_block
from guardrail.integrations._common.tools import Bindings, Bound
from guardrail.integrations.mcp._listing import (
    LISTING,
    declare_tools,
    manifest_from_tools,
    qualified,
)
from guardrail.integrations.mcp._results import (
    APPROVALS_META_KEY,
    CALL_ID_META_KEY,
    LISTED_KEPT,
    REFUSAL_META_KEY,
    REPROMPT_LIMIT_ERROR,
    SESSION_META_KEY,
    USER_TEXT_META_KEY,
    approvals_of,
    asked_result,
    failed_result,
    refused_result,
    result_value,
    with_sealed_text,
)
from guardrail.integrations.mcp._server import (
    LEDGER_PROMPT,
    GuardMiddleware,
    guard_server,
    request_session,
)

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

__all__ = [
    "APPROVALS_META_KEY",
    "CALL_ID_META_KEY",
    "LEDGER_PROMPT",
    "REFUSAL_META_KEY",
    "REPROMPT_LIMIT_ERROR",
    "SESSION_META_KEY",
    "USER_TEXT_META_KEY",
    "GuardMiddleware",
    "GuardedClientSession",
    "approval_requests",
    "declare_tools",
    "guard_server",
    "guarded_call_tool",
    "manifest_from_tools",
    "request_session",
    "session_meta",
]


def session_meta(
    session_id: str, *, user_text: str | None = None, call_id: str | None = None
) -> RequestParamsMeta:
    """The ``_meta`` of a ``tools/call`` that names its conversation for a guarded server.

    ``await client.call_tool(name, arguments, meta=session_meta("conversation-42"))``.
    ``user_text`` forwards the user's latest message: the server reads it as
    a guard reads a user message (ids of a kind's shape, unverified; a new
    turn), so a lookup may take the ids the user typed and confirm them. Send
    it with every call of the turn; the server starts one turn per new text.
    ``call_id`` names the model's call the result will answer in the host's
    transcript: a server with a secret seals its result for that call.
    """
    if not isinstance(session_id, str) or not session_id:
        raise GuardrailUsageError("a session id is a non-empty string, e.g. a conversation id")
    meta: dict[str, Any] = {SESSION_META_KEY: session_id}
    if user_text is not None:
        meta[USER_TEXT_META_KEY] = _user_text(user_text)
    if call_id is not None:
        meta[CALL_ID_META_KEY] = _call_id(call_id)
    return cast(RequestParamsMeta, meta)


def _call_id(call_id: object) -> str:
    if not isinstance(call_id, str) or not call_id:
        raise GuardrailUsageError(
            f"call_id is the id of the model's tool call (a non-empty string), not {call_id!r}"
        )
    return call_id


def _user_text(text: object) -> str:
    if not isinstance(text, str) or not text:
        raise GuardrailUsageError(
            f"user_text is the user's latest message as a non-empty string, not {text!r}"
        )
    return text


def approval_requests(result: Any) -> list[dict[str, Any]]:
    """What a host's guarded call waits for the user to approve: one dict per value, or [].

    :func:`guarded_call_tool` (and :meth:`GuardedClientSession.call_tool`)
    answers a call whose ids need the user's approval with an ``isError``
    result that ran nothing; its ``_meta`` (``"guardrail/approvals"``) holds
    the requests: ``tool``, ``param``, ``value`` (cut short), ``kind``,
    ``tier``, ``outside``, ``evidence`` and ``token``. Show the user each
    value and its evidence, pass the token to ``guard.approve`` or
    ``guard.deny``, and make the same call again: approved, it runs;
    declined, it comes back refused, the model told that the user declined.
    Give the model the result only if you do not ask: its text says that the
    call waits for the user.
    """
    return approvals_of(result)


class _CallsTools(Protocol):
    """What a guarded call needs of an MCP client: ``mcp.Client`` or ``mcp.ClientSession``."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> CallToolResult: ...


# -- the client side ----------------------------------------------------------------------------


def _with_meta(
    options: dict[str, Any], user_text: str | None, call_id: str | None
) -> dict[str, Any]:
    """``call_tool`` options whose ``meta`` forwards the user's message and the call's id."""
    if user_text is None and call_id is None:
        return options
    meta = dict(options.get("meta") or {})
    if user_text is not None:
        meta[USER_TEXT_META_KEY] = _user_text(user_text)
    if call_id is not None:
        meta[CALL_ID_META_KEY] = call_id
    return {**options, "meta": meta}


async def guarded_call_tool(
    session: _CallsTools,
    guard: Guard,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    user_text: str | None = None,
    call_id: str | None = None,
    **options: Any,
) -> CallToolResult:
    """``session.call_tool(name, arguments)``, checked before and recorded after.

    ``session`` is an ``mcp.Client`` or ``mcp.ClientSession``; ``options``
    go to its ``call_tool``. Run it inside the conversation's
    ``guard.session(...)``. A call the guard refuses never reaches the
    server: in ``reprompt`` mode it returns an ``isError`` result whose text
    is the re-prompt (``_meta["guardrail/refusal"]`` holds the findings); in
    ``raise`` mode it raises :class:`~guardrail.IdentifierViolation`, and
    :class:`~guardrail.RepromptLimitExceeded` when re-prompts run out. A call
    whose ids wait for the user's approval does not reach the server either,
    in any mode but ``observe``: its ``isError`` result carries the requests
    (see :func:`approval_requests`), for the host to ask the user, answer with
    ``guard.approve`` or ``guard.deny``, and call again. An allowed call is
    sent with its arguments as the model wrote them. An ``isError`` result,
    or an exception, is recorded as a failure.
    ``user_text`` forwards the user's latest message to a guarded server (see
    :func:`session_meta`); nothing of the conversation is sent otherwise.

    ``call_id`` is the id of the model's tool call this result will answer in
    your transcript. With it, a guard with a ``secret`` seals the result's text
    (a last line, see :meth:`Guard.seal_result`) over that call, as the model
    sent ``arguments``: write that text into the tool message, and a host that
    rebuilds its ledger from a transcript its client sends back trusts it, and
    no tool message the client wrote. It also goes to the server in the
    request's ``_meta``, so a guarded server with a secret can seal its result.
    """
    if call_id is not None:
        _call_id(call_id)
    return await _call(session, guard, name, name, arguments, None, user_text, call_id, options)


async def _call(
    session: _CallsTools,
    guard: Guard,
    name: str,
    checked_as: str,
    arguments: Mapping[str, Any] | None,
    bound: Bound | None,
    user_text: str | None,
    call_id: str | None,
    options: dict[str, Any],
) -> CallToolResult:
    """One guarded call of ``name``, checked as the guard's ``checked_as``."""
    given = dict(arguments or {})
    checked, undo = bound.to_check(given) if bound is not None else (given, None)
    verdict = asking.enforce(guard, checked_as, checked)  # an ask comes back, in any mode
    if asking.waiting(guard, verdict):
        return asked_result(verdict)  # the host asks the user; nothing ran, nothing recorded
    if not verdict.allowed and guard.mode != "observe":
        return refused_result(verdict)
    run_with = verdict.arguments if verdict.arguments is not None else checked
    sent = bound.to_run(run_with, undo, given) if bound is not None else dict(run_with)
    options = _with_meta(options, user_text, call_id)
    try:
        result = await session.call_tool(name, dict(sent), **options)
    except BaseException:
        guard.record(checked_as, run_with, None, error=True, call_id=call_id)
        raise
    if result.meta and APPROVALS_META_KEY in result.meta:
        # Requests for the host's user come from the host's guard alone, never from a server.
        meta = {key: value for key, value in result.meta.items() if key != APPROVALS_META_KEY}
        result = result.model_copy(update={"meta": meta or None})
    if result.is_error or failed_result(
        guard, checked_as, result.structured_content, result.content
    ):
        guard.record(checked_as, run_with, None, error=True, call_id=call_id)
        return result
    value = result_value(result.structured_content, result.content)
    guard.record(checked_as, run_with, value, call_id=call_id)
    if call_id is None or not guard.seals_results:
        return result
    ledger = guard.ledger
    sealed: CallToolResult = with_sealed_text(
        result,
        lambda text: guard.seal_result(
            checked_as, arguments or {}, text, call_id=call_id, ledger=ledger
        ),
    )
    return sealed


class GuardedClientSession:
    """An MCP client (``mcp.Client`` or ``ClientSession``) whose tool calls are guarded.

    ``call_tool`` is :func:`guarded_call_tool`, in the session named by
    ``session`` (else the current one). ``list_tools`` returns the listing,
    each identifier parameter described for the model ("copy the value
    exactly"), and declares to the guard the tools it does not know yet
    (``declare=True``, see :func:`declare_tools`); a call of a tool this
    server has not listed yet lists its tools first, so a tool is always
    checked by this server's declaration of it, never by another server's of
    the same name. ``namespace`` declares this server's tools as
    ``namespace/name`` (give one to each server of a host whose servers share
    tool names); a hand declaration then goes under that name too.

    ``observe_user(text)`` reads a user message into the guard's ledger (as
    ``guard.observe_user``); with ``forward_user_text=True`` the latest one
    also goes with each call to the server (see :func:`session_meta`), so a
    guarded server can tell the ids the user typed from the ones the model
    made up. Off by default: it sends the user's words to the server.
    Everything else is the wrapped client's.
    """

    def __init__(
        self,
        client: Any,
        guard: Guard,
        *,
        session: str | None = None,
        declare: bool = True,
        namespace: str | None = None,
        forward_user_text: bool = False,
    ) -> None:
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            raise GuardrailUsageError(f"namespace is a non-empty string, not {namespace!r}")
        self.client = client
        self.guard = guard
        self.session = session
        self.declare = declare
        self.namespace = namespace
        self.forward_user_text = forward_user_text
        #: The latest user message, forwarded with each call where asked.
        self.user_text: str | None = None
        #: The input schema of each tool of this server's latest listing, by name.
        self._listed: dict[str, Any] = {}
        #: Names called that the listing did not have, looked up once each (bounded).
        self._asked: set[str] = set()
        self._bindings = Bindings(guard, "MCP")
        #: The report of the last :meth:`compact` (None before the first).
        self.last_report: CompactionReport | None = None

    def observe_user(self, text: str) -> None:
        """Read a user message into the ledger (and forward it, with ``forward_user_text``)."""
        if self.session is None:
            self.guard.observe_user(text)
        else:
            self.guard.observe_user(text, session=self.session)
        self.user_text = text

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        **options: Any,
    ) -> CallToolResult:
        """Call a tool, guarded (see :func:`guarded_call_tool`, and its ``call_id``)."""
        if call_id is not None:
            _call_id(call_id)
        if (
            self.declare
            and name not in self._listed
            and name not in self._asked
            and len(self._asked) < LISTED_KEPT  # a model inventing names gains nothing
        ):
            self._asked.add(name)
            await self.list_tools()
        checked_as = qualified(name, self.namespace)
        if name not in self._listed and self._from_another_listing(checked_as):
            return self._not_listed(name, checked_as)
        bound = self._bindings.get(checked_as, self._listed.get(name))
        user_text = self.user_text if self.forward_user_text else None
        if self.session is None:
            return await _call(
                self.client,
                self.guard,
                name,
                checked_as,
                arguments,
                bound,
                user_text,
                call_id,
                options,
            )
        async with self.guard.session(self.session):
            return await _call(
                self.client,
                self.guard,
                name,
                checked_as,
                arguments,
                bound,
                user_text,
                call_id,
                options,
            )

    def ledger_instructions(
        self, instructions: str | None = None, *, max_tokens: int = DEFAULT_BLOCK_TOKENS
    ) -> str:
        """Your system prompt, then the conversation's ID LEDGER block: send it at every call.

        The host builds its model's request; this is the text to put in its
        instructions before each model call (see
        :func:`guardrail.integrations.loops.ledger_instructions`, which it is):
        the entries used last, within ``max_tokens``, sealed under a guard
        with a ``secret``. Keep it out of the history you store.
        """
        guard = self.guard
        ledger = guard.ledger if self.session is None else guard.ledger_for(self.session)
        return with_block(instructions, block_for(guard, ledger, max_tokens))

    def compact(
        self,
        messages: Sequence[Any],
        *,
        trigger: Trigger | None = None,
        keep_recent: int = DEFAULT_KEEP_RECENT,
        keep_last_messages: int | None = None,
        summarize: Summarizer | None = None,
        shape: Shape | None = None,
    ) -> list[Any]:
        """The host's transcript compacted against this conversation's ledger, with this guard.

        As every adapter compacts: once ``trigger`` is reached
        (``("messages", n)`` or ``("tokens", n)``, characters / 4 of the
        messages as JSON; always, without one), the last ``keep_last_messages``
        messages (else the last ``keep_recent`` turns) stay raw, a call never
        leaves its result, and the rest becomes the sealed ID LEDGER block and
        a summary (see :func:`guardrail.compact`). The ledger is the one this
        session's calls recorded into, so no second guard is needed. The
        report is :attr:`last_report`.
        """
        check_keep(keep_recent, keep_last_messages)
        if trigger is not None and not reached(check_trigger(trigger), messages):
            return list(messages)
        guard = self.guard
        ledger = guard.ledger if self.session is None else guard.ledger_for(self.session)
        done = compact(
            list(messages),
            ledger,
            guard=guard,
            keep_recent=keep_recent,
            keep_last_messages=keep_last_messages,
            summarize=summarize,
            shape=shape,
        )
        self.last_report = done.report
        return list(done.messages)

    def _from_another_listing(self, name: str) -> bool:
        origin = internals(self.guard).registry.origins.get(name)
        return origin is not None and origin.startswith(LISTING)

    def _not_listed(self, name: str, checked_as: str) -> CallToolResult:
        """Refuse a call of a tool this server does not list, declared from another's listing."""
        verdict = undeclared_verdict(checked_as)
        text = (
            f"{refusal_head(name)}\n- {name} is not a tool of this server; use one of the tools "
            "this server lists."
        )
        verdict = Verdict(verdict.tool, False, findings=verdict.findings, message=text)
        if self.guard.mode == "raise":
            raise IdentifierViolation(verdict)
        return refused_result(verdict)

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        """The server's tools, each id parameter described; the unknown ones are declared."""
        listing = await self.client.list_tools(*args, **kwargs)
        tools = listing.tools if isinstance(listing, ListToolsResult) else None
        if tools is None:
            return listing
        if self.declare:
            declare_tools(self.guard, tools, namespace=self.namespace)
        self._listed = {tool.name: tool.input_schema for tool in tools}
        described = []
        for tool in tools:
            bound = self._bindings.get(qualified(tool.name, self.namespace), tool.input_schema)
            schema = bound.schema
            described.append(
                tool
                if schema is None or schema == tool.input_schema
                else tool.model_copy(update={"input_schema": dict(schema)})
            )
        return listing.model_copy(update={"tools": described})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)
