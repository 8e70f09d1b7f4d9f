"""Replay: recorded conversations through a guard, its cost and what it catches, and the report."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard, Ledger, Rejection, compact
from guardrail.errors import GuardrailUsageError
from guardrail.replay import (
    CLASSES,
    ReplayReport,
    Trace,
    load_trace_file,
    replay,
    trace_from_messages,
)

from .conftest import AIRLINE_MANIFEST as MANIFEST
from .conftest import AIRLINE_TRACES as TAU
from .conftest import CorpusReplay, call, needs_corpus, result, user

SHOP: dict[str, Any] = {
    "kinds": {
        "customer": {"pattern": "cus_[a-z0-9]{6}"},
        "order": {"pattern": "ord_[A-Za-z0-9]{8}", "examples": ["ord_00000000"]},
        "city": {"pattern": "[A-Z]{3}", "enforce": False},
        "slot": {"pattern": "[0-9]"},
    },
    "tools": {
        "find_customer": {"effect": "read", "produces": {"customer_id": "customer"}},
        "list_orders": {
            "effect": "read",
            "ids": {"customer_id": "customer"},
            "produces": {"orders[*].order_id": "order"},
        },
        "describe": {"effect": "read", "ids": {"order_id": "order"}},
        "refund": {"effect": "write", "ids": {"order_id": "order"}},
        "refund_many": {"effect": "write", "ids": {"order_ids[*]": "order"}},
        "refund_packed": {"effect": "write", "ids": {"order_ids": {"kind": "order", "sep": ","}}},
        "ship": {"effect": "write", "ids": {"order_id": "order", "to": "city"}},
        "slots": {"effect": "read", "produces": {"slots[*]": "slot"}},
        "book": {"effect": "write", "ids": {"slot": "slot"}},
    },
}
CUS = "cus_ab12cd"
ORDERS = ["ord_8F3kQ2xM", "ord_3Tq7Lm2P"]


def shop(**options: Any) -> Guard:
    """A guard of the SHOP manifest (``options`` go to the Guard: ``capacity=3``)."""
    return Guard.from_manifest(SHOP, **options)


def opening() -> list[dict[str, Any]]:
    """The customer is found and their orders listed: CUS and ORDERS are in the ledger."""
    return [
        user("Hi, I need a refund"),
        call("c1", "find_customer", {"email": "a@example.com"}),
        result("c1", {"customer_id": CUS}),
        call("c2", "list_orders", {"customer_id": CUS}),
        result("c2", {"orders": [{"order_id": o} for o in ORDERS]}),
    ]


def run(*messages: dict[str, Any], **options: Any) -> ReplayReport:
    guard = shop(capacity=options.pop("capacity")) if "capacity" in options else shop()
    return replay(trace_from_messages(list(messages), id="t"), guard, **options)


def test_allowed_calls_are_counted_and_corrupted() -> None:
    """Real calls from the ledger are allowed; every corruption class is refused."""
    report = run(*opening(), call("c3", "refund", {"order_id": ORDERS[0]}), result("c3", "ok"))
    total = report.total
    assert (total.traces, total.calls, total.checked, total.allowed, total.refused) == (
        1,
        3,
        3,
        3,
        0,
    )
    assert total.identifier_arguments == 2
    for name in CLASSES:
        stats = total.detection[name]
        assert stats.refused == stats.variants, name
    assert total.detection["substituted"].findings["mutated"] >= 1
    # The customer kind has no examples: the class does not apply to it.
    assert total.detection["example"].findings == {"example": 1}
    assert total.detection["example"].not_applicable == 1
    # The other order is a value provenance cannot tell apart: allowed.
    same = total.detection["same_kind"]
    assert same.variants == 1
    assert same.refused == 0


def test_false_refusals_are_told_apart() -> None:
    """Invented and user-typed unverified refusals are expected; a tool-shown value is genuine."""
    report = run(
        *opening(),
        user("Also refund ord_AAAAAAAA please"),
        call("c3", "refund", {"order_id": "ord_AAAAAAAA"}),  # typed, never looked up
        result("c3", "ok"),
        call("c4", "refund", {"order_id": "ord_ZZZZZZZZ"}),  # invented
        result("c4", "ok"),
        call("c5", "describe", {"order_id": ORDERS[0]}),
        result("c5", {"note": "replaces ord_QQQQQQQQ"}),  # a path the manifest does not declare
        call("c6", "refund", {"order_id": "ord_QQQQQQQQ"}),
        result("c6", "ok"),
    )
    total = report.total
    assert total.refused == 3
    assert dict(total.false_refusals) == {"unverified": 1, "invented": 1, "genuine": 1}
    assert report.false_refusals == 1
    (genuine,) = total.false_refusal_examples["genuine"]
    assert genuine.tool == "refund"
    assert genuine.findings[0]["value"] == "ord_QQQQQQQQ"
    assert genuine.findings[0]["problem"] == "unknown"
    assert genuine.trace == "t"


def test_a_genuine_false_refusal_names_the_result_and_the_declaration_to_add() -> None:
    """For an id a tool result did return, replay says which result and which path admits it."""
    messages = [
        *opening(),
        call("c5", "describe", {"order_id": ORDERS[0]}),
        result("c5", {"replacement": {"order_id": "ord_QQQQQQQQ"}, "note": "see ord_RRRRRRRR"}),
        call("c6", "refund", {"order_id": "ord_QQQQQQQQ"}),  # a whole field no path declares
        result("c6", "ok"),
        call("c7", "refund", {"order_id": "ord_RRRRRRRR"}),  # inside a longer text
        result("c7", "ok"),
    ]
    report = run(*messages)
    whole, inside = report.total.false_refusal_examples["genuine"]
    assert whole.hint == (
        "describe returned it (message 6) at replacement.order_id: "
        'declare produces={"replacement.order_id": "order"} on describe'
    )
    assert inside.hint == (
        "describe returned it (message 6) at note, inside a longer text: "
        "return it in a field of its own"
    )
    with pytest.raises(AssertionError, match=r"replacement\.order_id"):
        report.assert_no_false_refusals()
    assert 'declare produces={"replacement.order_id"' in report.to_text(width=400)
    # The declaration the hint names admits the id: only the one inside the text is left.
    describe = dict(SHOP["tools"]["describe"], produces={"replacement.order_id": "order"})
    fixed = Guard.from_manifest({**SHOP, "tools": {**SHOP["tools"], "describe": describe}})
    again = replay(trace_from_messages(messages, id="t"), fixed)
    assert [e.hint for e in again.total.false_refusal_examples["genuine"]] == [inside.hint]


@pytest.mark.parametrize(
    ("output", "found"),
    [
        ({"orders": [{"id": "x1"}, {"id": "x2"}]}, [("orders[*].id", True)]),
        ({"by_id": {"x2": {"total": 1}}}, [("by_id.~", True)]),
        ('[{"odd key": "x2"}]', [('[*]["odd key"]', True)]),
        ("Your order x2 ships today", [("$", False)]),
        ({"n": 7, "ok": True}, []),
    ],
)
def test_provenance_finds_the_path_a_declaration_would_name(output: Any, found: list[Any]) -> None:
    """Lists are [*], keys are ~, odd keys are quoted, plain text is $ (a re: producer)."""
    from guardrail._provenance.coverage import places

    assert list(places(output, "x2")) == found


def test_refused_calls_that_failed_or_got_no_result_are_not_false_refusals() -> None:
    """A refused call that failed in the recording, or has no result, is counted apart."""
    report = run(
        *opening(),
        call("c3", "refund", {"order_id": "ord_ZZZZZZZZ"}),
        result("c3", "Error: no such order", error=True),
        call("c4", "refund", {"order_id": "ord_YYYYYYYY"}),
    )
    total = report.total
    assert sum(total.false_refusals.values()) == 0
    assert dict(total.refused_failed) == {"invented": 1}
    assert total.refused_no_result == 1
    assert total.unanswered_calls == 1


REFUNDS: dict[str, Any] = {
    "kinds": {"order": {"pattern": "ord_[A-Za-z0-9]{8}"}},
    "tools": {
        "refund": {
            "effect": "write",
            "ids": {"order_id": "order"},
            "produces": {"re:(ord_[A-Za-z0-9]{8})": "order"},
        }
    },
}


@pytest.mark.parametrize("form", ["text", "json", "result", "built"])
def test_a_refusal_recorded_as_the_result_is_a_failure_and_teaches_nothing(form: str) -> None:
    """A refusal a runtime sent back as the result is never harvested, however it was recorded."""
    guard = Guard.from_manifest(REFUNDS, mode="reprompt")
    invented = "ord_ZZZZZZZZ"
    with guard.session("recording"):
        refusal = Rejection(guard.check("refund", {"order_id": invented}))
    # The recording kept the refusal as a plain (successful) result of the refused call.
    sent: dict[str, Any] = result("c1", str(refusal))
    if form == "json":
        sent = result("c1", refusal.to_dict())
    elif form == "result":
        sent = {**result("c1", "refused"), "result": refusal.to_dict()}
    messages = [
        user("Refund my order please"),
        call("c1", "refund", {"order_id": invented}),
        sent,
        call("c2", "refund", {"order_id": invented}),
    ]
    trace = trace_from_messages(messages, id="t")
    if form == "built":  # a trace built in code, whose message does not say it failed
        tool_message = dataclasses.replace(trace.messages[2], error=False)
        trace = dataclasses.replace(
            trace, messages=(*trace.messages[:2], tool_message, trace.messages[3])
        )
    total = replay(trace, guard).total
    assert (total.allowed, total.refused) == (0, 2)
    assert dict(total.refused_failed) == {"invented": 1}
    assert sum(total.false_refusals.values()) == 0


def test_a_result_answers_the_latest_open_call_with_its_id() -> None:
    """Reused call ids pair a result with the most recent open call of that id."""
    report = run(
        user(f"I am {CUS}"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "find_customer", "arguments": {"email": "a@example.com"}},
                {"id": "c1", "name": "list_orders", "arguments": {"customer_id": CUS}},
            ],
        },
        result("c1", {"orders": [{"order_id": ORDERS[0]}]}),  # answers list_orders
        result("c1", {"customer_id": CUS}),  # answers find_customer
        call("c1", "refund", {"order_id": ORDERS[0]}),
        result("c1", "ok"),
    )
    assert report.total.refused == 0
    assert report.total.orphan_results == 0


def test_unknown_tools_unreadable_arguments_and_orphans_are_counted() -> None:
    """Calls of undeclared tools, arguments that are not JSON, and stray results are counted."""
    trace = trace_from_messages(
        [
            *opening(),
            call("c3", "teleport", {"to": "mars"}),
            result("c3", "ok"),
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c4", "function": {"name": "refund", "arguments": "{not json"}}
                ],
            },
            result("c4", "ok"),
            result("c9", "nobody asked"),
        ]
    )
    total = replay(trace, shop()).total
    assert dict(total.unknown_tools) == {"teleport": 1}
    assert total.unreadable_arguments == 1
    assert total.orphan_results == 1
    assert total.calls == 4
    assert total.checked == 2
    assert total.refused == 0


def test_the_result_of_a_call_with_unreadable_arguments_is_recorded() -> None:
    """Ids a tool returned enter the ledger even when its call's arguments were not JSON."""
    report = run(
        user("hi"),
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "function": {"name": "list_orders", "arguments": "{oops"}}],
        },
        result("c1", {"orders": [{"order_id": o} for o in ORDERS]}),
        call("c2", "describe", {"order_id": ORDERS[0]}),
        result("c2", {}),
        classes=(),
        compaction=lambda messages, ledger: messages,
    )
    total = report.total
    assert total.unreadable_arguments == 1
    assert (total.refused, sum(total.false_refusals.values())) == (0, 0)
    avail = report.availability["compaction"]
    assert (avail.ids, avail.present, avail.evicted) == (1, 1, 0)


def test_malformed_lines_reach_the_report(tmp_path: Path) -> None:
    """Lines a trace file could not read are listed, with their line, in the report."""
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps({"id": "ok", "messages": opening()}) + "\nnot json\n" + json.dumps([1]) + "\n",
        encoding="utf-8",
    )
    report = replay(path, shop())
    (stats,) = report.files
    assert stats.traces == 1
    assert stats.malformed_lines == 2
    data = report.to_dict()
    assert data["total"]["malformed"]["lines"] == 2
    assert [m["line"] for m in data["files"][0]["malformed"]["examples"]] == [2, 3]


def test_corruptions_that_name_another_value_are_collisions() -> None:
    """When every substitution lands on another ledger value, it is a collision, not a miss."""
    report = run(
        user("book a slot"),
        call("c1", "slots", {}),
        result("c1", {"slots": [str(n) for n in range(10)]}),
        call("c2", "book", {"slot": "3"}),
        result("c2", "ok"),
        classes=["substituted"],
    )
    stats = report.total.detection["substituted"]
    assert stats.collisions == 1
    assert stats.variants == 0
    assert stats.rate is None


def test_advisory_kinds_are_not_corrupted() -> None:
    """Identifier arguments of advisory kinds are counted apart and not corrupted."""
    report = run(*opening(), call("c3", "ship", {"order_id": ORDERS[0], "to": "JFK"}))
    assert report.total.advisory_arguments == 1
    assert report.total.identifier_arguments == 2


def test_the_header_counts_every_identifier_argument_of_every_checked_call() -> None:
    """Refused calls' and advisory arguments count too: the header is every id argument checked."""
    report = run(
        *opening(),
        call("c3", "refund", {"order_id": "ord_8F3kQ2xN"}),  # refused: mutated
        result("c3", "Error: no such order", error=True),
        call("c4", "ship", {"order_id": ORDERS[0], "to": "JFK"}),  # one advisory argument
        call("c5", "refund_many", {"order_ids": ORDERS}),  # two, in one list
    )
    total = report.total
    assert total.refused == 1
    assert (total.identifier_arguments, total.advisory_arguments) == (5, 1)
    assert "6 identifier arguments checked" in report.to_text().splitlines()[0]
    # Detection corrupts the enforced arguments of allowed calls only: 4 of them.
    assert report.total.detection["inserted"].variants == 4


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("refund_many", {"order_ids": ORDERS}),
        ("refund_many", {"order_ids": json.dumps(ORDERS)}),
        ("refund_packed", {"order_ids": ", ".join(ORDERS)}),
    ],
)
def test_ids_in_lists_json_strings_and_packed_strings_are_corrupted(
    tool: str, arguments: dict[str, Any]
) -> None:
    """Each id of a list, a JSON-string list or a separator-packed string is corrupted alone."""
    report = run(*opening(), call("c3", tool, arguments), result("c3", "ok"))
    total = report.total
    assert total.refused == 0
    assert total.identifier_arguments == 3
    for name in CLASSES:
        assert total.detection[name].refused == total.detection[name].variants, name
    assert total.detection["substituted"].variants == 3


def test_same_seed_same_report() -> None:
    """Two replays with one seed give the same report."""
    messages = [*opening(), call("c3", "refund", {"order_id": ORDERS[1]}), result("c3", "ok")]
    assert run(*messages, seed=3).to_dict() == run(*messages, seed=3).to_dict()


def test_limit_and_progress() -> None:
    """limit replays at most N traces; progress is told after each one."""
    traces = [trace_from_messages(opening(), id=f"t{i}") for i in range(5)]
    seen: list[tuple[int, int]] = []
    report = replay(
        traces, shop(), limit=3, progress=lambda done, total: seen.append((done, total))
    )
    assert report.total.traces == 3
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_variants_per_class() -> None:
    """variants=N checks N variants of each class per identifier argument."""
    messages = [*opening(), call("c3", "refund", {"order_id": ORDERS[1]})]
    report = run(*messages, variants=3, classes=["inserted"])
    assert report.total.detection["inserted"].variants == 3 * report.total.identifier_arguments
    assert list(report.total.detection) == ["inserted"]


def test_availability_is_empty_without_compaction() -> None:
    """With no compaction, the availability slot is there and empty."""
    report = run(*opening())
    assert report.availability == {}
    assert report.to_dict()["total"]["availability"] == {}
    assert "not measured" in report.to_text()


def test_compaction_hook_measures_ids_still_in_the_context() -> None:
    """Each strategy is given the conversation before each call; its ledger ids are looked for."""
    seen: list[int] = []

    def keep_all(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        seen.append(len(messages))
        return messages

    def drop_tools(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        return [m for m in messages if m["role"] in ("system", "user")]

    report = run(
        *opening(),
        user("refund the first one"),
        call("c3", "refund", {"order_id": ORDERS[0]}),
        result("c3", "ok"),
        compaction={"keep": keep_all, "drop": drop_tools},
    )
    keep, drop = report.availability["keep"], report.availability["drop"]
    assert seen == [1, 3, 6]  # before each recorded call
    assert keep.compactions == 3
    # The e-mail is no identifier; the customer and order ids came from tool results.
    assert (keep.ids, keep.present, keep.rate) == (2, 2, 1.0)
    assert (drop.ids, drop.present, drop.rate) == (2, 0, 0.0)
    assert [m.tool for m in drop.misses] == ["list_orders", "refund"]
    assert (keep.evicted, keep.other_ids, keep.not_in_context) == (0, 0, 0)
    assert report.settings["compaction"] == ["keep", "drop"]


def test_only_ids_from_tool_results_are_required() -> None:
    """Typed, invented and evicted ids are counted apart, never in the measured rate."""

    def drop_tools(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        return [m for m in messages if m["role"] != "tool"]

    report = run(
        *opening(),
        user("please refund ord_3Tq7Lm2P, and look at ord_AAAAAAAA"),
        call("c3", "describe", {"order_id": "ord_AAAAAAAA"}),  # typed by the user
        result("c3", {"note": "fine"}),
        call("c4", "describe", {"order_id": "ord_BBBBBBBB"}),  # in no context: invented
        result("c4", {"note": "fine"}),
        call("c5", "refund", {"order_id": ORDERS[1]}),  # from list_orders, and typed too
        result("c5", "ok"),
        compaction=drop_tools,
    )
    avail = report.availability["compaction"]
    assert avail.compactions == 5
    # Ledger ids: the customer id (c2) and ORDERS[1] (c5). The user's text keeps ORDERS[1].
    assert (avail.ids, avail.present) == (2, 1)
    assert (avail.other_ids, avail.other_present) == (1, 1)
    assert avail.not_in_context == 1
    data = report.to_dict()["total"]["availability"]["compaction"]
    assert data["ids"] + data["evicted"] + data["other_ids"] + data["not_in_context"] == 4


def test_which_one_counts_the_ids_a_write_took_and_those_the_user_named() -> None:
    """Two orders listed bare: the one the user named is told apart, and a write took it."""

    def guardrail_compaction(messages: list[dict[str, Any]], ledger: Ledger) -> list[Any]:
        return list(compact(messages, ledger, keep_recent=0).messages)

    report = run(
        *opening(),
        user(f"please refund {ORDERS[1]}"),
        call("c3", "describe", {"order_id": ORDERS[0]}),  # the other one, looked up: a read
        result("c3", {"note": "fine"}),
        call("c4", "refund", {"order_id": ORDERS[1]}),
        result("c4", "ok"),
        classes=(),
        compaction={"guardrail": guardrail_compaction},
    )
    which = report.to_dict()["total"]["availability"]["guardrail"]["which_by_kind"]
    assert which == {
        "order": {
            "asked": 2,
            "told_apart": 1,  # the refund's: the user named it; the other has no fact at all
            "described": 0,
            "described_told_apart": 0,
            "writes": 1,
            "writes_told_apart": 1,
        }
    }


def test_ids_evicted_from_the_ledger_are_beyond_capacity() -> None:
    """An id a tool produced but the ledger did not keep is counted as evicted, not asked."""
    # Capacity 3 lets one call add one new id: the list's last order is never kept.
    many = [f"ord_{n:08d}" for n in range(1, 7)]
    report = run(
        user("hi"),
        call("c1", "find_customer", {"email": "a@example.com"}),
        result("c1", {"customer_id": CUS}),
        call("c2", "list_orders", {"customer_id": CUS}),
        result("c2", {"orders": [{"order_id": o} for o in many]}),
        call("c3", "describe", {"order_id": many[-1]}),
        result("c3", {}),
        capacity=3,
        classes=(),
        compaction=lambda messages, ledger: messages,
    )
    avail = report.availability["compaction"]
    assert avail.evicted == 1
    assert (avail.ids, avail.present) == (1, 1)  # the customer id, before the list came


def test_compaction_gets_a_copy_of_the_ledger() -> None:
    """A strategy that changes the ledger it is given does not change the replay."""

    def meddle(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
        for entry in ledger.entries():
            ledger.forget(entry.role)
        return messages

    messages = [*opening(), user("go"), call("c3", "refund", {"order_id": ORDERS[0]})]
    plain = run(*messages).to_dict()["total"]
    meddled = run(*messages, compaction=meddle).to_dict()["total"]
    meddled.pop("availability")
    plain.pop("availability")
    assert meddled == plain


def test_a_guard_is_replayed_silently_and_left_as_it_was() -> None:
    """Replaying with a Guard emits no audit events and leaves the guard's own logging alone."""
    guard = Guard.from_manifest(SHOP)
    with structlog.testing.capture_logs() as events:
        report = replay(trace_from_messages(opening()), guard)
    assert report.total.allowed == 2
    assert events == []
    with structlog.testing.capture_logs() as events, guard.session("s"):
        guard.check("refund", {"order_id": "ord_ZZZZZZZZ"})
    assert [e["event"] for e in events] == ["guardrail.call_checked"]


def test_errors_of_use_are_raised_before_the_run() -> None:
    """A bad manifest, class, limit, guard or trace source raises a usage error."""
    trace = trace_from_messages(opening())
    with pytest.raises(GuardrailUsageError, match=r"takes a Guard \(for a manifest file"):
        replay(trace, {"tools": {"t": {"ids": {"x": "nope"}}}})  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="garbled"):
        replay(trace, shop(), classes=["garbled"])
    with pytest.raises(GuardrailUsageError, match="limit"):
        replay(trace, shop(), limit=-1)
    with pytest.raises(TypeError, match="capacity"):
        replay(trace, shop(), capacity=5)  # type: ignore[call-arg]
    with pytest.raises(GuardrailUsageError, match=r"takes a Guard \(for a manifest file"):
        replay(trace, 42)  # type: ignore[arg-type]
    with pytest.raises(GuardrailUsageError, match="int"):
        replay([42], shop())  # type: ignore[list-item]


def test_report_serialises_and_renders() -> None:
    """to_dict is JSON; to_text shows the per-file, refusal and detection tables."""
    report = run(
        *opening(),
        call("c3", "refund", {"order_id": "ord_ZZZZZZZZ"}),
        result("c3", "ok"),
    )
    data = json.loads(json.dumps(report.to_dict()))
    assert data["total"]["false_refusals"]["by_reason"]["invented"] == 1
    assert data["total"]["detection"]["substituted"]["rate"] == 1.0
    assert data["files"][0]["path"] == "<memory>"
    text = report.to_text(width=120)
    assert "Per trace file" in text
    assert "False refusals" in text
    assert "Detection" in text
    assert 'order_id="ord_ZZZZZZZZ" unknown' in text


def test_assert_no_false_refusals() -> None:
    """Genuine false refusals fail the assertion; expected ones pass unless disallowed."""
    expected = run(*opening(), call("c3", "refund", {"order_id": "ord_ZZZZZZZZ"}), result("c3", 1))
    expected.assert_no_false_refusals()
    with pytest.raises(AssertionError, match="ord_ZZZZZZZZ"):
        expected.assert_no_false_refusals(allow_expected=False)
    genuine = run(
        *opening(),
        call("c5", "describe", {"order_id": ORDERS[0]}),
        result("c5", {"note": "replaces ord_QQQQQQQQ"}),
        call("c6", "refund", {"order_id": "ord_QQQQQQQQ"}),
        result("c6", "ok"),
    )
    with pytest.raises(AssertionError, match=r"(?s)1 call\(s\).*ord_QQQQQQQQ"):
        genuine.assert_no_false_refusals()


def test_assert_no_false_refusals_fails_on_what_the_tables_call_false_refusals() -> None:
    """The assertion and the command print one sentence: what fails it, and what it allows."""
    typed = run(
        *opening(),
        user("Also refund ord_AAAAAAAA please"),
        call("c3", "refund", {"order_id": "ord_AAAAAAAA"}),  # typed, never looked up
        result("c3", "ok"),
    )
    text = typed.to_text()
    start = text.index("False refusals")
    line = " ".join(text[start : text.index("No result recorded: 0.") + 22].split())  # unwrapped
    assert line.startswith("False refusals (succeeded in the recording, refused): 0 genuine, ")
    assert "1 expected (0 invented id, 1 unverified), which it allows unless" in line
    typed.assert_no_false_refusals()  # as the line says
    with pytest.raises(AssertionError) as failed:
        typed.assert_no_false_refusals(allow_expected=False)
    assert str(failed.value).splitlines()[0] == line


def test_assert_detection() -> None:
    """assert_detection fails for a class refused less often than asked, naming it."""
    report = run(*opening(), call("c3", "refund", {"order_id": ORDERS[0]}), result("c3", "ok"))
    report.assert_detection(1.0)
    with pytest.raises(AssertionError, match="same_kind"):
        report.assert_detection(0.5, classes=["same_kind"])


@needs_corpus
def test_corpus_replay(corpus_replay: CorpusReplay) -> None:
    """On the tau-airline corpus: one expected false refusal, four refused invented ids."""
    report = corpus_replay.report  # the suite's one replay of the corpus, with compaction
    total = report.total
    assert (total.traces, total.calls) == (200, 1164)
    assert total.refused == 5
    assert dict(total.false_refusals) == {"unverified": 1}
    assert dict(total.refused_failed) == {"invented": 4}
    report.assert_no_false_refusals()
    report.assert_detection(0.99)


@needs_corpus
def test_corpus_which_one_after_compaction(corpus_replay: CorpusReplay) -> None:
    """The airline manifest's notes tell 1,128 of 1,403 ids with rivals apart; a plain summary 0.

    Of the ids a result had described before the call, 1,103 of 1,125 (98%); of those a
    write took, 792 of 814; each kind over 90% in both.
    """
    availability = corpus_replay.report.to_dict()["total"]["availability"]
    guarded, plain = availability["guardrail k=0"], availability["plain summary k=0"]
    assert (guarded["which_ids"], guarded["which_told"]) == (1403, 1128)
    assert (plain["which_ids"], plain["which_told"]) == (1403, 0)

    def counts(
        asked: int, told: int, described: int, told_described: int, writes: int, told_writes: int
    ) -> dict[str, int]:
        return {
            "asked": asked,
            "told_apart": told,
            "described": described,
            "described_told_apart": told_described,
            "writes": writes,
            "writes_told_apart": told_writes,
        }

    assert guarded["which_by_kind"] == {
        # An airport is told by the field of the record that named it: origin of [reservation],
        # of a searched flight (origin of [flight_3]).
        "airport": counts(417, 417, 417, 417, 106, 106),
        # Four more than the notes tell: flights the user named.
        "flight": counts(376, 362, 376, 362, 376, 362),
        "payment_method": counts(182, 175, 182, 175, 182, 175),
        # Most of the rest are looked up by the very call: get_user_details lists ids only;
        # 25 bare ones the user named.
        "reservation": counts(428, 174, 150, 149, 150, 149),
    }
    assert "Which one after compaction" in corpus_replay.printed


def test_in_memory_traces_and_files_mix(tmp_path: Path) -> None:
    """Trace objects and files can be replayed together; loose traces form one entry."""
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "f", "messages": opening()}) + "\n", encoding="utf-8")
    traces: list[Trace] = [trace_from_messages(opening(), id="a")]
    assert [f.path for f in replay(traces, shop()).files] == ["<memory>"]
    mixed = replay([traces[0], path, trace_from_messages(opening(), id="b")], shop())
    assert [(f.path, f.traces) for f in mixed.files] == [(str(path), 1), ("<memory>", 2)]
    assert mixed.total.traces == 3


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_IDS = st.sampled_from([CUS, *ORDERS, "ord_ZZZZZZZZ", "3", "JFK", ""])
_ARGS = st.one_of(
    st.dictionaries(
        st.sampled_from(["order_id", "customer_id", "order_ids", "to", "slot", "x"]),
        st.one_of(_IDS, st.lists(_IDS, max_size=3), _JSON),
        max_size=3,
    ),
    st.text(max_size=10),
)
_MESSAGE = st.one_of(
    st.builds(user, st.text(max_size=30)),
    st.builds(
        call,
        st.sampled_from(["c1", "c2", "c3"]),
        st.sampled_from([*SHOP["tools"], "teleport"]),
        _ARGS,
    ),
    st.builds(
        result,
        st.sampled_from(["c1", "c2", "c3", "zz"]),
        st.one_of(_JSON, st.builds(lambda o: {"orders": [{"order_id": o}]}, _IDS)),
        error=st.booleans(),
    ),
)


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(_MESSAGE, max_size=12), seed=st.integers(0, 1000))
def test_any_conversation_replays_and_adds_up(messages: list[dict[str, Any]], seed: int) -> None:
    """Whatever a recording holds, replay never raises and its counts add up."""
    total = run(*messages, seed=seed).total
    assert total.calls == total.checked + sum(total.unknown_tools.values()) + (
        total.unreadable_arguments
    )
    assert total.checked == total.allowed + total.refused
    assert total.refused == (
        sum(total.false_refusals.values())
        + sum(total.refused_failed.values())
        + total.refused_no_result
    )
    for stats in total.detection.values():
        assert 0 <= stats.refused <= stats.variants


def _placeless(data: Any) -> Any:
    """``data`` without the file paths and line numbers, which differ between two files."""
    if isinstance(data, dict):
        return {k: _placeless(v) for k, v in data.items() if k not in ("path", "line")}
    if isinstance(data, list):
        return [_placeless(v) for v in data]
    return data


@needs_corpus
def test_openai_shape_replays_like_the_corpus_shape(tmp_path: Path) -> None:
    """The same conversations written as OpenAI messages (string arguments) replay the same."""
    file = load_trace_file(TAU)
    traces = file.traces[:25]
    openai = tmp_path / "openai.jsonl"
    openai.write_text(
        "\n".join(json.dumps({"id": t.id, "messages": t.openai_messages()}) for t in traces),
        encoding="utf-8",
    )
    guard = Guard.from_manifest(MANIFEST)
    corpus = _placeless(replay(list(traces), guard).to_dict()["total"])
    again = _placeless(replay(openai, guard).to_dict()["total"])
    assert again == corpus
    assert corpus["calls"] > 100


# -- the agent diff ---------------------------------------------------------------------------


def later_refund() -> list[dict[str, Any]]:
    """The opening, then a turn that refunds the second order."""
    return [
        *opening(),
        user("refund the blender one"),
        call("c3", "refund", {"order_id": ORDERS[1]}),
        result("c3", "ok"),
    ]


def drop_tools(messages: list[dict[str, Any]], ledger: Ledger) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] != "tool"]


def test_the_agent_is_asked_on_each_context_with_the_tools() -> None:
    """Before each recorded call the agent sees the uncompacted and each compacted context."""
    asked: list[tuple[int, list[str]]] = []

    def agent(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        asked.append((len(messages), [t["function"]["name"] for t in tools]))
        messages.clear()  # what an agent does to its copy does not reach the replay

    report = run(*later_refund(), classes=(), compaction={"drop": drop_tools}, agent=agent)
    assert [n for n, _ in asked] == [1, 1, 3, 2, 6, 4]  # uncompacted, then compacted
    assert asked[0][1] == list(SHOP["tools"])
    recorded, dropped = report.total.agent_recorded, report.total.agent["drop"]
    assert recorded is not None
    # Making no call where the recording made one: every id argument is changed.
    assert (recorded.calls, recorded.same, recorded.no_call) == (3, 0, 3)
    assert (recorded.ids, recorded.changed) == (2, 2)
    # No call on both sides is the same call.
    assert (dropped.calls, dropped.same, dropped.ids) == (3, 3, 0)
    assert report.settings["agent"].endswith("agent")


def test_the_reference_agent_diff_is_empty_with_the_ledger_and_not_without() -> None:
    """Copying by role from the ledger block keeps every id; a mutating summary changes them."""
    from guardrail.replay import LossySummarizer, strategies
    from guardrail.replay._reference_agent import reference_agent

    guard = shop()
    lossy = LossySummarizer(seed=3, drop=0, generalize=0, truncate=0, mutate=1.0, kinds=guard.kinds)
    both = strategies(guard, summarize=lossy, keep_recent=0)
    report = replay(
        trace_from_messages(later_refund()),
        guard,
        classes=(),
        compaction=both,
        agent=reference_agent,
    )
    recorded = report.total.agent_recorded
    assert recorded is not None and recorded.same == recorded.calls == 3
    guarded, plain = report.total.agent["guardrail"], report.total.agent["plain summary"]
    assert (guarded.ids, guarded.changed, guarded.same) == (2, 0, 3)
    assert (plain.ids, plain.changed) == (2, 2)
    # Each mutated id is copied as the summary wrote it, and the guard refuses it.
    assert plain.refused == 2
    assert all("(refused: mutated)" in e.label for e in plain.examples)
    data = report.to_dict()["total"]["agent"]
    assert data["compacted_vs_uncompacted"]["guardrail"]["changed"] == 0
    assert data["uncompacted_vs_recording"]["same"] == 3
    text = report.to_text(width=140)
    assert "Agent diff" in text and "Differences" in text


def test_differing_calls_are_sorted_by_what_the_guard_would_do() -> None:
    """Another valid id is allowed, a gap is incomplete, an invented id refused, none no_call."""
    answers = iter(
        [
            # before c1 (find_customer): uncompacted, compacted
            {"name": "find_customer", "arguments": {"email": "a@example.com"}},
            None,
            # before c2 (list_orders): the same
            {"name": "list_orders", "arguments": {"customer_id": CUS}},
            {"name": "list_orders", "arguments": '{"customer_id": null}'},
            # before c3 (refund): the other order, then an invented one
            {"name": "refund", "arguments": {"order_id": ORDERS[1]}},
            {"name": "refund", "arguments": {"order_id": ORDERS[0]}},
        ]
    )

    def agent(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        return next(answers)

    report = run(
        *later_refund(),
        classes=(),
        compaction={"same": lambda messages, ledger: messages},
        agent=agent,
    )
    diff = report.total.agent["same"]
    assert (diff.calls, diff.same) == (3, 0)
    assert (diff.no_call, diff.incomplete, diff.allowed, diff.refused) == (1, 1, 1, 0)
    assert (diff.ids, diff.changed) == (2, 2)
    labels = [e.label for e in diff.examples]
    assert labels[0] == "find_customer() -> no call (no call)"
    assert labels[1] == f"customer_id: {CUS!r} -> None (incomplete)"
    assert labels[2] == f"order_id: {ORDERS[1]!r} -> {ORDERS[0]!r} (allowed)"


def test_an_agent_that_misbehaves_is_an_error_of_use() -> None:
    """A return value of the wrong shape, or an exception, is a usage error naming the place."""

    def wrong(messages: Any, tools: Any) -> Any:
        return ("refund", {})

    def broken(messages: Any, tools: Any) -> Any:
        raise RuntimeError("rate limited")

    with pytest.raises(GuardrailUsageError, match="'name'"):
        run(*opening(), classes=(), agent=wrong)
    with pytest.raises(GuardrailUsageError, match=r"RuntimeError at t message 1: rate limited"):
        run(*opening(), classes=(), agent=broken)
    with pytest.raises(GuardrailUsageError, match="callable"):
        run(*opening(), agent="not an agent")


@pytest.mark.parametrize("arguments", ["{oops", "[1]", [1], 7])
def test_agent_arguments_that_are_not_json_are_refused_as_malformed(arguments: Any) -> None:
    """An agent's arguments that are not a JSON object (as text or not) differ, and are refused."""

    def agent(messages: Any, tools: Any) -> Any:
        return {"name": "refund", "arguments": arguments}

    report = run(*later_refund(), classes=(), agent=agent)
    recorded = report.total.agent_recorded
    assert recorded is not None
    assert (recorded.calls, recorded.same, recorded.refused) == (3, 0, 3)
    assert recorded.examples[-1].label.endswith("arguments not a JSON object (refused: malformed)")


# -- results read by the tool's failure rule, as at run time --------------------------------------

WHOAMI: dict[str, Any] = {
    "kinds": {"customer": {"pattern": "cus_[a-z0-9]{6}"}},
    "tools": {
        "whoami": {"effect": "read", "produces": {"re:(cus_[a-z0-9]{6})": "customer"}},
        "close": {"effect": "write", "ids": {"customer_id": "customer"}},
    },
}


def whoami_trace(text: str) -> Trace:
    """The agent looks the customer up, the tool answers ``text``, then closes the account."""
    return trace_from_messages(
        [
            user("Close my account"),
            call("c1", "whoami", {}),
            result("c1", text),  # no error flag: the tool's own text says what happened
            call("c2", "close", {"customer_id": "cus_ab12cd"}),
            result("c2", {"closed": True}),
        ],
        id="t",
    )


@pytest.mark.parametrize(
    ("fails", "text"),
    [(None, "Error: cus_ab12cd is locked"), ("Sorry", "Sorry, cus_ab12cd is locked")],
)
def test_a_recorded_text_is_read_by_the_tools_failure_rule(fails: str | None, text: str) -> None:
    """An id named only in a result its rule reads as a failure is never harvested."""
    manifest = json.loads(json.dumps(WHOAMI))
    if fails is not None:
        manifest["tools"]["whoami"]["fails"] = fails
    total = replay(whoami_trace(text), Guard.from_manifest(manifest)).total
    assert (total.allowed, total.refused) == (1, 1)
    assert dict(total.false_refusals) == {"invented": 1}
    assert total.suspect_successes == 0


def test_a_success_that_reads_like_an_error_and_yielded_ids_is_warned_about() -> None:
    """The rule overridden (fails = false): the report names the tool and what to declare."""
    manifest = json.loads(json.dumps(WHOAMI))
    manifest["tools"]["whoami"]["fails"] = False
    report = replay(whoami_trace("Error: cus_ab12cd is locked"), Guard.from_manifest(manifest))
    total = report.total
    assert (total.allowed, total.refused, total.suspect_successes) == (2, 0, 1)
    (example,) = total.suspect_examples
    assert example.tool == "whoami" and 'fails = "Error" on whoami' in example.label
    assert report.to_dict()["total"]["suspect_successes"]["total"] == 1
    assert "Warning: 1 result(s) read as successes" in report.to_text(width=200)
