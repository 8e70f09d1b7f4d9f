"""Compaction inside one long run, in every runtime, with the same options and guarantees.

A scripted model makes 50 tool calls after one user message: 49 searches, each
returning a new order, then a refund of the first order, whose value it copies
from the ID LEDGER block of its (compacted) context. In every runtime the context
the model is sent stays short, no call is ever separated from its result, the
block is there and sealed, and the refund's id still checks.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.apps.app import EventsCompactionConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import InMemoryRunner
from google.genai import types
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent, ToolAnnotations
from pydantic import Field
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from guardrail import Guard, GuardrailUsageError
from guardrail.compaction import BLOCK_HEADER
from guardrail.compaction._block import unseal
from guardrail.integrations.google_adk import GuardrailPlugin, GuardrailSummarizer, session_key
from guardrail.integrations.langchain import (
    GuardrailCompactionMiddleware,
    GuardrailMiddleware,
    Trigger,
)
from guardrail.integrations.mcp import GuardedClientSession
from guardrail.integrations.openai_agents import GuardedSession, guard_agent
from guardrail.integrations.pydantic_ai import Guardrail, guardrail_history_processor
from guardrail.ledger._ledger import state_of

from ._adk_model import ScriptedLlm as AdkModel
from ._langchain_model import ScriptedModel as LangChainModel

CALLS = 50
OrderId = Annotated[str, Field(json_schema_extra={"x-guardrail-kind": "order"})]
TRIGGER: Trigger = ("messages", 12)
KEEP = 4  # the last messages kept raw
FIRST = "#W1000001"


def make_guard() -> Guard:
    guard = Guard(mode="reprompt")
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("search", produces={"orders[*]": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


class Shop:
    def __init__(self) -> None:
        self.refunds: list[str] = []

    def search(self, page: int) -> dict[str, Any]:
        """Find the orders of one page."""
        return {"orders": [f"#W{1000000 + page}"]}

    def refund(self, order_id: str) -> str:
        """Refund an order."""
        self.refunds.append(order_id)
        return f"refunded {order_id}"


# What the model was sent, as the checks read it: ("call" | "result", call id) and ("text", text).
View = list[tuple[str, str]]


def step(view: View) -> tuple[str, dict[str, Any]] | None:
    """The scripted model: 49 searches, a refund of the first order copied from the block."""
    made = sum(kind == "result" for kind, _ in view)  # raw results left: not the count made
    number = len(SEEN)
    SEEN.append(view)
    if number < CALLS - 1:
        return "search", {"page": number + 1}
    if number == CALLS - 1:
        assert made < CALLS - 1, "the context was never shortened"
        [block] = [text for kind, text in view if kind == "text" and BLOCK_HEADER in text]
        block = block[block.index(BLOCK_HEADER) :]
        [line] = [line for line in block.splitlines() if line.split()[:1] == ["order"]]
        return "refund", {"order_id": line.split()[1]}
    return None


SEEN: list[View] = []


def checked(guard: Guard, shop: Shop, session: str) -> None:
    """The guarantees, on every context the model was sent."""
    state = state_of(guard.ledger_for(session))
    assert len(SEEN) == CALLS + 1
    assert max(len(view) for view in SEEN) <= 2 * TRIGGER[1]  # shortened, again and again
    for view in SEEN:
        calls = [value for kind, value in view if kind == "call"]
        results = [value for kind, value in view if kind == "result"]
        assert sorted(calls) == sorted(results), "a call was split from its result"
    for view in SEEN[TRIGGER[1] :]:
        blocks = [text for kind, text in view if kind == "text" and BLOCK_HEADER in text]
        assert len(blocks) == 1
        block = blocks[0][blocks[0].index(BLOCK_HEADER) :].partition("\n\n")[0]
        assert unseal(block, state)[1], "the block is not sealed for this session"
    assert shop.refunds == [FIRST]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SEEN.clear()


def test_langchain_compacts_a_long_run_with_keep_last_messages() -> None:
    """The compaction middleware cuts with keep_last_messages, as compaction cuts everywhere."""
    guard, shop = make_guard(), Shop()

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        view: View = []
        for message in messages:
            if isinstance(message, ToolMessage):
                view.append(("result", message.tool_call_id))
            elif isinstance(message, AIMessage):
                view += [("call", str(call["id"])) for call in message.tool_calls]
            else:
                view.append(("text", str(message.content)))
        action = step(view)
        if action is None:
            return AIMessage(content="done")
        name, args = action
        return AIMessage(
            content="", tool_calls=[{"name": name, "args": args, "id": f"c{len(SEEN)}"}]
        )

    compaction = GuardrailCompactionMiddleware(guard, trigger=TRIGGER, keep_last_messages=KEEP)
    agent = create_agent(
        LangChainModel(script=script),
        [tool(shop.search), tool(shop.refund)],
        middleware=[compaction, GuardrailMiddleware(guard)],
    )
    config: Any = {"configurable": {"thread_id": "conv"}, "recursion_limit": 200}
    agent.invoke({"messages": [HumanMessage("refund my first order")]}, config)
    checked(guard, shop, "conv")


def test_pydantic_ai_compacts_within_one_run_with_keep_last_messages() -> None:
    """The history processor shortens one run's history; Pydantic AI keeps it for the run."""
    guard, shop = make_guard(), Shop()

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        view: View = []
        for message in messages:
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    view.append(("call", part.tool_call_id))
                elif isinstance(part, (ToolReturnPart, RetryPromptPart)):
                    view.append(("result", part.tool_call_id))
                elif isinstance(part, CompactionPart):
                    view.append(("text", part.content or ""))
        action = step(view)
        if action is None:
            return ModelResponse(parts=[TextPart("done")])
        name, args = action
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{len(SEEN)}")])

    processor = guardrail_history_processor(guard, trigger=TRIGGER, keep_last_messages=KEEP)
    agent = PydanticAgent(
        FunctionModel(model),
        tools=[shop.search, shop.refund],
        capabilities=[Guardrail(guard), ProcessHistory(processor)],
    )
    with guard.session("conv"):
        asyncio.run(
            agent.run("refund my first order", usage_limits=UsageLimits(request_limit=CALLS + 5))
        )
    checked(guard, shop, "conv")


def _responses_view(items: Sequence[Any]) -> View:
    view: View = []
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            view.append(("call", item["call_id"]))
        elif kind == "function_call_output":
            view.append(("result", item["call_id"]))
        elif isinstance(item, dict) and isinstance(item.get("content"), str):
            view.append(("text", item["content"]))
    return view


def test_the_agents_sdk_shortens_the_stored_session_and_the_model_input_within_a_run(
    tmp_path: Any,
) -> None:
    """GuardedSession compacts the store as the run saves it; its filter, the model's input."""
    guard, shop = make_guard(), Shop()

    def respond(call: ModelCall) -> list[Any]:
        action = step(_responses_view(call.input))
        if action is None:
            return [assistant_message("done")]
        name, args = action
        return [function_call(name, args, call_id=f"c{len(SEEN)}")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(CALLS + 1)])
    agent = Agent(
        name="shop", model=model, tools=[function_tool(shop.search), function_tool(shop.refund)]
    )
    store = SQLiteSession("conv", str(tmp_path / "history.db"))
    session = GuardedSession(store, guard, trigger=TRIGGER, keep_last_messages=KEEP)
    config = RunConfig(call_model_input_filter=session.model_input_filter())
    set_tracing_disabled(True)
    sizes: list[int] = []
    add = store.add_items

    async def add_items(items: list[Any]) -> None:
        await add(items)
        sizes.append(len(await store.get_items()))

    store.add_items = add_items  # type: ignore[method-assign]
    try:
        with guard.session("conv"):
            asyncio.run(
                Runner.run(
                    guard_agent(agent, guard),
                    "refund my first order",
                    session=session,
                    run_config=config,
                    max_turns=CALLS + 5,
                )
            )
    finally:
        set_tracing_disabled(False)
    checked(guard, shop, "conv")
    stored = asyncio.run(session.get_items())
    assert len(stored) < TRIGGER[1]  # the store, not only the model's input, was shortened
    assert max(sizes) <= 2 * TRIGGER[1]  # and kept short while the run went on
    assert session.last_report is not None and session.last_report.summarized


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Agent Framework needs Python 3.11")
def test_agent_framework_compacts_a_long_run_with_its_compaction_strategy() -> None:
    """GuardrailCompaction as the agent's compaction_strategy: the run's messages shortened."""
    # Imported here: the framework needs Python 3.11, and this module runs on 3.10 too.
    from agent_framework import Agent as FrameworkAgent
    from agent_framework import Content as FrameworkContent
    from agent_framework import tool as framework_tool

    from guardrail.integrations.agent_framework import Guardrail as FrameworkGuardrail
    from guardrail.integrations.agent_framework import GuardrailCompaction

    from ._agent_framework_model import ScriptedClient, Sent, finish

    guard, shop = make_guard(), Shop()

    def reply(sent: Sent) -> list[FrameworkContent]:
        view: View = []
        for message in sent.messages:
            for content in message.contents:
                if content.type == "function_call" and content.call_id:
                    view.append(("call", content.call_id))
                elif content.type == "function_result" and content.call_id:
                    view.append(("result", content.call_id))
                elif content.type == "text" and content.text:
                    view.append(("text", content.text))
        action = step(view)
        if action is None:
            return [FrameworkContent.from_text("done")]
        name, args = action
        return [FrameworkContent.from_function_call(f"c{len(SEEN)}", name, arguments=args)]

    strategy = GuardrailCompaction(guard, trigger=TRIGGER, keep_last_messages=KEEP)
    client = ScriptedClient(reply)
    client.function_invocation_configuration["max_iterations"] = CALLS + 5
    agent = FrameworkAgent(
        client=client,
        tools=[framework_tool(shop.search), framework_tool(shop.refund)],
        context_providers=[FrameworkGuardrail(guard)],
        compaction_strategy=strategy,
    )
    session = agent.create_session(session_id="conv")
    finish(agent.run("refund my first order", session=session))
    checked(guard, shop, "conv")
    assert strategy.last_report is not None and strategy.last_report.summarized


def test_an_mcp_host_compacts_its_transcript_with_its_guarded_session() -> None:
    """GuardedClientSession.compact: the host's one guard compacts, with the same options."""
    guard, shop = make_guard(), Shop()
    server = MCPServer("shop", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def search(page: int) -> dict[str, Any]:
        """Find the orders of one page."""
        return shop.search(page)

    @server.tool()
    def refund(order_id: OrderId) -> str:
        """Refund an order."""
        return shop.refund(order_id)

    def view_of(messages: list[dict[str, Any]]) -> View:
        view: View = []
        for message in messages:
            view += [("call", call["id"]) for call in message.get("tool_calls") or ()]
            if message["role"] == "tool":
                view.append(("result", message["tool_call_id"]))
            elif isinstance(message.get("content"), str):
                view.append(("text", message["content"]))
        return view

    async def main() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "refund my first order"}]
        async with Client(server) as client:
            session = GuardedClientSession(client, guard, session="host")
            await session.list_tools()
            while True:
                messages = session.compact(messages, trigger=TRIGGER, keep_last_messages=KEEP)
                action = step(view_of(messages))
                if action is None:
                    return
                name, args = action
                call_id = f"c{len(SEEN)}"
                function = {"name": name, "arguments": json.dumps(args)}
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                    }
                )
                result = await session.call_tool(name, args, call_id=call_id)
                content = result.content[0]
                assert isinstance(content, TextContent)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": content.text})

    anyio.run(main)
    checked(guard, shop, "host")


def test_the_options_are_checked_alike_in_every_runtime() -> None:
    """A trigger or a count that is none is a usage error that shows what to pass."""
    guard = make_guard()
    store = SQLiteSession("conv")
    wrong_trigger: Any = ("turns", 3)
    builders: list[Callable[[], object]] = [
        lambda: GuardrailCompactionMiddleware(guard, trigger=wrong_trigger),
        lambda: guardrail_history_processor(guard, trigger=wrong_trigger),
        lambda: GuardedSession(store, guard, trigger=wrong_trigger),
    ]
    if sys.version_info >= (3, 11):
        from guardrail.integrations.agent_framework import GuardrailCompaction

        builders.append(lambda: GuardrailCompaction(guard, trigger=wrong_trigger))
    for build in builders:
        with pytest.raises(GuardrailUsageError, match=r"\('messages', n\) or \('tokens', n\)"):
            build()
    with pytest.raises(GuardrailUsageError, match="keep_last_messages must be an integer >= 1"):
        guardrail_history_processor(guard, trigger=TRIGGER, keep_last_messages=0)
    with pytest.raises(GuardrailUsageError, match="say when to compact"):
        guardrail_history_processor(guard)
    with pytest.raises(GuardrailUsageError, match="keep_last_messages must be an integer >= 0"):
        GuardedSession(store, guard, keep_last_messages=-1)


def test_a_token_trigger_compacts_once_the_history_is_that_long() -> None:
    """("tokens", n) in Pydantic AI: nothing before the history reaches it, compacted after."""
    guard, shop = make_guard(), Shop()
    lengths: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        lengths.append(len(messages))
        if len(lengths) > 20:
            return ModelResponse(parts=[TextPart("done")])
        call = ToolCallPart("search", {"page": len(lengths)}, tool_call_id=f"c{len(lengths)}")
        return ModelResponse(parts=[call])

    processor = guardrail_history_processor(guard, trigger=("tokens", 400), keep_last_messages=KEEP)
    agent = PydanticAgent(
        FunctionModel(model),
        tools=[shop.search],
        capabilities=[Guardrail(guard), ProcessHistory(processor)],
    )
    with guard.session("conv"):
        asyncio.run(agent.run("list my orders"))
    assert lengths[:3] == [1, 3, 5]  # short: as it is
    assert max(lengths) < 20  # compacted once the tokens were reached


def test_langchain_keeps_every_message_while_there_are_no_more_than_it_keeps() -> None:
    """keep_last_messages above the history's length: nothing is summarized."""
    guard, shop = make_guard(), Shop()
    sent: list[int] = []

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        sent.append(len(messages))
        assert not any(BLOCK_HEADER in str(message.content) for message in messages)
        if len(sent) > 2:
            return AIMessage(content="done")
        call = {"name": "search", "args": {"page": len(sent)}, "id": f"c{len(sent)}"}
        return AIMessage(content="", tool_calls=[call])

    compaction = GuardrailCompactionMiddleware(guard, trigger=("messages", 3), keep_last_messages=5)
    agent = create_agent(
        LangChainModel(script=script),
        [tool(shop.search)],
        middleware=[compaction, GuardrailMiddleware(guard)],
    )
    config: Any = {"configurable": {"thread_id": "conv"}}
    agent.invoke({"messages": [HumanMessage("list my orders")]}, config)
    assert sent == [1, 3, 5]  # never shortened: five messages or fewer are all kept


def test_langchain_keeps_the_last_turns_when_told_keep_recent() -> None:
    """keep_last_messages=None: the last keep_recent turns stay raw, the earlier ones go."""
    guard, shop = make_guard(), Shop()
    sent: list[list[BaseMessage]] = []

    def script(messages: Sequence[BaseMessage]) -> AIMessage:
        sent.append(list(messages))
        if isinstance(messages[-1], HumanMessage):
            call = {"name": "search", "args": {"page": len(sent)}, "id": f"c{len(sent)}"}
            return AIMessage(content="", tool_calls=[call])
        return AIMessage(content="found it")

    compaction = GuardrailCompactionMiddleware(
        guard, trigger=("messages", 6), keep_last_messages=None, keep_recent=1
    )
    agent = create_agent(
        LangChainModel(script=script),
        [tool(shop.search)],
        middleware=[compaction, GuardrailMiddleware(guard)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "conv"}}
    for text in ("first page", "second page"):
        agent.invoke({"messages": [HumanMessage(text)]}, config)
    last = sent[-1]  # the second turn's last model call: the block, then that turn raw
    assert str(last[0].content).startswith(BLOCK_HEADER)
    assert [type(message).__name__ for message in last[1:]] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert last[1].content == "second page"


def _adk_view(request: LlmRequest) -> View:
    view: View = []
    for content in request.contents:
        for part in content.parts or ():
            if part.function_call is not None:
                view.append(("call", part.function_call.id or ""))
            elif part.function_response is not None:
                view.append(("result", part.function_response.id or ""))
            elif part.text:
                view.append(("text", part.text))
    return view


def test_google_adk_compacts_within_one_run_with_its_events_summarizer() -> None:
    """ADK's token-threshold compaction, summarized by GuardrailSummarizer, inside the run."""
    guard, shop = make_guard(), Shop()

    def script(request: LlmRequest) -> list[types.Part]:
        action = step(_adk_view(request))
        if action is None:
            return [types.Part(text="done")]
        name, args = action
        call = types.FunctionCall(name=name, args=args, id=f"c{len(SEEN)}")
        return [types.Part(function_call=call)]

    plugin = GuardrailPlugin(guard)
    app = App(
        name="shop",
        root_agent=LlmAgent(
            name="shop", model=AdkModel.of(script), tools=[shop.search, shop.refund]
        ),
        plugins=[plugin],
        events_compaction_config=EventsCompactionConfig(
            summarizer=GuardrailSummarizer(plugin), token_threshold=100, event_retention_size=KEEP
        ),
    )
    runner = InMemoryRunner(app=app)

    async def main() -> str:
        session = await runner.session_service.create_session(app_name="shop", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text="refund my first order")])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass
        return session_key(session)

    checked(guard, shop, asyncio.run(main()))
