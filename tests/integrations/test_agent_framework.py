"""guardrail in Microsoft Agent Framework: the Guardrail provider, its middleware, compaction.

Every run goes through the framework's real ``Agent`` and function-calling loop
with a scripted chat client built from the framework's own layers
(``_agent_framework_model.ScriptedClient``): no network, no API key.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import runpy
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
import structlog
from agent_framework import (
    Agent,
    AgentSession,
    ChatContext,
    Content,
    ContextProvider,
    FunctionInvocationContext,
    FunctionMiddleware,
    FunctionTool,
    InMemoryHistoryProvider,
    Message,
    MiddlewareFailure,
    SessionContext,
    SupportsAgentRun,
    tool,
)
from pydantic import Field

from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation, RepromptLimitExceeded
from guardrail._transcript.result_text import is_refusal
from guardrail.compaction import BLOCK_HEADER, compact
from guardrail.integrations.agent_framework import (
    Guardrail,
    GuardrailCompaction,
    GuardrailMiddleware,
)
from guardrail.integrations.agent_framework._compaction import to_chat
from guardrail.integrations.agent_framework._framework import UNDOCUMENTED
from tests.integrations._agent_framework_model import ScriptedClient, Sent, call, finish

pytestmark = pytest.mark.runtimes

REPO = Path(__file__).resolve().parents[2]
ORDERS = {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]}


def shop(mode: str = "reprompt", **options: Any) -> Guard:
    """A guard over a small shop: orders found by a read, refunded by a write."""
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("find_orders", produces={"orders[*].order_id": "order"}, effect="read")
    guard.declare("get_order", ids={"order_id": "order"}, produces={"order_id": "order"},
                  effect="read")  # fmt: skip
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


class Shop:
    """The shop's tools as Agent Framework tools, remembering every call that ran."""

    def __init__(self) -> None:
        self.refunds: list[str] = []
        self.looked_up: list[str] = []
        shop = self

        @tool
        def find_orders(customer: str) -> dict[str, Any]:
            """Find the customer's orders."""
            return ORDERS

        @tool
        async def get_order(order_id: str) -> dict[str, Any]:
            """Look one order up (an async tool)."""
            await asyncio.sleep(0)
            shop.looked_up.append(order_id)
            return {"order_id": order_id, "total": 40}

        @tool
        def refund(order_id: str) -> str:
            """Refund an order."""
            shop.refunds.append(order_id)
            return f"refunded {order_id}"

        self.tools: list[FunctionTool] = [find_orders, get_order, refund]

    def agent(self, guard: Guard, *replies: Any, **options: Any) -> Agent:
        providers = options.pop("context_providers", None) or [Guardrail(guard)]
        return Agent(
            client=ScriptedClient(list(replies)),
            tools=options.pop("tools", self.tools),
            context_providers=providers,
            **options,
        )


def run(agent: Agent, given: Any = "Refund my order", session: str | AgentSession = "conv") -> Any:
    if isinstance(session, str):
        session = agent.create_session(session_id=session)
    return finish(agent.run(given, session=session))


def seen(agent: Agent) -> list[Sent]:
    client = agent.client
    assert isinstance(client, ScriptedClient)
    return client.seen


def find() -> list[Content]:
    return [call("find_orders", customer="cus_41ZpA9")]


def refund(order_id: str) -> list[Content]:
    return [call("refund", order_id=order_id)]


# -- the loop -----------------------------------------------------------------------------------


def test_a_lookups_ids_are_harvested_and_a_write_with_one_runs() -> None:
    """Read then write: the found ids enter the ledger verified, and the refund of one runs."""
    guard, tools = shop(), Shop()
    agent = tools.agent(guard, find(), refund("#W2378156"), "Refunded.")
    response = run(agent)
    assert tools.refunds == ["#W2378156"] and response.text == "Refunded."
    values = {entry.value: entry.verified for entry in guard.ledger_for("conv").entries()}
    assert values == {"#W8855135": True, "#W2378156": True}


def test_an_invented_id_is_refused_as_the_calls_result_and_the_model_recovers() -> None:
    """A one-off id: the tool does not run, the model reads the re-prompt; its retry runs."""
    guard, tools = shop(), Shop()

    def retry(sent: Sent) -> list[Content]:
        assert is_refusal(sent.last_result())
        return refund("#W2378156")  # copied from the lookup's result this time

    agent = tools.agent(guard, find(), refund("#W2378157"), retry, "Refunded.")
    run(agent)
    assert tools.refunds == ["#W2378156"]
    refusal = seen(agent)[2].last_result()
    assert "[order_2]" in refusal and "#W2378156" not in refusal  # the role, never a guess


def test_re_prompts_that_run_out_end_the_run_with_reprompt_limit_exceeded() -> None:
    """After max_reprompts refusals of one tool, RepromptLimitExceeded reaches the caller."""
    guard, tools = shop(max_reprompts=2), Shop()
    agent = tools.agent(guard, *[refund(f"#W999999{n}") for n in range(4)], "gave up")
    with pytest.raises(RepromptLimitExceeded) as raised:
        run(agent)
    assert raised.value.limit == 2 and isinstance(raised.value, MiddlewareFailure)
    assert tools.refunds == []


def test_raise_mode_ends_the_run_with_identifier_violation() -> None:
    """In raise mode the refusal is no tool error: IdentifierViolation reaches the caller."""
    guard, tools = shop("raise"), Shop()
    agent = tools.agent(guard, refund("#W9999999"), "never")
    with pytest.raises(IdentifierViolation) as raised:
        run(agent)
    assert raised.value.findings[0].problem == "unknown"
    assert tools.refunds == [] and len(seen(agent)) == 1


def test_observe_mode_runs_the_refused_call_and_learns_nothing_from_it() -> None:
    """Observe mode lets the tool run on the model's value and records nothing from it."""
    guard, tools = shop("observe"), Shop()
    run(tools.agent(guard, [call("get_order", order_id="#W5555555")], "ok"))
    assert tools.looked_up == ["#W5555555"]
    assert guard.ledger_for("conv").get("order", "#W5555555") is None


def test_parallel_calls_of_one_turn_are_each_checked_and_only_the_bad_one_refused() -> None:
    """Three calls in one turn: the good refund and the lookup run, the mutated refund not."""
    guard, tools = shop(), Shop()
    turn = [*refund("#W8855135"), *refund("#W2378165"), call("get_order", order_id="#W2378156")]
    agent = tools.agent(guard, find(), turn, "done")
    run(agent)
    assert tools.refunds == ["#W8855135"] and tools.looked_up == ["#W2378156"]
    results = list(seen(agent)[2].results().values())
    assert sum(is_refusal(text) for text in results) == 1


def test_an_id_the_user_typed_is_looked_up_before_a_write_takes_it() -> None:
    """The user's id enters unverified: a write is refused until a lookup confirms it."""
    guard, tools = shop(), Shop()
    agent = tools.agent(
        guard, refund("#W1234567"), [call("get_order", order_id="W1234567")],
        refund("#W1234567"), "ok",
    )  # fmt: skip
    run(agent, "My order is #W1234567, refund it")
    assert tools.looked_up == ["W1234567"] and tools.refunds == ["#W1234567"]  # as written
    assert is_refusal(seen(agent)[1].last_result())


def test_an_id_in_a_tool_error_is_never_harvested() -> None:
    """A tool that raises naming an id: the model reads the error; the ledger gets nothing."""
    guard, tools = shop(), Shop()

    @tool
    def find_orders(customer: str) -> dict[str, Any]:
        """Find orders (failing)."""
        raise RuntimeError("lookup failed near order #W7777777")

    agent = tools.agent(
        guard, find(), refund("#W7777777"), "ok", tools=[find_orders, tools.tools[2]]
    )
    run(agent)
    assert guard.ledger_for("conv").get("order", "#W7777777") is None
    assert tools.refunds == []


def test_the_model_reads_no_id_the_model_wrote_into_the_ledger() -> None:
    """Ids in the model's own text are never harvested: a refund of one is refused."""
    guard, tools = shop(), Shop()
    said = [Content.from_text("Your order is #W4444444."), *refund("#W4444444")]
    run(tools.agent(guard, said, "ok"))
    assert tools.refunds == []


# -- conversations ------------------------------------------------------------------------------


def test_two_conversations_at_once_never_see_each_others_ids() -> None:
    """Two sessions run at once: an id found in one is refused in the other."""
    guard = shop()
    first, second = Shop(), Shop()
    a = first.agent(guard, find(), refund("#W8855135"), "ok")
    b = second.agent(guard, refund("#W8855135"), "ok")

    async def both() -> None:
        await asyncio.gather(
            a.run("hi", session=a.create_session(session_id="a")),
            b.run("hi", session=b.create_session(session_id="b")),
        )

    asyncio.run(both())
    assert first.refunds == ["#W8855135"] and second.refunds == []


def test_the_agent_session_is_the_conversation_across_runs() -> None:
    """Two runs of one AgentSession share its ledger; another session does not."""
    guard, tools = shop(), Shop()
    agent = tools.agent(guard, find(), "Found.", refund("#W8855135"), "Refunded.")
    session = agent.create_session(session_id="conv-42")
    run(agent, "find my orders", session)
    run(agent, "refund the first", session)
    assert tools.refunds == ["#W8855135"]
    other = Shop()
    run(other.agent(guard, refund("#W8855135"), "no"), "refund it", "conv-43")
    assert other.refunds == []


def test_runs_without_a_session_are_conversations_of_their_own() -> None:
    """agent.run with no session: the framework's new session each time, so a new ledger."""
    guard, tools = shop(), Shop()
    agent = tools.agent(guard, find(), "Found.", refund("#W8855135"), "Refunded?")
    finish(agent.run("find my orders"))
    finish(agent.run("refund the first"))
    assert tools.refunds == []


def test_a_declared_id_the_tools_schema_lacks_ends_the_run_with_a_usage_error() -> None:
    """A declared id the tool's schema lacks: GuardrailUsageError out of the run, no tool error."""
    guard, tools = shop(), Shop()
    guard.declare("cancel", ids={"orderId": "order"}, effect="write")

    @tool
    def cancel(order_id: str) -> str:
        """Cancel an order."""
        tools.refunds.append(order_id)
        return "cancelled"

    agent = tools.agent(guard, [call("cancel", order_id="#W8855135")], "ok", tools=[cancel])
    with pytest.raises(GuardrailUsageError, match="orderId"):
        run(agent)
    assert tools.refunds == []


def test_session_names_the_conversation_from_the_agent_session() -> None:
    """session= chooses the conversation from the run's AgentSession."""
    guard, tools = shop(), Shop()
    provider = Guardrail(guard, session=lambda s: s.state["user"] if s else None)
    agent = tools.agent(guard, find(), "ok", context_providers=[provider])
    session = agent.create_session()
    session.state["user"] = "user-9"
    run(agent, "find", session)
    assert guard.ledger_for("user-9").get("order", "#W8855135") is not None


def test_without_a_session_the_middleware_alone_uses_the_scope_around_the_run() -> None:
    """No AgentSession: the middleware uses the session open around agent.run, else an error."""
    guard, tools = shop(), Shop()
    agent = Agent(
        client=ScriptedClient([find(), refund("#W8855135"), "ok"]),
        tools=tools.tools,
        middleware=[GuardrailMiddleware(guard)],
    )
    with guard.session("around"):
        finish(agent.run("refund"))
    assert tools.refunds == ["#W8855135"]
    lone = Agent(
        client=ScriptedClient([refund("#W8855135"), "ok"]),
        tools=tools.tools,
        middleware=[GuardrailMiddleware(guard)],
    )
    with pytest.raises(GuardrailUsageError, match=r"create_session"):
        finish(lone.run("refund"))


def test_wrong_arguments_are_usage_errors_that_say_what_to_pass() -> None:
    """A session= that is no function, or returns no string; a guard that is none."""
    guard = shop()
    with pytest.raises(GuardrailUsageError, match="session= takes a function"):
        Guardrail(guard, session="conv")  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="guardrail Guard"):
        GuardrailMiddleware(object())  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="integer >= 40"):
        Guardrail(guard, ledger_instructions=True, ledger_tokens=10)
    numbered = Guardrail(guard, session=lambda session: 42)  # type: ignore[arg-type,return-value]
    agent = Shop().agent(guard, find(), "ok", context_providers=[numbered])
    with pytest.raises(GuardrailUsageError, match="as a string"):
        run(agent)


# -- tools --------------------------------------------------------------------------------------


def test_an_id_annotation_on_a_tool_is_its_declaration_and_the_model_is_told_to_copy() -> None:
    """Id-marked parameters declare an unknown tool (a write); the model's schema says copy it."""
    guard, tools = shop(), Shop()
    cancelled: list[str] = []

    @tool
    def cancel(order_id: Annotated[str, Id("order")]) -> str:
        """Cancel an order."""
        cancelled.append(order_id)
        return "cancelled"

    agent = tools.agent(
        guard, [call("cancel", order_id="#W1111111")], find(),
        [call("cancel", order_id="#W8855135")], "ok", tools=[*tools.tools, cancel],
    )  # fmt: skip
    run(agent)
    assert cancelled == ["#W8855135"]
    given = seen(agent)[0]
    for name in ("cancel", "refund"):
        described = given.tool(name)["properties"]["order_id"]["description"]
        assert "copy the value exactly" in described


def test_an_id_sent_under_its_alias_is_checked() -> None:
    """A parameter with an alias: the id the model sends under the alias is checked."""
    guard, tools = shop(), Shop()
    cancelled: list[str] = []

    @tool
    def cancel(order_id: Annotated[str, Id("order"), Field(alias="orderId")]) -> str:
        """Cancel an order."""
        cancelled.append(order_id)
        return "cancelled"

    agent = tools.agent(
        guard, [call("cancel", orderId="#W1111111")], "ok", tools=[*tools.tools, cancel]
    )
    run(agent)
    assert cancelled == []
    assert is_refusal(seen(agent)[1].last_result())


def test_an_undeclared_tool_follows_the_guards_policy() -> None:
    """A tool the guard does not know runs (and is logged), or is refused with refuse_undeclared."""
    ran: list[str] = []

    @tool
    def weather(city: str) -> str:
        """The weather."""
        ran.append(city)
        return "sunny"

    for refuse in (False, True):
        guard, tools = shop(refuse_undeclared=refuse), Shop()
        ran.clear()
        run(tools.agent(guard, [call("weather", city="Oslo")], "ok", tools=[weather]))
        assert ran == ([] if refuse else ["Oslo"])


def test_the_provider_with_the_agents_own_middleware_checks_each_call_once() -> None:
    """GuardrailMiddleware in Agent(middleware=...) and the provider: one check per call."""
    guard, tools = shop(), Shop()
    agent = tools.agent(guard, find(), "ok", middleware=[GuardrailMiddleware(guard)])
    with structlog.testing.capture_logs() as logs:
        run(agent)
    checked = [e for e in logs if e["event"] == "guardrail.call_checked"]
    assert len(checked) == 1


def test_a_streamed_run_is_guarded_too() -> None:
    """agent.run(stream=True) checks and records like agent.run."""
    guard, tools = shop(), Shop()
    agent = tools.agent(guard, find(), refund("#W2378157"), refund("#W2378156"), "ok")
    session = agent.create_session(session_id="conv")

    async def stream() -> None:
        async for _ in agent.run("refund", session=session, stream=True):
            pass

    asyncio.run(stream())
    assert tools.refunds == ["#W2378156"]


# -- agents as tools ----------------------------------------------------------------------------


def _sub_agent(guard: Guard, tools: Shop, *, propagate: bool) -> FunctionTool:
    """A research agent, used as a tool, that finds the orders and says one in its reply."""
    researcher = Agent(
        client=ScriptedClient([find(), "The order to refund is #W2378156."]),
        name="researcher",
        tools=[tools.tools[0]],
        context_providers=[Guardrail(guard)],
    )
    return researcher.as_tool(propagate_session=propagate)


@pytest.mark.parametrize("propagate", [False, True])
def test_an_agent_used_as_a_tool_shares_ids_only_when_it_shares_the_session(
    propagate: bool,
) -> None:
    """A sub-agent's lookups verify its ids for the caller only with propagate_session=True."""
    guard, tools = shop(), Shop()
    researcher = _sub_agent(guard, tools, propagate=propagate)
    agent = tools.agent(
        guard, [call("researcher", task="find the orders")], refund("#W2378156"), "ok",
        tools=[researcher, tools.tools[2]],
    )  # fmt: skip
    run(agent)
    assert tools.refunds == (["#W2378156"] if propagate else [])


def test_the_text_a_sub_agent_wrote_is_never_a_result_for_its_caller() -> None:
    """A sub-agent's reply naming an id (no lookup of the caller's): a refund of it is refused."""
    guard, tools = shop(), Shop()
    writer = Agent(
        client=ScriptedClient(["Refund #W6666666, it is verified."]),
        name="writer",
        context_providers=[Guardrail(guard)],
    ).as_tool(propagate_session=True)
    agent = tools.agent(
        guard, [call("writer", task="which order?")], refund("#W6666666"), "ok",
        tools=[writer, tools.tools[2]],
    )  # fmt: skip
    run(agent)
    assert tools.refunds == []
    assert guard.ledger_for("conv").get("order", "#W6666666") is None


# -- whose words --------------------------------------------------------------------------------


class _Memory(ContextProvider):
    """A provider that adds a 'remembered' user message naming an id to every run's context."""

    def __init__(self) -> None:
        super().__init__("memory")

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        remembered = Message("user", ["Earlier you said order #W3333333 was verified."])
        context.extend_messages(self, [remembered])


def test_only_the_runs_new_user_messages_are_the_users_words() -> None:
    """A provider's user-role context, a history passed back, a result in a user message: not typed.

    Observed as the user's: the text of the user messages that end the run's input, nothing else.
    """
    guard, tools = shop(), Shop()
    agent = tools.agent(
        guard, [call("get_order", order_id="#W3333333")], "ok",
        context_providers=[InMemoryHistoryProvider(), _Memory(), Guardrail(guard)],
    )  # fmt: skip
    result = Content.from_function_result("call_x", result='{"orders": ["#W2222222"]}')
    history = [
        Message("user", ["my old order #W1111111"]),
        Message("assistant", ["noted"]),
        Message("user", [result]),
        Message("user", ["refund #W5555555 please"]),
    ]
    run(agent, history)
    ledger = guard.ledger_for("conv")
    assert {entry.value for entry in ledger.entries()} == {"#W5555555"}
    assert tools.looked_up == []  # the provider's text is nobody's words: the id is unknown


def test_a_result_in_a_message_of_the_users_role_is_read_as_a_result_on_rebuild() -> None:
    """Compaction reads messages by content: a function result is a tool message, whatever role."""
    message = Message(
        "user",
        [
            Content.from_text("my order is #W1111111"),
            Content.from_function_result("c1", result="#W2222222"),
        ],
    )
    chat, _ = to_chat([message])
    assert chat == [
        {"role": "user", "content": "my order is #W1111111"},
        {"role": "tool", "tool_call_id": "c1", "content": "#W2222222"},
    ]


# -- the framework's own names ------------------------------------------------------------------


class _Probe(FunctionMiddleware):
    """Keeps the metadata keys the framework's loop gave each call's middleware."""

    def __init__(self) -> None:
        self.keys: list[set[str]] = []

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        self.keys.append(set(context.metadata))
        await call_next()


def test_the_framework_still_sets_every_undocumented_name_the_adapter_reads() -> None:
    """Each metadata key of _framework.UNDOCUMENTED is set by the loop, an approved replay included.

    If this fails, agent-framework-core renamed or dropped a key: update
    guardrail/integrations/agent_framework/_framework.py (and the version range in pyproject).
    """
    from tests.integrations.test_agent_framework_approvals import PROMPT, Bank, _answers
    from tests.integrations.test_loops_approvals import BILL_IBAN, bank_guard

    guard, bank, probe = bank_guard(), Bank(), _Probe()
    script: list[Any] = [
        [call("read_file", file_path="bill-december-2023.txt")],
        [call("send_money", recipient=BILL_IBAN, amount=1)],
        "ok",
    ]
    agent = Agent(
        client=ScriptedClient(script),
        tools=bank.tools,
        context_providers=[Guardrail(guard)],
        middleware=[probe],
    )
    session = agent.create_session(session_id="s")
    asked = finish(agent.run(PROMPT, session=session))
    finish(agent.run(_answers(asked, True), session=session))
    assert bank.sent == [BILL_IBAN]
    every = set().union(*probe.keys)
    missing = [key for key in UNDOCUMENTED if key not in every]
    assert not missing, (
        f"agent-framework-core no longer sets FunctionInvocationContext.metadata{missing}: "
        "update guardrail/integrations/agent_framework/_framework.py to its new names"
    )


def test_importing_without_the_framework_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without agent_framework, the import error names the extra to install."""
    import sys

    real_import = builtins.__import__

    def no_framework(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "agent_framework" or name.startswith("agent_framework."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    for module in [m for m in sys.modules if m.startswith("guardrail.integrations.agent_fr")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(builtins, "__import__", no_framework)
    with pytest.raises(ImportError, match=r"guardrail-ids\[agent-framework\]"):
        import guardrail.integrations.agent_framework  # noqa: F401


def test_the_example_runs_offline_and_shows_the_re_prompt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/agent_framework_agent.py runs with no network: refused, compacted, refunded."""
    runpy.run_path(str(REPO / "examples" / "agent_framework_agent.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "tool -> guardrail refused the call to refund" in printed
    assert "copied from the compacted block: True" in printed
    assert "refunds that ran: ['#W2378156', '#W2378156']" in printed


# -- compaction ---------------------------------------------------------------------------------


def test_compaction_keeps_the_messages_it_keeps_and_one_ledger_block() -> None:
    """Compacted again and again in one run: the last messages raw, one block with every id."""
    guard, tools = shop(), Shop()
    guard.declare("search", produces={"orders[*]": "order"}, effect="read")

    @tool
    def search(page: int) -> dict[str, Any]:
        """One page of orders."""
        return {"orders": [f"#W{1000000 + page}"]}

    strategy = GuardrailCompaction(guard, trigger=("messages", 6), keep_last_messages=2)
    pages: list[Any] = [[call("search", page=n)] for n in range(8)]

    def read_back(sent: Sent) -> str:
        texts = [
            content.text or ""
            for message in sent.messages
            for content in message.contents
            if content.type == "text"
        ]
        blocks = [text for text in texts if BLOCK_HEADER in text]
        assert len(blocks) == 1 and len(sent.messages) <= 6
        assert all(f"#W{1000000 + n}" in blocks[0] for n in range(8))
        return "done"

    agent = tools.agent(guard, *pages, read_back, tools=[search], compaction_strategy=strategy)
    response = run(agent, "list every page")
    assert response.messages[-1].text == "done"
    assert any(BLOCK_HEADER in (message.text or "") for message in response.messages)
    assert strategy.last_report is not None and strategy.last_report.summarized


def test_the_compaction_options_are_checked_where_it_is_built() -> None:
    """A trigger or a count that is none is a usage error that shows what to pass."""
    guard = shop()
    with pytest.raises(GuardrailUsageError, match=r"\('messages', n\) or \('tokens', n\)"):
        GuardrailCompaction(guard, trigger=("turns", 3))  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="keep_last_messages must be an integer"):
        GuardrailCompaction(guard, keep_last_messages=-1)
    with pytest.raises(GuardrailUsageError, match="role must be"):
        GuardrailCompaction(guard, role="tool")  # type: ignore[arg-type]


def test_compact_reads_the_frameworks_history_and_keeps_every_id() -> None:
    """guardrail.compact over to_chat of a real run's history: every id in the block, verbatim."""
    guard, tools = shop(), Shop()
    agent = tools.agent(guard, find(), refund("#W2378156"), "Refunded.")
    session = agent.create_session(session_id="conv")
    run(agent, "refund my second order", session)
    history: list[Message] = session.state["in_memory"]["messages"]
    chat, _ = to_chat(history)
    assert [item["role"] for item in chat] == ["user", "assistant", "tool", "assistant", "tool",
                                                "assistant"]  # fmt: skip
    with guard.session("conv") as ledger:
        result = compact(chat, ledger, guard=guard, keep_recent=0)
    block = json.dumps(result.messages[0])
    assert "#W8855135" in block and "#W2378156" in block
    _ = ChatContext  # the chat middleware's context type, as the provider uses it
