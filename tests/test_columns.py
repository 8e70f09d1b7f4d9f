"""A field of a list of plain records, read a column at a time, yields what the general path does.

Every test here harvests the same result twice: once as the guard does (a
producer whose field sits in a list of plain records read by
:func:`~guardrail._provenance.columns.plain_columns`), once with that
reader turned off, every id taken one by one. The batches (values, keys,
statuses, notes, down to a note's type) and the problems must be the same,
whatever the records hold: ids as text, numbers, None, empty, too long,
spaced, repeated, examples, missing; several producers of one kind; default
note fields of every type; records of several shapes; a normaliser that
fails.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard, Id
from guardrail._provenance import harvest as harvest_module
from guardrail._provenance.columns import MAX_ID_LENGTH, plain_columns
from guardrail._provenance.harvest import Harvest, harvest

FIELDS = ("order_id", "customer_id", "id", "flight_number", "status", "name", "date", "amount")
VALUES = st.one_of(
    st.sampled_from(["W1", "W2", " W1 ", "#W3", "", "W0", "x" * (MAX_ID_LENGTH + 1), "[a]"]),
    st.sampled_from(["delivered", "a\nb", "Kettle  K2", "x" * 50, "ok"]),
    st.integers(-3, 3),
    st.sampled_from([None, True, 1.5, float("nan")]),
    st.lists(st.sampled_from(["W1", "W2"]), max_size=2),
)
IDS = st.sampled_from(["W1", "W2", " W1 ", "#W3", "W4", "[W5]", "W  6", "c1", "c2", 7])
ID_FIELDS = ("order_id", "customer_id", "flight_number", "id")


def _records(names: frozenset[str]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Records that mostly hold the id fields ``names`` as text (the column way).

    With other fields of every kind, in any order, and now and then a value it cannot take.
    """
    return st.lists(
        st.builds(
            lambda base, extra, order: dict(
                sorted({**base, **extra}.items(), key=lambda item: order.index(item[0]))
            ),
            st.fixed_dictionaries(dict.fromkeys(sorted(names), IDS)),
            st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=3),
            st.permutations(FIELDS),
        ),
        max_size=8,
    )


RECORDS = st.frozensets(st.sampled_from(ID_FIELDS), min_size=1).flatmap(_records)
PRODUCES = st.dictionaries(
    st.sampled_from(
        [
            "orders[*].order_id",
            "orders[*].customer_id",
            "orders[*].flight_number",
            "orders[*].id",
            "order_id",
            "[*].order_id",
        ]
    ),
    st.sampled_from(
        [
            "order",
            "customer",
            Id("order", status="status"),
            Id("customer", status="date"),
            Id("order", note=False),
            Id("customer", note=["name"]),
        ]
    ),
    min_size=1,
    max_size=3,
)


def _failing(text: str) -> str:
    if text == "W2":
        raise ValueError("no")
    return text.strip().lstrip("#")


def _guard(produces: dict[str, Any]) -> Guard:
    guard = Guard()
    guard.add_kind("order", normalize=_failing, examples=["W0"])
    guard.add_kind("customer")
    guard.declare("list_orders", produces=produces, effect="read")
    return guard


def _shown(found: Harvest) -> Any:
    return (
        [
            (
                tuple(b[:6]),
                None if b.notes is None else [(n, type(n)) for n in b.notes],
                b[7:],
            )
            for b in found.batches
        ],
        found.problems,
    )


def _both(guard: Guard, result: Any) -> tuple[Any, Any]:
    spec = guard.specs["list_orders"]
    fast = _shown(harvest(spec, result, guard.kinds))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harvest_module, "plain_columns", lambda *args: None)
        slow = _shown(harvest(spec, result, guard.kinds))
    return fast, slow


@settings(max_examples=400, deadline=None)
@given(
    produces=PRODUCES,
    records=RECORDS,
    shape=st.sampled_from(["orders", "list", "one", "json"]),
    uniform=st.booleans(),
)
def test_columns_yield_what_the_general_path_yields(
    produces: dict[str, Any], records: list[dict[str, Any]], shape: str, uniform: bool
) -> None:
    guard = _guard(produces)
    if uniform and records:  # every record of the first one's fields, in its order
        first = records[0]
        records = [{name: held.get(name, first[name]) for name in first} for held in records]
    result: Any = {"orders": records, "order_id": "W9"}
    if shape == "list":
        result = records
    elif shape == "one":
        result = records[0] if records else {}
    elif shape == "json":
        result = json.dumps({"orders": records}, allow_nan=True)
    fast, slow = _both(guard, result)
    assert fast == slow


@settings(max_examples=60, deadline=None)
@given(count=st.integers(998, 1002), repeat=st.integers(1, 3), status=st.booleans())
def test_columns_take_no_default_notes_past_the_bound(
    count: int, repeat: int, status: bool
) -> None:
    """Past DEFAULT_NOTES ids a producer reads no default note, on both paths alike."""
    order = Id("order", status="status") if status else "order"
    guard = _guard({"orders[*].order_id": order, "orders[*].customer_id": "customer"})
    records = [
        {"order_id": f"W{i + 10}", "customer_id": f"c{i // repeat}", "name": f"n{i % 3}"}
        for i in range(count)
    ]
    fast, slow = _both(guard, {"orders": records})
    assert fast == slow


def test_plain_records_are_read_as_columns() -> None:
    """The usual list of records goes the column way (so the twin tests compare something)."""
    guard = _guard({"orders[*].order_id": "order", "orders[*].customer_id": "customer"})
    spec = guard.specs["list_orders"]
    records = [{"order_id": "W5", "customer_id": "c1", "status": "paid"}]
    columns = plain_columns(spec.produces[0], {"orders": records}, {}, str.strip, (set(), set()))
    assert columns is not None
    assert columns.values == ["W5"] and columns.notes == ["paid"]


def test_a_value_no_declared_field_holds_is_never_taken() -> None:
    """An attacker's record: ids in undeclared fields, a look-alike key, a nested copy."""
    guard = _guard({"orders[*].order_id": "order"})
    records = [
        {"order_id": "W5", "note": "W6", "orders": [{"order_id": "W7"}]},
        {"order_id ": "W8", "Order_id": "W9", "order_id\u200b": "W10"},
    ]
    for held in (records, records[:1]):  # the general path, then the columns
        found = harvest(guard.specs["list_orders"], {"orders": held}, guard.kinds)
        assert [b.values for b in found.batches] == [["W5"]]


STATUS_ORDERS = {
    "orders[*].order_id": Id("order", status="status"),
    "orders[*].customer_id": "customer",
}


@pytest.mark.parametrize(
    "records",
    [
        [{"order_id": "W1", "status": "paid"}],  # the status is no part of the note
        [{"order_id": "W1", "status": "paid", "name": "Kettle"}],
        [{"order_id": "W1", "name": ""}, {"order_id": "W4", "name": "x" * 41}],
        [{"order_id": "W1", "name": "  a\tb [c] "}, {"order_id": "W4", "name": 12}],
        [{"order_id": "W1", "name": None, "date": "2024"}, {"order_id": "W4", "name": True}],
        [{"customer_id": "c1", "order_id": "W1", "name": "n"}],  # the order is not its own
        [{"flight_number": "F1", "order_id": "W1"}, {"order_id": "W4", "flight_number": 7}],
        [{"order_id": "W1", "customer_id": "c[1]"}, {"order_id": "W4", "customer_id": "c  2"}],
        [{"order_id": "W1", "customer_id": "c1", "id": "x"}],
        [{"order_id": "W1", "customer_id": "c 1 "}, {"order_id": "W4", "customer_id": " c2"}],
        [{"order_id": "W1", "customer_id": "c1 "}, {"order_id": "W4", "customer_id": " c2"}],
        [{"order_id": "W1", "customer_id": "c\u200e1"}, {"order_id": "W4", "customer_id": ""}],
        [{"order_id": "W1", "status": "paid"}, {"order_id": "W4", "status": "x" * 41}],
        [{"order_id": "W1", "status": ""}, {"order_id": "W4", "status": 3}],
        [{"id": "W1", "order_id": "W2"}, {"id": "W3", "order_id": "W4"}],
        [{"order_id": " W1", "customer_id": "c1"}, {"order_id": "W4 ", "customer_id": "c2"}],
        [{"order_id": "W]1", "customer_id": "c1"}, {"order_id": "W4", "customer_id": "c2"}],
        [{"flight_number": "F1", "name": "n"}, {"flight_number": "F2", "name": "m"}],
        [{"order_id": "W1", "flight_number": "F1", "name": "n"}],
    ],
)
def test_columns_read_notes_as_the_general_path(records: list[dict[str, Any]]) -> None:
    """Records whose note takes each turn of the column reader's planned notes."""
    for produces in (
        STATUS_ORDERS,
        {"orders[*].order_id": "order", "orders[*].id": "customer"},
        {"orders[*].flight_number": "order", "orders[*].order_id": "customer"},
    ):
        guard = _guard(produces)
        for result in ({"orders": records}, {"orders": records, "order_id": "W9"}, records[0]):
            fast, slow = _both(guard, result)
            assert fast == slow


def test_a_failed_or_odd_result_brings_no_id_by_the_column_way() -> None:
    """What an attacker may put in a list of records: nothing enters but declared text ids."""
    guard = _guard({"orders[*].order_id": "order"})
    ledger = guard.new_ledger("attack")
    odd = [{"order_id": ["W1", "W2"]}, {"order_id": {"id": "W3"}}, {"order_id": True}]
    guard.record("list_orders", {}, {"orders": odd}, ledger=ledger)
    guard.record("list_orders", {}, {"error": "no", "orders": [{"order_id": "W4"}]}, ledger=ledger)
    guard.record("list_orders", {}, {"orders": [{"order_id": "W5"}]}, error=True, ledger=ledger)
    assert [entry.value for entry in ledger] == []
    guard.record("list_orders", {}, {"orders": [{"order_id": "W6", "x": "W7"}]}, ledger=ledger)
    assert [(entry.value, entry.verified) for entry in ledger] == [("W6", True)]
