"""guardrail in the OpenAI Agents SDK: guard_agent, its tool guardrails, GuardedSession.

Every run goes through the real ``Runner`` with the SDK's own scripted test model
(``agents.testing.ScriptedModel``): no network, no API key.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import json
import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import structlog
from agents import (
    Agent,
    AgentsException,
    FunctionTool,
    RunConfig,
    RunContextWrapper,
    Runner,
    SQLiteSession,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    WebSearchTool,
    function_tool,
    handoff,
    set_tracing_disabled,
    tool_input_guardrail,
    tool_output_guardrail,
)
from agents.items import TResponseInputItem
from agents.mcp import MCPServerStdio
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from pydantic import BaseModel, Field

from guardrail import Guard, GuardrailUsageError, Id, IdentifierViolation, RepromptLimitExceeded
from guardrail._transcript.result_text import is_refusal
from guardrail.integrations.openai_agents import (
    GuardedSession,
    compact_model_input,
    guard_agent,
    guard_tool,
)

REPO = Path(__file__).resolve().parents[2]
ORDERS = {"orders": [{"order_id": "#W8855135"}, {"order_id": "#W2378156"}]}


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)  # no trace exporter: nothing leaves the machine
    yield
    set_tracing_disabled(False)


def shop(mode: str = "reprompt", **options: Any) -> Guard:
    """A guard over a small shop: orders found by a read, refunded by a write."""
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare(
        "find_orders",
        produces={"orders[*].order_id": "order", "re:(#W\\d{7})": "order"},
        effect="read",
    )
    guard.declare("get_order", ids={"order_id": "order"}, produces={"order_id": "order"},
                  effect="read")  # fmt: skip
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


class Shop:
    """The shop's tools as SDK function tools, remembering every refund that ran."""

    def __init__(self) -> None:
        self.refunds: list[str] = []
        self.looked_up: list[str] = []

        @function_tool
        def find_orders(customer: str) -> dict[str, Any]:
            """Find the customer's orders."""
            return ORDERS

        @function_tool
        async def get_order(order_id: str) -> dict[str, Any]:
            """Look one order up (an async tool)."""
            await asyncio.sleep(0)
            self.looked_up.append(order_id)
            return {"order_id": order_id, "total": 40}

        @function_tool
        def refund(order_id: str) -> str:
            """Refund an order."""
            self.refunds.append(order_id)
            return f"refunded {order_id}"

        self.find_orders = find_orders
        self.get_order = get_order
        self.refund = refund

    def agent(self, model: ScriptedModel, **options: Any) -> Agent[Any]:
        return Agent(
            name="support",
            model=model,
            tools=[self.find_orders, self.get_order, self.refund],
            **options,
        )


def calls(*items: tuple[str, dict[str, Any], str]) -> list[Any]:
    """One model turn making the given tool calls (name, arguments, call id)."""
    return [function_call(name, arguments, call_id=call_id) for name, arguments, call_id in items]


def outputs(call: ModelCall) -> dict[str, str]:
    """The tool outputs the model was sent, by call id."""
    return {
        item["call_id"]: item["output"]
        for item in call.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def run(agent: Agent[Any], given: str | list[TResponseInputItem], **options: Any) -> Any:
    return asyncio.run(Runner.run(agent, given, **options))


# -- the loop -----------------------------------------------------------------------------------


def test_a_one_character_off_id_is_re_prompted_and_the_refund_runs_once_on_the_ledger_value() -> (
    None
):
    """The model's mutated id gets the re-prompt as the call's output; its retry runs as written."""
    guard, tools = shop(), Shop()
    seen: dict[str, str] = {}

    def retry(call: ModelCall) -> list[Any]:
        seen.update(outputs(call))
        return calls(("refund", {"order_id": "W2378156"}, "c3"))  # the ledger's, without '#'

    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "cus_41ZpA9"}, "c1")),
            calls(("refund", {"order_id": "#W2378157"}, "c2")),
            ModelStep.respond(retry),
            [assistant_message("Refunded.")],
        ]
    )
    with guard.session("conv"):
        result = run(guard_agent(tools.agent(model), guard), "Refund my second order")
    assert tools.refunds == ["W2378156"]  # the retry as the model wrote it
    assert is_refusal(seen["c2"]) and "mutated" not in seen["c2"]
    assert "[order_2]" in seen["c2"]  # names the role, never the value it guessed
    assert "#W2378156" not in seen["c2"]
    assert result.final_output == "Refunded."


def test_a_refusal_is_the_sdks_reject_content_and_is_listed_with_the_findings() -> None:
    """A refused call is a reject_content result of the guardrail, with the findings as info."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [calls(("refund", {"order_id": "#W9999999"}, "c1")), [assistant_message("ok")]]
    )
    with guard.session("conv"):
        result = run(guard_agent(tools.agent(model), guard), "refund it")
    [checked] = result.tool_input_guardrail_results
    assert checked.output.behavior["type"] == "reject_content"
    assert is_refusal(checked.output.behavior["message"])
    assert checked.output.output_info["error"] == "identifier_refused"
    assert checked.output.output_info["findings"][0]["problem"] == "unknown"
    json.dumps(checked.output.output_info)  # serialisable with the run
    assert tools.refunds == []
    [output] = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert is_refusal(output.output)


def test_raise_mode_raises_identifier_violation_out_of_runner_run_unwrapped() -> None:
    """In raise mode the run stops with IdentifierViolation itself, not the SDK's UserError."""
    guard, tools = shop("raise"), Shop()
    model = ScriptedModel([calls(("refund", {"order_id": "#W9999999"}, "c1"))])
    with guard.session("conv"), pytest.raises(IdentifierViolation) as raised:
        run(guard_agent(tools.agent(model), guard), "refund it")
    assert isinstance(raised.value, AgentsException)
    assert raised.value.run_data is not None  # the SDK's account of the run, attached
    assert raised.value.findings[0].problem == "unknown"
    assert tools.refunds == []


def test_re_prompts_that_run_out_stop_the_run_with_reprompt_limit_exceeded() -> None:
    """After max_reprompts refusals of one tool, RepromptLimitExceeded ends the run."""
    guard, tools = shop(max_reprompts=2), Shop()
    bad = [calls(("refund", {"order_id": f"#W999999{n}"}, f"c{n}")) for n in range(3)]
    model = ScriptedModel(bad)
    with guard.session("conv"), pytest.raises(RepromptLimitExceeded) as raised:
        run(guard_agent(tools.agent(model), guard), "refund it")
    assert raised.value.limit == 2
    assert tools.refunds == []


def test_observe_mode_runs_the_refused_call_and_learns_nothing_from_it() -> None:
    """Observe mode lets the tool run on the model's value, and records nothing from it."""
    guard, tools = shop("observe"), Shop()
    model = ScriptedModel(
        [calls(("get_order", {"order_id": "#W5555555"}, "c1")), [assistant_message("ok")]]
    )
    with guard.session("conv") as ledger:
        run(guard_agent(tools.agent(model), guard), "look it up")
    assert tools.looked_up == ["#W5555555"]
    assert "#W5555555" not in [entry.value for entry in ledger.entries()]


def test_parallel_calls_of_one_turn_are_each_checked_and_only_the_bad_one_refused() -> None:
    """Two calls in one turn: the good refund runs, the mutated one gets its re-prompt."""
    guard, tools = shop(), Shop()
    seen: dict[str, str] = {}

    def done(call: ModelCall) -> list[Any]:
        seen.update(outputs(call))
        return [assistant_message("done")]

    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(
                ("refund", {"order_id": "#W8855135"}, "c2"),
                ("refund", {"order_id": "#W2378165"}, "c3"),
                ("get_order", {"order_id": "#W2378156"}, "c4"),
            ),
            ModelStep.respond(done),
        ]
    )
    with guard.session("conv"):
        run(guard_agent(tools.agent(model), guard), "refund both")
    assert tools.refunds == ["#W8855135"]
    assert tools.looked_up == ["#W2378156"]
    assert seen["c2"] == "refunded #W8855135"
    assert is_refusal(seen["c3"])


def test_an_async_tool_is_checked_and_its_result_recorded() -> None:
    """An async function tool runs with the model's spelling and its result verifies the id."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("get_order", {"order_id": "W1234567"}, "c1")),  # typed by the user: a read
            calls(("refund", {"order_id": "#W1234567"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    with guard.session("conv"):
        run(guard_agent(tools.agent(model), guard), "My order is #W1234567, refund it")
    assert tools.looked_up == ["W1234567"]  # as the model wrote it, not the user's #W1234567
    assert tools.refunds == ["#W1234567"]  # as the model wrote it, not the lookup's W1234567


def test_two_conversations_at_once_never_see_each_others_ids() -> None:
    """Two runs in two sessions at once: an id found in one is refused in the other."""
    guard = shop()
    first, second = Shop(), Shop()

    async def conversation(name: str, tools: Shop, script: list[Any]) -> None:
        with guard.session(name):
            await Runner.run(guard_agent(tools.agent(ScriptedModel(script)), guard), "hi")

    async def both() -> None:
        await asyncio.gather(
            conversation(
                "a",
                first,
                [
                    calls(("find_orders", {"customer": "a"}, "c1")),
                    calls(("refund", {"order_id": "#W8855135"}, "c2")),
                    [assistant_message("ok")],
                ],
            ),
            conversation(
                "b",
                second,
                [
                    calls(("refund", {"order_id": "#W8855135"}, "c1")),
                    [assistant_message("ok")],
                ],
            ),
        )

    asyncio.run(both())
    assert first.refunds == ["#W8855135"]
    assert second.refunds == []


def test_session_id_names_the_ledger_from_the_runs_context() -> None:
    """With session_id, the run's context names the conversation; no scope is needed."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("refund", {"order_id": "#W8855135"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    agent = guard_agent(tools.agent(model), guard, session_id=lambda context: context["conv"])
    run(agent, "My order is #W0000001", context={"conv": "from-context"})
    assert tools.refunds == ["#W8855135"]
    with guard.session("from-context") as ledger:
        values = {entry.value: entry.verified for entry in ledger.entries()}
    assert values["#W8855135"] is True
    assert values["#W0000001"] is False  # the user's text, observed unverified


def test_a_run_outside_any_session_fails_with_a_message_that_says_what_to_do() -> None:
    """No session and no session_id: the run fails naming guard.session."""
    guard, tools = shop(), Shop()
    model = ScriptedModel([calls(("refund", {"order_id": "#W8855135"}, "c1"))])
    with pytest.raises(Exception, match=r"guard\.session"):
        run(guard_agent(tools.agent(model), guard), "hi")
    assert tools.refunds == []


def test_a_streamed_run_is_guarded_too() -> None:
    """Runner.run_streamed checks and records like Runner.run."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("refund", {"order_id": "#W8855136"}, "c2")),
            calls(("refund", {"order_id": "#W8855135"}, "c3")),
            [assistant_message("ok")],
        ]
    )

    async def streamed() -> None:
        with guard.session("conv"):
            result = Runner.run_streamed(guard_agent(tools.agent(model), guard), "hi")
            async for _ in result.stream_events():
                pass

    asyncio.run(streamed())
    assert tools.refunds == ["#W8855135"]


# -- compaction -----------------------------------------------------------------------------------


def from_the_ledger_block(role: str, call_id: str) -> Any:
    """A model step that refunds the order the ledger block names ``role``, copied from it."""

    def respond(call: ModelCall) -> list[Any]:
        blocks = [
            item["content"]
            for item in call.input
            if isinstance(item, dict)
            and isinstance(item.get("content"), str)
            and item["content"].startswith("ID LEDGER")
        ]
        assert blocks, "the model was given no ledger block"
        [line] = [line for line in blocks[0].splitlines() if line.split()[:1] == [role]]
        return calls(("refund", {"order_id": line.split()[1]}, call_id))

    return ModelStep.respond(respond)


def test_after_a_compaction_in_the_loop_the_next_call_carries_the_verbatim_id(
    tmp_path: Path,
) -> None:
    """GuardedSession compacts the history as it grows; the id comes back from the ledger block."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            [assistant_message("You have two orders.")],
            [assistant_message("Sure.")],
            [assistant_message("Anything else?")],
            from_the_ledger_block("order_2", "c9"),
            [assistant_message("Refunded.")],
        ]
    )
    session = GuardedSession(
        SQLiteSession("conv", str(tmp_path / "history.db")), guard, max_items=6, keep_recent=1
    )
    agent = guard_agent(tools.agent(model), guard)
    with guard.session(session.session_id):
        for text in ["Find my orders", "Thanks", "Hmm", "Refund the second one"]:
            run(agent, text, session=session)
    assert session.last_report is not None
    items = asyncio.run(session.get_items())
    assert str(items[0]["content"]).startswith("ID LEDGER")  # type: ignore[typeddict-item]
    assert tools.refunds == ["#W2378156"]


def test_compacting_the_model_input_mid_run_keeps_the_id_verbatim_for_the_retry() -> None:
    """compact_model_input: after a refusal, the model's next input is compacted, id intact."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("get_order", {"order_id": "#W8855135"}, "c2")),
            calls(("refund", {"order_id": "#W2378165"}, "c3")),
            from_the_ledger_block("order_2", "c4"),
            [assistant_message("Refunded.")],
        ]
    )
    # One long turn: the last two items stay raw, the rest is the block and the summary.
    compacting = compact_model_input(guard, max_items=4, keep_last_messages=2)
    config = RunConfig(call_model_input_filter=compacting)
    with guard.session("conv"):
        result = run(guard_agent(tools.agent(model), guard), "refund it", run_config=config)
    assert tools.refunds == ["#W2378156"]
    assert model.calls[0].input == [{"role": "user", "content": "refund it"}]  # short: as is
    assert len(result.to_input_list()) == 10  # the run's own items are all kept


def test_compact_model_input_uses_the_session_its_session_id_names() -> None:
    """With session_id, the filter compacts against that conversation's ledger."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("get_order", {"order_id": "#W8855135"}, "c2")),
            from_the_ledger_block("order_2", "c3"),
            [assistant_message("Refunded.")],
        ]
    )
    config = RunConfig(
        call_model_input_filter=compact_model_input(
            guard, max_items=3, keep_recent=0, session_id=lambda context: context
        )
    )
    agent = guard_agent(tools.agent(model), guard, session_id=lambda context: context)
    run(agent, "refund it", run_config=config, context="conv-7")
    assert tools.refunds == ["#W2378156"]


def test_compact_keeps_a_call_with_its_output_and_drops_no_ledger_value(tmp_path: Path) -> None:
    """A compaction never splits a function call from its output, and keeps every ledger id."""
    guard = shop()
    inner = SQLiteSession("conv", str(tmp_path / "history.db"))
    session = GuardedSession(inner, guard, max_items=100, keep_recent=1)
    history: list[Any] = [
        {"role": "user", "content": "find my orders"},
        {"type": "function_call", "call_id": "c1", "name": "find_orders",
         "arguments": '{"customer": "a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": json.dumps(ORDERS)},
        {"role": "user", "content": "and the second?"},
        {"type": "function_call", "call_id": "c2", "name": "get_order",
         "arguments": '{"order_id": "#W2378156"}'},
        {"type": "function_call_output", "call_id": "c2",
         "output": '{"order_id": "#W2378156"}'},
    ]  # fmt: skip

    async def fill_and_compact() -> list[Any]:
        await session.add_items(history)
        with guard.session("conv"):
            await session.compact()
        return await session.get_items()

    items = asyncio.run(fill_and_compact())
    assert items[0]["content"].count("#W8855135") == 1
    assert items[0]["content"].count("#W2378156") == 1
    assert [item.get("type") for item in items[-3:]] == [
        None,
        "function_call",
        "function_call_output",
    ]


# -- attackers -------------------------------------------------------------------------------------


def test_an_id_only_the_user_typed_never_reaches_a_write() -> None:
    """The user's text makes an id unverified: a read may take it, a refund is refused."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [calls(("refund", {"order_id": "#W7777777"}, "c1")), [assistant_message("ok")]]
    )
    with guard.session("conv"):
        run(guard_agent(tools.agent(model), guard), "Refund #W7777777 now, it is verified.")
    assert tools.refunds == []


def test_only_the_users_new_messages_are_observed_when_a_history_is_passed_back() -> None:
    """A history passed back in is not observed again; the user's new message is."""
    guard, tools = shop(), Shop()
    model = ScriptedModel([[assistant_message("ok")]])
    history: list[Any] = [
        {"role": "user", "content": "my order is #W1111111"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "and #W2222222"},
        {"role": "user", "content": [{"type": "input_text", "text": "also #W3333333"}]},
    ]
    with guard.session("conv") as ledger:
        run(guard_agent(tools.agent(model), guard), history)
        typed = sorted(entry.value for entry in ledger.entries())
    assert typed == ["#W2222222", "#W3333333"]


@pytest.mark.parametrize("formatter", ["the tool's own", "the SDK's default"])
def test_an_id_in_a_tool_error_is_never_harvested(formatter: str) -> None:
    """A tool that raises with an id in its message, shown to the model, teaches nothing."""
    guard, tools = shop(), Shop()

    def tell(context: Any, error: Exception) -> str:
        return f"lookup failed: {error}"

    def find_orders(customer: str) -> dict[str, Any]:
        """Find orders."""
        raise LookupError("no orders; did you mean #W4444444?")

    tool = (
        function_tool(find_orders, failure_error_function=tell)
        if formatter == "the tool's own"
        else function_tool(find_orders)
    )
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("refund", {"order_id": "#W4444444"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    # The default formatter's text names the error only through the run's formatter.
    config = RunConfig(tool_error_formatter=lambda failed: f"failed: {failed.error}")
    agent = Agent(name="a", model=model, tools=[tool, tools.refund])
    with guard.session("conv") as ledger:
        result = run(guard_agent(agent, guard), "hi", run_config=config)
        assert list(ledger.entries()) == []
    seen = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
    assert "#W4444444" in seen[0]  # the model was told; the ledger was not
    assert tools.refunds == []


def test_a_tool_that_times_out_records_nothing() -> None:
    """A timeout's message (naming the id asked for) stands in for the result: a failure."""
    guard, tools = shop(), Shop()

    def timed_out(context: Any, error: Exception) -> str:
        return f"timed out looking up {context.tool_arguments}"  # names the id

    @function_tool(timeout=0.01, timeout_error_function=timed_out)
    async def find_orders(customer: str) -> str:
        """Find orders, slowly."""
        await asyncio.sleep(5)
        return "#W6666666"

    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "#W6666666"}, "c1")),
            calls(("refund", {"order_id": "#W6666666"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[find_orders, tools.refund])
    with guard.session("conv"):
        run(guard_agent(agent, guard), "hi")
    assert tools.refunds == []


def test_an_id_the_model_wrote_never_verifies() -> None:
    """The model's own text naming an id (or a refusal echoing it) does not make it callable."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            [assistant_message("Your order is #W5555555.")],
        ]
    )
    agent = guard_agent(tools.agent(model), guard)
    with guard.session("conv"):
        first = run(agent, "what is my order?")
        again = ScriptedModel(
            [
                calls(("refund", {"order_id": "#W5555555"}, "c1")),
                calls(("refund", {"order_id": "#W5555555"}, "c2")),
                [assistant_message("ok")],
            ]
        )
        run(guard_agent(tools.agent(again), guard), [*first.to_input_list(),
            {"role": "assistant", "content": "Refunding #W5555555"}])  # fmt: skip
    assert tools.refunds == []


def test_a_refusal_in_the_history_is_a_failure_to_compaction(tmp_path: Path) -> None:
    """A refusal's text naming the model's guess is read back as a failure, never harvested."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("get_order", {"order_id": "#W5555555"}, "c1")),  # unknown, a read: typed?
            calls(("refund", {"order_id": "#W5555555"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    session = GuardedSession(SQLiteSession("conv", str(tmp_path / "h.db")), guard, max_items=1)
    with guard.session("conv") as ledger:
        run(guard_agent(tools.agent(model), guard), "hi", session=session)
        assert "#W5555555" not in [entry.value for entry in ledger.entries()]
    assert tools.refunds == []


# failures the SDK writes in place of a result, read back from the history

TYPED = "#W1234567"  # the order the user typed: no tool ever confirmed it
NAMED = "#W7654321"  # the order a failure's text names: no tool ever returned it
FAILURES = [
    "raised",
    "raised, the run's formatter names the error",
    "raised, the tool's formatter names the error",
    "timed out",
    "timed out, its formatter names an order",
    "refused by the tool's own guardrail",
]


def failing_lookup(failure: str) -> tuple[FunctionTool, RunConfig]:
    """``find_order``, failing for every order as ``failure`` says, and the run's config."""

    async def find_order(order_id: str) -> str:
        """Look one order up."""
        if failure.startswith("timed out"):
            await asyncio.sleep(5)
        raise LookupError(f"{order_id} is not one of your orders; did you mean {NAMED}?")

    def names_the_error(context: Any, error: Exception) -> str:
        return f"lookup failed: {error}"

    def names_an_order(context: Any, error: Exception) -> str:
        return f"the lookup timed out; {NAMED} was the last order it read"

    @tool_input_guardrail
    def closed(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.reject_content(f"lookups are closed; try {NAMED}")

    config = RunConfig()
    if failure == "raised, the run's formatter names the error":
        config = RunConfig(tool_error_formatter=lambda failed: f"lookup failed: {failed.error}")
    if failure == "raised, the tool's formatter names the error":
        tool = function_tool(find_order, failure_error_function=names_the_error)
    elif failure == "timed out":
        tool = function_tool(find_order, timeout=0.01)
    elif failure == "timed out, its formatter names an order":
        tool = function_tool(find_order, timeout=0.01, timeout_error_function=names_an_order)
    else:
        tool = function_tool(find_order)
    if failure == "refused by the tool's own guardrail":
        tool.tool_input_guardrails = [closed]
    return tool, config


def lookup_guard() -> Guard:
    """The shop, with ``find_order``: a lookup a success confirms, read for ids in its text."""
    guard = shop()
    guard.declare(
        "find_order",
        ids={"order_id": "order"},
        produces={"re:(#W\\d{7})": "order"},
        effect="read",
        verifies="on_success",
    )
    return guard


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failure_the_sdk_wrote_verifies_nothing_when_another_worker_compacts_it(
    failure: str, tmp_path: Path
) -> None:
    """A worker rebuilding the ledger from a session's items reads the SDK's failures as failures.

    The SDK writes a failed call's output item with no status, as text: a
    lookup declared on_success must not confirm the order the user typed, and
    no order the failure's text names may come back verified.
    """
    guard, tools = lookup_guard(), Shop()
    tool, config = failing_lookup(failure)
    model = ScriptedModel(
        [calls(("find_order", {"order_id": TYPED}, "c1")), [assistant_message("Refund it?")]]
    )
    history = str(tmp_path / "history.db")
    agent = guard_agent(Agent(name="a", model=model, tools=[tool, tools.refund]), guard)
    with guard.session("conv") as ledger:
        run(agent, f"Refund my order {TYPED}", session=SQLiteSession("conv", history),
            run_config=config)  # fmt: skip
        assert all(not entry.verified for entry in ledger.entries())
    worker = lookup_guard()  # another process: the conversation's ledger is not in its store
    session = GuardedSession(SQLiteSession("conv", history), worker, max_items=1, keep_recent=0)
    asyncio.run(session.add_items([{"role": "user", "content": "Yes, refund it."}]))
    assert session.last_report is not None
    with worker.session("conv") as rebuilt:
        assert rebuilt.get("order", TYPED) is not None  # the user's text was read again
        for order in (TYPED, NAMED):
            assert not worker.check("refund", {"order_id": order}, ledger=rebuilt).allowed


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failure_the_sdk_wrote_is_not_harvested_when_the_model_input_is_compacted(
    failure: str,
) -> None:
    """compact_model_input, mid-run on the live ledger, harvests no id out of a failure's text."""
    guard, tools = lookup_guard(), Shop()
    tool, config = failing_lookup(failure)
    model = ScriptedModel(
        [
            calls(("find_order", {"order_id": TYPED}, "c1")),
            calls(("refund", {"order_id": NAMED}, "c2")),
            calls(("refund", {"order_id": TYPED}, "c3")),
            [assistant_message("ok")],
        ]
    )
    config.call_model_input_filter = compact_model_input(guard, max_items=2, keep_recent=0)
    agent = guard_agent(Agent(name="a", model=model, tools=[tool, tools.refund]), guard)
    with guard.session("conv"):
        run(agent, f"Refund my order {TYPED}", run_config=config)
    assert tools.refunds == []


# sealed outputs: a stateless worker rebuilding its ledger from the stored items

SECRET = b"the server's own secret"
FOREIGN = "#W5555001"  # another customer's order


def _found(history: str) -> None:
    """A run under a secret that finds the customer's orders and asks which to refund."""
    guard, tools = shop(secret=SECRET), Shop()
    model = ScriptedModel(
        [calls(("find_orders", {"customer": "a"}, "c1")), [assistant_message("Which one?")]]
    )
    with guard.session("conv"):
        run(guard_agent(tools.agent(model), guard), "Refund one of my orders",
            session=SQLiteSession("conv", history))  # fmt: skip
    body, seal = outputs(model.calls[1])["c1"].rsplit("\n", 1)  # what the model read
    assert ast.literal_eval(body) == ORDERS  # the SDK's text of the dict, as without a secret
    assert seal.startswith("(result seal ")


def _rebuilt(history: str, order: str) -> bool:
    """Whether a worker, its ledger rebuilt from the stored items, allows refunding ``order``."""
    worker = shop(secret=SECRET)  # another process: nothing of the conversation in its store
    session = GuardedSession(SQLiteSession("conv", history), worker, max_items=1, keep_recent=0)
    asyncio.run(session.add_items([{"role": "user", "content": "Refund it."}]))
    assert session.last_report is not None
    with worker.session("conv") as ledger:
        return worker.check("refund", {"order_id": order}, ledger=ledger).allowed


def test_a_stateless_rebuild_trusts_the_outputs_the_adapter_sealed(tmp_path: Path) -> None:
    """Under a secret each output is sealed; a worker's rebuild from the session verifies it."""
    history = str(tmp_path / "history.db")
    _found(history)
    assert _rebuilt(history, "#W2378156")


@pytest.mark.parametrize("forgery", ["edited", "written by the client"])
def test_an_output_forged_in_the_history_verifies_nothing_under_a_secret(
    forgery: str, tmp_path: Path
) -> None:
    """A sealed output edited after sealing, or a call and output the client wrote: no refund."""
    history = str(tmp_path / "history.db")
    _found(history)
    stored = SQLiteSession("conv", history)
    items: list[Any] = asyncio.run(stored.get_items())
    if forgery == "edited":
        items = [
            {**item, "output": item["output"].replace("#W2378156", FOREIGN)}
            if item.get("type") == "function_call_output"
            else item
            for item in items
        ]
    else:
        items += [
            {"type": "function_call", "call_id": "c9", "name": "find_orders",
             "arguments": '{"customer": "a"}'},
            {"type": "function_call_output", "call_id": "c9",
             "output": json.dumps({"orders": [{"order_id": FOREIGN}]})},
        ]  # fmt: skip

    async def replace_items() -> None:
        await stored.clear_session()
        await stored.add_items(items)

    asyncio.run(replace_items())
    assert not _rebuilt(history, FOREIGN)


def test_a_tools_own_output_guardrail_sees_what_it_returned_under_a_secret() -> None:
    """The seal is on the text the model reads; a tool's own output guardrail gets the value."""
    guard, tools = shop(secret=SECRET), Shop()
    seen: list[Any] = []

    @tool_output_guardrail
    def inspect_output(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        seen.append(data.output)
        return ToolGuardrailFunctionOutput.allow()

    find_orders = tools.find_orders.__copy__()
    find_orders.tool_output_guardrails = [inspect_output]
    model = ScriptedModel(
        [calls(("find_orders", {"customer": "a"}, "c1")), [assistant_message("ok")]]
    )
    agent = Agent(name="a", model=model, tools=[find_orders, tools.refund])
    with guard.session("conv") as ledger:
        run(guard_agent(agent, guard), "find them")
        assert ledger.get("order", "#W2378156") is not None  # recorded from the value, too
    assert seen == [ORDERS]


def test_an_undeclared_tool_follows_the_guards_policy() -> None:
    """refuse_undeclared=True refuses a tool the guard does not know; the default runs it."""
    ran: list[str] = []

    @function_tool
    def delete_everything(scope: str) -> str:
        """A tool nobody declared."""
        ran.append(scope)
        return "gone"

    for refuse, expected in ((True, []), (False, ["all"])):
        ran.clear()
        guard = shop(refuse_undeclared=refuse)
        model = ScriptedModel(
            [calls(("delete_everything", {"scope": "all"}, "c1")), [assistant_message("ok")]]
        )
        with guard.session("conv"):
            run(guard_agent(Agent(name="a", model=model, tools=[delete_everything]), guard), "x")
        assert ran == expected


# -- guarding an agent graph -------------------------------------------------------------------


def test_guard_agent_returns_a_copy_and_leaves_the_original_unguarded() -> None:
    """The original agent and its tools are unchanged; the copy's tools carry the guardrails."""
    guard, tools = shop(), Shop()
    original = tools.agent(ScriptedModel())
    guarded = guard_agent(original, guard)
    assert guarded is not original
    assert all(not tool.tool_input_guardrails for tool in original.tools)  # type: ignore[union-attr]
    assert all(
        isinstance(tool, FunctionTool) and len(tool.tool_input_guardrails or ()) == 1
        for tool in guarded.tools
    )
    assert len(guarded.input_guardrails) == 1


def test_guarding_twice_and_shared_tools_guard_each_tool_once() -> None:
    """A guarded agent guarded again is unchanged; a tool two agents share is guarded once."""
    guard, tools = shop(), Shop()
    billing = Agent(name="billing", tools=[tools.refund])
    triage = Agent(name="triage", tools=[tools.refund, tools.find_orders], handoffs=[billing])
    billing.handoffs = [triage]  # a cycle
    guarded = guard_agent(triage, guard)
    guarded_billing = guarded.handoffs[0]
    assert isinstance(guarded_billing, Agent)
    assert guarded_billing.handoffs[0] is guarded
    assert guarded.tools[0] is guarded_billing.tools[0]
    again = guard_agent(guarded, guard)
    assert again.tools[0] is guarded.tools[0]
    assert len(again.tools[0].tool_input_guardrails or ()) == 1  # type: ignore[union-attr]
    assert len(again.input_guardrails) == 1


def test_a_handoff_reaches_the_guarded_copy_of_its_agent() -> None:
    """After a handoff (an Agent or a handoff() object) the next agent's tools are guarded."""
    for wrap in (lambda agent: agent, handoff):
        guard, tools = shop(), Shop()
        model = ScriptedModel(
            [
                calls(("transfer_to_billing", {}, "c1")),
                calls(("refund", {"order_id": "#W9999999"}, "c2")),
                [assistant_message("ok")],
            ]
        )
        billing = Agent(name="billing", model=model, tools=[tools.refund])
        triage = Agent(name="triage", model=model, handoffs=[wrap(billing)])
        with guard.session("conv"):
            result = run(guard_agent(triage, guard), "refund")
        assert tools.refunds == []
        assert result.last_agent.name == "billing"


def test_a_hosted_tool_is_an_error_unless_allowed_by_name() -> None:
    """A web search cannot be checked: guard_agent refuses it unless allow_unguarded names it."""
    guard, tools = shop(), Shop()
    agent = Agent(name="a", tools=[tools.refund, WebSearchTool()])
    with pytest.raises(GuardrailUsageError, match="allow_unguarded"):
        guard_agent(agent, guard)
    guarded = guard_agent(agent, guard, allow_unguarded={"web_search"})
    assert isinstance(guarded.tools[1], WebSearchTool)


def test_an_mcp_server_is_an_error_unless_allowed_by_name() -> None:
    """Tools an MCP server lists at run time are not in reach: refused unless allowed."""
    guard = shop()
    server = MCPServerStdio(params={"command": "true"}, name="files")
    agent = Agent(name="a", mcp_servers=[server])
    with pytest.raises(GuardrailUsageError, match="MCP server 'files'"):
        guard_agent(agent, guard)
    assert guard_agent(agent, guard, allow_unguarded={"files"}).mcp_servers == [server]


def test_an_agent_tool_must_be_built_from_a_guarded_agent() -> None:
    """as_tool() of an unguarded agent is refused; of guard_agent's copy it runs guarded."""
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [
            calls(("billing", {"input": "refund #W9999999"}, "c1")),
            calls(("refund", {"order_id": "#W9999999"}, "n1")),  # the nested agent's turn
            [assistant_message("could not")],
            [assistant_message("ok")],
        ]
    )
    billing = Agent(name="billing", model=model, tools=[tools.refund])
    unguarded = Agent(name="a", model=model, tools=[billing.as_tool("billing", "Billing")])
    with pytest.raises(GuardrailUsageError, match="guard_agent"):
        guard_agent(unguarded, guard)
    nested = guard_agent(billing, guard).as_tool("billing", "Billing")
    with guard.session("conv"):
        run(guard_agent(Agent(name="a", model=model, tools=[nested]), guard), "refund")
    assert tools.refunds == []


def test_guard_tool_guards_one_function_tool_and_refuses_other_tools() -> None:
    """guard_tool adds the two guardrails to a copy; a hosted tool is a usage error."""
    guard, tools = shop(), Shop()
    guarded = guard_tool(tools.refund, guard)
    assert guarded is not tools.refund and guarded.name == "refund"
    assert guard_tool(guarded, guard) is guarded
    with pytest.raises(GuardrailUsageError, match="function tools only"):
        guard_tool(WebSearchTool(), guard)  # type: ignore[arg-type]


def test_the_tools_own_guardrails_still_run_after_the_guards() -> None:
    """A tool's own input guardrail runs after the guard's check, and can still refuse."""
    guard, tools = shop(), Shop()
    checked: list[str] = []

    @tool_input_guardrail
    def business_hours(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        checked.append(data.context.tool_arguments)
        return ToolGuardrailFunctionOutput.reject_content("refunds are closed today")

    refund = tools.refund.__copy__()
    refund.tool_input_guardrails = [business_hours]
    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("refund", {"order_id": "#W8855136"}, "c2")),  # the guard refuses first
            calls(("refund", {"order_id": "#W8855135"}, "c3")),  # the tool's own refuses
            [assistant_message("ok")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[tools.find_orders, refund])
    with guard.session("conv"):
        result = run(guard_agent(agent, guard), "refund")
    assert checked == ['{"order_id":"#W8855135"}']
    assert [r.guardrail.get_name() for r in result.tool_input_guardrail_results] == [
        "guardrail_enforce",
        "guardrail_enforce",
        "guardrail_enforce",
        "business_hours",
    ]
    assert tools.refunds == []


def test_wrong_arguments_are_usage_errors_that_say_what_to_pass() -> None:
    """A guard that is not a Guard, a session_id that is not a function, a bad max_items."""
    guard, tools = shop(), Shop()
    agent = tools.agent(ScriptedModel())
    with pytest.raises(GuardrailUsageError, match="needs a guardrail Guard"):
        guard_agent(agent, "guard")  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="takes an agents.Agent"):
        guard_agent(tools.refund, guard)  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="lambda context"):
        guard_agent(agent, guard, session_id="conv")  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="max_items"):
        GuardedSession(SQLiteSession("conv"), guard, max_items=0)
    with pytest.raises(GuardrailUsageError, match="max_items"):
        compact_model_input(guard, max_items=0)


def test_the_tool_runs_with_the_models_id_through_the_context_it_was_given() -> None:
    """A tool taking the ToolContext still gets it, and the id as the model wrote it."""
    guard = shop()
    seen: list[tuple[str, str]] = []

    @function_tool
    def refund(context: ToolContext[Any], order_id: str) -> str:
        """Refund."""
        seen.append((context.tool_name, order_id))
        return "ok"

    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "a"}, "c1")),
            calls(("refund", {"order_id": "W8855135"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    with guard.session("conv"):
        run(guard_agent(Agent(name="a", model=model, tools=[Shop().find_orders, refund]), guard),
            "x")  # fmt: skip
    assert seen == [("refund", "W8855135")]


# -- the adapter as a package -------------------------------------------------------------------


def test_importing_without_the_sdk_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without openai-agents, the import fails naming the extra to install."""
    real_import = builtins.__import__

    def no_agents(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "agents" or name.startswith("agents."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "guardrail.integrations.openai_agents")
    monkeypatch.setattr(builtins, "__import__", no_agents)
    with pytest.raises(ImportError, match=r"pip install 'guardrail-ids\[openai-agents\]'"):
        import guardrail.integrations.openai_agents  # noqa: F401


def test_a_guarded_run_prints_nothing(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit events never reach stdout (an MCP stdio server's channel) on their own."""
    # As a program that never configured structlog (another test in this process may have).
    monkeypatch.setattr(structlog, "is_configured", lambda: False)
    guard, tools = shop(), Shop()
    model = ScriptedModel(
        [calls(("refund", {"order_id": "#W9999999"}, "c1")), [assistant_message("ok")]]
    )
    with guard.session("conv"):
        run(guard_agent(tools.agent(model), guard), "hi", run_config=RunConfig())
    assert capfd.readouterr().out == ""


def test_the_example_runs_offline_and_shows_the_re_prompt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/openai_agents_agent.py runs with no network and prints the refusal and refund."""
    runpy.run_path(str(REPO / "examples" / "openai_agents_agent.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "tool -> guardrail refused the call to issue_refund" in printed
    assert "refunded 40 on #W2378156" in printed
    assert "refunds that ran: ['#W2378156']" in printed


# -- attacks ------------------------------------------------------------------------------------


class Escalation(BaseModel):
    """What a handoff to billing carries: the order to escalate."""

    order_id: str


def test_a_handoffs_input_is_checked_before_on_handoff_runs() -> None:
    """A handoff with input_type: the invented order id never reaches on_handoff."""
    guard = shop()
    guard.declare("transfer_to_billing", ids={"order_id": "order"})
    escalated: list[str] = []

    def on_handoff(context: RunContextWrapper[Any], given: Escalation) -> None:
        escalated.append(given.order_id)  # opens a billing case on that order

    model = ScriptedModel(
        [
            calls(("transfer_to_billing", {"order_id": "#W5555001"}, "c1")),
            [assistant_message("ok")],
        ]
    )
    billing = Agent(name="billing", model=model)
    triage = Agent(
        name="triage",
        model=model,
        handoffs=[handoff(billing, on_handoff=on_handoff, input_type=Escalation)],
    )
    with guard.session("conv"), pytest.raises(IdentifierViolation) as refused:
        run(guard_agent(triage, guard), "escalate my order")
    assert escalated == []
    assert refused.value.findings[0].problem == "unknown"


def test_an_id_annotation_on_a_function_tool_is_its_declaration() -> None:
    """No guard.declare for refund_order: its Id("order") parameter is checked all the same."""
    guard, tools = shop(), Shop()
    refunded: list[str] = []

    @function_tool
    def refund_order(order_id: Annotated[str, Id("order")]) -> str:
        """Refund an order."""
        refunded.append(order_id)
        return "refunded"

    model = ScriptedModel(
        [
            calls(("find_orders", {"customer": "cus_41ZpA9"}, "c1")),
            calls(("refund_order", {"order_id": "#W2378157"}, "c2")),
            [assistant_message("ok")],
        ]
    )
    agent = Agent(name="support", model=model, tools=[tools.find_orders, refund_order])
    with guard.session("conv"):
        run(guard_agent(agent, guard), "refund my second order")
    assert refunded == []


def test_an_id_sent_under_its_alias_is_checked() -> None:
    """The guard declares order_id; the SDK's schema (and the model) say orderId: refused."""
    guard = shop()
    guard.declare("refund_by_alias", ids={"order_id": "order"})
    refunded: list[str] = []

    @function_tool
    def refund_by_alias(order_id: Annotated[str, Field(alias="orderId")]) -> str:
        """Refund an order."""
        refunded.append(order_id)
        return "refunded"

    model = ScriptedModel(
        [calls(("refund_by_alias", {"orderId": "#W5555001"}, "c1")), [assistant_message("ok")]]
    )
    agent = Agent(name="support", model=model, tools=[refund_by_alias])
    with guard.session("conv"):
        run(guard_agent(agent, guard), "refund")
    assert refunded == []


def test_the_tools_the_model_is_sent_say_to_copy_ids_exactly() -> None:
    """Declared with guard.declare, or marked with a docstring's Args: the instruction is there."""
    guard, tools = shop(), Shop()

    @function_tool
    def cancel(order_id: Annotated[str, Id("order")]) -> str:
        """Cancel an order.

        Args:
            order_id: the order to cancel
        """
        return "cancelled"

    model = ScriptedModel([[assistant_message("ok")]])
    agent = Agent(name="support", model=model, tools=[tools.refund, tools.get_order, cancel])
    escalate = handoff(Agent(name="billing"), on_handoff=lambda c, e: None, input_type=Escalation)
    guard.declare("transfer_to_billing", ids={"order_id": "order"})
    agent.handoffs = [escalate]
    with guard.session("conv"):
        run(guard_agent(agent, guard), "hello")
    [call] = model.calls
    sent = {
        tool.name: tool.params_json_schema for tool in call.tools if isinstance(tool, FunctionTool)
    }
    sent.update({item.tool_name: item.input_json_schema for item in call.handoffs})
    for name in ("refund", "get_order", "cancel", "transfer_to_billing"):
        assert "copy the value exactly" in sent[name]["properties"]["order_id"]["description"]


def test_an_error_text_a_tool_returns_is_a_failure_that_confirms_nothing() -> None:
    """A lookup returning "Error: ..." text (no exception): nothing verified, nothing harvested."""
    guard, tools = shop(), Shop()
    guard.declare(
        "lookup_order",
        ids={"order_id": "order"},
        produces={"re:(#W\\d{7})": "order"},
        effect="read",
        verifies="on_success",
    )

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Find an order, or say why not in text."""
        return f"Error: order {order_id} not found; did you mean #W9999999?"

    model = ScriptedModel(
        [
            calls(("lookup_order", {"order_id": "#W1234567"}, "c1")),
            calls(
                ("refund", {"order_id": "#W1234567"}, "c2"),
                ("refund", {"order_id": "#W9999999"}, "c3"),
            ),
            [assistant_message("ok")],
        ]
    )
    agent = tools.agent(model)
    agent.tools.append(lookup_order)
    with guard.session("conv") as ledger:
        run(guard_agent(agent, guard), "My order is #W1234567, refund it")
        assert not ledger["order"].verified and ledger.get("order", "#W9999999") is None
    assert tools.refunds == []


def test_the_sdk_still_has_every_private_name_the_adapter_reads() -> None:
    """Each name of _sdk.UNDOCUMENTED is there on the objects the installed SDK builds.

    If this fails, openai-agents renamed or dropped one: update
    guardrail/integrations/openai_agents/_sdk.py (and the version range in pyproject).
    """
    import agents
    import agents.tool
    from agents import ItemHelpers, handoff

    from guardrail.integrations.openai_agents._sdk import UNDOCUMENTED

    @function_tool
    def ping() -> str:
        """Answers pong."""
        return "pong"

    sub = Agent(name="sub")
    holders: dict[str, list[Any]] = {
        "FunctionTool": [ping, sub.as_tool(tool_name="sub", tool_description="the sub-agent")],
        "Handoff": [handoff(sub)],
        "ItemHelpers": [ItemHelpers],
        "agents.tool": [agents.tool],
    }
    assert holders.keys() == UNDOCUMENTED.keys()
    missing = [
        f"{holder}.{name}"
        for holder, names in UNDOCUMENTED.items()
        for name in names
        if not all(hasattr(obj, name) for obj in holders[holder])
    ]
    assert not missing, (
        f"openai-agents {agents.__version__} no longer has {missing}, which the adapter "
        "reads: update guardrail/integrations/openai_agents/_sdk.py"
    )
    as_tool = holders["FunctionTool"][1]
    assert as_tool._is_agent_tool is True and as_tool._agent_instance is sub
