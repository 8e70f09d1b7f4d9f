"""The ledger: verbatim entries, stable roles, eviction by last use, exact JSON round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import GuardrailUsageError, Ledger, Source
from guardrail.harvest import Found
from guardrail.kinds import Kind
from guardrail.ledger import USER_TEXTS_KEPT

SRC = Source("get_order", "call_1", "order_id", 0)


def found(kind: str, value: str, *, role: str | None = None, status: str | None = None) -> Found:
    return Found(kind, value, value, "order_id", status, role)


def test_default_roles_are_kind_then_numbered() -> None:
    """Roles default to the kind, then kind_2, kind_3 in order seen."""
    ledger = Ledger()
    added = ledger.admit(
        [found("order", "W1"), found("order", "W2"), found("user", "u1")], source=SRC
    )
    assert [e.role for e in added.added] == ["order", "order_2", "user"]
    assert ledger.roles == {"order": "order", "order_2": "order", "user": "user"}
    assert ledger["order_2"].value == "W2"


def test_role_templates_fill_kind_number_tool_and_status() -> None:
    """A spec's role template is filled in and kept unique."""
    ledger = Ledger()
    items = [
        found("order", "W1", role="{status}_order", status="damaged"),
        found("order", "W2", role="{status}_order", status="damaged"),
        found("order", "W3", role="{tool}-{n}"),
    ]
    roles = [e.role for e in ledger.admit(items, source=SRC).added]
    assert roles == ["damaged_order", "damaged_order_2", "get_order-3"]


def test_known_ids_are_refreshed_not_duplicated() -> None:
    """Seeing an id again updates its status and verification, never adds a second entry."""
    ledger = Ledger()
    ledger.admit([found("order", "W1")], source=SRC, verified=False)
    again = ledger.admit([found("order", "W1", status="shipped")], source=SRC)
    assert again.added == [] and [e.value for e in again.verified] == ["W1"]
    entry = ledger["order"]
    assert entry.verified and entry.status == "shipped" and len(ledger) == 1


def test_relabel_keeps_the_old_role_as_an_alias() -> None:
    """Summaries written with the old role still resolve after a relabel."""
    ledger = Ledger()
    ledger.admit([found("order", "W1"), found("order", "W2")], source=SRC)
    ledger.label("order_2", "damaged_order")
    assert ledger["damaged_order"] is ledger["order_2"]
    assert ledger["damaged_order"].aliases == ("order_2",)
    assert "order_2" not in ledger.roles and "damaged_order" in ledger.roles
    with pytest.raises(GuardrailUsageError, match="already names 'W1'"):
        ledger.label("damaged_order", "order")
    with pytest.raises(GuardrailUsageError, match="must be a non-empty name"):
        ledger.label("order", "bad role!")
    with pytest.raises(KeyError, match="no ledger role 'nope'"):
        ledger.label("nope", "x")


def test_eviction_is_by_last_use_not_first_seen() -> None:
    """The order still in use at turn 40 stays; the one untouched since turn 2 goes."""
    ledger = Ledger(capacity=2)
    ledger.admit([found("order", "W_old_but_used")], source=SRC)
    ledger.next_turn()
    ledger.admit([found("order", "W_idle")], source=SRC)
    ledger.next_turn()
    ledger.touch(ledger["order"])
    evicted = ledger.admit([found("order", "W_new")], source=SRC).evicted
    assert [e.value for e in evicted] == ["W_idle"]
    assert {e.value for e in ledger} == {"W_old_but_used", "W_new"}


def test_pinned_entries_stay_and_do_not_count_against_capacity() -> None:
    """A pinned entry is never evicted and leaves the capacity to the others."""
    ledger = Ledger(capacity=1)
    ledger.admit([found("order", "W1")], source=SRC)
    ledger.pin("order")
    assert ledger.admit([found("order", "W2")], source=SRC).evicted == []
    assert len(ledger) == 2
    assert [e.value for e in ledger.admit([found("order", "W3")], source=SRC).evicted] == ["W2"]
    ledger.pin("order", False)
    assert [e.value for e in ledger] == ["W3"]


def test_a_result_larger_than_capacity_is_recorded_before_eviction() -> None:
    """All ids of one result are admitted before any is evicted, so none is half-recorded."""
    ledger = Ledger(capacity=3)
    result = ledger.admit([found("order", f"W{n}") for n in range(5)], source=SRC)
    assert len(result.added) == 5 and len(result.evicted) == 2 and len(ledger) == 3


def test_tombstones_are_bounded_and_returning_ids_keep_their_role() -> None:
    """Evicted ids leave bounded tombstones; an id that comes back gets its old role."""
    ledger = Ledger(capacity=1, tombstones=2)
    for n in range(4):
        ledger.admit([found("order", f"W{n}")], source=SRC)
    assert [t.value for t in ledger.tombstones()] == ["W1", "W2"]
    tomb = ledger.tombstone("order", "W1")
    assert tomb is not None and tomb.role == "order_2"
    assert ledger.admit([found("order", "W1")], source=SRC).added[0].role == "order_2"
    assert ledger.tombstone("order", "W1") is None


def test_roles_of_evicted_ids_are_not_reused() -> None:
    """A role names one id forever: new ids never take a tombstone's role."""
    ledger = Ledger(capacity=1)
    ledger.admit([found("order", "W1")], source=SRC)
    ledger.admit([found("order", "W2")], source=SRC)
    with pytest.raises(GuardrailUsageError, match="belonged to an evicted id"):
        ledger.label("order_2", "order")


def test_user_texts_are_bounded_and_matched_as_whole_tokens() -> None:
    """Only the last texts are kept; a value counts as typed only as a whole token."""
    ledger = Ledger()
    ledger.observe_text("I stay at the Grand Hyatt, room 12.")
    assert ledger.typed_by_user("Grand Hyatt")
    assert not ledger.typed_by_user("Grand Hy")
    assert not ledger.typed_by_user("1")
    for n in range(USER_TEXTS_KEPT):
        ledger.observe_text(f"text {n}")
    assert not ledger.typed_by_user("Grand Hyatt")


def test_prefix_search_sees_pending_and_merged_keys_but_not_evicted_ones() -> None:
    """Prefix look-ups stay right while keys are added and evicted."""
    ledger = Ledger(capacity=400)
    ledger.admit([found("order", f"W{n:04d}") for n in range(600)], source=SRC)
    assert {e.value for e in ledger.keys_with_prefix("order", "W059", limit=20)} == {
        f"W059{n}" for n in range(10)
    }
    assert ledger.keys_with_prefix("order", "W000") == []  # evicted
    ledger.admit([found("order", "W0001x")], source=SRC)
    assert [e.value for e in ledger.keys_with_prefix("order", "W0001")] == ["W0001x"]


def test_json_round_trip_is_exact() -> None:
    """A saved ledger loads back equal, and saves to the same text."""
    ledger = Ledger(capacity=2, tombstones=5, session_id="s")
    ledger.admit([found("order", "W1", status="paid"), found("user", "u1")], source=SRC)
    ledger.next_turn()
    ledger.label("order", "paid_order")
    ledger.pin("paid_order")
    ledger.admit([found("order", "W2"), found("order", "W3")], source=SRC, verified=False)
    assert [t.value for t in ledger.tombstones()] == ["u1"]
    ledger.observe_text("hello W2")
    ledger.refusals["refund"] = 2
    text = ledger.to_json()
    again = Ledger.from_json(text)
    assert again == ledger
    assert again.to_json() == text
    assert again["order"] is again["paid_order"]
    assert [t.value for t in again.tombstones()] == [t.value for t in ledger.tombstones()]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["order", "user", "item"]), st.text(min_size=1, max_size=8)),
        max_size=40,
    ),
    st.integers(min_value=1, max_value=10),
)
def test_round_trip_property(items: list[tuple[str, str]], capacity: int) -> None:
    """Any sequence of admissions and turns survives a JSON round trip exactly."""
    ledger = Ledger(capacity=capacity)
    for n, (kind, value) in enumerate(items):
        if n % 3 == 0:
            ledger.next_turn()
        ledger.admit([Found(kind, value, value, "p")], source=SRC, verified=n % 2 == 0)
    assert Ledger.from_json(ledger.to_json()).to_json() == ledger.to_json()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"format": 99}', "format 99"),
        ('{"format": 2}', "not a saved ledger"),
    ],
)
def test_bad_saved_ledgers_are_usage_errors(text: str, message: str) -> None:
    """Loading something that is not a saved ledger says so."""
    with pytest.raises(GuardrailUsageError, match=message):
        Ledger.from_json(text)


def test_capacity_must_be_positive() -> None:
    """A ledger needs room for at least one entry."""
    with pytest.raises(GuardrailUsageError, match="positive integer"):
        Ledger(capacity=0)


def test_entry_to_dict_is_json_safe() -> None:
    """Entries serialise to plain JSON."""
    ledger = Ledger()
    ledger.admit([found("order", "W1")], source=SRC)
    assert json.loads(json.dumps(ledger["order"].to_dict()))["source"]["call_id"] == "call_1"


# -- loading a saved ledger: every field validated --------------------------------------------


def saved(**changes: Any) -> dict[str, Any]:
    """A saved two-entry ledger (format 2) as a dict, with ``changes`` applied to it."""
    ledger = Ledger(capacity=5, session_id="s")
    ledger.admit([found("order", "W1"), found("order", "W2")], source=SRC)
    ledger.label("order_2", "second")
    data = ledger.to_dict()
    data.update(changes)
    return data


def entry_changed(index: int, **changes: Any) -> dict[str, Any]:
    """A saved ledger whose entry ``index`` has ``changes``."""
    data = saved()
    data["entries"][index].update(changes)
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (entry_changed(0, verified="false"), r"entries\[0\]\.verified: expected a boolean"),
        (entry_changed(1, pinned=1), r"entries\[1\]\.pinned: expected a boolean"),
        (entry_changed(0, first_seen="3"), r"entries\[0\]\.first_seen: expected an integer"),
        (entry_changed(0, last_used=-1), r"entries\[0\]\.last_used: must be >= 0"),
        (entry_changed(0, value=None), r"entries\[0\]\.value: expected a string"),
        (entry_changed(0, trusted=True), r"entries\[0\]\.trusted: unexpected field"),
        (saved(turn=True), r"turn: expected an integer"),
        (saved(turn=-2), r"turn: must be >= 0"),
        (saved(capacity=0), r"capacity: must be >= 1"),
        (saved(seal_key="abc"), r"seal_key: .*64 hex"),
        (saved(seal_key="zz" * 32), r"seal_key: .*64 hex"),
        (saved(roles={"order": "order", "second": "nobody"}), r"roles\['second'\].*nobody"),
        (saved(roles={"order": "order"}), r"entries\[1\].*'second'.*not in roles"),
        (saved(roles={"order": "order", "second": "second", "x": "order"}), r"roles\['x'\]"),
        (entry_changed(1, role="order"), r"entries\[1\]\.role: 'order' is also"),
        (entry_changed(1, key="W1"), r"entries\[1\]: .*order.*'W1' is also entries\[0\]"),
        (saved(refusals={"refund": "2"}), r"refusals\['refund'\]: expected an integer"),
        (saved(user_texts=[1]), r"user_texts\[0\]: expected a string"),
        (saved(extra=1), r"extra: unexpected field"),
        ({"format": 2}, r"session_id: missing \(and 13 more\)"),
    ],
)
def test_a_bad_saved_ledger_says_what_is_wrong_where(data: dict[str, Any], message: str) -> None:
    """Each wrong field of a saved ledger is a usage error naming the field and what to do."""
    with pytest.raises(GuardrailUsageError, match=message) as info:
        Ledger.from_json(json.dumps(data))
    assert "save it again" in str(info.value) or "fix" in str(info.value)
    with pytest.raises(GuardrailUsageError, match=message):
        Ledger.from_dict(data)


def test_a_format_1_ledger_loads_with_a_fresh_seal_key() -> None:
    """Format 1 (no seal key, no drop marks) loads; it gets a random seal key of its own."""
    data = saved(format=1)
    del data["seal_key"], data["dropped"]
    one, two = Ledger.from_json(json.dumps(data)), Ledger.from_json(json.dumps(data))
    assert one["second"].value == "W2"
    assert len(one.seal_key) == 32
    assert one.seal_key != two.seal_key
    with pytest.raises(GuardrailUsageError, match="dropped: unexpected field"):
        Ledger.from_json(json.dumps({**data, "dropped": []}))


def test_a_normaliser_that_changed_rekeys_entries_on_load() -> None:
    """With kinds given, an entry's key is what its kind's normaliser makes of its value."""
    order = Kind.build("order", normalize=["strip", "prefix:#", "upper"])
    data = saved()
    data["entries"][0].update(value="#w7", key="#w7")
    data["entries"][1].update(value="W8", key="W9999999")  # a key its value never gives
    ledger = Ledger.from_json(json.dumps(data), kinds={"order": order})
    assert {entry.key for entry in ledger} == {"W7", "W8"}
    assert ledger.get("order", "w7") is ledger["order"]
    assert ledger.get("order", "W9999999") is None


def test_entries_that_collide_after_rekeying_keep_the_verified_one() -> None:
    """Two entries whose values now normalise alike become one; the other's role is an alias."""
    order = Kind.build("order", normalize=["strip", "prefix:#"])
    data = saved()
    data["entries"][0].update(value="#W5", key="#W5", verified=False)
    data["entries"][1].update(value="W5", key="W5", last_used=0)
    ledger = Ledger.from_json(json.dumps(data), kinds={"order": order})
    assert len(ledger) == 1
    kept = ledger["second"]
    assert (kept.value, kept.verified) == ("W5", True)
    assert ledger["order"] is kept
    assert "order" in kept.aliases


def test_a_saved_ledger_never_loads_half_valid() -> None:
    """A bad field anywhere fails the whole load: nothing is returned, whatever came before."""
    data = saved()
    data["tombstones"] = [
        {"value": "W0", "kind": "order", "key": "W0", "role": "x", "evicted_turn": "1"}
    ]
    with pytest.raises(GuardrailUsageError, match=r"tombstones\[0\]\.evicted_turn"):
        Ledger.from_json(json.dumps(data))


def test_loading_imports_pydantic_only_when_it_validates() -> None:
    """import guardrail does not import pydantic; loading a saved ledger does."""
    code = (
        "import sys, guardrail; assert 'pydantic' not in sys.modules, 'imported early'; "
        "guardrail.Ledger.from_json(guardrail.Ledger().to_json()); "
        "assert 'pydantic' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_entry_the_normaliser_cannot_read_is_dropped_on_load() -> None:
    """A saved value today's normaliser fails on leaves a tombstone, never a live key."""

    def strict_order(value: str) -> str:
        if not value.startswith("W"):
            raise ValueError("not an order")
        return value

    data = saved()
    data["entries"][0].update(value="bad", key="W7")  # a key its value no longer gives
    ledger = Ledger.from_json(
        json.dumps(data), kinds={"order": Kind.build("order", normalize=strict_order)}
    )
    assert [entry.value for entry in ledger] == ["W2"]
    assert "order" not in ledger
    assert ledger.get("order", "W7") is None
    assert ledger.tombstone("order", "W7") is not None
    assert len(ledger) == 1
