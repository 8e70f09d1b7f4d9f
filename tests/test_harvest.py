"""Harvest: declared places in a result in, identifiers out; nothing else read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from guardrail import Guard, Id
from guardrail._provenance.failure import failed, recordable
from guardrail._provenance.harvest import (
    MAX_ID_LENGTH,
    MAX_LITERAL_CHARS,
    Harvest,
    decode,
    harvest,
)

from .conftest import ORDERS, shop_guard


class Row(NamedTuple):
    """One id a harvest found, read back from its batch's columns for comparing."""

    kind: str
    value: str
    key: str
    path: str
    status: str | None


def rows(harvested: Harvest) -> list[Row]:
    """The ids of a harvest in order, one row each."""
    found: list[Row] = []
    for batch in harvested.batches:
        statuses = batch.statuses or [None] * len(batch.values)
        found.extend(
            Row(batch.kind, value, key, batch.path, status)
            for value, key, status in zip(batch.values, batch.keys, statuses, strict=True)
        )
    return found


def ids(guard: Guard, tool: str, result: Any) -> list[tuple[str, str]]:
    return [(f.kind, f.value) for f in rows(harvest(guard.specs[tool], result, guard.kinds))]


def test_json_paths_and_status() -> None:
    """Declared paths yield ids verbatim, keyed by the kind's normaliser, with a status."""
    guard = shop_guard()
    found = rows(harvest(guard.specs["search_orders"], ORDERS, guard.kinds))
    assert [(f.value, f.key, f.status, f.path) for f in found] == [
        ("#W8855135", "W8855135", "delivered", "orders[*].order_id"),
        ("#W2378156", "W2378156", "pending", "orders[*].order_id"),
    ]


def test_json_text_results_are_parsed_first() -> None:
    """A str result that is valid JSON is parsed before paths apply."""
    guard = shop_guard()
    assert ids(guard, "search_orders", json.dumps(ORDERS)) == [
        ("order", "#W8855135"),
        ("order", "#W2378156"),
    ]
    assert ids(guard, "search_orders", b'{"orders": [{"order_id": "W1234567"}]}') == [
        ("order", "W1234567")
    ]


def test_plain_text_is_seen_only_by_root_and_regex_producers() -> None:
    """Prose is never scanned by JSON paths; `$` and `re:` read plain text."""
    guard = shop_guard()
    guard.declare("create_item", produces={"$": "item"})
    guard.declare("send", produces={"re:ticket (it_[a-z0-9]+)": "item", "re:W\\d{7}": "order"})
    assert ids(guard, "search_orders", "Your order W1234567 shipped") == []
    assert ids(guard, "create_item", "  it_abcd \n") == [("item", "it_abcd")]
    assert ids(guard, "send", "ticket it_x9y8 for W1234567 and W7654321") == [
        ("item", "it_x9y8"),
        ("order", "W1234567"),
        ("order", "W7654321"),
    ]


class Line(BaseModel):
    item_id: Annotated[str, Id("item")]


class Receipt(BaseModel):
    order_id: Annotated[str, Id("order", status="state")]
    state: str = "paid"
    lines: list[Line]


@dataclass
class Ticket:
    ticket: Annotated[str, Id("item")]


def test_models_and_dataclasses_are_read_by_their_annotations() -> None:
    """A tool with no result paths is read by the Id fields of what it returned."""
    guard = shop_guard()
    guard.declare("plain")
    receipt = Receipt(order_id="#W1234567", lines=[Line(item_id="it_aaaa"), Line(item_id="it_b1")])
    assert ids(guard, "plain", receipt) == [
        ("order", "#W1234567"),
        ("item", "it_aaaa"),
        ("item", "it_b1"),
    ]
    assert ids(guard, "plain", [Ticket("it_t1"), Ticket("it_t2")]) == [
        ("item", "it_t1"),
        ("item", "it_t2"),
    ]
    assert ids(guard, "plain", {"order_id": "W1234567"}) == []
    assert rows(harvest(guard.specs["plain"], receipt, guard.kinds))[0].status == "paid"


def test_numbers_are_ids_too_but_not_booleans_or_objects() -> None:
    """Integer ids are read as text; booleans, None and objects are not ids."""
    guard = shop_guard()
    guard.add_kind("ticket", normalize="number")
    guard.declare("t", produces={"[*]": "ticket"})
    result = harvest(guard.specs["t"], [7, 7.0, True, None, {"a": 1}, "8"], guard.kinds)
    assert [(f.value, f.key) for f in rows(result)] == [("7", "7"), ("8", "8")]
    assert result.problems and "not identifiers" in result.problems[0]


def test_examples_empty_and_oversized_values_are_not_recorded() -> None:
    """Placeholders, empty strings and absurdly long values never enter the ledger."""
    guard = shop_guard()
    result = {"orders": [{"order_id": "#W0000000"}, {"order_id": ""}, {"order_id": "W" * 5000}]}
    found = harvest(guard.specs["search_orders"], result, guard.kinds)
    assert rows(found) == []
    assert str(MAX_ID_LENGTH) in found.problems[0]


def test_duplicates_are_reported_once() -> None:
    """The same id twice in one result is one finding."""
    guard = shop_guard()
    twice = {"orders": [{"order_id": "#W1234567"}, {"order_id": "W1234567"}]}
    assert ids(guard, "search_orders", twice) == [("order", "#W1234567")]


def test_bad_results_never_crash() -> None:
    """Non-UTF-8 bytes, deep JSON, cycles and foreign objects give problems, not exceptions."""
    guard = shop_guard()
    spec = guard.specs["search_orders"]
    assert "not UTF-8" in harvest(spec, b"\xff\xfe\x00", guard.kinds).problems[0]
    deep = "[" * 100_000 + "]" * 100_000
    assert "nested too deeply" in harvest(spec, deep, guard.kinds).problems[0]
    cyclic: dict[str, Any] = {"orders": []}
    cyclic["orders"].append(cyclic)
    assert rows(harvest(spec, cyclic, guard.kinds)) == []
    assert rows(harvest(spec, object(), guard.kinds)) == []
    assert rows(harvest(spec, float("nan"), guard.kinds)) == []


def test_huge_results_are_harvested_completely() -> None:
    """Forty thousand ids in one result all come out."""
    guard = shop_guard()
    big = {"orders": [{"order_id": f"W{n:07d}"} for n in range(1, 40_001)]}
    assert len(rows(harvest(guard.specs["search_orders"], json.dumps(big), guard.kinds))) == 40_000


order_ids = st.lists(st.from_regex(r"W[1-9]\d{6}", fullmatch=True), max_size=30, unique=True)


@settings(max_examples=60, deadline=None)
@given(order_ids, st.booleans())
def test_harvest_never_loses_a_declared_id(values: list[str], as_text: bool) -> None:
    """Every id placed at a declared path is harvested, whatever else the result holds."""
    guard = shop_guard()
    result: Any = {"orders": [{"order_id": v, "note": "W9999999 in prose"} for v in values]}
    if as_text:
        result = json.dumps(result)
    found = [f.value for f in rows(harvest(guard.specs["search_orders"], result, guard.kinds))]
    assert found == values


def test_a_python_repr_result_is_harvested_like_json() -> None:
    """str(dict) text, as some runtimes send a return value, yields the declared ids."""
    guard = shop_guard()
    as_repr = str({"orders": [{"order_id": "#W8855135", "status": "delivered", "n": -1.5}]})
    assert as_repr.startswith("{'orders'")
    assert ids(guard, "search_orders", as_repr) == [("order", "#W8855135")]
    assert ids(guard, "search_orders", f"  {as_repr}\n") == [("order", "#W8855135")]
    listed = str([{"order_id": "#W8855135", "ok": True, "note": None}])
    guard.declare("list_orders", produces={"[*].order_id": "order"}, effect="read")
    assert ids(guard, "list_orders", listed) == [("order", "#W8855135")]


def test_a_python_repr_reads_back_to_the_value_it_was_written_from() -> None:
    """Quotes, escapes, non-ASCII text, names inside strings and floats survive the reading."""
    value = {
        "orders": [{"order_id": "#W8855135"}],
        "notes": ["it's", 'say "hi"', "both ' and \"", "tab\there", "caf\u00e9 \U0001f600"],
        "text": "None of them is True",
        "numbers": [0, -3, 1.5, 1e-05, 2.5e300, -0.0],
        "flags": [True, False, None],
        "nested": {"a": [], "b": {}},
    }
    text = str(value)
    assert decode(text, []) == (value, None)


@pytest.mark.parametrize(
    "text",
    [
        "{'orders': [{'order_id': '#W8855135'}], 'x': __import__('os').getcwd()}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': {1, 2}}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': (1, 2)}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': b'bytes'}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': 2 ** 1000}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': -True}",
        "{'orders': [{'order_id': '#W8855135'}], 1: 'int key'}",
        "{'orders': [{'order_id': '#W8855135'}], **other}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': nan}",
        "{'orders': [{'order_id': '#W8855135'}] if True else []}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': " + "[" * 40_000 + "]" * 40_000 + "}",
        "{'orders': [{'order_id': '#W8855135'}], 'x': 'unterminated}",
        "{'orders': [{'order_id': f'#W8855135'}]}",
    ],
)
def test_text_that_is_more_than_a_plain_literal_is_not_read_as_one(text: str) -> None:
    """Calls, names, sets, tuples, bytes, arithmetic, odd keys or deep nesting: plain text."""
    guard = shop_guard()
    assert ids(guard, "search_orders", text) == []


def test_a_python_literal_over_the_size_bound_is_not_parsed() -> None:
    """Repr text over MAX_LITERAL_CHARS is plain text, and the harvest says so."""
    guard = shop_guard()
    padding = "x" * MAX_LITERAL_CHARS
    text = str({"orders": [{"order_id": "#W8855135"}], "pad": padding})
    harvested = harvest(guard.specs["search_orders"], text, guard.kinds)
    assert rows(harvested) == []
    assert any("not JSON" in problem for problem in harvested.problems)


def test_regex_producers_read_plain_text_only() -> None:
    """re: reads a text that is not JSON, or a JSON string; never a JSON object or array."""
    guard = shop_guard()
    guard.declare("send", produces={"re:ticket (it_[a-z0-9]+)": "item", "re:W\\d{7}": "order"})
    as_object = json.dumps({"note": "ticket it_x9y8 for W1234567", "ok": True})
    assert ids(guard, "send", as_object) == []
    assert ids(guard, "send", json.dumps(["ticket it_x9y8", "W1234567"])) == []
    assert ids(guard, "send", as_object.encode()) == []
    assert ids(guard, "send", {"note": "ticket it_x9y8"}) == []
    assert ids(guard, "send", '"ticket it_x9y8 for \\u00571234567"') == [  # a JSON string, decoded
        ("item", "it_x9y8"),
        ("order", "W1234567"),
    ]
    assert ids(guard, "send", "ticket it_x9y8 for W1234567") == [
        ("item", "it_x9y8"),
        ("order", "W1234567"),
    ]


def _picky(value: str) -> str:
    """A user normaliser that fails on some values and returns no text for others."""
    if "!" in value:
        raise ValueError("cannot read this one")
    if "?" in value:
        return None  # type: ignore[return-value]
    return value.strip().upper()


def test_a_value_the_normaliser_cannot_read_is_skipped_and_the_rest_recorded() -> None:
    """One bad value is a problem to report; the other ids of the result still come out."""
    guard = Guard()
    guard.add_kind("ticket", normalize=_picky)
    guard.declare("list_tickets", produces={"[*]": "ticket"}, effect="read")
    result = harvest(guard.specs["list_tickets"], ["t1", "bad!", "t2", "what?", "t3"], guard.kinds)
    assert [(f.value, f.key) for f in rows(result)] == [("t1", "T1"), ("t2", "T2"), ("t3", "T3")]
    assert len(result.problems) == 1
    assert "2 value(s)" in result.problems[0] and "normaliser" in result.problems[0]


# -- fuzz: any result, any declaration shape, no crash -----------------------------------------


def _fuzz_guard() -> Guard:
    """Kinds with every normaliser (one that fails on '!'), and producers of every shape."""
    guard = shop_guard()
    guard.add_kind("amount", normalize="number")
    guard.add_kind("link", normalize="url")
    guard.add_kind("picky", normalize=_picky)
    guard.declare(
        "everything",
        effect="read",
        produces={
            "rows[*].id": {"kind": "order", "status": "state"},
            "~": "link",
            "a.~": {"kind": "picky", "status": "state"},
            "*.n": "amount",
            "b[0]": "link",
            "[*][*].x": "customer",
            "items[*]": "picky",
            "re:(W\\d{3,7})": "order",
        },
    )
    guard.declare("whole", effect="read", produces={"$": "email"})
    return guard


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["W1234567", "#W0000000", "http://[::1", "x!", "y?", "1e3", "１０００"]),
)
_KEYS = st.one_of(
    st.sampled_from(["rows", "id", "a", "b", "n", "x", "items", "state", "error"]),
    st.text(max_size=6),
)
JSONISH = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=24,
)
RESULTS = st.one_of(
    JSONISH,
    JSONISH.map(json.dumps),
    JSONISH.map(lambda value: json.dumps(value).encode()),
    st.text(max_size=40),
    st.binary(max_size=24),
)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, derandomize=True)
@given(result=RESULTS)
def test_fuzz_harvest_never_raises(result: Any) -> None:
    """Whatever a tool returns, harvesting it and telling a failure raise nothing."""
    guard = _fuzz_guard()
    for tool in ("everything", "whole", "search_orders"):
        spec = guard.specs[tool]
        harvested = harvest(spec, result, guard.kinds)
        assert all(isinstance(found.key, str) and found.key for found in rows(harvested))
        recordable(spec, result, guard.kinds)
    failed(None, result)
