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

Needs the MCP SDK: ``pip install 'guardrail-ids[mcp]'``. Audit events never go to
stdout (which a stdio server's protocol owns); note that ``MCPServer``
configures the root logger to print INFO records to stderr, guardrail's
included.
"""

from __future__ import annotations

import dataclasses
import re
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

from guardrail._verdict import Rejection, Verdict
from guardrail.errors import GuardrailUsageError, IdentifierViolation

if TYPE_CHECKING:
    from guardrail._guard import Guard

__all__ = [
    "REFUSAL_META_KEY",
    "SESSION_META_KEY",
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
#: The ``_meta`` key of a refusal's result holding ``Rejection.to_dict()`` (the findings).
REFUSAL_META_KEY = "guardrail/refusal"
#: The schema keyword naming the kind of an identifier property.
KIND_KEYWORD = "x-guardrail-kind"
#: How deep a schema is walked for identifier properties ($refs included).
_MAX_DEPTH = 32
#: Unknown tool names looked up in the server's listing at most once each, up to this many.
_LISTED_KEPT = 1000
#: Property names a result or parameter path can spell plainly.
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def session_meta(session_id: str) -> RequestParamsMeta:
    """The ``_meta`` of a ``tools/call`` that names its conversation for a guarded server.

    ``await client.call_tool(name, arguments, meta=session_meta("conversation-42"))``.
    """
    if not isinstance(session_id, str) or not session_id:
        raise GuardrailUsageError("a session id is a non-empty string, e.g. a conversation id")
    return cast(RequestParamsMeta, {SESSION_META_KEY: session_id})


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


def _kinds_in(schema: Any, root: Any) -> dict[str, str | list[str]]:
    """Path -> kind for every property of ``schema`` marked with ``x-guardrail-kind``.

    Follows local ``$ref``s (pydantic puts nested models in ``$defs``), object
    properties (``a.b``), array items (``a[*]``), ``additionalProperties``
    (``a.*``) and ``anyOf``/``oneOf``/``allOf`` branches; the root itself is ``$``.
    """
    found: dict[str, str | list[str]] = {}

    def walk(node: Any, path: str, refs: tuple[str, ...]) -> None:
        if not isinstance(node, Mapping) or len(refs) + path.count(".") > _MAX_DEPTH:
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/") and ref not in refs:
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part) if isinstance(target, Mapping) else None
            walk(target, path, (*refs, ref))
        kind = node.get(KIND_KEYWORD)
        if isinstance(kind, str) and kind:
            found[path or "$"] = kind
        elif isinstance(kind, list) and kind and all(isinstance(k, str) and k for k in kind):
            found[path or "$"] = list(kind)
        for branch in ("anyOf", "oneOf", "allOf"):
            for option in node.get(branch) or ():
                walk(option, path, refs)
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for key, child in properties.items():
                if isinstance(key, str) and _PLAIN_KEY.match(key):
                    walk(child, f"{path}.{key}" if path else key, refs)
        items = node.get("items")
        if isinstance(items, Mapping):
            walk(items, f"{path}[*]", refs)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            walk(extra, f"{path}.*" if path else "*", refs)

    walk(schema, "", ())
    return found


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
        ids = _kinds_in(input_schema, input_schema)
        ids.pop("$", None)  # the arguments object itself is no identifier
        if ids:
            spec["ids"] = ids
        produces = _kinds_in(output_schema, output_schema)
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


def declare_tools(
    guard: Guard,
    tools: ListToolsResult | Iterable[Tool | Mapping[str, Any]],
    *,
    annotated_only: bool = False,
) -> list[str]:
    """Declare to ``guard`` the tools of a listing it does not know yet; returns their names.

    ``annotated_only`` leaves out tools whose schemas mark no identifier and
    that are not ``readOnlyHint``: they stay undeclared, so a guard built with
    ``refuse_undeclared=True`` keeps refusing them (the server does this).
    """
    manifest = manifest_from_tools(tools)["tools"]
    new = {
        name: spec
        for name, spec in manifest.items()
        if name not in guard.specs
        and (not annotated_only or "ids" in spec or "produces" in spec or spec["effect"] == "read")
    }
    if new:
        guard.load_manifest({"tools": new})
    return list(new)


# -- the client side ----------------------------------------------------------------------------


def _refusal(verdict: Verdict, text: str | None = None) -> CallToolResult:
    """The ``isError`` result answering a refused call: the re-prompt, and the findings in _meta."""
    rejection = Rejection(verdict)
    return CallToolResult(
        content=[TextContent(type="text", text=text or rejection.message)],
        is_error=True,
        _meta={REFUSAL_META_KEY: rejection.to_dict()},
    )


def _result_value(structured: Any, content: Any) -> Any:
    """What a result's record harvests: its structured content, else its text."""
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
    return "\n".join(texts)  # record() reads text that is JSON as JSON


async def guarded_call_tool(
    session: _CallsTools,
    guard: Guard,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    **options: Any,
) -> CallToolResult:
    """``session.call_tool(name, arguments)``, checked before and recorded after.

    ``session`` is an ``mcp.Client`` or ``mcp.ClientSession``; ``options``
    go to its ``call_tool``. Run it inside the conversation's
    ``guard.session(...)``. A call the guard refuses never reaches the
    server: in ``reprompt`` mode it returns an ``isError`` result whose text
    is the re-prompt (``_meta["guardrail/refusal"]`` holds the findings); in
    ``raise`` mode it raises :class:`~guardrail.IdentifierViolation`. An
    allowed call is sent with each identifier as the ledger spells it. An
    ``isError`` result, or an exception, is recorded as a failure.
    """
    given = dict(arguments or {})
    verdict = guard.enforce(name, given)
    if not verdict.allowed and guard.mode != "observe":
        return _refusal(verdict)
    sent = dict(verdict.arguments) if verdict.arguments is not None else given
    try:
        result = await session.call_tool(name, sent, **options)
    except BaseException:
        guard.record(name, sent, None, error=True)
        raise
    if result.is_error:
        guard.record(name, sent, None, error=True)
    else:
        guard.record(name, sent, _result_value(result.structured_content, result.content))
    return result


class GuardedClientSession:
    """An MCP client (``mcp.Client`` or ``ClientSession``) whose tool calls are guarded.

    ``call_tool`` is :func:`guarded_call_tool`, in the session named by
    ``session`` (else the current one); ``list_tools`` returns the listing and
    declares to the guard the tools it does not know yet (``declare=True``,
    see :func:`declare_tools`). Everything else is the wrapped client's.
    """

    def __init__(
        self,
        client: Any,
        guard: Guard,
        *,
        session: str | None = None,
        declare: bool = True,
    ) -> None:
        self.client = client
        self.guard = guard
        self.session = session
        self.declare = declare

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, **options: Any
    ) -> CallToolResult:
        """Call a tool, guarded (see :func:`guarded_call_tool`)."""
        if self.session is None:
            return await guarded_call_tool(self.client, self.guard, name, arguments, **options)
        async with self.guard.session(self.session):
            return await guarded_call_tool(self.client, self.guard, name, arguments, **options)

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        """The server's tools; those the guard does not know are declared from their schemas."""
        listing = await self.client.list_tools(*args, **kwargs)
        if self.declare:
            declare_tools(self.guard, listing)
        return listing

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


class GuardMiddleware:
    """MCP server middleware: every ``tools/call`` checked before it runs, recorded after.

    See :func:`guard_server`, which builds it and adds it to a server.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        session: Callable[[ServerRequestContext[Any, Any]], str | None] = request_session,
        reads_introduce_ids: bool = True,
        list_tools: Callable[[], Any] | None = None,
    ) -> None:
        self.guard = guard
        self.session = session
        self.reads_introduce_ids = reads_introduce_ids
        self._list_tools = list_tools
        #: Tool names already looked up in the server's listing (declared or not).
        self._listed: set[str] = set()

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Check a ``tools/call`` request before the server runs it; pass others through."""
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        name, arguments = params.get("name"), params.get("arguments")
        arguments = {} if arguments is None else arguments
        if not isinstance(name, str) or not isinstance(arguments, Mapping):
            return await call_next(ctx)  # malformed: the SDK answers INVALID_PARAMS
        guard = self.guard
        if (
            name not in guard.specs
            and self._list_tools is not None
            and name not in self._listed
            and len(self._listed) < _LISTED_KEPT  # a client inventing names gains nothing
        ):
            self._listed.add(name)
            declare_tools(guard, await self._list_tools(), annotated_only=True)
        session_id = self.session(ctx) or guard.default_session
        if session_id is None:
            text = _NO_SESSION.format(tool=name, key=SESSION_META_KEY)
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        async with guard.session(session_id):
            if self.reads_introduce_ids:
                self._introduce(name, arguments)
            try:
                verdict = guard.enforce(name, arguments)
            except IdentifierViolation as violation:
                # raise mode, or re-prompts run out: a server has no program to raise to,
                # only the model to answer; the text says what to do (or to stop).
                return _refusal(violation.verdict, str(violation))
            if not verdict.allowed and guard.mode != "observe":
                return _refusal(verdict)
            sent = dict(verdict.arguments) if verdict.arguments is not None else dict(arguments)
            if verdict.arguments is not None and verdict.arguments is not arguments:
                ctx = dataclasses.replace(ctx, params={**params, "arguments": sent})
            try:
                result = await call_next(ctx)
            except BaseException:
                guard.record(name, sent, None, error=True)
                raise
            _record_result(guard, name, sent, result)
            return result

    def _introduce(self, name: str, arguments: Mapping[str, Any]) -> None:
        """Take the ids a ``read`` call brings that appear nowhere as the user's (unverified).

        A server never sees the user's messages, where a conversation's ids
        first appear; its reads are where they enter instead. Only ids that
        are ``unknown`` qualify: a near miss of a ledger value (``mutated``,
        ``truncated``), a placeholder or an id of another kind is still
        refused, and a ``write`` still takes only ids a tool returned.
        """
        guard = self.guard
        spec = guard.specs.get(name)
        if spec is None or spec.effect != "read":
            return
        verdict = guard._engine.verdict(name, arguments, guard.ledger)  # not logged
        if verdict.allowed or not all(f.problem == "unknown" for f in verdict.findings):
            return
        guard.observe_user("\n".join(finding.value for finding in verdict.findings))


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
    reads_introduce_ids: bool = True,
) -> GuardMiddleware:
    """Guard every tool of an MCP server: adds a :class:`GuardMiddleware` and returns it.

    ``server`` is an ``mcp.server.mcpserver.MCPServer`` or a low-level
    ``mcp.server.Server``. ``session`` maps a request to its conversation's
    session id (default: :func:`request_session`); a request that names none
    uses the guard's ``default_session`` (a stdio server serves one client),
    and with neither it is refused. With ``declare`` (``MCPServer`` only), a
    tool the guard does not know is declared from the server's own listing
    the first time it is called, if its schemas mark an identifier (see
    :func:`declare_tools`); any other undeclared tool meets the guard's
    policy (``refuse_undeclared``).

    A server never sees the user's messages, so with ``reads_introduce_ids``
    an id that appears nowhere yet, passed to a ``read`` tool, is taken as
    the user's: unverified, allowed to the read (whose result then verifies
    what it returns), refused to a ``write``. A near miss of a ledger value
    is refused as everywhere. Turn it off when the client forwards nothing
    the user typed and reads must only take ids a tool returned.

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
    list_tools = getattr(server, "list_tools", None) if declare else None
    middleware = GuardMiddleware(
        guard,
        session=session,
        reads_introduce_ids=reads_introduce_ids,
        list_tools=list_tools if callable(list_tools) else None,
    )
    middleware_list.append(middleware)
    return middleware
