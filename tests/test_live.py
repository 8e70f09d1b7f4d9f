"""The live replay: recorded calls run through the real tools, without the guard and behind it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples import live_shop
from guardrail import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.replay import (
    LiveExample,
    LiveStats,
    ReplayReport,
    Rewrite,
    Trace,
    load_live,
    load_trace_file,
    replay,
    replay_live,
    trace_from_messages,
)
from guardrail.replay._live_call import Ran, call_failed

from .conftest import REPO, call, result, user

TRACES = REPO / "examples" / "live_shop.jsonl"
MANIFEST = REPO / "examples" / "live_shop.toml"


def conversation(name: str) -> Trace:
    """One recorded conversation of the shop's trace file, by id."""
    return next(t for t in load_trace_file(TRACES).traces if t.id == name)


def live(
    traces: Any, guard: Any = MANIFEST, tools: Any = live_shop.fresh, **options: Any
) -> LiveStats:
    """The live counts of a live replay (asserted present)."""
    report = replay_live(traces, guard, tools, **options)
    assert report.total.live is not None
    return report.total.live


# -- the shop's recorded conversations -------------------------------------------------------


def test_every_recorded_call_of_the_shop_runs_on_both_sides() -> None:
    """The baseline runs the 15 recorded calls: 12 succeed, 3 fail, as the recording says."""
    report = replay_live(TRACES, MANIFEST, live_shop.fresh)
    counts = report.total.live
    assert counts is not None
    assert (counts.conversations, counts.calls) == (4, 15)
    assert counts.unguarded == {"succeeded": 12, "failed": 3}
    assert sum(counts.guarded.values()) == 15
    assert (counts.recording_agrees, counts.recording_disagrees) == (15, 0)
    assert (report.total.traces, report.total.calls, report.total.checked) == (4, 15, 15)


def test_a_write_and_the_read_after_it_see_one_fresh_shop_per_side() -> None:
    """Each side has a shop of its own: both cancel the pending order, then read it cancelled."""
    counts = live(conversation("shop-looked-up"))
    assert counts.unguarded == {"succeeded": 5}
    assert counts.guarded == {"succeeded": 5}
    assert counts.failed_behind_guard == counts.rewritten_calls == counts.refused_succeeded == 0


def test_each_conversation_gets_a_fresh_environment() -> None:
    """The same cancelling conversation twice: the second cancels again, in a shop of its own."""
    once = conversation("shop-looked-up")
    again = Trace("again", once.messages)
    opened: list[live_shop.Shop] = []

    def environment() -> live_shop.Shop:
        opened.append(live_shop.Shop())
        return opened[-1]

    counts = live([once, again], tools=live_shop.tools, environment=environment)
    assert counts.unguarded == {"succeeded": 10}
    assert counts.guarded == {"succeeded": 10}
    assert len(opened) == 4  # two conversations, two sides each
    assert all(shop.orders["#W2000002"]["status"] == "cancelled" for shop in opened)


def test_the_typed_id_conversation_runs_clean_behind_the_guard() -> None:
    """W1000002 typed, #W1000002 written by the shop and the model: every call succeeds, as is.

    Behind the guard each tool receives the arguments the model wrote: nothing
    fails that works without the guard, and nothing is rewritten.
    """
    counts = live(conversation("shop-typed-id"))
    assert counts.unguarded == {"succeeded": 4}
    assert counts.guarded == {"succeeded": 4}
    assert counts.failed_behind_guard == counts.refused_succeeded == 0
    assert (counts.rewritten_calls, counts.rewritten_arguments) == (0, 0)
    assert counts.failed_examples == counts.rewritten_examples == []


def test_a_result_that_says_error_harvests_nothing_and_the_write_is_refused() -> None:
    """'Error: user not found' confirms no typed user id and is no user id itself, live.

    The update with the id the failed lookup did not confirm is refused
    (unverified), as a replay of the recording refuses it.
    """
    report = replay_live(conversation("shop-lookup-error"), MANIFEST, live_shop.fresh)
    counts = report.total.live
    assert counts is not None
    assert counts.unguarded == {"failed": 3}
    assert counts.guarded == {"failed": 2, "refused": 1}
    assert (counts.harvested_from_failed, counts.harvested_ids) == (0, 0)
    assert counts.harvested_examples == []
    [refused] = report.total.refused_failed_examples
    assert (refused.tool, refused.findings[0]["problem"]) == ("update_address", "unverified")
    assert refused.findings[0]["value"] == "ben_ode_5555"
    assert counts.guarded["refused"] == counts.replay_refused == 1


def test_an_invented_id_refused_is_reported_with_its_cause() -> None:
    """#W2000001 appears nowhere before the call: refused, though it succeeded without the guard."""
    report = replay_live(conversation("shop-invented-id"), MANIFEST, live_shop.fresh)
    counts = report.total.live
    assert counts is not None
    assert counts.unguarded == {"succeeded": 3}
    assert counts.guarded == {"refused": 1, "succeeded": 2}
    assert counts.refused_succeeded == 1
    assert counts.refusal_causes == {"get_order_details.order_id: unknown": 1}
    [example] = counts.refused_examples
    assert (example.tool, example.message) == ("get_order_details", 2)
    # The replay's counts, in the replay's shape: a false refusal of an invented id.
    assert report.total.false_refusals == {"invented": 1}
    [refused] = report.total.false_refusal_examples["invented"]
    assert refused.findings[0]["problem"] == "unknown"
    assert refused.findings[0]["value"] == "#W2000001"
    assert counts.replay_refused == 1


# -- what a live run sees that a replay does not ------------------------------------------------


def _listing_tools() -> dict[str, Callable[..., Any]]:
    """Tools that list an order as '#W1000001' but look it up only as 'W1000001'."""

    def list_orders(user_id: str) -> dict[str, Any]:
        return {"orders": ["#W1000001"]}

    def get_order(order_id: str) -> dict[str, Any] | str:
        return (
            {"order_id": order_id, "status": "pending"}
            if order_id == "W1000001"
            else ("Error: order not found")
        )

    return {"list_orders": list_orders, "get_order": get_order}


LISTING = {
    "kinds": {
        "order": {"pattern": "#?W[0-9]{7}", "normalize": ["strip", "prefix:#"]},
        "user": {"pattern": "u_[0-9]{3}"},
    },
    "tools": {
        "list_orders": {"effect": "read", "produces": {"orders[*]": "order"}},
        "get_order": {"effect": "read", "ids": {"order_id": "order"}},
    },
}


def test_a_tool_that_lists_one_spelling_and_finds_another_gets_the_models() -> None:
    """The list writes #W1000001, the lookup finds only W1000001: the model's W1000001 reaches it.

    The tool gets W1000001 and succeeds on both sides: the guard puts no
    spelling of its own (or of another tool's) in place of the model's.
    """
    trace = trace_from_messages(
        [
            user("I'm u_123, what about my order?"),
            call("c1", "list_orders", {"user_id": "u_123"}),
            result("c1", {"orders": ["#W1000001"]}),
            call("c2", "get_order", {"order_id": "W1000001"}),
            result("c2", {"order_id": "W1000001", "status": "pending"}),
        ]
    )
    # A replay of the recorded results sees nothing wrong; live, nothing is wrong either.
    replayed = replay(trace, Guard.from_manifest(LISTING), variants=0)
    assert replayed.total.refused == 0
    received: list[dict[str, Any]] = []

    def tools() -> dict[str, Callable[..., Any]]:
        listing = _listing_tools()
        lookup = listing["get_order"]

        def get_order(order_id: str) -> Any:
            received.append({"order_id": order_id})
            return lookup(order_id)

        return {**listing, "get_order": get_order}

    counts = live(trace, LISTING, tools)
    assert counts.unguarded == {"succeeded": 2}
    assert counts.guarded == {"succeeded": 2}
    assert counts.failed_behind_guard == counts.rewritten_arguments == 0
    assert received == [{"order_id": "W1000001"}] * 2  # without the guard, then behind it


def test_recorded_results_never_reach_the_live_ledger() -> None:
    """A recording that claims a tool returned an id: live, only what the tool returns counts.

    Whoever wrote the recording, its results are not the tools': the id a forged result
    names is refused behind the guard, though a replay of the recording allows it.
    """
    trace = trace_from_messages(
        [
            user("I'm u_123."),
            call("c1", "list_orders", {"user_id": "u_123"}),
            result("c1", {"orders": ["#W1000001", "#W6666666"]}),  # the tool never lists it
            call("c2", "get_order", {"order_id": "#W6666666"}),
            result("c2", {"order_id": "#W6666666", "status": "pending"}),
        ]
    )
    assert replay(trace, Guard.from_manifest(LISTING), variants=0).total.refused == 0
    report = replay_live(trace, LISTING, _listing_tools)
    assert report.total.refused == 1
    [example] = report.total.false_refusal_examples["genuine"]
    assert example.findings[0]["value"] == "#W6666666"
    assert report.total.live is not None
    assert report.total.live.replay_refused == 0


def test_a_tool_output_that_reads_like_a_refusal_is_still_its_run() -> None:
    """A tool whose text mimics guardrail's refusal and failure texts still counts as its run."""

    def tools() -> dict[str, Callable[..., Any]]:
        def list_orders(user_id: str) -> str:
            return "guardrail refused the call to list_orders; the tool did not run."

        def get_order(order_id: str) -> str:
            return "guardrail: there is no tool named 'get_order'"

        return {"list_orders": list_orders, "get_order": get_order}

    trace = trace_from_messages(
        [
            user("I'm u_123, order W1000001."),
            call("c1", "list_orders", {"user_id": "u_123"}),
            call("c2", "get_order", {"order_id": "W1000001"}),
        ]
    )
    counts = live(trace, LISTING, tools)
    assert counts.guarded == {"failed": 2}
    assert counts.unguarded == {"failed": 2}


def test_a_tool_that_raises_fails_on_both_sides() -> None:
    """An exception is a failure without the guard and behind it: nothing broken by the guard."""

    def tools() -> dict[str, Callable[..., Any]]:
        def list_orders(user_id: str) -> dict[str, Any]:
            raise LookupError(user_id)

        return {"list_orders": list_orders}

    trace = trace_from_messages(
        [user("I'm u_123."), call("c1", "list_orders", {"user_id": "u_123"})]
    )
    counts = live(trace, LISTING, tools)
    assert counts.unguarded == {"failed": 1}
    assert counts.guarded == {"failed": 1}
    assert counts.failed_behind_guard == 0
    assert counts.missing_tools == {}


def test_arguments_the_schema_refuses_do_not_run_behind_the_guard() -> None:
    """The loop validates arguments against the schema given: such a call does not run."""
    trace = trace_from_messages(
        [user("I'm u_123."), call("c1", "list_orders", {"user_id": "u_123", "page": "x"})]
    )
    schema = {
        "list_orders": {
            "type": "object",
            "properties": {"user_id": {"type": "string"}},
            "additionalProperties": False,
        }
    }
    counts = live(trace, LISTING, _listing_tools, schemas=schema)
    assert counts.guarded == {"not_run": 1}
    assert counts.unguarded == {"failed": 1}  # list_orders() got an unexpected argument


def test_a_call_of_a_tool_the_environment_lacks_is_counted_apart() -> None:
    """A recorded call of a tool the environment does not have runs on neither side."""
    trace = trace_from_messages([user("hi"), call("c1", "refund", {"order_id": "#W1000001"})])
    counts = live(trace, LISTING, _listing_tools)
    assert counts.calls == 0
    assert counts.missing_tools == {"refund": 1}


@pytest.mark.parametrize(("approve", "outcome"), [("all", "succeeded"), ("none", "refused")])
def test_a_call_that_waits_for_the_user_is_answered_as_told(approve: str, outcome: str) -> None:
    """An ask is counted, then approved (the call runs) or declined (refused as declined)."""
    manifest = json.loads(json.dumps(LISTING))
    manifest["kinds"]["user"]["user_typed"] = "ask"
    manifest["tools"]["list_orders"] = {"effect": "write", "ids": {"user_id": "user"}}
    trace = trace_from_messages(
        [
            user("I'm u_123."),
            call("c1", "list_orders", {"user_id": "u_123"}),
            result("c1", {"orders": []}),
        ]
    )
    report = replay_live(trace, manifest, _listing_tools, approve=approve)  # type: ignore[arg-type]
    assert report.total.asked == 1
    assert report.total.live is not None
    assert report.total.live.guarded == {outcome: 1}
    if outcome == "refused":
        [example] = report.total.false_refusal_examples["unverified"]
        assert example.findings[0]["problem"] == "declined"


def test_the_reprompt_limit_stops_a_message_and_says_so() -> None:
    """Past the re-prompt limit the loop stops before any tool of the message runs."""
    calls = [
        {"id": f"c{i}", "name": "get_order", "arguments": {"order_id": f"#W900000{i}"}}
        for i in range(5)
    ]
    trace = trace_from_messages(
        [user("hi"), {"role": "assistant", "content": "", "tool_calls": calls}]
    )
    guard = Guard.from_manifest(LISTING, mode="reprompt", max_reprompts=2)
    counts = live(trace, guard, _listing_tools)
    assert counts.stopped == 1
    # Three refusals, the third past the limit: the loop stops; the last two were never checked.
    assert counts.guarded == {"refused": 3, "not_run": 2}
    assert counts.unguarded == {"failed": 5}


def test_the_live_report_has_the_replays_shape_and_a_live_part() -> None:
    """to_dict() is the replay's, with ``live``; the text has the live table and examples."""
    report = replay_live(TRACES, MANIFEST, live_shop.fresh)
    data = report.to_dict()
    plain = replay(TRACES, Guard.from_manifest(MANIFEST), variants=0).to_dict()
    assert set(data) == set(plain)
    assert set(data["total"]) - set(plain["total"]) == {"live"}
    assert data["total"]["live"]["failed_behind_guard"] == {"total": 0, "examples": []}
    assert data["total"]["live"]["rewritten"] == {"calls": 0, "arguments": 0, "examples": []}
    assert json.loads(report.to_json())["total"]["live"]["calls"] == 15
    text = report.to_text(width=1000)
    assert "guardrail replay --live: 4 conversations, 15 tool calls" in text
    assert "Live: the same calls without the guard and behind it" in text
    assert "get_order_details.order_id: unknown 1" in text


def test_assert_live_clean_passes_on_the_shop() -> None:
    """The shop's four conversations: nothing breaks behind the guard, nothing is rewritten."""
    replay_live(TRACES, MANIFEST, live_shop.fresh).assert_live_clean()
    with pytest.raises(AssertionError, match="not a live replay"):
        ReplayReport(
            files=[], total=replay(TRACES, Guard.from_manifest(MANIFEST)).total
        ).assert_live_clean()


def test_assert_live_clean_names_each_way_the_guard_broke_a_call() -> None:
    """A call failing only behind the guard, a rewritten argument, an id from a failure: named."""
    where = ("t1", "f.jsonl", 1, 3)  # trace, path, line, message
    counts = LiveStats(
        failed_behind_guard=1,
        failed_examples=[LiveExample(*where, tool="get_order", label="Error: order not found")],
        rewritten_calls=1,
        rewritten_arguments=2,
        rewritten_examples=[
            LiveExample(
                *where,
                tool="cancel_order",
                label="result: ok",
                rewrites=(
                    Rewrite("order_id", "W1000002", "#W1000002"),
                    Rewrite("items[0]", "it_1", "it_9"),
                ),
            )
        ],
        harvested_from_failed=1,
        harvested_ids=1,
        harvested_examples=[
            LiveExample(*where, tool="find_user", label="result: Error", ids=("Error: no",))
        ],
    )
    total = replay(TRACES, Guard.from_manifest(MANIFEST), variants=0).total
    total.live = counts
    with pytest.raises(AssertionError) as failed:
        ReplayReport(files=[], total=total).assert_live_clean()
    message = str(failed.value)
    assert "1 call(s) fail behind the guard but not without it" in message
    assert "t1 (message 3) get_order: Error: order not found" in message
    assert "2 argument(s) received otherwise than the model wrote them" in message
    assert 'order_id: "W1000002" -> "#W1000002"; items[0]: "it_1" -> "it_9"' in message
    assert "1 id(s) entered the ledger from failed results" in message
    assert 'ids: "Error: no"' in message


def test_files_add_up_to_the_total() -> None:
    """Two files: the total's live counts are their sum."""
    report = replay_live([TRACES, TRACES], MANIFEST, live_shop.fresh)
    assert report.total.live is not None
    assert report.total.live.calls == 30
    assert [stats.live.calls for stats in report.files if stats.live] == [15, 15]


# -- whether a call failed: one rule -----------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "raised", "expected"),
    [
        ("Error: user not found", None, True),
        ("error: no such order", None, True),
        ({"error": "not found"}, None, True),
        ('{"is_error": true}', None, True),
        ("guardrail refused the call to x; the tool did not run.", None, True),
        ({"order_id": "#W1"}, None, False),
        ("noa_kim_1234", None, False),
        ("Errors happen", None, False),
        (None, ValueError("x"), True),
    ],
)
def test_a_live_result_fails_by_the_rule_every_reader_follows(
    result: Any, raised: BaseException | None, expected: bool
) -> None:
    """call_failed reads a live result by the guard's failure rule (``Error:`` text by default)."""
    guard = Guard(mode="reprompt")
    assert call_failed(guard, Ran("lookup", {}, result=result, raised=raised)) is expected


def test_a_tools_own_failure_rule_decides_its_live_calls() -> None:
    """A tool declared fails="Sorry" fails live on its own text; its "Error:" text is output."""
    guard = Guard(mode="reprompt")
    guard.declare("lookup", effect="read", fails="Sorry")
    assert call_failed(guard, Ran("lookup", {}, result="Sorry, no such order"))
    assert not call_failed(guard, Ran("lookup", {}, result="Error: codes E1-E9 are listed"))
    assert call_failed(guard, Ran("other", {}, result="Error: not found"))  # the guard's default


# -- bad input ---------------------------------------------------------------------------------


def test_a_guard_not_in_reprompt_mode_is_a_usage_error() -> None:
    """The live replay runs the guard re-prompting, as a loop does: another mode says what to do."""
    with pytest.raises(GuardrailUsageError, match="re-prompt mode"):
        replay_live(TRACES, Guard.from_manifest(MANIFEST), live_shop.fresh)


def test_tools_that_are_not_tools_are_usage_errors() -> None:
    """Tools: a mapping or a function returning one; with environment=, a function."""
    with pytest.raises(GuardrailUsageError, match="function of the environment"):
        replay_live(TRACES, MANIFEST, live_shop.fresh(), environment=live_shop.Shop)
    with pytest.raises(GuardrailUsageError, match="mapping of tool name to callable"):
        replay_live(TRACES, MANIFEST, lambda: ["get_user_details"])  # type: ignore[arg-type,return-value]
    with pytest.raises(GuardrailUsageError, match="mapping of tool name to callable"):
        replay_live(TRACES, MANIFEST, 42)  # type: ignore[arg-type]

    async def get_user_details(user_id: str) -> str:
        return user_id

    with pytest.raises(GuardrailUsageError, match="is async"):
        replay_live(TRACES, MANIFEST, {"get_user_details": get_user_details})


def test_load_live_reads_a_factory_or_an_object_with_tools() -> None:
    """module:factory is the factory; a bare module with tools and environment is the object."""
    tools, environment, schemas = load_live("examples.live_shop:fresh")
    assert (tools, environment, schemas) == (live_shop.fresh, None, None)
    tools, environment, schemas = load_live("examples.live_shop")
    assert (tools, environment, schemas) == (live_shop.tools, live_shop.Shop, None)
    with pytest.raises(GuardrailUsageError, match="cannot import"):
        load_live("no_such_module_here:fresh")
    with pytest.raises(GuardrailUsageError, match="has no 'nothing'"):
        load_live("examples.live_shop:nothing")
    with pytest.raises(GuardrailUsageError, match="neither a function"):
        load_live("examples.live_shop:ORDERS")


def test_the_shop_example_is_what_its_recording_says() -> None:
    """Each recorded result of live_shop.jsonl is what the shop's tool returns for that call."""
    for line in Path(TRACES).read_text(encoding="utf-8").splitlines():
        shop_tools = live_shop.fresh()
        messages = json.loads(line)["messages"]
        calls = {
            c["id"]: c
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls", [])
        }
        for message in messages:
            if message["role"] == "tool":
                recorded = calls[message["tool_call_id"]]
                assert shop_tools[recorded["name"]](**recorded["arguments"]) == message["content"]
