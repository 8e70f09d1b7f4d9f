"""Paths: compiled once, walked over results and arguments."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from guardrail import GuardrailUsageError
from guardrail._declare.paths import compile_path

RESULT: dict[str, Any] = {
    "orders": [{"order_id": "W1", "items": [{"id": "i1"}, {"id": "i2"}]}, {"order_id": "W2"}],
    "payment_methods": {"credit_card_1": {"id": "credit_card_1"}, "gift_card_2": {"id": "x"}},
    "odd.key": "odd",
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$", [RESULT]),
        ("orders[*].order_id", ["W1", "W2"]),
        ("orders[*].items[*].id", ["i1", "i2"]),
        ("orders[1].order_id", ["W2"]),
        ("orders[-1].order_id", ["W2"]),
        ("payment_methods.~", ["credit_card_1", "gift_card_2"]),
        ("payment_methods.*.id", ["credit_card_1", "x"]),
        ('["odd.key"]', ["odd"]),
        ("$.orders[0].order_id", ["W1"]),
        ("missing.key", []),
        ("orders.order_id", []),
    ],
)
def test_paths_reach_what_they_name(path: str, expected: list[Any]) -> None:
    """Each step of the syntax reaches the values its documentation describes."""
    assert compile_path(path).extract(RESULT) == expected


def test_leading_each_and_bare_keys() -> None:
    """A leading [*] walks a list result; a bare ~ reads the root's keys."""
    assert compile_path("[*][*].n").extract([[{"n": 1}, {"n": 2}], [{"n": 3}]]) == [1, 2, 3]
    assert compile_path("~").extract({"JFK": "New York", "SEA": "Seattle"}) == ["JFK", "SEA"]


def test_paths_read_attributes_of_models_and_dataclasses() -> None:
    """Models and dataclasses are walked by attribute; methods are never reached."""

    class Order(BaseModel):
        order_id: str

    @dataclass
    class Page:
        orders: list[Order]

    page = Page(orders=[Order(order_id="W1"), Order(order_id="W2")])
    assert compile_path("orders[*].order_id").extract(page) == ["W1", "W2"]
    assert compile_path("orders[*].model_dump").extract(page) == []
    assert compile_path("upper").extract("text") == []


def test_arguments_given_as_json_strings_are_parsed() -> None:
    """Models send list parameters as JSON text; argument paths read through it."""
    path = compile_path("flights[*].flight_number")
    arguments = {"flights": '[{"flight_number": "HAT136"}, {"flight_number": "HAT039"}]'}
    assert path.extract(arguments, parse_json_strings=True) == ["HAT136", "HAT039"]
    assert path.extract(arguments) == []


def test_single_value_where_a_list_is_declared_is_still_seen() -> None:
    """A bare string given for a list parameter is checked rather than dropped."""
    path = compile_path("item_ids[*]")
    assert path.extract({"item_ids": "it_1"}, parse_json_strings=True) == ["it_1"]


def test_extract_with_parents_pairs_values_with_their_holders() -> None:
    """A status can be read beside the id: the holder is the object holding it."""
    rows = compile_path("orders[*].order_id").extract_with_parents(RESULT)
    assert [value for value, _ in rows] == ["W1", "W2"]
    keyed = compile_path("payment_methods.~").extract_with_parents(RESULT)
    assert keyed[0] == ("credit_card_1", {"id": "credit_card_1"})


@pytest.mark.parametrize(
    "bad",
    ["", "a..b", ".a", "a.", "a[*", "a[x]", "a.~.b", "a .b", "a*", "a~", "[*]."],
)
def test_malformed_paths_are_usage_errors(bad: str) -> None:
    """A malformed path names the tool, the path and the position."""
    with pytest.raises(GuardrailUsageError, match="malformed path") as info:
        compile_path(bad, tool="get_order", param=bad)
    assert info.value.tool == "get_order"
    assert "tool 'get_order'" in str(info.value)


def test_path_must_be_text() -> None:
    """A path that is not a string is refused clearly."""
    with pytest.raises(GuardrailUsageError, match="must be a string"):
        compile_path(3)  # type: ignore[arg-type]


# -- fuzz: any path text, any value ----------------------------------------------------------

_PATH_TEXT = st.one_of(
    st.text(alphabet="ab.[]*~0-1\"' $", max_size=14),
    st.tuples(
        st.sampled_from(["a", "b", "[*]", "[0]", "~", "*", "$", '["a"]', ".a"]),
        st.lists(st.sampled_from([".a", ".b", "[*]", "[0]", "[-1]", ".*", ".~", "a"]), max_size=4),
    ).map(lambda parts: parts[0] + "".join(parts[1])),
)
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet="abAB", max_size=3))
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "ab", "0"]), inner, max_size=3),
        st.lists(inner, max_size=3).map(json.dumps),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=3).map(json.dumps),
    ),
    max_leaves=16,
)
_ROOTS = st.one_of(
    st.dictionaries(st.sampled_from(["a", "b"]), _VALUES, min_size=1, max_size=2),
    st.lists(_VALUES, min_size=1, max_size=3),
    _VALUES,
)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, derandomize=True)
@given(text=_PATH_TEXT, root=_ROOTS, parse=st.booleans())
def test_fuzz_paths_compile_or_refuse_and_walking_never_raises(
    text: str, root: Any, parse: bool
) -> None:
    """A path compiles or is a usage error; walking never raises nor changes what it walks."""
    try:
        path = compile_path(text)
    except GuardrailUsageError:
        return
    snapshot = json.dumps(root)
    path.extract(root, parse_json_strings=parse)
    path.extract_with_parents(root)
    assert json.dumps(root) == snapshot  # nothing given is changed
