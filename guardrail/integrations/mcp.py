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

Under ``Guard(secret=...)`` a result whose content is one text is sealed for
the model's call it answers: by the host, given the call id
(``call_tool(..., call_id=...)``), and by the server, when the request's
``_meta`` names it (``"guardrail/call_id"``), so a ledger rebuilt from the
host's transcript trusts it, and no tool message a client wrote.

Needs the MCP SDK: ``pip install 'guardrail-ids[mcp]'``. Audit events never go to
stdout (which a stdio server's protocol owns); note that ``MCPServer``
configures the root logger to print INFO records to stderr, guardrail's
included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

try:
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.types import CallToolResult, ListToolsResult, RequestParamsMeta, TextContent, Tool
except ImportError as exc:  # pragma: no cover - tested with the module hidden
    raise ImportError(
        "guardrail.integrations.mcp needs the MCP SDK: pip install 'guardrail-ids[mcp]'"
    ) from exc

from guardrail._check import undeclared_verdict
from guardrail._registry import Registry
from guardrail._reprompt import refusal_head
from guardrail._seal import seal_result, split_seal
from guardrail._spec import ToolSpec
from guardrail._verdict import Rejection, Verdict
from guardrail.errors import GuardrailUsageError, IdentifierViolation, RepromptLimitExceeded
from guardrail.integrations._tools import Bindings, Bound, kinds_in

if TYPE_CHECKING:
    from guardrail._guard import Guard

__all__ = [
    "CALL_ID_META_KEY",
    "REFUSAL_META_KEY",
    "REPROMPT_LIMIT_ERROR",
    "SESSION_META_KEY",
    "USER_TEXT_META_KEY",
    "GuardMiddleware",
    "GuardedClientSession",
    "declare_tools",
    "guard_server",
    "guarded_call_tool",
    "manifest_from_tools",
    "request_session",
    "session_meta",
]

#: The ``_meta`` key of a ``tools/call`` request naming the conversation it belongs to.
SESSION_META_KEY = "guardrail/session"
#: The ``_meta`` key of a ``tools/call`` request carrying the user's latest message.
USER_TEXT_META_KEY = "guardrail/user_text"
#: The ``_meta`` key of a ``tools/call`` request naming the model's call id in the host's
#: transcript, for a server with a secret to seal its result (see :func:`guard_server`).
CALL_ID_META_KEY = "guardrail/call_id"
#: The ``_meta`` key of a refusal's result holding ``Rejection.to_dict()`` (the findings).
REFUSAL_META_KEY = "guardrail/refusal"
#: The ``error`` of a refusal's ``_meta`` once a conversation's re-prompts ran out this turn.
REPROMPT_LIMIT_ERROR = "reprompt_limit"
#: Unknown tool names looked up in the server's listing at most once each, up to this many.
_LISTED_KEPT = 1000
#: The origin of a declaration read from an MCP listing (a namespace follows, where given).
_LISTING = "the MCP listing"


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


class _CallsTools(Protocol):
    """What a guarded call needs of an MCP client: ``mcp.Client`` or ``mcp.ClientSession``."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *args: Any, **kwargs: Any
    ) -> CallToolResult: ...


# -- declarations from a tool listing -----------------------------------------------------------


def _wire(tool: Any) -> Mapping[str, Any]:
    """A tool of a listing in its wire form (camelCase keys), from a ``Tool`` or a dict."""
    if isinstance(tool, Tool):
        return tool.model_dump(by_alias=True, mode="json", exclude_none=True)
    if isinstance(tool, Mapping):
        return tool
    raise GuardrailUsageError(
        f"a tool of an MCP listing is an mcp.types.Tool or its JSON, not {type(tool).__name__}"
    )


def manifest_from_tools(
    tools: ListToolsResult | Iterable[Tool | Mapping[str, Any]],
) -> dict[str, Any]:
    """A guard manifest (``{"tools": {...}}``) declaring the tools of an MCP listing.

    Identifier parameters are the input schema's properties marked
    ``"x-guardrail-kind": "order"`` (what ``Id("order")`` publishes in a
    pydantic schema), result identifiers the output schema's; a tool
    annotated ``readOnlyHint`` is a ``read``, any other a ``write``. Load it
    with ``guard.load_manifest(...)``; the kinds it names must be declared on
    the guard. A listing is only as trustworthy as the server that sent it:
    for a server you do not control, declare its tools yourself.
    """
    listed = tools.tools if isinstance(tools, ListToolsResult) else tools
    declared: dict[str, Any] = {}
    for tool in listed:
        wire = _wire(tool)
        name = wire.get("name")
        if not isinstance(name, str) or not name:
            raise GuardrailUsageError(f"a tool of the listing has no name: {dict(wire)!r}")
        input_schema = wire.get("inputSchema")
        output_schema = wire.get("outputSchema")
        annotations = wire.get("annotations")
        read_only = isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True
        spec: dict[str, Any] = {"effect": "read" if read_only else "write"}
        ids = kinds_in(input_schema)
        ids.pop("$", None)  # the arguments object itself is no identifier
        if ids:
            spec["ids"] = ids
        produces = kinds_in(output_schema)
        for path, kind in produces.items():
            if not isinstance(kind, str):
                raise GuardrailUsageError(
                    f"the result field {path} of {name} is marked with several kinds "
                    f"({', '.join(kind)}); a result names one kind per field: declare the "
                    "tool yourself (guard.declare)",
                    tool=name,
                )
        if produces:
            spec["produces"] = produces
        description = wire.get("description")
        if isinstance(description, str) and description:
            spec["description"] = description
        declared[name] = spec
    return {"tools": declared}


def _qualified(name: str, namespace: str | None) -> str:
    """The name the guard knows a server's tool by: ``namespace/name``, or ``name`` without one."""
    return f"{namespace}/{name}" if namespace else name


def declare_tools(
    guard: Guard,
    tools: ListToolsResult | Iterable[Tool | Mapping[str, Any]],
    *,
    annotated_only: bool = False,
    namespace: str | None = None,
) -> list[str]:
    """Declare to ``guard`` the tools of a listing it does not know yet; returns their names.

    ``annotated_only`` leaves out tools whose schemas mark no identifier:
    they stay undeclared, so a guard built with ``refuse_undeclared=True``
    keeps refusing them (the server does this), whatever their annotations.

    ``namespace`` declares each tool as ``namespace/name``, for a host that
    talks to several servers through one guard: two servers may each have a
    ``transfer``, and neither may be checked by the other's spec. A tool
    declared from another listing under the same name whose spec differs is a
    :class:`GuardrailUsageError` (give each server its namespace), and so is
    a tool whose listing changed since it was declared; a tool the program
    declared itself (``guard.declare``, a manifest) keeps its declaration.
    """
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise GuardrailUsageError(f"namespace is a non-empty string, not {namespace!r}")
    manifest = manifest_from_tools(tools)["tools"]
    origin = f"{_LISTING} of {namespace}" if namespace else _LISTING
    trial = Registry()
    trial.kinds.update(guard._registry.kinds)
    new: dict[str, ToolSpec] = {}
    for listed, entry in manifest.items():
        if annotated_only and "ids" not in entry and "produces" not in entry:
            continue
        name = _qualified(listed, namespace)
        try:
            spec = trial.declare(name, origin=origin, **entry)
        except GuardrailUsageError as exc:
            raise GuardrailUsageError(f"the MCP listing of {listed!r}: {exc}", tool=name) from None
        known = guard.specs.get(name)
        if known is None:
            new[name] = spec
        elif guard._registry.origins.get(name, "").startswith(_LISTING) and not _same(known, spec):
            first = guard._registry.origins[name]
            raise GuardrailUsageError(
                f"the MCP tool {listed!r} is declared already, from {first}, "
                f"as {_summary(known)}; this listing has it as {_summary(spec)}. A tool never "
                "takes another's spec: give each server its own namespace "
                "(GuardedClientSession(..., namespace='bank'), declare_tools(..., namespace=...)), "
                "or declare the tool yourself (guard.declare).",
                tool=name,
            )
    for name in new:
        entry = manifest[name[len(namespace) + 1 :] if namespace else name]
        guard._registry.declare(name, origin=origin, **entry)
    return list(new)


def _same(one: ToolSpec, other: ToolSpec) -> bool:
    """Whether two specs check and harvest alike (their descriptions aside)."""
    return (one.params, one.produces, one.mints, one.effect, one.verifies) == (
        other.params,
        other.produces,
        other.mints,
        other.effect,
        other.verifies,
    )


def _summary(spec: ToolSpec) -> str:
    ids = ", ".join(f"{param.path.text} ({'/'.join(param.kinds)})" for param in spec.params)
    return f"a {spec.effect} taking {ids or 'no identifier'}"


# -- the client side ----------------------------------------------------------------------------


def _refusal(
    verdict: Verdict, text: str | None = None, *, limit: int | None = None
) -> CallToolResult:
    """The ``isError`` result answering a refused call: the re-prompt, and the findings in _meta."""
    rejection = Rejection(verdict)
    refusal = rejection.to_dict()
    if limit is not None:
        refusal = {**refusal, "error": REPROMPT_LIMIT_ERROR, "limit": limit}
    return CallToolResult(
        content=[TextContent(type="text", text=text or rejection.message)],
        is_error=True,
        _meta={REFUSAL_META_KEY: refusal},
    )


def _result_value(structured: Any, content: Any) -> Any:
    """What a result's record harvests: its structured content, else its text (unsealed)."""
    if structured is not None:
        return structured
    texts = []
    for block in content or ():
        if isinstance(block, TextContent):
            texts.append(block.text)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str):
                texts.append(text)
    return split_seal("\n".join(texts))[0]  # record() reads text that is JSON as JSON


def _sealed(result: Any, seal: Callable[[str], str]) -> Any:
    """A successful result whose content is one text, that text sealed (``seal``); else as is.

    The text is what a host writes into its model's transcript, so the seal
    goes there, replacing a seal the server wrote (a host with a secret
    vouches for its own transcript). Structured content is left as it is.
    """
    if isinstance(result, CallToolResult):
        if result.is_error or len(result.content) != 1:
            return result
        (block,) = result.content
        if not isinstance(block, TextContent):
            return result
        text = seal(split_seal(block.text)[0])
        return result.model_copy(update={"content": [block.model_copy(update={"text": text})]})
    if not isinstance(result, Mapping) or result.get("isError"):
        return result
    content = result.get("content")
    if not isinstance(content, list) or len(content) != 1:
        return result
    (block,) = content
    if not isinstance(block, Mapping) or block.get("type") != "text":
        return result
    given = block.get("text")
    if not isinstance(given, str):
        return result
    return {**result, "content": [{**block, "text": seal(split_seal(given)[0])}]}


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
    :class:`~guardrail.RepromptLimitExceeded` when re-prompts run out. An
    allowed call is sent with each identifier as the ledger spells it. An
    ``isError`` result, or an exception, is recorded as a failure.
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
    verdict = guard.enforce(checked_as, checked)
    if not verdict.allowed and guard.mode != "observe":
        return _refusal(verdict)
    run_with = verdict.arguments if verdict.arguments is not None else checked
    sent = bound.to_run(run_with, undo, given) if bound is not None else dict(run_with)
    options = _with_meta(options, user_text, call_id)
    try:
        result = await session.call_tool(name, dict(sent), **options)
    except BaseException:
        guard.record(checked_as, run_with, None, error=True, call_id=call_id)
        raise
    if result.is_error:
        guard.record(checked_as, run_with, None, error=True, call_id=call_id)
        return result
    value = _result_value(result.structured_content, result.content)
    guard.record(checked_as, run_with, value, call_id=call_id)
    if call_id is None or not guard.seals_results:
        return result
    ledger = guard.ledger
    sealed: CallToolResult = _sealed(
        result,
        lambda text: seal_result(
            text, ledger, call_id=call_id, tool=checked_as, arguments=arguments or {}
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
            and len(self._asked) < _LISTED_KEPT  # a model inventing names gains nothing
        ):
            self._asked.add(name)
            await self.list_tools()
        checked_as = _qualified(name, self.namespace)
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

    def _from_another_listing(self, name: str) -> bool:
        origin = self.guard._registry.origins.get(name)
        return origin is not None and origin.startswith(_LISTING)

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
        return _refusal(verdict)

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
            bound = self._bindings.get(_qualified(tool.name, self.namespace), tool.input_schema)
            schema = bound.schema
            described.append(
                tool
                if schema is None or schema == tool.input_schema
                else tool.model_copy(update={"input_schema": dict(schema)})
            )
        return listing.model_copy(update={"tools": described})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


# -- the server side ----------------------------------------------------------------------------


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
    ) -> None:
        self.guard = guard
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
            and len(self._listed) < _LISTED_KEPT  # a client inventing names gains nothing
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
        async with guard.session(session_id) as ledger:
            meta = ctx.meta
            said = meta.get(USER_TEXT_META_KEY) if isinstance(meta, Mapping) else None
            if isinstance(said, str) and said:
                guard._engine.observe_user_once(said, ledger)
            stopped = guard._engine.stopped(ledger)
            if stopped is not None:
                return self._stopped(name, stopped)
            if self.reads_introduce_ids:
                guard._engine.introduce(name, checked, ledger)
            try:
                verdict = guard.enforce(name, checked)
            except RepromptLimitExceeded as limit:
                return _refusal(limit.verdict, str(limit), limit=limit.limit)
            except IdentifierViolation as violation:
                # raise mode: a server has no program to raise to, only the model to answer.
                return _refusal(violation.verdict, str(violation))
            if not verdict.allowed and guard.mode != "observe":
                return _refusal(verdict)
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
            sealed: HandlerResult = _sealed(
                result,
                lambda text: seal_result(
                    text, ledger, call_id=call_id, tool=name, arguments=arguments
                ),
            )
            return sealed

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
    if wire.get("isError"):
        guard.record(name, arguments, None, error=True)
        return
    guard.record(name, arguments, _result_value(wire.get("structuredContent"), wire.get("content")))


def guard_server(
    server: Any,
    guard: Guard,
    *,
    session: Callable[[ServerRequestContext[Any, Any]], str | None] = request_session,
    declare: bool = True,
    reads_introduce_ids: bool = False,
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

    When the re-prompts of one tool run out in a turn (``max_reprompts``),
    every later call of the conversation in that turn is answered with the
    stop, never run: the server's counterpart of the host's
    ``RepromptLimitExceeded``. A forwarded new user message starts a turn.

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
    )
    middleware_list.append(middleware)
    return middleware
