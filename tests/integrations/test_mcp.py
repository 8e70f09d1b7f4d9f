"""MCP: a guarded server (middleware) and a guarded client, over the SDK's in-memory transport."""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import json
import re
import runpy
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
import structlog
from pydantic import BaseModel, Field
from structlog.testing import capture_logs

pytest.importorskip(
    "mcp", reason="the mcp extra is not installed: pip install 'guardrail-ids[mcp]'"
)

from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations

from guardrail import Guard
from guardrail._transcript.messages import SHAPES, Shape, result_message, text_message
from guardrail.compaction import compact
from guardrail.errors import GuardrailUsageError, IdentifierViolation, RepromptLimitExceeded
from guardrail.integrations.mcp import (
    REFUSAL_META_KEY,
    REPROMPT_LIMIT_ERROR,
    USER_TEXT_META_KEY,
    GuardedClientSession,
    GuardMiddleware,
    declare_tools,
    guard_server,
    guarded_call_tool,
    manifest_from_tools,
    request_session,
    session_meta,
)

#: What ``Id("order")`` publishes in a JSON schema, written out by hand.
OrderId = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "order"})]
ORDERS = {"#W8855135": 40, "#W8855136": 99}


class Order(BaseModel):
    order_id: OrderId
    total: int


def guard_for(mode: str = "reprompt", **options: Any) -> Guard:
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    return guard


def shop_server(refunds: list[str]) -> MCPServer:
    """A shop: an async read returning an Order, a write that appends to ``refunds``."""
    server = MCPServer("shop", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def get_order(order_id: OrderId) -> Order:
        """Look an order up."""
        order_id = "#" + order_id.lstrip("#")  # the shop reads W8855135 as #W8855135
        if order_id not in ORDERS:
            raise ToolError(f"no order {order_id}; the customer's other order is #W8855136")
        await anyio.sleep(0)
        return Order(order_id=order_id, total=ORDERS[order_id])

    @server.tool()
    def issue_refund(order_id: OrderId, amount: int) -> str:
        """Refund an order."""
        refunds.append("#" + order_id.lstrip("#"))  # the record it lands on
        return f"refunded {amount} on {order_id}"

    @server.tool()
    def ping() -> str:
        """No identifiers at all."""
        return "pong"

    return server


def meta(session: str) -> Any:
    return session_meta(session)


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(main)


# -- the server side ----------------------------------------------------------------------------


def test_a_guarded_server_refuses_a_one_character_off_id_then_runs_the_ledger_value_once() -> None:
    """The model's mutated id gets an isError re-prompt; the retry runs once, on the right order."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    guard_server(server, guard)

    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            m = session_meta("conv-1", user_text="Please refund my order W8855135.")
            looked = await client.call_tool("get_order", {"order_id": "W8855135"}, meta=m)
            wrong = await client.call_tool(
                "issue_refund", {"order_id": "#W8855153", "amount": 40}, meta=m
            )
            right = await client.call_tool(
                "issue_refund", {"order_id": "W8855135", "amount": 40}, meta=m
            )
            return [looked, wrong, right]

    looked, wrong, right = run(main)
    assert not looked.is_error and looked.structured_content == {
        "order_id": "#W8855135",
        "total": 40,
    }
    assert wrong.is_error and text(wrong).startswith("guardrail refused the call to issue_refund")
    assert (
        wrong.meta is not None
        and wrong.meta[REFUSAL_META_KEY]["findings"][0]["problem"] == "mutated"
    )
    assert not right.is_error and text(right) == "refunded 40 on W8855135"  # as the model wrote it
    assert refunds == ["#W8855135"]  # the record the shop reads it as


def test_parallel_calls_and_two_conversations_at_once_never_cross() -> None:
    """Concurrent calls of two conversations: each writes only the order its own lookup returned."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    guard_server(server, guard)
    results: dict[str, CallToolResult] = {}

    async def conversation(client: Client, session: str, mine: str, theirs: str) -> None:
        m = session_meta(session, user_text=f"My order is {mine}.")
        await client.call_tool("get_order", {"order_id": mine}, meta=m)
        results[f"{session}-theirs"] = await client.call_tool(
            "issue_refund", {"order_id": theirs, "amount": 1}, meta=m
        )
        results[f"{session}-mine"] = await client.call_tool(
            "issue_refund", {"order_id": mine, "amount": 1}, meta=m
        )

    async def main() -> None:
        async with Client(server) as one, Client(server) as two, anyio.create_task_group() as tasks:
            tasks.start_soon(conversation, one, "a", "#W8855135", "#W8855136")
            tasks.start_soon(conversation, two, "b", "#W8855136", "#W8855135")

    run(main)
    assert results["a-theirs"].is_error and results["b-theirs"].is_error
    assert not results["a-mine"].is_error and not results["b-mine"].is_error
    assert sorted(refunds) == ["#W8855135", "#W8855136"]


def test_raise_mode_and_the_reprompt_limit_answer_with_an_error_result_not_a_lost_exception() -> (
    None
):
    """On a server, raise mode and RepromptLimitExceeded become isError results with their text."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for("reprompt", max_reprompts=1)
    guard_server(server, guard)
    raising = shop_server(refunds)
    guard_server(raising, guard_for("raise"))

    async def main() -> list[CallToolResult]:
        bad = {"order_id": "#W0000001", "amount": 1}
        async with Client(server) as client, Client(raising) as other:
            first = await client.call_tool("issue_refund", bad, meta=meta("s"))
            second = await client.call_tool("issue_refund", bad, meta=meta("s"))
            raised = await other.call_tool("issue_refund", bad, meta=meta("s"))
            return [first, second, raised]

    first, second, raised = run(main)
    assert all(result.is_error for result in (first, second, raised))
    assert "refusals of issue_refund this turn" in text(second)
    assert text(raised).startswith("guardrail refused the call to issue_refund")
    assert refunds == []


def test_a_request_that_names_no_conversation_is_refused_unless_the_guard_has_a_default() -> None:
    """No _meta session and no default_session: refused; a stdio-style default session works."""
    refunds: list[str] = []
    server = shop_server(refunds)
    guard_server(server, guard_for())
    single = shop_server(refunds)
    guard_server(single, guard_for(default_session="stdio"))
    said: Any = {USER_TEXT_META_KEY: "my order is #W8855135"}  # no session named

    async def main() -> list[CallToolResult]:
        async with Client(server) as client, Client(single) as other:
            return [
                await client.call_tool("get_order", {"order_id": "#W8855135"}),
                await other.call_tool("get_order", {"order_id": "#W8855135"}, meta=said),
            ]

    nameless, defaulted = run(main)
    assert nameless.is_error and "names no conversation" in text(nameless)
    assert not defaulted.is_error


def test_a_read_may_introduce_an_unknown_id_but_not_a_near_miss_and_a_write_never() -> None:
    """Server policy: an unseen id enters through a read; a near miss or a write is refused."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    guard_server(server, guard, reads_introduce_ids=True)
    strict = shop_server(refunds)
    guard_server(strict, guard_for())  # the default: a read takes only ids the user typed

    async def main() -> list[CallToolResult]:
        async with Client(server) as client, Client(strict) as other:
            m = meta("s")
            return [
                await client.call_tool(
                    "issue_refund", {"order_id": "#W8855135", "amount": 1}, meta=m
                ),
                await client.call_tool("get_order", {"order_id": "#W8855135"}, meta=m),
                await client.call_tool("get_order", {"order_id": "#W8855153"}, meta=m),
                await other.call_tool("get_order", {"order_id": "#W8855135"}, meta=m),
            ]

    unknown_write, read, near_miss, strict_read = run(main)
    assert unknown_write.is_error and read.is_error is False
    assert near_miss.is_error and "close to" in text(near_miss)
    assert strict_read.is_error
    assert refunds == []


def test_ids_in_a_tool_error_never_verify_on_the_server() -> None:
    """A ToolError naming another order: recorded as a failure, that order stays refused."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    guard_server(server, guard)

    async def main() -> CallToolResult:
        async with Client(server) as client:
            m = session_meta("s", user_text="Is #W1234567 my order?")
            failed = await client.call_tool("get_order", {"order_id": "#W1234567"}, meta=m)
            assert failed.is_error and "#W8855136" in text(failed)
            return await client.call_tool(
                "issue_refund", {"order_id": "#W8855136", "amount": 1}, meta=m
            )

    assert run(main).is_error
    assert refunds == []


def test_undeclared_tools_meet_the_guards_policy() -> None:
    """A tool with no identifier schema stays undeclared: refused under refuse_undeclared."""
    refunds: list[str] = []
    server, strict = shop_server(refunds), guard_for(refuse_undeclared=True)
    guard_server(server, strict)
    lenient = shop_server(refunds)
    guard_server(lenient, guard_for())

    async def main() -> list[CallToolResult]:
        async with Client(server) as client, Client(lenient) as other:
            return [
                await client.call_tool("ping", {}, meta=meta("s")),
                await other.call_tool("ping", {}, meta=meta("s")),
            ]

    with capture_logs() as logs:
        refused, allowed = run(main)
    assert refused.is_error and "ping" in text(refused)
    assert "issue_refund" in strict.specs and "ping" not in strict.specs
    assert not allowed.is_error and text(allowed) == "pong"
    assert any(event["event"] == "guardrail.undeclared_tool" for event in logs)


def test_the_audit_never_writes_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    """Refusals and allowed writes log nothing on stdout (a stdio server's protocol owns it)."""
    structlog.reset_defaults()  # as a program that never configured structlog (capture_logs does)
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    guard_server(server, guard)

    async def main() -> None:
        async with Client(server) as client:
            m = session_meta("s", user_text="refund #W8855135")
            await client.call_tool("get_order", {"order_id": "#W8855135"}, meta=m)
            await client.call_tool("issue_refund", {"order_id": "#W8855135", "amount": 1}, meta=m)
            await client.call_tool("issue_refund", {"order_id": "#W0000009", "amount": 1}, meta=m)

    run(main)
    assert capfd.readouterr().out == ""
    assert refunds == ["#W8855135"]


def test_guard_server_takes_a_server_once() -> None:
    """Guarding twice, or something that is no server, is a usage error."""
    server = shop_server([])
    guard_server(server, guard_for())
    with pytest.raises(GuardrailUsageError, match="guarded already"):
        guard_server(server, guard_for())
    with pytest.raises(GuardrailUsageError, match="MCPServer"):
        guard_server(object(), guard_for())


# -- the client side ----------------------------------------------------------------------------


def test_a_refused_call_never_reaches_the_server() -> None:
    """guarded_call_tool: the refusal is an isError result made here; the server ran nothing."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()

    async def main() -> list[CallToolResult]:
        async with Client(server) as client, guard.session("host"):
            guard.observe_user("refund W8855135 please")
            wrong = await guarded_call_tool(
                client, guard, "issue_refund", {"order_id": "W8855135", "amount": 1}
            )
            found = await guarded_call_tool(client, guard, "get_order", {"order_id": "W8855135"})
            right = await guarded_call_tool(
                client, guard, "issue_refund", {"order_id": "W8855135", "amount": 1}
            )
            return [wrong, found, right]

    declare_tools(guard, run(lambda: _listing(server)))
    wrong, found, right = run(main)
    assert wrong.is_error and "typed by the user" in text(wrong)
    assert wrong.meta is not None and wrong.meta[REFUSAL_META_KEY]["error"] == "identifier_refused"
    assert not found.is_error and not right.is_error
    assert refunds == ["#W8855135"]  # the ledger's spelling was sent, once


async def _listing(server: MCPServer) -> list[Tool]:
    async with Client(server) as client:
        return (await client.list_tools()).tools


def test_the_client_raises_in_raise_mode_and_records_error_results_as_failures() -> None:
    """raise mode raises IdentifierViolation; an isError result from the server verifies nothing."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for("raise")
    declare_tools(guard, run(lambda: _listing(server)))

    async def main() -> None:
        async with Client(server) as client, guard.session("host"):
            guard.observe_user("order W1234567")
            failed = await guarded_call_tool(client, guard, "get_order", {"order_id": "W1234567"})
            assert failed.is_error
            assert guard.ledger.get("order", "#W8855136") is None
            with pytest.raises(IdentifierViolation):
                await guarded_call_tool(
                    client, guard, "issue_refund", {"order_id": "#W8855136", "amount": 1}
                )

    run(main)
    assert refunds == []


def _exchange(
    shape: Shape, call_id: str, name: str, arguments: dict[str, Any], answer: dict[str, Any]
) -> list[dict[str, Any]]:
    """A host's transcript of one call in ``shape``: the call, then its result.

    ``answer`` is the result's text (``"text"``) and the fields the host keeps beside it.
    """
    fields = {key: value for key, value in answer.items() if key != "text"}
    result = result_message(shape, call_id, answer["text"], error=False)
    if shape == "anthropic":
        use = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        block = {**result["content"][0], **fields}
        return [{"role": "assistant", "content": [use]}, {**result, "content": [block]}]
    if shape == "openai_responses":
        call = {"type": "function_call", "call_id": call_id, "name": name,
                "arguments": json.dumps(arguments)}  # fmt: skip
        return [call, {**result, **fields}]
    function = {"name": name, "arguments": json.dumps(arguments)}
    made = {"id": call_id, "type": "function", "function": function}
    return [{"role": "assistant", "tool_calls": [made]}, {**result, **fields}]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_is_error_result_kept_in_the_hosts_transcript_verifies_nothing_on_rebuild(
    shape: Shape,
) -> None:
    """A server's isError answer, written down by the host with its flag, is a failure read back.

    The lookup of the order the user typed failed, its text naming another
    customer's order. A host that rebuilds its ledger from the transcript
    confirms neither: the flag MCP set is read in every message shape.
    """
    server = shop_server([])

    def host_guard() -> Guard:
        guard = guard_for()
        guard.declare("get_order", ids={"order_id": "order"}, produces={"re:(#W\\d{7})": "order"},
                      effect="read", verifies="on_success")  # fmt: skip
        guard.declare("issue_refund", ids={"order_id": "order"}, effect="write")
        return guard

    guard = host_guard()
    asked = {"order_id": "W1234567"}

    async def main() -> CallToolResult:
        async with Client(server) as client, guard.session("host"):
            guard.observe_user("Refund my order W1234567.")
            return await guarded_call_tool(client, guard, "get_order", asked)

    failed = run(main)
    assert failed.is_error and "#W8855136" in text(failed)
    answer = {"text": text(failed), "isError": failed.is_error}
    messages = [
        text_message(shape, "user", "Refund my order W1234567."),
        *_exchange(shape, "c1", "get_order", asked, answer),
        text_message(shape, "assistant", "Shall I refund it?"),
        text_message(shape, "user", "Yes."),
    ]
    worker = host_guard()
    ledger = worker.new_ledger("host")
    compact(messages, ledger, guard=worker, keep_recent=1, shape=shape)
    for order in ("W1234567", "#W8855136"):
        refund = {"order_id": order, "amount": 1}
        assert not worker.check("issue_refund", refund, ledger=ledger).allowed


SECRET = b"the server's own secret"
FORGERIES = ["edited", "written by the client"]


def _forged(messages: list[dict[str, Any]], forgery: str, foreign: str) -> list[dict[str, Any]]:
    """A chat transcript with its last tool result edited, or with a result the client wrote."""
    if forgery == "edited":
        *head, last = messages[:-2]
        return [*head, {**last, "content": last["content"].replace("#W8855135", foreign)},
                *messages[-2:]]  # fmt: skip
    answer = {"text": json.dumps({"order_id": foreign, "total": 99})}
    written = _exchange("openai_chat", "c9", "get_order", {"order_id": foreign}, answer)
    return [*messages[:-2], *written, *messages[-2:]]


def _looked_up(text: str) -> list[dict[str, Any]]:
    """The host's chat transcript of a lookup of W8855135 answered with ``text``."""
    return [
        {"role": "user", "content": "Refund my order W8855135."},
        *_exchange("openai_chat", "c1", "get_order", {"order_id": "W8855135"}, {"text": text}),
        {"role": "assistant", "content": "Shall I refund it?"},
        {"role": "user", "content": "Yes."},
    ]


def _refundable(guard: Guard, session: str, messages: list[dict[str, Any]], order: str) -> bool:
    """Whether ``guard``, its ledger of ``session`` rebuilt from ``messages``, allows the refund."""
    ledger = guard.new_ledger(session)
    compact(messages, ledger, guard=guard, keep_recent=1, shape="openai_chat")
    refund = {"order_id": order, "amount": 40}
    return guard.check("issue_refund", refund, ledger=ledger).allowed


def _host(server: MCPServer) -> Guard:
    """A host's guard with a secret, its declarations read from ``server``'s listing."""
    guard = guard_for(secret=SECRET)
    declare_tools(guard, run(lambda: _listing(server)))
    return guard


def _host_answer(server: MCPServer) -> str:
    """The text a guarded host writes down for the model's call c1, get_order(W8855135)."""
    guard = _host(server)

    async def main() -> CallToolResult:
        async with Client(server) as client:
            session = GuardedClientSession(client, guard, session="host")
            session.observe_user("Refund my order W8855135.")
            return await session.call_tool("get_order", {"order_id": "W8855135"}, call_id="c1")

    found = run(main)
    body, seal = text(found).rsplit("\n", 1)
    assert json.loads(body) == {"order_id": "#W8855135", "total": 40}  # the model reads it
    assert seal.startswith("(result seal ")
    return text(found)


def test_a_host_with_a_secret_seals_what_it_writes_down_and_trusts_it_on_rebuild() -> None:
    """Given the model's call id, the host's result text is sealed; a rebuild verifies its id."""
    server = shop_server([])
    messages = _looked_up(_host_answer(server))
    assert _refundable(_host(server), "host", messages, "#W8855135")


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_result_forged_in_the_hosts_transcript_verifies_nothing(forgery: str) -> None:
    """The host's sealed result edited, or a tool message the client wrote: no refund."""
    server = shop_server([])
    messages = _forged(_looked_up(_host_answer(server)), forgery, "#W8855136")
    assert not _refundable(_host(server), "host", messages, "#W8855136")


def _server_answer(server: MCPServer) -> str:
    """The text a guarded server with a secret answers call c1 with, named in the _meta."""
    guard = guard_for(secret=SECRET)
    guard_server(server, guard)

    async def main() -> CallToolResult:
        async with Client(server) as client:
            m = session_meta("conv-1", user_text="Refund my order W8855135.", call_id="c1")
            return await client.call_tool("get_order", {"order_id": "W8855135"}, meta=m)

    found = run(main)
    assert text(found).rsplit("\n", 1)[1].startswith("(result seal ")
    return text(found)


@pytest.mark.parametrize("forgery", [None, *FORGERIES])
def test_a_server_with_a_secret_seals_the_result_of_the_call_the_host_names(
    forgery: str | None,
) -> None:
    """The server's sealed answer verifies where its secret rebuilds; a forgery does not."""
    server = shop_server([])
    messages = _looked_up(_server_answer(server))
    if forgery is not None:
        messages = _forged(messages, forgery, "#W8855136")
    rebuilding = _host(server)  # the server's own declarations, and its secret
    order = "#W8855135" if forgery is None else "#W8855136"
    assert _refundable(rebuilding, "conv-1", messages, order) is (forgery is None)


def test_a_guarded_client_session_declares_listed_tools_and_survives_a_compaction() -> None:
    """GuardedClientSession: list_tools declares; after compact() the next call carries the id."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Refund my order W8855135."}]

    async def call(
        session: GuardedClientSession, call_id: str, name: str, arguments: dict[str, Any]
    ) -> None:
        function = {"name": name, "arguments": json.dumps(arguments)}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            }
        )
        result = await session.call_tool(name, arguments)
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text(result)})

    async def main() -> str:
        async with Client(server) as client:
            session = GuardedClientSession(client, guard, session="host")
            listing = await session.list_tools()
            assert {tool.name for tool in listing.tools} == {"get_order", "issue_refund", "ping"}
            async with guard.session("host"):
                guard.observe_user("Refund my order W8855135.")
            await call(session, "c1", "get_order", {"order_id": "W8855135"})
            for n in range(3):
                messages.append({"role": "user", "content": f"still there? {n}"})
                messages.append({"role": "assistant", "content": "Yes, looking into it."})
            async with guard.session("host"):
                compacted = compact(messages, guard.ledger, guard=guard, keep_recent=1).messages
            # the scripted model copies the order id out of the compacted context's ledger block
            block = compacted[0]["content"]
            order = re.search(r"#?W\d{7}", block.partition("\n\n")[0]).group()  # type: ignore[union-attr]
            await call(session, "c2", "issue_refund", {"order_id": order, "amount": 40})
            return order

    assert run(main) == "#W8855135"  # verbatim, as the lookup wrote it
    assert refunds == ["#W8855135"]
    assert (
        guard.specs["get_order"].effect == "read" and guard.specs["issue_refund"].effect == "write"
    )


def test_a_manifest_reads_kinds_from_nested_schemas_and_the_read_only_hint() -> None:
    """x-guardrail-kind under $defs, arrays, maps and anyOf become paths; readOnlyHint, a read."""
    kind = {"type": "string", "x-guardrail-kind": "order"}
    tool = Tool(
        name="search",
        input_schema={
            "type": "object",
            "properties": {
                "ids": {"type": "array", "items": kind},
                "maybe": {"anyOf": [{"x-guardrail-kind": ["order", "item"]}, {"type": "null"}]},
            },
        },
        output_schema={
            "type": "object",
            "$defs": {"Line": {"type": "object", "properties": {"order_id": kind}}},
            "properties": {
                "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}},
                "by_id": {
                    "type": "object",
                    "additionalProperties": {"x-guardrail-kind": "item"},
                },
            },
        },
        annotations=ToolAnnotations(read_only_hint=True),
    )
    manifest = manifest_from_tools([tool, {"name": "plain", "inputSchema": {"type": "object"}}])
    assert manifest["tools"]["search"] == {
        "effect": "read",
        "ids": {"ids[*]": "order", "maybe": ["order", "item"]},
        "produces": {"lines[*].order_id": "order", "by_id.*": "item"},
    }
    assert manifest["tools"]["plain"] == {"effect": "write"}
    guard = guard_for()
    guard.add_kind("item")
    assert declare_tools(guard, [tool], annotated_only=True) == ["search"]
    assert declare_tools(guard, [tool]) == []  # known already: nothing declared twice
    with pytest.raises(GuardrailUsageError, match="mcp.types.Tool"):
        manifest_from_tools([3])  # type: ignore[list-item]
    several = {"name": "x", "outputSchema": {"x-guardrail-kind": ["order", "item"]}}
    with pytest.raises(GuardrailUsageError, match="several kinds"):
        manifest_from_tools([several])


def test_importing_without_the_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the mcp package missing, the import error names the extra to install."""
    real_import = builtins.__import__

    def without_mcp(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "mcp" or name.startswith("mcp."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_mcp)
    monkeypatch.delitem(sys.modules, "guardrail.integrations.mcp")
    with pytest.raises(ImportError, match=r"pip install 'guardrail-ids\[mcp\]'"):
        importlib.import_module("guardrail.integrations.mcp")


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_server.py"


@pytest.mark.parametrize("introduce", [False, True])
def test_the_mcp_example_runs_offline(capsys: pytest.CaptureFixture[str], introduce: bool) -> None:
    """examples/mcp_server.py: the swapped id is an isError re-prompt; the right one runs once."""
    example = runpy.run_path(str(EXAMPLE))  # in this process: mcp is imported already
    anyio.run(example["conversation"], example["build_server"](reads_introduce_ids=introduce))
    assert capsys.readouterr().out.splitlines() == [
        'get_order: ok: {"order_id": "#W8855135", "item": "blender"}',
        "issue_refund: error: guardrail refused the call to issue_refund; the tool did not run.",
        "issue_refund: ok: refunded 40 on #W8855135",
        "refunds: ['#W8855135']",
    ]


def test_the_example_server_speaks_stdio_with_the_audit_on() -> None:
    """Over a real stdio transport, refusals and writes leave the protocol's stdout intact."""
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=[str(EXAMPLE), "--stdio"])

    async def main() -> list[CallToolResult]:
        async with Client(params) as client:
            m = session_meta("over-stdio", user_text="refund #W8855135")
            return [
                await client.call_tool("get_order", {"order_id": "#W8855135"}, meta=m),
                await client.call_tool(
                    "issue_refund", {"order_id": "#W8855153", "amount": 1}, meta=m
                ),
                await client.call_tool(
                    "issue_refund", {"order_id": "#W8855135", "amount": 1}, meta=m
                ),
            ]

    found, refused, refunded = run(main)
    assert not found.is_error and refused.is_error and not refunded.is_error
    assert "close to" in text(refused)


def test_session_meta_names_the_conversation_and_refuses_an_empty_id() -> None:
    """session_meta("c") is the _meta a guarded server reads; an empty id is a usage error."""
    assert session_meta("c") == {"guardrail/session": "c"}
    with pytest.raises(GuardrailUsageError, match="non-empty"):
        session_meta("")


def test_request_session_reads_the_meta_then_the_transport_and_scopes_by_client() -> None:
    """_meta names the conversation, else the mcp-session-id header; a token prefixes it."""
    from types import SimpleNamespace

    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    def ctx(meta: Any = None, headers: Any = None) -> Any:
        request = SimpleNamespace(headers=headers) if headers is not None else None
        return SimpleNamespace(meta=meta, request=request)

    assert request_session(ctx(session_meta("c1"))) == "c1"
    assert request_session(ctx({}, {"mcp-session-id": "abc"})) == "transport:abc"
    assert request_session(ctx(session_meta("c1"), {"mcp-session-id": "abc"})) == "c1"
    assert request_session(ctx({"guardrail/session": ""})) is None
    assert request_session(ctx()) is None
    token = AccessToken(token="t", client_id="app", scopes=[], subject="alice")
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        assert request_session(ctx(session_meta("c1"))) == "app/alice:c1"
    finally:
        auth_context_var.reset(reset)


def test_a_custom_session_resolver_decides_the_ledger() -> None:
    """guard_server(session=...): the resolver's id is the session the call's ids live in."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for()
    guard_server(server, guard, session=lambda ctx: "tenant-7")

    async def main() -> None:
        async with Client(server) as client:
            said: Any = {USER_TEXT_META_KEY: "order #W8855135"}
            await client.call_tool("get_order", {"order_id": "#W8855135"}, meta=said)

    run(main)
    with guard.session("tenant-7"):
        assert guard.ledger.get("order", "#W8855135") is not None


# -- attacks ------------------------------------------------------------------------------------
#
# Each test is a model, a client or a second server trying to get an id no tool returned into
# a write tool of a guarded server or host; each asserts the write never ran with it.

VICTIM = "#W8855136"  # another customer's order: it exists, so a lookup of it succeeds
AccountId = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "account"})]


def lookup_server(refunds: list[str]) -> MCPServer:
    """A shop whose lookup succeeds for any order that exists and names no id in its result."""
    server = MCPServer("shop", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def order_total(order_id: OrderId) -> dict[str, int]:
        """The total of an order (fails for an order that does not exist)."""
        key = "#" + order_id.lstrip("#")
        if key not in ORDERS:
            raise ToolError(f"no order {order_id}")
        return {"total": ORDERS[key]}

    @server.tool()
    def issue_refund(order_id: OrderId, amount: int) -> str:
        """Refund an order."""
        refunds.append("#" + order_id.lstrip("#"))
        return f"refunded {amount} on {order_id}"

    return server


def lookup_guard(verifies: Any = "on_success", **options: Any) -> Guard:
    """A guard whose lookup confirms the id it took on success (it fails for unknown orders)."""
    guard = guard_for(**options)
    guard.declare("order_total", ids={"order_id": "order"}, effect="read", verifies=verifies)
    return guard


def _distance(one: str, other: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(other) + 1))
    for i, a in enumerate(one, 1):
        previous, row[0] = row[0], i
        for j, b in enumerate(other, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (a != b))
    return row[-1]


def far_apart_orders(count: int) -> list[str]:
    """Made-up order ids, none a near miss of another or of a real order."""
    found: list[str] = []
    seed = 1_000_003
    while len(found) < count:
        seed = seed * 48271 % 2_147_483_647
        candidate = f"#W{seed % 10**7:07d}"
        if all(_distance(candidate, held) >= 4 for held in [*found, *ORDERS]):
            found.append(candidate)
    return found


@pytest.mark.parametrize("introduce", [True, False])
def test_an_invented_id_never_reaches_a_write_through_an_on_success_lookup(introduce: bool) -> None:
    """A model's made-up order id that exists is looked up, then refunded: the refund is refused."""
    refunds: list[str] = []
    server, guard = lookup_server(refunds), lookup_guard()
    guard_server(server, guard, reads_introduce_ids=introduce)

    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            m = meta("s")
            looked = await client.call_tool("order_total", {"order_id": VICTIM}, meta=m)
            refund = {"order_id": VICTIM, "amount": 99}
            return [looked, await client.call_tool("issue_refund", refund, meta=m)]

    looked, refunded = run(main)
    assert looked.is_error is not introduce  # introduced ids may be read, never written
    assert refunded.is_error and refunds == []
    with guard.session("s"):
        entry = guard.ledger.get("order", VICTIM)
        assert entry is None or (not entry.verified and entry.source.tool != "user")


def test_only_the_users_forwarded_text_lets_a_lookup_confirm_an_id() -> None:
    """The host forwards the user's words: their order is confirmed and refunded, a guess is not."""
    refunds: list[str] = []
    server, guard = lookup_server(refunds), lookup_guard()
    guard_server(server, guard)

    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            m = session_meta("s", user_text="Please refund my order W8855135.")
            return [
                await client.call_tool("order_total", {"order_id": "#W8855135"}, meta=m),
                await client.call_tool(
                    "issue_refund", {"order_id": "W8855135", "amount": 40}, meta=m
                ),
                await client.call_tool("order_total", {"order_id": VICTIM}, meta=m),
                await client.call_tool("issue_refund", {"order_id": VICTIM, "amount": 99}, meta=m),
            ]

    looked, refunded, guessed, stolen = run(main)
    assert not looked.is_error and not refunded.is_error
    assert guessed.is_error and stolen.is_error
    assert refunds == ["#W8855135"]


def test_reads_of_made_up_ids_do_not_reset_the_reprompt_limit() -> None:
    """Fifty refused writes between reads of new made-up ids: the limit stops the conversation."""
    refunds: list[str] = []
    server, guard = lookup_server(refunds), lookup_guard(verifies=True, max_reprompts=2)
    guard_server(server, guard, reads_introduce_ids=True)

    async def main() -> list[CallToolResult]:
        answers = []
        async with Client(server) as client:
            m = meta("s")
            for invented in far_apart_orders(50):
                await client.call_tool("order_total", {"order_id": invented}, meta=m)
                answers.append(
                    await client.call_tool(
                        "issue_refund", {"order_id": invented, "amount": 1}, meta=m
                    )
                )
            answers.append(await client.call_tool("order_total", {"order_id": "#W8855135"}, meta=m))
        return answers

    with capture_logs() as logs:
        answers = run(main)
    assert refunds == []
    assert [e["event"] for e in logs].count("guardrail.reprompt_limit") == 1
    assert all(answer.is_error for answer in answers)  # the lookup at the end too: stopped
    stopped = [
        a for a in answers if a.meta and a.meta[REFUSAL_META_KEY]["error"] == REPROMPT_LIMIT_ERROR
    ]
    assert len(stopped) == len(answers) - 2  # two re-prompts, then the conversation stops
    assert "stopping instead of re-prompting" in text(answers[-1])


def test_a_read_only_tool_with_unmarked_ids_is_refused_under_refuse_undeclared() -> None:
    """readOnlyHint alone declares nothing: with refuse_undeclared the tool does not run."""
    server, guard = MCPServer("crm", log_level="WARNING"), guard_for(refuse_undeclared=True)
    looked_up: list[str] = []

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def customer_file(customer_id: str) -> str:
        """A customer's file (its id is not marked)."""
        looked_up.append(customer_id)
        return "file"

    guard_server(server, guard)

    async def main() -> CallToolResult:
        async with Client(server) as client:
            return await client.call_tool("customer_file", {"customer_id": "cus_9"}, meta=meta("s"))

    assert run(main).is_error and looked_up == []


def test_another_servers_tool_of_the_same_name_never_lends_its_spec() -> None:
    """A shop lists a read-only transfer first: the bank's write transfer is still checked."""
    transfers: list[str] = []
    shop, bank = MCPServer("shop", log_level="WARNING"), MCPServer("bank", log_level="WARNING")

    @shop.tool(annotations=ToolAnnotations(read_only_hint=True))
    def transfer() -> str:
        """The shop's transfer policy (no identifiers)."""
        return "transfers take two days"

    @bank.tool(name="transfer")
    def bank_transfer(account: AccountId, amount: int) -> str:
        """Move money to an account."""
        transfers.append(account)
        return f"sent {amount} to {account}"

    guard = guard_for()
    guard.add_kind("account", pattern=r"acc_\d{4}")

    async def main() -> list[Any]:
        outcomes: list[Any] = []
        async with Client(shop) as to_shop, Client(bank) as to_bank, guard.session("host"):
            shop_tools = GuardedClientSession(to_shop, guard)
            bank_tools = GuardedClientSession(to_bank, guard)
            await shop_tools.list_tools()
            for attempt in (
                bank_tools.list_tools,
                lambda: bank_tools.call_tool("transfer", {"account": "acc_6666", "amount": 500}),
            ):
                try:
                    outcomes.append(await attempt())
                except GuardrailUsageError as refused:
                    outcomes.append(refused)
        return outcomes

    outcomes = run(main)
    assert transfers == []
    assert isinstance(outcomes[-1], GuardrailUsageError) or outcomes[-1].is_error


def test_two_servers_sharing_a_tool_name_are_each_checked_by_their_own_spec() -> None:
    """With a namespace per server, the shop's listing never weakens the bank's transfer."""
    transfers: list[str] = []
    shop, bank = MCPServer("shop", log_level="WARNING"), MCPServer("bank", log_level="WARNING")

    @shop.tool(annotations=ToolAnnotations(read_only_hint=True))
    def transfer() -> str:
        """The shop's transfer policy."""
        return "transfers take two days"

    @bank.tool(annotations=ToolAnnotations(read_only_hint=True))
    def accounts() -> dict[str, list[AccountId]]:
        """The customer's accounts."""
        return {"accounts": ["acc_1234"]}

    @bank.tool(name="transfer")
    def bank_transfer(account: AccountId, amount: int) -> str:
        """Move money to an account."""
        transfers.append(account)
        return f"sent {amount} to {account}"

    guard = guard_for()
    guard.add_kind("account", pattern=r"acc_\d{4}")

    async def main() -> list[CallToolResult]:
        async with Client(shop) as to_shop, Client(bank) as to_bank, guard.session("host"):
            shop_tools = GuardedClientSession(to_shop, guard, namespace="shop")
            bank_tools = GuardedClientSession(to_bank, guard, namespace="bank")
            await shop_tools.list_tools()
            return [
                await shop_tools.call_tool("transfer", {}),
                await bank_tools.call_tool("transfer", {"account": "acc_6666", "amount": 5}),
                await bank_tools.call_tool("accounts", {}),
                await bank_tools.call_tool("transfer", {"account": "acc_1234", "amount": 5}),
            ]

    policy, stolen, listed, sent = run(main)
    assert not policy.is_error and stolen.is_error and not listed.is_error and not sent.is_error
    assert transfers == ["acc_1234"]
    assert guard.specs["bank/transfer"].effect == "write"
    assert guard.specs["shop/transfer"].effect == "read"


class RefundRequest(BaseModel):
    """A refund request whose order id travels under its alias (orderId)."""

    order_id: str = Field(alias="orderId")
    amount: int


def test_an_id_sent_under_its_alias_is_never_left_unchecked_on_a_server() -> None:
    """The guard names order_id, the schema (and the model) orderId: a usage error, no refund."""
    refunds: list[str] = []
    server = MCPServer("shop", log_level="CRITICAL")

    @server.tool()
    def issue_refund(request: RefundRequest) -> str:
        """Refund an order."""
        refunds.append(request.order_id)
        return f"refunded {request.order_id}"

    guard = guard_for()
    guard.declare("issue_refund", ids={"request.order_id": "order"})
    guard_server(server, guard)
    sent = {"request": {"orderId": VICTIM, "amount": 99}}

    async def main() -> Any:
        async with Client(server) as client:
            try:
                return await client.call_tool("issue_refund", sent, meta=meta("s"))
            except Exception as failed:  # the server's usage error comes back as a protocol error
                return failed

    answer = run(main)
    assert refunds == []
    assert not isinstance(answer, CallToolResult) or answer.is_error
    schema = run(server.list_tools)[0].input_schema  # the server's own listing, unguarded
    with pytest.raises(GuardrailUsageError, match="has no 'order_id' there \\(it has: 'orderId'"):
        GuardMiddleware(guard)._bindings.get("issue_refund", schema)


def test_what_the_model_lists_says_to_copy_ids_exactly_on_both_sides() -> None:
    """Declared by hand or marked, every id parameter a listing shows carries the instruction."""
    refunds: list[str] = []
    server, guard = MCPServer("shop", log_level="WARNING"), guard_for()

    @server.tool()
    def issue_refund(order_id: str, amount: int) -> str:
        """Refund an order (its id is not marked: the guard declares it)."""
        refunds.append(order_id)
        return "ok"

    guard.declare("issue_refund", ids={"order_id": "order"})
    guard_server(server, guard)
    host = guard_for()
    host.declare("issue_refund", ids={"order_id": "order"})

    async def main() -> tuple[list[Tool], list[Tool]]:
        async with Client(server) as client:
            served = (await client.list_tools()).tools
            hosted = (await GuardedClientSession(client, host).list_tools()).tools
            return served, hosted

    for tools in run(main):
        description = tools[0].input_schema["properties"]["order_id"]["description"]
        assert "copy the value exactly" in description


def test_a_host_forwards_the_users_text_only_when_asked() -> None:
    """forward_user_text sends observe_user's text: the server takes the typed id, no other."""
    refunds: list[str] = []
    server, server_guard = lookup_server(refunds), lookup_guard()
    guard_server(server, server_guard)
    host = guard_for()

    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            quiet = GuardedClientSession(client, host, session="quiet")
            told = GuardedClientSession(client, host, session="told", forward_user_text=True)
            for tools in (quiet, told):
                tools.observe_user("Please refund my order W8855135.")
            m = meta("s")  # the server's conversation; the host's session is its own
            return [
                await quiet.call_tool("order_total", {"order_id": "W8855135"}, meta=m),
                await told.call_tool("order_total", {"order_id": "W8855135"}, meta=m),
                await told.call_tool("order_total", {"order_id": VICTIM}, meta=m),
            ]

    unsent, sent, guessed = run(main)
    assert unsent.is_error and not sent.is_error and guessed.is_error
    with host.session("told"):
        assert host.ledger.get("order", "W8855135") is not None


def test_guarded_call_tool_forwards_user_text_in_the_meta_it_sends() -> None:
    """user_text= joins the caller's own meta; the server reads it as the user's words."""
    refunds: list[str] = []
    server, server_guard = lookup_server(refunds), lookup_guard()
    guard_server(server, server_guard)
    host = guard_for()

    async def main() -> CallToolResult:
        async with Client(server) as client, host.session("host"):
            return await guarded_call_tool(
                client,
                host,
                "order_total",
                {"order_id": "#W8855135"},
                user_text="my order #W8855135",
                meta=meta("s"),
            )

    assert not run(main).is_error
    with server_guard.session("s"):
        entry = server_guard.ledger.get("order", "#W8855135")
        assert entry is not None and entry.verified  # the lookup confirmed the typed id
    with pytest.raises(GuardrailUsageError, match="user_text"):
        session_meta("s", user_text="")


def test_the_host_raises_when_its_reprompts_run_out() -> None:
    """The host's side of the limit: RepromptLimitExceeded, and the server is never called."""
    refunds: list[str] = []
    server, guard = shop_server(refunds), guard_for(max_reprompts=1)
    declare_tools(guard, run(lambda: _listing(server)))

    async def main() -> None:
        async with Client(server) as client, guard.session("host"):
            bad = {"order_id": "#W0000001", "amount": 1}
            assert (await guarded_call_tool(client, guard, "issue_refund", bad)).is_error
            with pytest.raises(RepromptLimitExceeded):
                await guarded_call_tool(client, guard, "issue_refund", bad)

    run(main)
    assert refunds == []


def error_text_server(refunds: list[str]) -> MCPServer:
    """A shop whose lookup answers an unknown order with "Error: ..." text, not an isError."""
    server = MCPServer("shop", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def order_total(order_id: OrderId) -> str:
        """The total of an order, or an error text naming the order asked for."""
        key = "#" + order_id.lstrip("#")
        if key not in ORDERS:
            return f"Error: no order {order_id}"
        return json.dumps({"total": ORDERS[key]})

    @server.tool()
    def issue_refund(order_id: OrderId, amount: int) -> str:
        """Refund an order."""
        refunds.append("#" + order_id.lstrip("#"))
        return f"refunded {amount} on {order_id}"

    return server


def test_an_error_text_result_confirms_nothing_on_a_guarded_server() -> None:
    """A lookup verifying on success answers "Error: ...": the user's id stays unverified."""
    refunds: list[str] = []
    server, guard = error_text_server(refunds), lookup_guard()
    guard_server(server, guard)

    async def main() -> list[CallToolResult]:
        async with Client(server) as client:
            m = session_meta("s", user_text="Refund my order W1234567.")
            return [
                await client.call_tool("order_total", {"order_id": "W1234567"}, meta=m),
                await client.call_tool(
                    "issue_refund", {"order_id": "W1234567", "amount": 1}, meta=m
                ),
            ]

    looked, refunded = run(main)
    assert text(looked) == "Error: no order W1234567"
    assert refunded.is_error and "typed by the user" in text(refunded)
    assert refunds == []
    with guard.session("s"):
        assert not guard.ledger["order"].verified


def test_an_error_text_result_confirms_nothing_through_a_guarded_client() -> None:
    """guarded_call_tool: a lookup's "Error: ..." text records as a failure on the host."""
    refunds: list[str] = []
    server, guard = error_text_server(refunds), lookup_guard("on_success", mode="raise")
    declare_tools(guard, run(lambda: _listing(server)))

    async def main() -> None:
        async with Client(server) as client, guard.session("host"):
            guard.observe_user("Refund my order W1234567.")
            looked = await guarded_call_tool(client, guard, "order_total", {"order_id": "W1234567"})
            assert text(looked) == "Error: no order W1234567"
            assert not guard.ledger["order"].verified
            with pytest.raises(IdentifierViolation):
                await guarded_call_tool(
                    client, guard, "issue_refund", {"order_id": "W1234567", "amount": 1}
                )

    run(main)
    assert refunds == []
