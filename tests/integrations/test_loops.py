"""Plain tool-call loops: OpenAI chat, Responses and Anthropic messages answered, guarded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field, validate_call
from structlog.testing import capture_logs

from guardrail import Guard, Id, IdentifierViolation, RepromptLimitExceeded
from guardrail.compaction import compact
from guardrail.errors import GuardrailUsageError
from guardrail.integrations.loops import Toolbox, arun_tool_calls, run_tool_calls
from tests.shop_case import Shop as CaseShop
from tests.shop_case import shop_guard as case_guard

SHAPES = ("openai_chat", "openai_responses", "anthropic")
ORDERS = {"#W8855135": 40, "#W8855136": 99}  # two orders one character apart


class Shop:
    """The tools of a small shop, counting what each write did and to which order."""

    def __init__(self) -> None:
        self.refunds: list[str] = []

    def get_order(self, order_id: str) -> dict[str, Any]:
        if order_id not in ORDERS:
            raise KeyError(f"no order {order_id}")
        return {"order_id": order_id, "total": ORDERS[order_id]}

    def search_orders(self, customer_id: str) -> dict[str, Any]:
        return {"orders": [{"order_id": order} for order in ORDERS]}

    def issue_refund(self, order_id: str, amount: int) -> str:
        self.refunds.append(order_id)
        return f"refunded {amount} on {order_id}"

    def tools(self) -> dict[str, Callable[..., Any]]:
        return {
            "get_order": self.get_order,
            "search_orders": self.search_orders,
            "issue_refund": self.issue_refund,
        }


def shop_guard(mode: str = "reprompt", **options: Any) -> Guard:
    """A guard that knows the shop's tools: a search and a lookup return orders; a refund writes."""
    guard = Guard(mode=mode, **options)  # type: ignore[arg-type]
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.add_kind("customer", pattern=r"cus_\w{6}")
    guard.declare(
        "search_orders",
        ids={"customer_id": "customer"},
        produces={"orders[*].order_id": "order"},
        effect="read",
    )
    guard.declare(
        "get_order", ids={"order_id": "order"}, produces={"order_id": "order"}, effect="read"
    )
    guard.declare("issue_refund", ids={"order_id": "order"}, effect="write")
    return guard


def greeted(guard: Guard, session: str = "s") -> Guard:
    """``guard`` with the user's first message observed in ``session`` (it names the customer)."""
    with guard.session(session):
        guard.observe_user("Hi, I am cus_41ZpA9.")
    return guard


def assistant(shape: str, *calls: tuple[str, str, dict[str, Any]], text: str = "") -> Any:
    """An assistant message in ``shape`` making ``calls`` (id, tool, arguments), as sent."""
    if shape == "openai_chat":
        return {
            "role": "assistant",
            "content": text or None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for call_id, name, arguments in calls
            ],
        }
    if shape == "openai_responses":
        items: list[dict[str, Any]] = []
        if text:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
            )
        items += [
            {
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": json.dumps(arguments),
            }
            for call_id, name, arguments in calls
        ]
        return items
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        for call_id, name, arguments in calls
    ]
    return {"role": "assistant", "content": blocks}


def answers(shape: str, results: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """``(call id, text, marked as an error)`` of each answer, whatever the shape."""
    if shape == "anthropic":
        assert len(results) == 1 and results[0]["role"] == "user"
        return [
            (block["tool_use_id"], block["content"], block["is_error"])
            for block in results[0]["content"]
        ]
    if shape == "openai_responses":
        return [
            (item["call_id"], item["output"], item.get("status") == "incomplete")
            for item in results
        ]
    return [
        (message["tool_call_id"], message["content"], message["content"].startswith("guardrail"))
        for message in results
    ]


def history(shape: str, user: str) -> list[Any]:
    """The start of a conversation in ``shape``."""
    if shape == "openai_responses":
        return [{"type": "message", "role": "user", "content": user}]
    return [{"role": "user", "content": user}]


def extend(shape: str, messages: list[Any], reply: Any, results: list[dict[str, Any]]) -> None:
    messages.extend(reply if shape == "openai_responses" else [reply])
    messages.extend(results)


# -- the scenario every adapter shows ----------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_a_one_character_off_id_is_refused_then_the_ledger_value_runs_once(shape: str) -> None:
    """A write with a mutated id gets the re-prompt; the retry with the ledger's value runs once."""
    guard, shop = shop_guard(), Shop()
    with guard.session("c1"):
        guard.observe_user("I am cus_41ZpA9, please refund my order")
        looked_up = run_tool_calls(
            guard,
            assistant(shape, ("c1", "search_orders", {"customer_id": "cus_41ZpA9"})),
            shop.tools(),
        )
        assert answers(shape, looked_up)[0][2] is False
        # Two neighbours swapped in #W8855135; one edit from both orders, it would name neither.
        wrong = assistant(shape, ("c2", "issue_refund", {"order_id": "#W8855153", "amount": 40}))
        [(call_id, text, error)] = answers(shape, run_tool_calls(guard, wrong, shop.tools()))
        assert (call_id, error) == ("c2", True)
        assert text.startswith("guardrail refused the call to issue_refund")
        assert "mutated" not in text and "close to" in text
        assert shop.refunds == []
        right = assistant(shape, ("c3", "issue_refund", {"order_id": "W8855135", "amount": 40}))
        [(_, text, error)] = answers(shape, run_tool_calls(guard, right, shop.tools()))
    assert (text, error) == ("refunded 40 on W8855135", False)
    assert shop.refunds == ["W8855135"]  # once, with the id as the model wrote it


@pytest.mark.parametrize("shape", SHAPES)
def test_parallel_calls_in_one_turn_are_each_answered_once_in_order(shape: str) -> None:
    """Three calls in one message, one refused and one to no tool: three answers, in call order."""
    guard, shop = greeted(shop_guard()), Shop()
    message = assistant(
        shape,
        ("a", "search_orders", {"customer_id": "cus_41ZpA9"}),
        ("b", "issue_refund", {"order_id": "#W1234567", "amount": 1}),
        ("c", "cancel_everything", {}),
        text="Let me look.",
    )
    got = answers(shape, run_tool_calls(guard, message, shop.tools(), session="s"))
    assert [call_id for call_id, _, _ in got] == ["a", "b", "c"]
    assert [error for _, _, error in got][:2] == [False, True]
    assert json.loads(got[0][1])["orders"][0]["order_id"] == "#W8855135"
    assert "no tool named 'cancel_everything'" in got[2][1]
    assert shop.refunds == []


def test_every_call_of_a_message_is_checked_before_any_runs() -> None:
    """A call may not use an id another call of the same message is about to return."""
    guard, shop = greeted(shop_guard()), Shop()
    message = assistant(
        "openai_chat",
        ("a", "search_orders", {"customer_id": "cus_41ZpA9"}),
        ("b", "issue_refund", {"order_id": "#W8855135", "amount": 5}),
    )
    got = answers("openai_chat", run_tool_calls(guard, message, shop.tools(), session="s"))
    assert got[1][1].startswith("guardrail refused the call to issue_refund")
    assert shop.refunds == []
    with guard.session("s"):
        assert (
            guard.ledger.get("order", "#W8855135") is not None
        )  # the search itself ran and was recorded


def test_in_raise_mode_a_refusal_raises_before_any_tool_of_the_message_ran() -> None:
    """raise mode: IdentifierViolation, and no call of the message ran (nothing half done)."""
    guard, shop = greeted(shop_guard("raise")), Shop()
    calls: list[str] = []
    tools = {**shop.tools(), "search_orders": lambda customer_id: calls.append(customer_id)}
    message = assistant(
        "anthropic",
        ("a", "search_orders", {"customer_id": "cus_41ZpA9"}),
        ("b", "issue_refund", {"order_id": "#W8855135", "amount": 5}),
    )
    with pytest.raises(IdentifierViolation):
        run_tool_calls(guard, message, tools, session="s")
    assert calls == [] and shop.refunds == []


def test_the_reprompt_limit_ends_a_loop_that_keeps_sending_bad_ids() -> None:
    """After max_reprompts refusals of one tool, RepromptLimitExceeded."""
    guard, shop = shop_guard(max_reprompts=2), Shop()
    bad = assistant("openai_chat", ("x", "issue_refund", {"order_id": "#W1111111", "amount": 1}))
    with guard.session("s"):
        run_tool_calls(guard, bad, shop.tools())
        run_tool_calls(guard, bad, shop.tools())
        with pytest.raises(RepromptLimitExceeded):
            run_tool_calls(guard, bad, shop.tools())


def test_observe_mode_runs_a_refused_call_and_learns_nothing_from_it() -> None:
    """observe: the call runs, is logged as would_refuse, and its result records nothing."""
    guard, shop = shop_guard("observe"), Shop()
    message = assistant("openai_chat", ("x", "get_order", {"order_id": "#W8855136"}))
    with capture_logs() as logs, guard.session("s"):
        [(_, text, _)] = answers("openai_chat", run_tool_calls(guard, message, shop.tools()))
        assert json.loads(text)["order_id"] == "#W8855136"
        assert guard.ledger.get("order", "#W8855136") is None
    assert any(event.get("outcome") == "would_refuse" for event in logs)


# -- async tools, concurrency, sessions ---------------------------------------------------------


def test_async_tools_of_one_message_run_concurrently() -> None:
    """arun_tool_calls awaits the async tools of one message together; answers keep call order."""
    guard = shop_guard()
    started: list[str] = []

    async def get_order(order_id: str) -> dict[str, Any]:
        started.append(order_id)
        while len(started) < 2:  # each waits for the other: only concurrent runs finish
            await asyncio.sleep(0)
        return {"order_id": order_id}

    async def search_orders(customer_id: str) -> dict[str, Any]:
        started.append(customer_id)
        while len(started) < 2:
            await asyncio.sleep(0)
        return {"orders": [{"order_id": "#W8855135"}]}

    async def main() -> list[dict[str, Any]]:
        async with guard.session("s"):
            guard.observe_user("I am cus_41ZpA9, order W8855136 please")
            message = assistant(
                "openai_responses",
                ("a", "get_order", {"order_id": "W8855136"}),
                ("b", "search_orders", {"customer_id": "cus_41ZpA9"}),
            )
            tools = {"get_order": get_order, "search_orders": search_orders}
            return await asyncio.wait_for(arun_tool_calls(guard, message, tools), 5)

    got = answers("openai_responses", asyncio.run(main()))
    assert [call_id for call_id, _, _ in got] == ["a", "b"]
    assert json.loads(got[0][1]) == {"order_id": "W8855136"}


def test_a_sync_loop_refuses_an_async_tool_before_any_tool_runs() -> None:
    """run_tool_calls on a message with an async tool: advice, and no tool of it ran."""
    ran: list[str] = []

    async def get_order(order_id: str) -> str:
        return order_id

    def search_orders(customer_id: str) -> str:
        ran.append(customer_id)
        return "[]"

    guard = greeted(shop_guard())
    tools = {"get_order": get_order, "search_orders": search_orders}
    with guard.session("s"):
        guard.observe_user("W8855135")
        message = assistant(
            "openai_chat",
            ("a", "search_orders", {"customer_id": "cus_41ZpA9"}),
            ("b", "get_order", {"order_id": "W8855135"}),
        )
        with pytest.raises(GuardrailUsageError, match="arun_tool_calls"):
            run_tool_calls(guard, message, tools)
        assert ran == []
        # A sync callable that hands back a coroutine: an error answer, never awaited.
        sneaky = {"get_order": lambda order_id: get_order(order_id)}
        lone = assistant("openai_chat", ("c", "get_order", {"order_id": "W8855135"}))
        [(_, text, _)] = answers("openai_chat", run_tool_calls(guard, lone, sneaky))
    assert "returned a coroutine" in text


def test_two_conversations_at_once_never_see_each_others_ids() -> None:
    """Two sessions run concurrently: an id found in one is refused in the other."""
    guard, shop = shop_guard(), Shop()  # each conversation's user names their own order

    async def conversation(session: str, order: str) -> list[tuple[str, str, bool]]:
        await arun_tool_calls(
            guard,
            assistant("anthropic", ("a", "get_order", {"order_id": order})),
            shop.tools(),
            session=session,
        )
        await asyncio.sleep(0)
        other = "#W8855136" if order == "#W8855135" else "#W8855135"
        write = assistant("anthropic", ("b", "issue_refund", {"order_id": other, "amount": 1}))
        return answers(
            "anthropic", await arun_tool_calls(guard, write, shop.tools(), session=session)
        )

    async def main() -> list[list[tuple[str, str, bool]]]:
        for session, order in (("one", "#W8855135"), ("two", "#W8855136")):
            async with guard.session(session):
                guard.observe_user(f"my order is {order}")
        return list(
            await asyncio.gather(conversation("one", "#W8855135"), conversation("two", "#W8855136"))
        )

    for [(_, text, error)] in asyncio.run(main()):
        assert error and "guardrail refused" in text
    assert shop.refunds == []


def test_outside_any_session_nothing_runs() -> None:
    """No session and none given: a usage error before any tool runs."""
    guard, shop = shop_guard(), Shop()
    message = assistant("openai_chat", ("a", "search_orders", {"customer_id": "cus_41ZpA9"}))
    with pytest.raises(GuardrailUsageError):
        run_tool_calls(guard, message, shop.tools())


@pytest.mark.parametrize("shape", SHAPES)
def test_after_a_compaction_the_next_call_carries_the_verbatim_id(shape: str) -> None:
    """Mid-loop compaction keeps the id verbatim in its ledger block; the next write uses it."""
    guard, shop = shop_guard(), Shop()
    messages = history(shape, "I am cus_41ZpA9. Refund the blender from my first order.")
    with guard.session("s"):
        guard.observe_user("I am cus_41ZpA9. Refund the blender from my first order.")
        for n in range(3):
            reply = assistant(shape, (f"s{n}", "search_orders", {"customer_id": "cus_41ZpA9"}))
            extend(shape, messages, reply, run_tool_calls(guard, reply, shop.tools()))
            messages += history(shape, f"and now? ({n})")
        compacted = compact(messages, guard.ledger, guard=guard, keep_recent=1).messages
        # The scripted model copies the order from the ledger block of the compacted context.
        block = json.dumps(compacted)
        assert "#W8855135" in block
        reply = assistant(shape, ("r", "issue_refund", {"order_id": "#W8855135", "amount": 40}))
        [(_, text, error)] = answers(shape, run_tool_calls(guard, reply, shop.tools()))
    assert (text, error) == ("refunded 40 on #W8855135", False)


# -- attacker's view: nothing but a declared field of a successful result verifies --------------


def test_an_id_the_user_typed_does_not_verify_a_write() -> None:
    """An order id in user text is refused by a write until a lookup confirms it."""
    guard, shop = shop_guard(), Shop()
    with guard.session("s"):
        guard.observe_user("Refund #W8855136 now, it is mine.")
        write = assistant(
            "openai_chat", ("a", "issue_refund", {"order_id": "#W8855136", "amount": 99})
        )
        [(_, text, _)] = answers("openai_chat", run_tool_calls(guard, write, shop.tools()))
    assert "typed by the user" in text and shop.refunds == []


def test_an_id_in_a_tool_error_never_verifies() -> None:
    """A tool that raises with an id in its message: an error answer, nothing recorded."""
    guard, shop = shop_guard(), Shop()

    def get_order(order_id: str) -> dict[str, Any]:
        raise LookupError(f"{order_id} not found; did you mean #W8855136?")

    tools = {**shop.tools(), "get_order": get_order}
    with guard.session("s"):
        guard.observe_user("my order is W8855135")
        lookup = assistant("anthropic", ("a", "get_order", {"order_id": "W8855135"}))
        [(_, text, error)] = answers("anthropic", run_tool_calls(guard, lookup, tools))
        assert error and "LookupError" in text and "#W8855136" in text
        assert guard.ledger.get("order", "#W8855136") is None
        assert not guard.ledger["order"].verified  # the failed lookup confirmed nothing
        write = assistant(
            "anthropic", ("b", "issue_refund", {"order_id": "#W8855136", "amount": 1})
        )
        [(_, text, error)] = answers("anthropic", run_tool_calls(guard, write, tools))
    assert error and shop.refunds == []


def test_an_error_shaped_result_never_verifies() -> None:
    """A tool returning {"error": ...} naming an id: nothing recorded from it."""
    guard, shop = shop_guard(), Shop()
    tools = {
        **shop.tools(),
        "get_order": lambda order_id: {"error": "gone", "order_id": "#W8855136"},
    }
    with guard.session("s"):
        guard.observe_user("W8855135")
        run_tool_calls(
            guard, assistant("openai_chat", ("a", "get_order", {"order_id": "W8855135"})), tools
        )
        assert guard.ledger.get("order", "#W8855136") is None


@pytest.mark.parametrize("shape", SHAPES)
def test_an_error_shaped_result_is_answered_as_an_error(shape: str) -> None:
    """{"error": ...} returned by a tool is marked as the failure it is, where the shape can."""
    guard, shop = shop_guard(), Shop()
    tools = {**shop.tools(), "get_order": lambda order_id: {"error": "gone"}}
    with guard.session("s"):
        guard.observe_user("W8855135")
        lookup = assistant(shape, ("a", "get_order", {"order_id": "W8855135"}))
        [(_, text, error)] = answers(shape, run_tool_calls(guard, lookup, tools))
    assert json.loads(text) == {"error": "gone"}
    assert error or shape == "openai_chat"  # chat has no field for it; its readers see the text


@pytest.mark.parametrize("shape", SHAPES)
def test_with_a_secret_each_result_is_sealed_and_each_failure_is_not(shape: str) -> None:
    """A server's guard seals what its tools returned; an error answer carries no seal."""
    guard, shop = greeted(shop_guard(secret="the server's key")), Shop()
    message = assistant(
        shape,
        ("a", "get_order", {"order_id": "#W8855135"}),
        ("b", "get_order", {"order_id": "#W0000001"}),  # no such order: the tool raises
    )
    with guard.session("s"):
        guard.observe_user("my orders are #W8855135 and #W0000001")
        [(_, found, _), (_, failed, error)] = answers(
            shape, run_tool_calls(guard, message, shop.tools())
        )
    text = found.rpartition("\n")[0]
    assert json.loads(text) == {"order_id": "#W8855135", "total": 40}
    # The seal over the call as the model wrote it, the one seal_result gives for it.
    arguments = {"order_id": "#W8855135"}
    assert found == guard.seal_result("get_order", arguments, text, call_id="a", session="s")
    assert failed.startswith("guardrail: get_order failed: KeyError") and error
    assert "seal" not in failed
    unsealed = shop_guard()  # no secret: results go out as the tools returned them
    with unsealed.session("s"):
        unsealed.observe_user("my order is #W8855135")
        [(_, plain, _)] = answers(
            shape,
            run_tool_calls(
                unsealed,
                assistant(shape, ("a", "get_order", {"order_id": "#W8855135"})),
                shop.tools(),
            ),
        )
    assert plain == text


def test_ids_in_a_refusal_or_in_model_text_never_verify() -> None:
    """The model's own text, and a refusal sent back to it, add nothing to the ledger."""
    guard, shop = shop_guard(), Shop()
    with guard.session("s"):
        message = assistant(
            "openai_responses",
            ("a", "issue_refund", {"order_id": "#W8855136", "amount": 1}),
            text="The order is #W8855136, I looked it up.",
        )
        refused = run_tool_calls(guard, message, shop.tools())
        assert refused[0]["status"] == "incomplete"
        # A tool that echoes the refusal it was shown: recorded as a failure.
        echo = {**shop.tools(), "get_order": lambda order_id: refused[0]["output"] + " #W8855136"}
        run_tool_calls(
            guard, assistant("openai_responses", ("b", "get_order", {"order_id": "x"})), echo
        )
        assert guard.ledger.get("order", "#W8855136") is None
        again = assistant(
            "openai_responses", ("c", "issue_refund", {"order_id": "#W8855136", "amount": 1})
        )
        assert run_tool_calls(guard, again, shop.tools())[0]["status"] == "incomplete"
    assert shop.refunds == []


def test_a_guard_that_refuses_undeclared_tools_rejects_a_toolbox_with_one() -> None:
    """refuse_undeclared=True: an undeclared tool in the toolbox is a usage error up front."""
    guard, shop = shop_guard(refuse_undeclared=True), Shop()
    with pytest.raises(GuardrailUsageError, match="delete_account is not declared"):
        Toolbox(guard, {**shop.tools(), "delete_account": lambda account: "gone"})


def test_an_undeclared_tool_runs_with_a_warning_by_default() -> None:
    """The default policy: an undeclared tool runs and is logged as undeclared."""
    guard = shop_guard()
    with capture_logs() as logs:
        got = run_tool_calls(
            guard,
            assistant("openai_chat", ("a", "ping", {})),
            {"ping": lambda: "pong"},
            session="s",
        )
    assert got[0]["content"] == "pong"
    assert any(event["event"] == "guardrail.undeclared_tool" for event in logs)


# -- arguments, schemas, results ----------------------------------------------------------------


def test_arguments_that_do_not_match_the_signature_are_an_error_answer() -> None:
    """The schema pydantic builds from the signature is enforced; the tool does not run."""
    guard, shop = shop_guard(), Shop()
    with guard.session("s"):
        guard.observe_user("W8855135")
        run_tool_calls(
            guard,
            assistant("openai_chat", ("a", "get_order", {"order_id": "W8855135"})),
            shop.tools(),
        )
        bad = assistant(
            "openai_chat", ("b", "issue_refund", {"order_id": "#W8855135", "amount": "all"})
        )
        [(_, text, _)] = answers("openai_chat", run_tool_calls(guard, bad, shop.tools()))
        missing = assistant("openai_chat", ("c", "issue_refund", {"order_id": "#W8855135"}))
        [(_, text2, _)] = answers("openai_chat", run_tool_calls(guard, missing, shop.tools()))
    assert text.startswith(
        "guardrail: invalid arguments for issue_refund: amount: 'all' is not of type 'integer'"
    )
    assert "'amount' is a required property" in text2
    assert shop.refunds == []


def test_arguments_that_are_not_json_are_an_error_answer() -> None:
    """Broken JSON arguments: the call is answered with an error, nothing runs."""
    guard, shop = shop_guard(), Shop()
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_order", "arguments": "{oops"}}
        ],
    }
    got = run_tool_calls(guard, message, shop.tools(), session="s")
    assert got[0]["tool_call_id"] == "a" and "not a JSON object" in got[0]["content"]


def test_schemas_may_be_the_tool_definitions_sent_to_the_api() -> None:
    """schemas= takes OpenAI and Anthropic tool definitions; None turns validation off."""
    guard, shop = shop_guard(), Shop()
    definitions = [
        {"name": "get_order", "input_schema": {"type": "object", "required": ["order_id"]}},
        {
            "type": "function",
            "function": {
                "name": "search_orders",
                "parameters": {
                    "type": "object",
                    "properties": {"customer_id": {"type": "string", "pattern": "^cus_"}},
                },
            },
        },
    ]
    box = Toolbox(guard, shop.tools(), schemas=definitions).compile()
    message = assistant("openai_chat", ("a", "search_orders", {"customer_id": "nobody"}))
    got = run_tool_calls(guard, message, box, session="s")
    assert "does not match '^cus_'" in got[0]["content"]
    with pytest.raises(GuardrailUsageError, match="not a valid JSON schema"):
        Toolbox(guard, shop.tools(), schemas={"get_order": {"type": 12}}).compile()
    with pytest.raises(GuardrailUsageError, match="not in tools: nope"):
        Toolbox(guard, shop.tools(), schemas={"nope": None})


def test_results_are_json_text_and_pydantic_models_are_harvested() -> None:
    """A pydantic result goes back as JSON and its Id fields enter the ledger."""
    from pydantic import BaseModel

    class Order(BaseModel):
        order_id: Annotated[str, Id("order")]
        total: int

    guard = shop_guard()
    guard.declare("fetch", ids={"order_id": "order"}, effect="read")
    with guard.session("s"):
        guard.observe_user("W8855135")
        got = run_tool_calls(
            guard,
            assistant("openai_chat", ("a", "fetch", {"order_id": "W8855135"})),
            {"fetch": lambda order_id: Order(order_id=order_id, total=3)},
        )
        assert json.loads(got[0]["content"]) == {"order_id": "W8855135", "total": 3}
        assert guard.ledger["order"].verified


def test_a_function_guarded_by_the_decorator_is_checked_once() -> None:
    """@guard.tool functions run undecorated: one check, one record, with the call id."""
    guard = shop_guard()
    done: list[str] = []

    @guard.tool(effect="write")
    def cancel(order_id: Annotated[str, Id("order")]) -> str:
        done.append(order_id)
        return "cancelled"

    with capture_logs() as logs, guard.session("s"):
        guard.observe_user("#W8855135")
        run_tool_calls(
            guard,
            assistant("openai_chat", ("a", "get_order", {"order_id": "#W8855135"})),
            Shop().tools(),
        )
        got = run_tool_calls(
            guard, assistant("openai_chat", ("b", "cancel", {"order_id": "W8855135"})), [cancel]
        )
    assert got[0]["content"] == "cancelled" and done == ["W8855135"]
    checks = [
        e for e in logs if e["event"] == "guardrail.call_checked" and e.get("tool") == "cancel"
    ]
    assert len(checks) == 1
    other = shop_guard()
    with pytest.raises(GuardrailUsageError, match="another Guard"):
        Toolbox(other, [cancel])
    with pytest.raises(GuardrailUsageError, match="declared as 'cancel'"):
        Toolbox(guard, {"cancel_order": cancel})  # under another name it would go unchecked


def test_server_tools_and_sdk_objects_are_read_as_the_api_sends_them() -> None:
    """An SDK object is read by model_dump; Anthropic server_tool_use blocks are not answered."""

    class Message:
        def model_dump(self, **options: Any) -> dict[str, Any]:
            return {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "server_tool_use", "id": "srv", "name": "web_search", "input": {}},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "search_orders",
                        "input": {"customer_id": "cus_41ZpA9"},
                    },
                ],
            }

    guard, shop = greeted(shop_guard()), Shop()
    got = run_tool_calls(guard, Message(), shop.tools(), session="s")
    assert [block["tool_use_id"] for block in got[0]["content"]] == ["t1"]


def test_a_message_with_no_tool_calls_gets_no_answers() -> None:
    """A final answer: nothing to run, nothing returned."""
    guard = shop_guard()
    finals: list[Any] = [
        {"role": "assistant", "content": "Done."},
        [],
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]
    for message in finals:
        assert run_tool_calls(guard, message, {}, session="s") == []


def test_bad_tools_are_usage_errors() -> None:
    """Two tools of one name, a nameless callable, a non-callable: each a clear usage error."""
    guard = shop_guard()
    with pytest.raises(GuardrailUsageError, match="two tools are named"):
        Toolbox(guard, [Shop().get_order, Shop().get_order])
    with pytest.raises(GuardrailUsageError, match="not callable"):
        Toolbox(guard, {"x": 3})  # type: ignore[dict-item]
    with pytest.raises(GuardrailUsageError, match="mapping of tool name"):
        Toolbox(guard, "get_order")  # type: ignore[arg-type]


# -- the tools bound to the guard, as every adapter binds them ---------------------------------

FOREIGN = "#W5555001"  # an order no tool of the conversation returned


def _search(guard: Guard, tools: dict[str, Callable[..., Any]]) -> None:
    """The model searches the customer's orders (so a write may take them)."""
    found = assistant("openai_chat", ("a", "search_orders", {"customer_id": "cus_41ZpA9"}))
    run_tool_calls(guard, found, tools)


def test_an_id_annotation_on_a_function_is_its_declaration() -> None:
    """A function whose parameter is marked Id("order") is declared by the mark: checked."""
    guard, shop = shop_guard(), Shop()
    refunded: list[str] = []

    def refund(order_id: Annotated[str, Id("order")]) -> str:
        refunded.append(order_id)
        return "refunded"

    tools = {**shop.tools(), "refund": refund}
    with greeted(guard).session("s"):
        _search(guard, tools)
        for call_id, order in (("b", "#W8855153"), ("c", FOREIGN), ("d", "#W8855135")):
            message = assistant("openai_chat", (call_id, "refund", {"order_id": order}))
            run_tool_calls(guard, message, tools)
    assert refunded == ["#W8855135"]
    assert guard.specs["refund"].effect == "write"


def test_a_marked_function_is_declared_for_a_guard_that_refuses_undeclared_tools() -> None:
    """Under refuse_undeclared, a tool's Id marks are its declaration: the toolbox takes it."""
    guard = shop_guard(refuse_undeclared=True)

    def refund(order_id: Annotated[str, Id("order")]) -> str:
        return "refunded"

    Toolbox(guard, {"refund": refund})
    assert "refund" in guard.specs


class _Refunds:
    """A refund whose id parameter the model sends as ``orderId`` (pydantic validates it)."""

    def __init__(self) -> None:
        self.done: list[str] = []

        @validate_call
        def refund(order_id: Annotated[str, Field(alias="orderId")], amount: int) -> str:
            self.done.append(order_id)
            return f"refunded {amount}"

        self.refund = refund


def test_an_id_sent_under_its_alias_is_checked() -> None:
    """The schema says orderId, the declaration order_id: the check reads what the model sent."""
    guard, shop, refunds = shop_guard(), Shop(), _Refunds()
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    tools = {**shop.tools(), "refund": refunds.refund}
    with greeted(guard).session("s"):
        _search(guard, tools)
        refused = run_tool_calls(
            guard,
            assistant("openai_chat", ("b", "refund", {"orderId": FOREIGN, "amount": 5})),
            tools,
        )
        ran = run_tool_calls(
            guard,
            assistant("openai_chat", ("c", "refund", {"orderId": "W8855135", "amount": 5})),
            tools,
        )
    assert refused[0]["content"].startswith("guardrail refused the call to refund")
    assert ran[0]["content"] == "refunded 5"
    assert refunds.done == ["W8855135"]  # under the name the model sent, as it wrote it


def test_a_declared_id_the_tools_schema_does_not_have_is_a_usage_error() -> None:
    """A declaration checking order_id where the schema says orderId fails before anything runs."""
    guard = shop_guard()
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    ran: list[Any] = []

    def refund(**arguments: Any) -> str:
        ran.append(arguments)
        return "refunded"

    schema = {
        "type": "object",
        "properties": {"orderId": {"type": "string"}},
        "required": ["orderId"],
    }
    box = Toolbox(guard, {"refund": refund}, schemas={"refund": schema})
    message = assistant("openai_chat", ("a", "refund", {"orderId": FOREIGN}))
    with pytest.raises(
        GuardrailUsageError, match="has no 'order_id' there \\(it has: 'orderId'\\)"
    ):
        run_tool_calls(guard, message, box, session="s")
    assert ran == []


@pytest.mark.parametrize("shape", SHAPES)
def test_the_definitions_the_model_is_given_say_to_copy_ids_exactly(shape: str) -> None:
    """Toolbox.definitions: each id parameter carries the instruction, marked or declared."""
    guard, shop = shop_guard(), Shop()

    def refund(order_id: Annotated[str, Id("order")], amount: int) -> str:
        """Refund an order."""
        return "refunded"

    box = Toolbox(guard, {**shop.tools(), "refund": refund})
    found = {}
    for definition in box.definitions(shape):  # type: ignore[arg-type]
        spec = definition.get("function", definition)
        found[spec["name"]] = (
            spec.get("parameters") or spec["input_schema"],
            spec.get("description"),
        )
    ids = {"get_order": "order_id", "refund": "order_id", "search_orders": "customer_id"}
    for name, param in ids.items():
        described = found[name][0]["properties"][param]["description"]
        assert "copy the value exactly" in described, name
    assert "copy" not in json.dumps(found["issue_refund"][0]["properties"]["amount"])
    assert found["refund"][1] == "Refund an order."
    with pytest.raises(GuardrailUsageError, match="unknown shape"):
        box.definitions("gemini")  # type: ignore[arg-type]


def test_the_plain_loop_example_runs_offline() -> None:
    """examples/plain_loop.py: a swapped id refused, the ledger's run once, after a compaction."""
    example = Path(__file__).resolve().parents[2] / "examples" / "plain_loop.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "c2: guardrail refused the call to issue_refund; the tool did not run.",
        "c3: refunded 40 on #W8855135",
        "final: Your blender is refunded. (refunds: ['#W8855135'])",
    ]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_error_text_result_is_answered_as_a_failure_and_confirms_nothing(shape: str) -> None:
    """The shop's "Error: user not found" (text, no exception): flagged, nothing confirmed."""
    guard, shop = case_guard(), CaseShop()
    with guard.session("s"):
        guard.observe_user("I am noah_brown_1234, change my address")
        lookup = assistant(shape, ("a", "get_user_details", {"user_id": "noah_brown_1234"}))
        [(_, text, error)] = answers(shape, run_tool_calls(guard, lookup, shop.tools()))
        assert text == "Error: user not found"
        assert error or shape == "openai_chat"  # chat has no field for it; the text says it
        assert not guard.ledger["user"].verified
        write = assistant(
            shape, ("b", "modify_user_address", {"user_id": "noah_brown_1234", "address": "x"})
        )
        [(_, text, _)] = answers(shape, run_tool_calls(guard, write, shop.tools()))
    assert "typed by the user" in text
    assert shop.received("modify_user_address") == []


def test_the_models_correct_spelling_runs_as_it_is_in_the_shop_case() -> None:
    """The user typed W5061109, the shop wrote #W5061109: run_tool_calls passes #W5061109."""
    guard, shop = case_guard(), CaseShop()
    with guard.session("s"):
        guard.observe_user("I am yusuf_rossi_9620; cancel W5061109")
        for call_id, tool, arguments in (
            ("a", "get_user_details", {"user_id": "yusuf_rossi_9620"}),
            ("b", "cancel_pending_order", {"order_id": "#W5061109", "reason": "no longer needed"}),
        ):
            run_tool_calls(
                guard, assistant("openai_chat", (call_id, tool, arguments)), shop.tools()
            )
    assert shop.received("cancel_pending_order")[0]["order_id"] == "#W5061109"
    assert shop.orders["#W5061109"]["status"] == "cancelled"
