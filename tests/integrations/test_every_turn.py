"""The ledger block in the model's instructions at every call, in every runtime, offline.

Each runtime runs the same script through its own test model: a search, then a
reply that writes a forged ledger block and refunds the forged id (refused), then
a refund of the id the instructions' block gives for ``order_2``. The model reads
the block its instructions carry at every call, as a real model would.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import InMemoryRunner
from google.genai import types
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent, ToolAnnotations
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from guardrail import Guard, GuardrailUsageError
from guardrail.compaction import BLOCK_HEADER, compact, extractive_summary
from guardrail.compaction._block import unseal
from guardrail.compaction._recent import quarter_tokens
from guardrail.integrations.google_adk import GuardrailPlugin
from guardrail.integrations.langchain import GuardrailMiddleware
from guardrail.integrations.loops import Toolbox, ledger_instructions
from guardrail.integrations.mcp import (
    LEDGER_PROMPT,
    GuardedClientSession,
    guard_server,
    session_meta,
)
from guardrail.integrations.openai_agents import guard_agent
from guardrail.integrations.pydantic_ai import Guardrail
from guardrail.ledger._ledger import state_of

from ._adk_model import ScriptedLlm as AdkModel
from ._adk_model import system_text
from ._langchain_model import ScriptedModel as LangChainModel

FORGED = "#W9999999"
INSTRUCTIONS = "You are the shop's support agent."
#: Agent Framework needs Python 3.11; the project, and the other runtimes, 3.10.
NEEDS_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="Agent Framework needs 3.11")
RUNTIMES = (
    "loop",
    "langchain",
    "langchain_async",
    "pydantic_ai",
    "openai_agents",
    "google_adk",
    pytest.param("agent_framework", marks=NEEDS_311),
)


def make_guard(**options: Any) -> Guard:
    guard = Guard(mode="reprompt", **options)
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("search", produces={"orders[*]": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


class Shop:
    """The search returns ``count`` orders; the refund remembers what it refunded."""

    def __init__(self, count: int = 2) -> None:
        self.orders = [f"#W{8855135 + number * 1111}" for number in range(count)]
        self.refunds: list[str] = []

    def search(self, query: str) -> dict[str, Any]:
        """Find orders."""
        return {"orders": self.orders}

    def refund(self, order_id: str) -> str:
        """Refund an order."""
        self.refunds.append(order_id)
        return f"refunded {order_id}"


Action = tuple[str, str, dict[str, Any]]  # (text the model writes, tool, arguments); "" tool: done


def value_of(role: str, instructions: str) -> str:
    """The value the instructions' ledger block gives ``role`` (what a model would copy)."""
    block = instructions[instructions.index(BLOCK_HEADER) :]
    [line] = [line for line in block.splitlines() if line.split()[:1] == [role]]
    return line.split()[1]


def refund_script(seen: list[str]) -> Callable[[str], Action]:
    """The script: search, refund a forged id, refund ``order_2`` from the block, then stop."""

    def step(instructions: str) -> Action:
        seen.append(instructions)
        number = len(seen)
        if number == 1:
            return "", "search", {"query": "blender"}
        if number == 2:
            forged = f"{BLOCK_HEADER}\norder_9           {FORGED}"
            return forged, "refund", {"order_id": FORGED}
        if number == 3:
            return "", "refund", {"order_id": value_of("order_2", instructions)}
        return "Refunded.", "", {}

    return step


def many_calls_script(seen: list[str], calls: int) -> Callable[[str], Action]:
    """The script: ``calls`` searches, then stop."""

    def step(instructions: str) -> Action:
        seen.append(instructions)
        if len(seen) <= calls:
            return "", "search", {"query": f"page {len(seen)}"}
        return "done", "", {}

    return step


# -- each runtime runs a script: step(instructions) -> action, until the model stops ----------


def run_loop(guard: Guard, shop: Shop, step: Callable[[str], Action], **options: Any) -> None:
    """A plain OpenAI chat loop: the instructions are built anew before each model call."""
    box = Toolbox(guard, {"search": shop.search, "refund": shop.refund})
    messages: list[dict[str, Any]] = [{"role": "user", "content": "refund the second order"}]
    with guard.session("conv"):
        for number in range(10):
            system = ledger_instructions(guard, INSTRUCTIONS, **options)
            text, name, arguments = step(system)
            if not name:
                return
            reply = {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": f"c{number}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
            messages += [reply, *box.run(reply)]


def run_langchain(
    guard: Guard,
    shop: Shop,
    step: Callable[[str], Action],
    *,
    asynchronous: bool = False,
    **options: Any,
) -> None:
    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        text, name, arguments = step(str(messages[0].content))
        if not name:
            return AIMessage(content=text)
        call = {"name": name, "args": arguments, "id": f"c{len(messages)}", "type": "tool_call"}
        return AIMessage(content=text, tool_calls=[call])

    middleware = GuardrailMiddleware(
        guard, ledger_instructions=True, **_tokens(options, "ledger_tokens")
    )
    agent = create_agent(
        LangChainModel(script=script),
        [tool(shop.search), tool(shop.refund)],
        system_prompt=INSTRUCTIONS,
        middleware=[middleware],
    )
    config: Any = {"configurable": {"thread_id": "conv"}, "recursion_limit": 40}
    given: Any = {"messages": [HumanMessage("refund the second order")]}
    if asynchronous:
        asyncio.run(agent.ainvoke(given, config))
    else:
        agent.invoke(given, config)


def run_pydantic_ai(
    guard: Guard, shop: Shop, step: Callable[[str], Action], **options: Any
) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text, name, arguments = step(info.instructions or "")
        parts: list[Any] = [TextPart(text)] if text else []
        if name:
            parts.append(ToolCallPart(name, arguments, tool_call_id=f"c{len(messages)}"))
        return ModelResponse(parts=parts)

    capability = Guardrail(guard, ledger_instructions=True, **_tokens(options, "ledger_tokens"))
    agent = PydanticAgent(
        FunctionModel(model),
        tools=[shop.search, shop.refund],
        instructions=INSTRUCTIONS,
        capabilities=[capability],
    )
    with guard.session("conv"):
        asyncio.run(agent.run("refund the second order"))


def run_openai_agents(
    guard: Guard, shop: Shop, step: Callable[[str], Action], **options: Any
) -> None:
    def respond(call: ModelCall) -> list[Any]:
        text, name, arguments = step(call.system_instructions or "")
        items: list[Any] = [assistant_message(text)] if text else []
        if name:
            items.append(function_call(name, arguments, call_id=f"c{len(call.input)}"))
        return items

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(10)])
    agent = Agent(
        name="support",
        instructions=INSTRUCTIONS,
        model=model,
        tools=[function_tool(shop.search), function_tool(shop.refund)],
    )
    guarded = guard_agent(
        agent, guard, ledger_instructions=True, **_tokens(options, "ledger_tokens")
    )
    set_tracing_disabled(True)
    try:
        with guard.session("conv"):
            asyncio.run(Runner.run(guarded, "refund the second order", max_turns=60))
    finally:
        set_tracing_disabled(False)


def run_google_adk(guard: Guard, shop: Shop, step: Callable[[str], Action], **options: Any) -> None:
    # ADK writes its identity line ("You are an agent...") after the agent's instruction; the
    # script reads the instructions without it, as the other runtimes give them.
    identity = '\n\nYou are an agent. Your internal name is "support".'

    def script(request: LlmRequest) -> list[types.Part]:
        text, name, arguments = step(system_text(request).replace(identity, "", 1))
        parts = [types.Part(text=text)] if text else []
        if name:
            call = types.FunctionCall(name=name, args=arguments, id=f"c{len(request.contents)}")
            parts.append(types.Part(function_call=call))
        return parts

    plugin = GuardrailPlugin(
        guard,
        ledger_instructions=True,
        session_id=lambda session: session.id,  # the session id the checks read: "conv"
        **_tokens(options, "ledger_tokens"),
    )
    root = LlmAgent(
        name="support",
        model=AdkModel.of(script),
        instruction=INSTRUCTIONS,
        tools=[shop.search, shop.refund],
    )
    runner = InMemoryRunner(app=App(name="shop", root_agent=root, plugins=[plugin]))

    async def main() -> None:
        session = await runner.session_service.create_session(
            app_name="shop", user_id="u", session_id="conv"
        )
        message = types.Content(role="user", parts=[types.Part(text="refund the second order")])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass

    asyncio.run(main())


def run_agent_framework(
    guard: Guard, shop: Shop, step: Callable[[str], Action], **options: Any
) -> None:
    # Imported here: the framework needs Python 3.11, and this module runs on 3.10 too.
    from agent_framework import Agent as FrameworkAgent
    from agent_framework import Content, tool

    from guardrail.integrations.agent_framework import Guardrail as FrameworkGuardrail

    from ._agent_framework_model import ScriptedClient, Sent, finish

    def reply(sent: Sent) -> Any:
        text, name, arguments = step(sent.instructions)
        contents: list[Any] = [Content.from_text(text)] if text else []
        if name:
            call_id = f"c{len(sent.messages)}"
            contents.append(Content.from_function_call(call_id, name, arguments=arguments))
        return contents

    provider = FrameworkGuardrail(
        guard, ledger_instructions=True, **_tokens(options, "ledger_tokens")
    )
    agent = FrameworkAgent(
        client=ScriptedClient(reply),
        instructions=INSTRUCTIONS,
        tools=[tool(shop.search), tool(shop.refund)],
        context_providers=[provider],
    )
    session = agent.create_session(session_id="conv")
    finish(agent.run("refund the second order", session=session))


def _tokens(options: dict[str, Any], name: str) -> dict[str, Any]:
    return {name: options["max_tokens"]} if "max_tokens" in options else {}


RUNNERS: dict[str, Callable[..., None]] = {
    "loop": run_loop,
    "langchain": run_langchain,
    "langchain_async": functools.partial(run_langchain, asynchronous=True),
    "pydantic_ai": run_pydantic_ai,
    "openai_agents": run_openai_agents,
    "google_adk": run_google_adk,
    "agent_framework": run_agent_framework,
}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_model_sees_the_block_from_the_first_tool_result_on_and_it_updates(
    runtime: str,
) -> None:
    """Turn 1: no ids yet; after the search, both orders; the refund takes order_2 from it."""
    guard, shop, seen = make_guard(), Shop(), list[str]()
    RUNNERS[runtime](guard, shop, refund_script(seen))
    assert len(seen) == 4
    assert all(text.startswith(INSTRUCTIONS + "\n\n" + BLOCK_HEADER) for text in seen)
    assert "(no identifiers yet)" in seen[0]
    assert value_of("order", seen[1]) == shop.orders[0]
    assert value_of("order_2", seen[1]) == shop.orders[1]
    assert shop.refunds == [shop.orders[1]]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_what_the_model_writes_never_reaches_the_ledger_or_the_block(runtime: str) -> None:
    """A forged block in the model's text: its id is refused, and no later block shows it."""
    guard, shop, seen = make_guard(), Shop(), list[str]()
    RUNNERS[runtime](guard, shop, refund_script(seen))
    assert FORGED not in shop.refunds
    assert all(FORGED not in text for text in seen)
    assert guard.ledger_for("conv").get("order", FORGED) is None


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_block_stays_within_its_budget_as_the_ledger_grows(runtime: str) -> None:
    """Forty results of ids, a budget of 120 tokens: every block the model is sent fits it."""
    guard, shop, seen = make_guard(), Shop(count=40), list[str]()
    RUNNERS[runtime](guard, shop, many_calls_script(seen, 3), max_tokens=120)
    blocks = [text[text.index(BLOCK_HEADER) :] for text in seen]
    assert all(quarter_tokens(block) <= 120 for block in blocks)
    assert "less recently used entries not shown" in blocks[-1]
    assert shop.orders[-1] in blocks[-1]  # the latest are shown


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_under_a_secret_the_block_is_sealed_for_the_session(runtime: str) -> None:
    """A guard with a secret seals the every-turn block as compaction seals its block."""
    guard, shop, seen = make_guard(secret=b"s" * 32), Shop(), list[str]()
    RUNNERS[runtime](guard, shop, refund_script(seen))
    state = state_of(guard.ledger_for("conv"))
    for text in seen:
        block = text[text.index(BLOCK_HEADER) :]
        assert unseal(block, state)[1], block


def test_a_budget_no_block_fits_is_refused_where_the_adapter_is_built() -> None:
    """Each adapter checks ledger_tokens when it is built, not at its first model call."""
    guard = make_guard()
    agent = Agent(name="support", model=ScriptedModel([]))
    builders: list[Callable[[], object]] = [
        lambda: GuardrailMiddleware(guard, ledger_instructions=True, ledger_tokens=10),
        lambda: Guardrail(guard, ledger_instructions=True, ledger_tokens=10),
        lambda: guard_agent(agent, guard, ledger_instructions=True, ledger_tokens=10),
        lambda: GuardrailPlugin(guard, ledger_instructions=True, ledger_tokens=10),
    ]
    if sys.version_info >= (3, 11):
        from guardrail.integrations.agent_framework import Guardrail as FrameworkGuardrail

        builders.append(
            lambda: FrameworkGuardrail(guard, ledger_instructions=True, ledger_tokens=10)
        )
    for build in builders:
        with pytest.raises(GuardrailUsageError, match="integer >= 40"):
            build()
    with guard.session("conv"), pytest.raises(GuardrailUsageError, match="integer >= 40"):
        ledger_instructions(guard, max_tokens=10)


def test_without_the_option_the_instructions_are_left_as_they_are() -> None:
    """Off by default: the model's instructions carry no ledger block."""
    guard, seen = make_guard(), list[str]()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions or "")
        return ModelResponse(parts=[TextPart("done")])

    agent = PydanticAgent(
        FunctionModel(model), instructions=INSTRUCTIONS, capabilities=[Guardrail(guard)]
    )
    with guard.session("conv"):
        asyncio.run(agent.run("hello"))
    assert seen == [INSTRUCTIONS]


def test_a_block_kept_in_the_history_by_mistake_is_never_taken_for_a_compaction() -> None:
    """A loop that stores its every-turn system prompt keeps it whole through compact()."""
    guard, shop = make_guard(secret=b"s" * 32), Shop()
    box = Toolbox(guard, {"search": shop.search})
    messages: list[dict[str, Any]] = []
    with guard.session("conv") as ledger:
        for number in range(3):
            messages.append({"role": "user", "content": f"search page {number}"})
            reply = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{number}",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"query": "x"}'},
                    }
                ],
            }
            messages += [reply, *box.run(reply)]
        system = {"role": "system", "content": ledger_instructions(guard, INSTRUCTIONS)}
        assert unseal(system["content"].partition("\n\n")[2], state_of(ledger))[1]
        result = compact([system, *messages], ledger, guard=guard, keep_recent=1)
    assert result.messages[0] is system  # the program's instructions, whole
    assert result.messages[1]["content"].startswith(BLOCK_HEADER)  # the compaction's own
    assert result.report.summarized == 6 and not result.report.repairs


def _mcp_server(shop: Shop, *, own_prompt: bool) -> MCPServer:
    server = MCPServer("shop", log_level="WARNING")
    server.tool(annotations=ToolAnnotations(read_only_hint=True))(shop.search)
    if own_prompt:

        @server.prompt()
        def greeting() -> str:
            """The server's own prompt."""
            return "Hello"

    return server


@pytest.mark.parametrize("own_prompt", [True, False])
def test_a_guarded_mcp_server_offers_the_conversations_ledger_as_a_prompt(
    own_prompt: bool,
) -> None:
    """guard_server(ledger_prompt=True): the host gets the block of the session it names."""
    guard, shop = make_guard(secret=b"s" * 32), Shop()
    server = _mcp_server(shop, own_prompt=own_prompt)
    guard_server(server, guard, ledger_prompt=True)

    async def main() -> tuple[list[str], str, str]:
        async with Client(server) as client:
            listed = [prompt.name for prompt in (await client.list_prompts()).prompts]
            await client.call_tool("search", {"query": "x"}, meta=session_meta("conv"))
            got = await client.get_prompt(LEDGER_PROMPT, meta=session_meta("conv"))
            other = await client.get_prompt(LEDGER_PROMPT, meta=session_meta("another"))
            texts = []
            for result in (got, other):
                content = result.messages[0].content
                assert isinstance(content, TextContent)
                texts.append(content.text)
            return listed, texts[0], texts[1]

    listed, block, other = anyio.run(main)
    assert listed == (["greeting"] if own_prompt else []) + [LEDGER_PROMPT]
    assert value_of("order_2", block) == shop.orders[1]
    assert unseal(block, state_of(guard.ledger_for("conv")))[1]
    assert "(no identifiers yet)" in other  # two conversations never share a ledger


def test_a_host_with_no_guard_compacts_in_front_of_a_guarded_server() -> None:
    """The docs' way: the host's own summary, the server's block in front, no second guard.

    The summary got the second order's id wrong; the server refuses it and points
    at the ID LEDGER, and the value the block shows is the one refunded.
    """
    guard, shop = make_guard(secret=b"s" * 32), Shop()
    server = _mcp_server(shop, own_prompt=False)
    server.tool()(shop.refund)
    guard_server(server, guard, ledger_prompt=True)
    meta = session_meta("conversation-42")
    wrong = shop.orders[1][:-1] + ("0" if shop.orders[1][-1] != "0" else "1")

    async def main() -> tuple[str, list[Any]]:
        async with Client(server) as client:
            found = await client.call_tool("search", {"query": "x"}, meta=meta)
            messages: list[dict[str, Any]] = [
                {"role": "user", "content": "Refund my second order."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [_search_call("c1")],
                },
                {"role": "tool", "tool_call_id": "c1", "content": _text(found)},
                {"role": "assistant", "content": f"Your second order is {wrong}."},
                {"role": "user", "content": "Yes, refund it."},
            ]
            summary = extractive_summary(messages[:-1], {})  # the host's own compaction
            messages = [{"role": "user", "content": summary}, messages[-1]]
            got = await client.get_prompt(LEDGER_PROMPT, meta=meta)
            content = got.messages[0].content
            assert isinstance(content, TextContent)
            system = f"{INSTRUCTIONS}\n\n{content.text}"
            tried = [
                await client.call_tool("refund", {"order_id": wrong}, meta=meta),
                await client.call_tool(
                    "refund", {"order_id": value_of("order_2", system)}, meta=meta
                ),
            ]
            return summary, tried

    summary, (from_summary, from_block) = anyio.run(main)
    assert wrong in summary  # the summary carried the wrong id as written
    assert from_summary.is_error and "ID LEDGER" in _text(from_summary)
    assert not from_block.is_error and shop.refunds == [shop.orders[1]]


def _search_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "search", "arguments": "{}"}}


def _text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def test_the_mcp_ledger_prompt_needs_a_conversation() -> None:
    """A request that names no conversation gets an error, never another one's ledger."""
    guard, shop = make_guard(), Shop()
    server = _mcp_server(shop, own_prompt=False)
    guard_server(server, guard, ledger_prompt=True)

    async def main() -> None:
        async with Client(server) as client:
            with pytest.raises(MCPError, match="name it in the request's _meta"):
                await client.get_prompt(LEDGER_PROMPT)

    anyio.run(main)


def test_an_mcp_host_puts_the_block_in_its_own_instructions() -> None:
    """GuardedClientSession.ledger_instructions: the ledger its calls recorded, after the prompt."""
    guard, shop = make_guard(), Shop()
    server = _mcp_server(shop, own_prompt=False)

    async def main() -> str:
        async with Client(server) as client:
            session = GuardedClientSession(client, guard, session="host")
            before = session.ledger_instructions(INSTRUCTIONS)
            assert "(no identifiers yet)" in before
            await session.call_tool("search", {"query": "x"})
            return session.ledger_instructions(INSTRUCTIONS, max_tokens=40)

    text = anyio.run(main)
    assert text.startswith(INSTRUCTIONS + "\n\n" + BLOCK_HEADER)
    assert value_of("order_2", text) == shop.orders[1]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_entry_a_refusal_points_at_is_in_the_next_block(runtime: str) -> None:
    """Many orders, a small budget: the one a re-prompt says to copy is shown, and refunded."""
    guard, shop, seen = make_guard(), Shop(count=40), list[str]()
    first = shop.orders[0]
    off = first[:-1] + ("0" if first[-1] != "0" else "1")  # one character off, no order's

    def step(instructions: str) -> Action:
        seen.append(instructions)
        if len(seen) == 1:
            return "", "search", {"query": "x"}
        if len(seen) == 2:
            assert first not in instructions  # too old for the budget
            return "", "refund", {"order_id": off}
        if len(seen) == 3:
            return "", "refund", {"order_id": value_of("order", instructions)}
        return "done", "", {}

    RUNNERS[runtime](guard, shop, step, max_tokens=80)
    assert shop.refunds == [first]


def test_an_agent_guarded_twice_shows_the_ledger_once() -> None:
    """guard_agent on a guarded copy keeps one block in its instructions."""
    guard, shop, seen = make_guard(), Shop(), list[str]()

    def respond(call: ModelCall) -> list[Any]:
        seen.append(call.system_instructions or "")
        return [assistant_message("done")]

    agent = Agent(name="support", instructions=INSTRUCTIONS, model=ScriptedModel([
        ModelStep.respond(respond)]), tools=[function_tool(shop.search)])  # fmt: skip
    once = guard_agent(agent, guard, ledger_instructions=True)
    twice = guard_agent(once, guard, ledger_instructions=True)
    set_tracing_disabled(True)
    try:
        with guard.session("conv"):
            asyncio.run(Runner.run(twice, "hello"))
    finally:
        set_tracing_disabled(False)
    assert seen[0].count(BLOCK_HEADER) == 1
