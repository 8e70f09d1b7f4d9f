"""MCP on the server: a middleware that checks every ``tools/call`` and records its result.

Private to :mod:`guardrail.integrations.mcp`, which re-exports
:func:`guard_server`, :class:`GuardMiddleware` and :func:`request_session`
(its docstring says what the server side does). It imports the MCP SDK, so
it is only imported from there, after the SDK's import check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    ListPromptsResult,
    ListToolsResult,
    Prompt,
    PromptMessage,
    TextContent,
    Tool,
)

from guardrail._check.reprompt import refusal_head
from guardrail._guard.facade import internals
from guardrail.errors import GuardrailUsageError, IdentifierViolation, RepromptLimitExceeded
from guardrail.integrations._common import asking
from guardrail.integrations._common.every_turn import DEFAULT_BLOCK_TOKENS, block_for, check_budget
from guardrail.integrations._common.tools import Bindings
from guardrail.integrations.mcp._approvals import elicit_approval
from guardrail.integrations.mcp._listing import declare_tools
from guardrail.integrations.mcp._results import (
    CALL_ID_META_KEY,
    LISTED_KEPT,
    REFUSAL_META_KEY,
    REPROMPT_LIMIT_ERROR,
    SESSION_META_KEY,
    USER_TEXT_META_KEY,
    failed_result,
    refused_result,
    result_value,
    with_sealed_text,
)
from guardrail.ledger._ledger import state_of

if TYPE_CHECKING:
    from guardrail._data.verdict import Verdict
    from guardrail._guard.facade import Guard
    from guardrail.ledger import Ledger


def request_session(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The conversation a ``tools/call`` belongs to, as the default session resolver reads it.

    The client names it in the request's ``_meta`` (``"guardrail/session"``);
    else the transport's session id (the ``mcp-session-id`` header of
    streamable HTTP) stands for it. Behind authentication the id is prefixed
    with the token's client id (and subject), so one client can never name
    another's conversation. None when the request names nothing.
    """
    meta = ctx.meta
    named = meta.get(SESSION_META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(named, str) or not named:
        headers = getattr(ctx.request, "headers", None)
        named = headers.get("mcp-session-id") if headers is not None else None
        named = f"transport:{named}" if isinstance(named, str) and named else None
    if named is None:
        return None
    token = get_access_token()
    if token is not None:
        owner = token.client_id if token.subject is None else f"{token.client_id}/{token.subject}"
        return f"{owner}:{named}"
    return named


_NO_SESSION = (
    "guardrail refused the call to {tool}; the tool did not run.\n"
    "- this request names no conversation, so no ledger can vouch for its identifiers. "
    "The MCP client sends the conversation id in the request's _meta ({key!r}); a server "
    "for one client (stdio) builds its guard with default_session=."
)

_STOPPED = (
    "- guardrail stopped this conversation's tool calls for this turn: the calls of {stopped} "
    "were refused more than {limit} times. (guardrail: stopping instead of re-prompting again. "
    "Stop calling tools, and ask the user for the identifiers you need.)"
)


#: The prompt a guarded server offers with ``ledger_prompt=True``: the conversation's ledger.
LEDGER_PROMPT = "guardrail_ledger"
_LEDGER_PROMPT_ABOUT = (
    "The conversation's ID LEDGER (the identifiers its tool results returned, verbatim): "
    "include it in the model's instructions before every model call"
)


class GuardMiddleware:
    """MCP server middleware: every ``tools/call`` checked before it runs, recorded after.

    See :func:`guard_server`, which builds it and adds it to a server.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        session: Callable[[ServerRequestContext[Any, Any]], str | None] = request_session,
        reads_introduce_ids: bool = False,
        list_tools: Callable[[], Any] | None = None,
        declare: bool = True,
        ledger_prompt: bool = False,
        ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
    ) -> None:
        self.guard = guard
        self.ledger_prompt = ledger_prompt
        self.ledger_tokens = check_budget(ledger_tokens)
        self.session = session
        self.reads_introduce_ids = reads_introduce_ids
        self.declare = declare
        self._list_tools = list_tools
        #: Tool names already looked up in the server's listing (declared or not).
        self._listed: set[str] = set()
        #: The input schema of each listed tool, by name (from the server's own listing).
        self._schemas: dict[str, Any] = {}
        self._bindings = Bindings(guard, "MCP")

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Check a ``tools/call`` request before the server runs it; describe ``tools/list``."""
        if ctx.method == "tools/list":
            listed: HandlerResult = self._described(await call_next(ctx))
            return listed
        if self.ledger_prompt and ctx.method in ("prompts/list", "prompts/get"):
            return await self._prompt(ctx, call_next)
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        name, arguments = params.get("name"), params.get("arguments")
        arguments = {} if arguments is None else arguments
        if not isinstance(name, str) or not isinstance(arguments, Mapping):
            return await call_next(ctx)  # malformed: the SDK answers INVALID_PARAMS
        guard = self.guard
        if (
            name not in self._listed
            and self._list_tools is not None
            and len(self._listed) < LISTED_KEPT  # a client inventing names gains nothing
        ):
            self._listed.add(name)
            listing = await self._list_tools()
            self._schemas.update(
                (tool.name, tool.input_schema) for tool in listing if isinstance(tool, Tool)
            )
            if self.declare:
                declare_tools(guard, listing, annotated_only=True)
        session_id = self.session(ctx) or guard.default_session
        if session_id is None:
            text = _NO_SESSION.format(tool=name, key=SESSION_META_KEY)
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        bound = self._bindings.get(name, self._schemas.get(name))
        checked, undo = bound.to_check(arguments)
        engine = internals(guard).engine
        async with guard.session(session_id) as ledger:
            state = state_of(ledger)
            meta = ctx.meta
            said = meta.get(USER_TEXT_META_KEY) if isinstance(meta, Mapping) else None
            if isinstance(said, str) and said:
                engine.observe_user_once(said, state)
            stopped = engine.stopped(state)
            if stopped is not None:
                return self._stopped(name, stopped)
            if self.reads_introduce_ids:
                engine.introduce(name, checked, state)
            try:
                verdict = asking.enforce(guard, name, checked)  # an ask: the user is asked
            except RepromptLimitExceeded as limit:
                return refused_result(limit.verdict, str(limit), limit=limit.limit)
            except IdentifierViolation as violation:
                # raise mode: a server has no program to raise to, only the model to answer.
                return refused_result(violation.verdict, str(violation))
            if asking.waiting(guard, verdict):
                asked = await self._asked(ctx, name, checked, verdict, ledger)
                if isinstance(asked, (CallToolResult, InputRequiredResult)):
                    return asked
                verdict = asked
            if not verdict.allowed and guard.mode != "observe":
                return refused_result(verdict)
            run_with = verdict.arguments if verdict.arguments is not None else checked
            sent = bound.to_run(run_with, undo, arguments)
            if sent is not arguments:
                ctx = dataclasses.replace(ctx, params={**params, "arguments": dict(sent)})
            try:
                result = await call_next(ctx)
            except BaseException:
                guard.record(name, run_with, None, error=True)
                raise
            _record_result(guard, name, dict(run_with), result)
            call_id = meta.get(CALL_ID_META_KEY) if isinstance(meta, Mapping) else None
            if not guard.seals_results or not isinstance(call_id, str) or not call_id:
                return result
            # The host names the model's call: the seal binds the result to it, over the
            # arguments as the client sent them (what the host's transcript shows).
            sealed: HandlerResult = with_sealed_text(
                result,
                lambda text: guard.seal_result(
                    name, arguments, text, call_id=call_id, ledger=ledger
                ),
            )
            return sealed

    async def _prompt(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """The ledger prompt listed beside the server's own, and got for the request's session."""
        if ctx.method == "prompts/list":
            try:
                listing = await call_next(ctx)
            except MCPError as error:
                if error.code != METHOD_NOT_FOUND:
                    raise
                listing = ListPromptsResult(prompts=[])  # a server with no prompts of its own
            ours = Prompt(name=LEDGER_PROMPT, description=_LEDGER_PROMPT_ABOUT)
            if isinstance(listing, ListPromptsResult):
                return listing.model_copy(update={"prompts": [*listing.prompts, ours]})
            if isinstance(listing, dict) and isinstance(listing.get("prompts"), list):
                wire = ours.model_dump(by_alias=True, mode="json", exclude_none=True)
                return {**listing, "prompts": [*listing["prompts"], wire]}
            return listing
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if params.get("name") != LEDGER_PROMPT:
            return await call_next(ctx)
        session_id = self.session(ctx) or self.guard.default_session
        if session_id is None:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"the {LEDGER_PROMPT} prompt is a conversation's: name it in the "
                f"request's _meta ({SESSION_META_KEY!r})",
            )
        ledger = self.guard.ledger_for(session_id)
        block = block_for(self.guard, ledger, self.ledger_tokens)
        return GetPromptResult(
            description=_LEDGER_PROMPT_ABOUT,
            messages=[PromptMessage(role="user", content=TextContent(type="text", text=block))],
        )

    async def _asked(
        self,
        ctx: ServerRequestContext[Any, Any],
        name: str,
        checked: Mapping[str, Any],
        verdict: Verdict,
        ledger: Ledger,
    ) -> Verdict | CallToolResult | InputRequiredResult:
        """Ask the user about a call that waits: the verdict once approved, else the answer."""
        guard, waiting = self.guard, verdict.approvals
        answer = await elicit_approval(ctx, name, waiting)
        if isinstance(answer, InputRequiredResult):
            return answer  # the client asks the user and calls again with the answer
        if answer is None:  # no form to show, or dismissed: the call waits
            return refused_result(verdict)
        if not answer:
            asking.declined(guard, waiting, ledger=ledger)
            return refused_result(guard.check(name, checked, ledger=ledger))
        return asking.approved(guard, name, checked, ledger=ledger)

    def _stopped(self, name: str, stopped: str) -> CallToolResult:
        """The answer to every call of a turn whose re-prompts ran out: stop, ask the user."""
        limit = self.guard.max_reprompts
        text = f"{refusal_head(name)}\n" + _STOPPED.format(stopped=stopped, limit=limit)
        refusal = {"error": REPROMPT_LIMIT_ERROR, "message": text, "findings": [], "tool": name}
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            is_error=True,
            _meta={REFUSAL_META_KEY: {**refusal, "limit": limit}},
        )

    def _described(self, result: Any) -> Any:
        """A ``tools/list`` result whose every id parameter tells the model to copy it exactly."""
        wire = (
            result.model_dump(by_alias=True, mode="json", exclude_none=True)
            if isinstance(result, ListToolsResult)
            else result
        )
        listed = wire.get("tools") if isinstance(wire, Mapping) else None
        if not isinstance(listed, list):
            return result
        tools = []
        for tool in listed:
            name = tool.get("name") if isinstance(tool, Mapping) else None
            if not isinstance(name, str):
                tools.append(tool)
                continue
            schema = tool.get("inputSchema")
            self._schemas[name] = schema
            if self.declare and name not in self.guard.specs:
                declare_tools(self.guard, [tool], annotated_only=True)
            described = self._bindings.get(name, schema).schema
            tools.append(
                tool
                if described is None or described == schema
                else {**tool, "inputSchema": dict(described)}
            )
        return {**wire, "tools": tools}


def _record_result(guard: Guard, name: str, arguments: dict[str, Any], result: Any) -> None:
    """Record a ``tools/call`` result in its wire form (or model); a failure records nothing."""
    wire = result.model_dump(by_alias=True) if isinstance(result, CallToolResult) else result
    if not isinstance(wire, Mapping):
        return
    if wire.get("resultType", "complete") != "complete":
        return  # input required: the tool has not finished
    structured, content = wire.get("structuredContent"), wire.get("content")
    if wire.get("isError") or failed_result(guard, name, structured, content):
        guard.record(name, arguments, None, error=True)
        return
    guard.record(name, arguments, result_value(structured, content))


def guard_server(
    server: Any,
    guard: Guard,
    *,
    session: Callable[[ServerRequestContext[Any, Any]], str | None] = request_session,
    declare: bool = True,
    reads_introduce_ids: bool = False,
    ledger_prompt: bool = False,
    ledger_tokens: int = DEFAULT_BLOCK_TOKENS,
) -> GuardMiddleware:
    """Guard every tool of an MCP server: adds a :class:`GuardMiddleware` and returns it.

    ``server`` is an ``mcp.server.mcpserver.MCPServer`` or a low-level
    ``mcp.server.Server``. ``session`` maps a request to its conversation's
    session id (default: :func:`request_session`); a request that names none
    uses the guard's ``default_session`` (a stdio server serves one client),
    and with neither it is refused. With ``declare`` (``MCPServer`` only), a
    tool the guard does not know is declared from the server's own listing
    the first time it is listed or called, if its schemas mark an identifier
    (see :func:`declare_tools`); any other undeclared tool meets the guard's
    policy (``refuse_undeclared``), whatever its annotations. An
    ``MCPServer``'s listing also holds each declaration to the tool: an id
    parameter its input schema does not have (``order_id`` where the schema,
    and so the model, says ``orderId``) is a :class:`GuardrailUsageError` at
    the tool's first use. Every ``tools/list`` answer tells the model, on
    each id parameter, to copy the value exactly.

    A server never sees the user's messages, where a conversation's ids
    first appear. The host may forward them (the ``"guardrail/user_text"``
    of a request's ``_meta``, see :func:`session_meta`): the ids the user
    typed are then read as a guard reads them everywhere (a read may take
    them, a write only once a lookup confirmed them), and anything else is
    refused as invented. With ``reads_introduce_ids`` (off by default) an id
    that appears nowhere yet, passed to a ``read`` tool, is allowed to that
    read instead: it enters with its own provenance, ``introduced``, which
    only a declared result field that returns it can verify (never the mere
    success of a ``verifies="on_success"`` lookup), which a write refuses,
    and which starts no turn. It lets a server serve hosts that forward
    nothing, at a price: a model's guess at an id that exists is looked up
    (the read shows that record), and a lookup that returns the id in a
    declared field verifies it. A near miss of a ledger value is refused as
    everywhere.

    A call whose ids wait for the user's approval (an ``ask`` verdict, in
    any mode but ``observe``) is put to the user by the server itself, through
    the client: a form elicitation showing the call, each value and its
    evidence, with one boolean field, ``approve``. Accepted with ``approve``
    true, the values are approved for that session and tool and the call runs
    once; declined (or ``approve`` false), the no is kept and the model gets
    an ``isError`` result saying the user declined. A client that declares no
    form elicitation, cannot take a request from the server, or whose user
    dismisses the form gets an ``isError`` result saying the call waits for
    the user's approval; nothing is recorded.

    When the re-prompts of one tool run out in a turn (``max_reprompts``),
    every later call of the conversation in that turn is answered with the
    stop, never run: the server's counterpart of the host's
    ``RepromptLimitExceeded``. A forwarded new user message starts a turn.

    With ``ledger_prompt=True`` the server offers one more prompt,
    ``guardrail_ledger``: got with the conversation named as for a call, it
    is the conversation's ID LEDGER block (the entries used last, within
    ``ledger_tokens``, sealed under a guard with a ``secret``), for a host to
    put in its model's instructions before every model call, so the ledger a
    refusal tells the model to copy from is in front of it.

    Add it once, after the server's own middleware is in place: it runs
    innermost, right around the tool.
    """
    middleware_list = getattr(server, "middleware", None)
    if not isinstance(middleware_list, list):
        raise GuardrailUsageError(
            "guard_server takes an MCPServer or a low-level mcp Server, "
            f"not {type(server).__name__}"
        )
    if any(isinstance(existing, GuardMiddleware) for existing in middleware_list):
        raise GuardrailUsageError("this server is guarded already; guard it once")
    list_tools = getattr(server, "list_tools", None)
    middleware = GuardMiddleware(
        guard,
        session=session,
        reads_introduce_ids=reads_introduce_ids,
        list_tools=list_tools if callable(list_tools) else None,
        declare=declare,
        ledger_prompt=ledger_prompt,
        ledger_tokens=ledger_tokens,
    )
    middleware_list.append(middleware)
    return middleware
