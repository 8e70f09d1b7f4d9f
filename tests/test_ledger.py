"""The ledger: verbatim entries, stable roles, eviction by last use, exact JSON round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import GuardrailUsageError, Kind, Ledger, Source
from guardrail._data.batch import Batch
from guardrail._data.entry import live_record
from guardrail.ledger import USER_TEXTS_KEPT, Dropped
from guardrail.ledger._ledger import state_of
from guardrail.ledger._merge import merge_record

SRC = Source("get_order", "call_1", "order_id", 0)


def found(kind: str, value: str, *, role: str | None = None, status: str | None = None) -> Batch:
    return Batch.one(kind, value, value, "order_id", status, role)


def test_the_ledger_shows_only_what_a_program_uses() -> None:
    """Public: reading entries, label/pin/forget/merge, saving, and four attributes; no more."""
    public = {name for name in dir(Ledger()) if not name.startswith("_")}
    assert public == {
        "entries", "get", "roles", "tombstones",
        "label", "pin", "forget", "merge",
        "to_json", "from_json", "to_dict", "from_dict",
        "session_id", "capacity", "turn", "seal_key",
    }  # fmt: skip


def test_default_roles_are_kind_then_numbered() -> None:
    """Roles default to the kind, then kind_2, kind_3 in order seen."""
    ledger = Ledger()
    added = state_of(ledger).admit(
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
    roles = [e.role for e in state_of(ledger).admit(items, source=SRC).added]
    assert roles == ["damaged_order", "damaged_order_2", "get_order-3"]


def test_known_ids_are_refreshed_not_duplicated() -> None:
    """Seeing an id again updates its status and verification, never adds a second entry."""
    ledger = Ledger()
    state_of(ledger).admit([found("order", "W1")], source=SRC, verified=False)
    again = state_of(ledger).admit([found("order", "W1", status="shipped")], source=SRC)
    assert again.added == [] and [e.value for e in again.verified] == ["W1"]
    entry = ledger["order"]
    assert entry.verified and entry.status == "shipped" and len(ledger) == 1


def test_relabel_keeps_the_old_role_as_an_alias() -> None:
    """Summaries written with the old role still resolve after a relabel."""
    ledger = Ledger()
    state_of(ledger).admit([found("order", "W1"), found("order", "W2")], source=SRC)
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
    state_of(ledger).admit([found("order", "W_old_but_used")], source=SRC)
    state_of(ledger).next_turn()
    state_of(ledger).admit([found("order", "W_idle")], source=SRC)
    state_of(ledger).next_turn()
    state_of(ledger).touch(ledger["order"])
    evicted = state_of(ledger).admit([found("order", "W_new")], source=SRC).evicted
    assert [e.value for e in evicted] == ["W_idle"]
    assert {e.value for e in ledger} == {"W_old_but_used", "W_new"}


def test_pinned_entries_stay_and_do_not_count_against_capacity() -> None:
    """A pinned entry is never evicted and leaves the capacity to the others."""
    ledger = Ledger(capacity=1)
    state_of(ledger).admit([found("order", "W1")], source=SRC)
    ledger.pin("order")
    assert state_of(ledger).admit([found("order", "W2")], source=SRC).evicted == []
    assert len(ledger) == 2
    assert [
        e.value for e in state_of(ledger).admit([found("order", "W3")], source=SRC).evicted
    ] == ["W2"]
    ledger.pin("order", False)
    assert [e.value for e in ledger] == ["W3"]


def test_a_result_larger_than_capacity_is_recorded_before_eviction() -> None:
    """All ids of one result are admitted before any is evicted, so none is half-recorded."""
    ledger = Ledger(capacity=3)
    result = state_of(ledger).admit([found("order", f"W{n}") for n in range(5)], source=SRC)
    assert len(result.added) == 5 and len(result.evicted) == 2 and len(ledger) == 3


def test_tombstones_are_bounded_and_returning_ids_keep_their_role() -> None:
    """Evicted ids leave bounded tombstones; an id that comes back gets its old role."""
    ledger = Ledger(capacity=1, tombstones=2)
    for n in range(4):
        state_of(ledger).admit([found("order", f"W{n}")], source=SRC)
    assert [t.value for t in ledger.tombstones()] == ["W1", "W2"]
    tomb = state_of(ledger).tombstone("order", "W1")
    assert tomb is not None and tomb.role == "order_2"
    assert state_of(ledger).admit([found("order", "W1")], source=SRC).added[0].role == "order_2"
    assert state_of(ledger).tombstone("order", "W1") is None


def test_roles_of_evicted_ids_are_not_reused() -> None:
    """A role names one id forever: new ids never take a tombstone's role."""
    ledger = Ledger(capacity=1)
    state_of(ledger).admit([found("order", "W1")], source=SRC)
    state_of(ledger).admit([found("order", "W2")], source=SRC)
    with pytest.raises(GuardrailUsageError, match="belonged to an evicted id"):
        ledger.label("order_2", "order")


def test_user_texts_are_bounded_and_matched_as_whole_tokens() -> None:
    """Only the last texts are kept; a value counts as typed only as a whole token."""
    ledger = Ledger()
    state_of(ledger).observe_text("I stay at the Grand Hyatt, room 12.")
    assert state_of(ledger).typed_by_user("Grand Hyatt")
    assert not state_of(ledger).typed_by_user("Grand Hy")
    assert not state_of(ledger).typed_by_user("1")
    for n in range(USER_TEXTS_KEPT):
        state_of(ledger).observe_text(f"text {n}")
    assert not state_of(ledger).typed_by_user("Grand Hyatt")


def test_prefix_search_sees_pending_and_merged_keys_but_not_evicted_ones() -> None:
    """Prefix look-ups stay right while keys are added and evicted."""
    ledger = Ledger(capacity=400)
    state_of(ledger).admit([found("order", f"W{n:04d}") for n in range(600)], source=SRC)
    assert {e.value for e in state_of(ledger).keys_with_prefix("order", "W059", limit=20)} == {
        f"W059{n}" for n in range(10)
    }
    assert state_of(ledger).keys_with_prefix("order", "W000") == []  # evicted
    state_of(ledger).admit([found("order", "W0001x")], source=SRC)
    assert [e.value for e in state_of(ledger).keys_with_prefix("order", "W0001")] == ["W0001x"]


def test_json_round_trip_is_exact() -> None:
    """A saved ledger loads back equal, and saves to the same text."""
    ledger = Ledger(capacity=2, tombstones=5, session_id="s")
    state_of(ledger).admit([found("order", "W1", status="paid"), found("user", "u1")], source=SRC)
    state_of(ledger).next_turn()
    ledger.label("order", "paid_order")
    ledger.pin("paid_order")
    state_of(ledger).admit([found("order", "W2"), found("order", "W3")], source=SRC, verified=False)
    assert [t.value for t in ledger.tombstones()] == ["u1"]
    state_of(ledger).observe_text("hello W2")
    state_of(ledger).reprompts.add("refund", ledger.turn)
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
            state_of(ledger).next_turn()
        state_of(ledger).admit(
            [Batch.one(kind, value, value, "p")], source=SRC, verified=n % 2 == 0
        )
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
    state_of(ledger).admit([found("order", "W1")], source=SRC)
    assert json.loads(json.dumps(ledger["order"].to_dict()))["source"]["call_id"] == "call_1"


# -- loading a saved ledger: every field validated --------------------------------------------


def saved(**changes: Any) -> dict[str, Any]:
    """A saved two-entry ledger (format 3) as a dict, with ``changes`` applied to its meta."""
    ledger = Ledger(capacity=5, session_id="s")
    state_of(ledger).admit([found("order", "W1"), found("order", "W2")], source=SRC)
    ledger.label("order_2", "second")
    data = ledger.to_dict()
    data["meta"].update(changes)
    return data


def record_changed(index: int, **changes: Any) -> dict[str, Any]:
    """A saved ledger whose record ``index`` has ``changes``."""
    data = saved()
    data["records"][index].update(changes)
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (record_changed(0, verified="false"), r"records\[0\]\.verified: expected a boolean"),
        (record_changed(1, pinned=1), r"records\[1\]\.pinned: expected a boolean"),
        (record_changed(0, first_seen="3"), r"records\[0\]\.first_seen: expected an integer"),
        (record_changed(0, last_used=-1), r"records\[0\]\.last_used: must be >= 0"),
        (record_changed(0, value=None), r"records\[0\]\.value: expected a string"),
        (record_changed(0, trusted=True), r"records\[0\]\.trusted: unexpected field"),
        (record_changed(0, state="alive"), r"records\[0\]: state: expected 'live'"),
        (saved(turn=True), r"meta\.turn: expected an integer"),
        (saved(turn=-2), r"meta\.turn: must be >= 0"),
        (saved(capacity=0), r"meta\.capacity: must be >= 1"),
        (saved(seal_key="abc"), r"meta\.seal_key: .*64 hex"),
        (saved(refusals={"refund": "2"}), r"meta\.refusals\['refund'\]: expected an integer"),
        (saved(user_texts=[1]), r"meta\.user_texts\[0\]: expected a string"),
        (saved(extra=1), r"meta\.extra: unexpected field"),
        (record_changed(1, role="order"), r"records\[1\]: the name 'order' is also records\[0\]"),
        (record_changed(1, aliases=["order"]), r"records\[1\]: the name 'order' is also"),
        (record_changed(1, key="W1"), r"records\[1\]: order key 'W1' is also records\[0\]'s"),
        ({"format": 3}, r"session_id: missing \(and 2 more\)"),
    ],
)
def test_a_bad_saved_ledger_says_what_is_wrong_where(data: dict[str, Any], message: str) -> None:
    """Each wrong field of a saved ledger is a usage error naming the field and what to do."""
    with pytest.raises(GuardrailUsageError, match=message) as info:
        Ledger.from_json(json.dumps(data))
    assert "save the ledger again" in str(info.value)
    with pytest.raises(GuardrailUsageError, match=message):
        Ledger.from_dict(data)


#: A ledger saved by the previous format (2): entries, a role table, a tombstone, a drop mark,
#: re-prompt counts and a seal key, written by the version before records.
FORMAT_2 = Path(__file__).parent / "data" / "ledger-format-2.json"


def test_a_ledger_saved_in_format_2_loads_as_it_was() -> None:
    """Format 2 loads: entries, roles and aliases, pins, marks, texts and counts; the key is not."""
    text = FORMAT_2.read_text()
    ledger = Ledger.from_json(text)
    assert (ledger.session_id, ledger.capacity, ledger.turn) == ("conv-42", 3, 2)
    assert [(e.role, e.value, e.pinned) for e in ledger.entries()] == [
        ("damaged_order", "#W1000001", True),
        ("order_2", "#W1000002", False),
        ("item", "it_a001", False),
        ("item_2", "it_a002", False),
    ]
    assert ledger["order"] is ledger["damaged_order"]  # the old role, an alias
    assert ledger["damaged_order"].status == "delivered"
    assert [t.value for t in ledger.tombstones()] == ["cus_41ZpA9"]
    state = state_of(ledger)
    assert [d.value for d in state.dropped.values()] == ["it_a003"]
    assert list(state.user_texts) == ["my order is #W1000001"]
    assert state.reprompts.of(2) == {"issue_refund": 2}
    assert ledger.seal_key != bytes.fromhex(json.loads(text)["seal_key"])  # not trusted
    again = Ledger.from_json(ledger.to_json())  # saved again, it is format 3, and round-trips
    assert json.loads(ledger.to_json())["format"] == 3
    assert again == ledger and again.to_json() == ledger.to_json()


def test_a_format_2_ledger_is_checked_as_format_2() -> None:
    """A bad field of a format 2 file is named as format 2 names it."""
    data = json.loads(FORMAT_2.read_text())
    data["entries"][0]["verified"] = "yes"
    with pytest.raises(GuardrailUsageError, match=r"entries\[0\]\.verified: expected a boolean"):
        Ledger.from_json(json.dumps(data))
    data = json.loads(FORMAT_2.read_text())
    data["roles"]["x"] = "order_2"
    with pytest.raises(GuardrailUsageError, match=r"roles\['x'\]"):
        Ledger.from_json(json.dumps(data))


def test_a_format_1_ledger_loads() -> None:
    """Format 1 (no seal key, no drop marks, fewer entry fields) loads with the defaults."""
    data = json.loads(FORMAT_2.read_text())
    data["format"] = 1
    del data["seal_key"], data["dropped"], data["session_id"], data["epoch"]
    for entry in data["entries"]:
        del entry["status"], entry["epoch"]
    ledger = Ledger.from_json(json.dumps(data))
    assert ledger["damaged_order"].value == "#W1000001" and ledger.session_id is None
    assert ledger["damaged_order"].status is None
    with pytest.raises(GuardrailUsageError, match="dropped: unexpected field"):
        Ledger.from_json(json.dumps({**data, "dropped": []}))


def test_a_normaliser_that_changed_rekeys_entries_on_load() -> None:
    """With kinds given, an entry's key is what its kind's normaliser makes of its value."""
    order = Kind.build("order", normalize=["strip", "prefix:#", "upper"])
    data = saved()
    data["records"][0].update(value="#w7", key="#w7")
    data["records"][1].update(value="W8", key="W9999999")  # a key its value never gives
    ledger = Ledger.from_json(json.dumps(data), kinds={"order": order})
    assert {entry.key for entry in ledger} == {"W7", "W8"}
    assert ledger.get("order", "w7") is ledger["order"]
    assert ledger.get("order", "W9999999") is None


def test_entries_that_collide_after_rekeying_keep_the_verified_one() -> None:
    """Two entries whose values now normalise alike become one; the other's role is an alias."""
    order = Kind.build("order", normalize=["strip", "prefix:#"])
    data = saved()
    data["records"][0].update(value="#W5", key="#W5", verified=False)
    data["records"][1].update(value="W5", key="W5", last_used=0)
    ledger = Ledger.from_json(json.dumps(data), kinds={"order": order})
    assert len(ledger) == 1
    kept = ledger["second"]
    assert (kept.value, kept.verified) == ("W5", True)
    assert ledger["order"] is kept
    assert "order" in kept.aliases


def test_a_saved_ledger_never_loads_half_valid() -> None:
    """A bad field anywhere fails the whole load: nothing is returned, whatever came before."""
    data = saved()
    data["records"].append(
        {"kind": "order", "key": "W0", "state": "evicted", "turn": "1", "value": "W0", "role": "x"}
    )
    with pytest.raises(GuardrailUsageError, match=r"records\[2\]\.turn"):
        Ledger.from_json(json.dumps(data))


def test_loading_imports_pydantic_only_when_it_validates() -> None:
    """import guardrail does not import pydantic; loading a saved ledger does."""
    code = (
        "import sys, guardrail; assert 'pydantic' not in sys.modules, 'imported early'; "
        "guardrail.Ledger.from_json(guardrail.Ledger().to_json()); "
        "assert 'pydantic' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- merging two copies of one conversation's ledger ------------------------------------------


def test_merge_unites_entries_and_keeps_the_stronger_facts() -> None:
    """Verified if either, first seen earliest, last used latest, pinned if either."""
    mine, theirs = Ledger(session_id="s"), Ledger(session_id="s")
    state_of(mine).admit([found("order", "W1", status="paid")], source=SRC, verified=False)
    state_of(theirs).next_turn()
    state_of(theirs).next_turn()
    state_of(theirs).admit(
        [found("order", "W1", status="refunded"), found("order", "W2")], source=SRC
    )
    theirs.pin("order")
    state_of(theirs).reprompts.add("refund", 2)
    state_of(theirs).reprompts.add("refund", 2)
    state_of(mine).reprompts.add("refund", 0)
    mine.merge(theirs)
    w1 = mine.get("order", "W1")
    assert w1 is not None
    assert (w1.verified, w1.pinned, w1.first_seen, w1.last_used) == (True, True, 0, 2)
    assert w1.status == "refunded"  # from the copy that used it last
    assert mine.turn == 2
    assert state_of(mine).reprompts.of(2) == {"refund": 2}
    assert mine.get("order", "W2") is not None


def test_merge_takes_the_refusals_of_the_later_turn() -> None:
    """Refusals count per turn: an older turn's counts never raise a newer turn's."""
    mine, theirs = Ledger(session_id="s"), Ledger(session_id="s")
    for _ in range(3):
        state_of(theirs).reprompts.add("refund", 0)
    state_of(mine).next_turn()
    state_of(mine).reprompts.add("cancel", 1)
    mine.merge(theirs)
    assert state_of(mine).reprompts.of(1) == {"cancel": 1}
    same = Ledger(session_id="s")
    state_of(same).next_turn()
    for tool in ("cancel", "cancel", "refund"):
        state_of(same).reprompts.add(tool, 1)
    mine.merge(same)
    assert state_of(mine).reprompts.of(1) == {"cancel": 2, "refund": 1}
    state_of(mine).next_turn()
    assert state_of(mine).reprompts.of(2) == {}


def test_merge_renames_an_entry_whose_role_is_taken() -> None:
    """An id of the other copy whose role names another id here gets a fresh role."""
    mine, theirs = Ledger(), Ledger()
    state_of(mine).admit([found("order", "W1")], source=SRC)
    state_of(theirs).admit([found("order", "W2")], source=SRC)
    theirs.label("order", "second")
    mine.merge(theirs)
    assert mine["order"].value == "W1"
    w2 = mine.get("order", "W2")
    assert w2 is not None
    assert w2.role not in {"order", "second"} or w2.role == "second"
    assert mine["second"] is w2  # its free name kept
    assert "order" not in w2.aliases


def test_merge_keeps_the_seal_key_and_capacity_of_the_ledger_merged_into() -> None:
    """The seal key is this ledger's; entries over capacity are evicted with a tombstone."""
    mine, theirs = Ledger(capacity=2), Ledger(capacity=2)
    state_of(mine).admit([found("order", "W1"), found("order", "W2")], source=SRC)
    state_of(theirs).next_turn()
    state_of(theirs).admit([found("order", "W3")], source=SRC)
    key = mine.seal_key
    evicted = mine.merge(theirs)
    assert mine.seal_key == key
    assert len(mine) == 2
    assert [entry.value for entry in evicted] == ["W1"]
    assert state_of(mine).tombstone("order", "W1") is not None


def test_merge_keeps_an_id_let_go_unless_the_other_copy_used_it_later() -> None:
    """A removal beats a use at no later turn, in either copy; a later use beats it."""
    mine, theirs = Ledger(), Ledger()
    state_of(mine).admit([found("order", "W1"), found("order", "W2")], source=SRC)
    state_of(theirs).admit([found("order", "W1"), found("order", "W2")], source=SRC)
    mine.forget("order")  # W1, at turn 0: the other copy used it at turn 0 too
    state_of(mine).add_drop_mark(Dropped("W3", "order", "W3", "search", 0))
    state_of(theirs).admit([found("order", "W3"), found("order", "W4")], source=SRC)
    theirs.forget("order_4")  # W4, which mine never saw
    state_of(theirs).next_turn()
    state_of(theirs).touch(theirs["order_2"])  # W2 used again at turn 1
    mine.forget("order_2")  # W2 let go at turn 0: the later use wins
    for first, second in ((mine, theirs), (theirs, mine)):
        merged = Ledger.from_json(first.to_json())
        merged.merge(Ledger.from_json(second.to_json()))
        state = state_of(merged)
        assert merged.get("order", "W1") is None and state.tombstone("order", "W1") is not None
        assert merged.get("order", "W2") is not None and state.tombstone("order", "W2") is None
        assert merged.get("order", "W3") is not None and state.drop_mark("order", "W3") is None
        assert state.tombstone("order", "W4") is not None


def content(ledger: Ledger) -> dict[str, Any]:
    """What a ledger knows, without the names it gives (nor their numbers) or its order."""
    data = ledger.to_dict()
    entries = {}
    for record in data["records"]:
        if record["state"] == "live":
            entry = dict(record)
            del entry["role"], entry["aliases"], entry["epoch"], entry["source"]
            entries[(entry["kind"], entry["key"])] = entry
    meta = data["meta"]
    return {
        "entries": entries,
        "tombstones": {(r["kind"], r["key"]) for r in data["records"] if r["state"] == "evicted"},
        "turn": meta["turn"],
        "refusals": meta["refusals"],
        "user_texts": set(meta["user_texts"]),
    }


def copy_of(ops: list[tuple[str, int]], capacity: int, *, base: Ledger | None = None) -> Ledger:
    """A ledger built from ``base`` (a saved copy) by a short program of operations."""
    fresh = Ledger(capacity=capacity, tombstones=64)  # room for every tombstone
    ledger = Ledger.from_json(base.to_json()) if base is not None else fresh
    for op, n in ops:
        value = f"W{n}"
        if op == "turn":
            state_of(ledger).next_turn()
        elif op == "user":
            state_of(ledger).observe_text(f"text {n}")
            state_of(ledger).admit([found("order", value)], source=SRC, verified=False)
        elif op == "read":
            state_of(ledger).admit([found("order", value, status=f"s{n % 3}")], source=SRC)
        elif op == "pin":
            entry = ledger.get("order", value)
            if entry is not None:
                ledger.pin(entry.role)
        elif op == "forget":
            entry = ledger.get("order", value)
            if entry is not None:
                ledger.forget(entry.role)
        elif op == "refuse":
            state_of(ledger).reprompts.add(f"t{n % 2}", ledger.turn)
    return ledger


OPS = st.lists(
    st.tuples(
        st.sampled_from(["turn", "user", "read", "read", "pin", "forget", "refuse"]),
        st.integers(min_value=0, max_value=12),
    ),
    max_size=25,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, derandomize=True)
@given(OPS, OPS, OPS, st.integers(min_value=1, max_value=30))
def test_merge_properties(
    shared: list[tuple[str, int]],
    left: list[tuple[str, int]],
    right: list[tuple[str, int]],
    capacity: int,
) -> None:
    """Property: merge is commutative in content, idempotent, and loses no key unless evicted."""
    base = copy_of(shared, capacity)
    a = copy_of(left, capacity, base=base)
    b = copy_of(right, capacity, base=base)
    ab = Ledger.from_json(a.to_json())
    ab.merge(b)
    ba = Ledger.from_json(b.to_json())
    ba.merge(a)
    assert content(ab) == content(ba)
    again = Ledger.from_json(ab.to_json())
    again.merge(Ledger.from_json(ab.to_json()))
    assert again.to_json() == ab.to_json()
    for side in (a, b):
        for entry in side:
            kept = ab.get(entry.kind, entry.key)
            assert kept is not None or state_of(ab).tombstone(entry.kind, entry.key) is not None
            if kept is not None:
                assert kept.verified >= entry.verified
                assert kept.last_used >= entry.last_used
    for entry in ab:  # nothing appears that neither side held, and nothing is verified anew
        sides = [s.get(entry.kind, entry.key) for s in (a, b)]
        assert any(sides)
        assert entry.verified == any(s.verified for s in sides if s is not None)
    for side in (a, b):  # role numbers only grow (a fresh role may take one more)
        assert all(state_of(ab).counters[kind] >= n for kind, n in state_of(side).counters.items())
    assert len(ab) - sum(entry.pinned for entry in ab) <= capacity
    assert Ledger.from_json(ab.to_json()) == ab


def test_an_entry_the_normaliser_cannot_read_is_dropped_on_load() -> None:
    """A saved value today's normaliser fails on leaves a tombstone, never a live key."""

    def strict_order(value: str) -> str:
        if not value.startswith("W"):
            raise ValueError("not an order")
        return value

    data = saved()
    data["records"][0].update(value="bad", key="W7")  # a key its value no longer gives
    ledger = Ledger.from_json(
        json.dumps(data), kinds={"order": Kind.build("order", normalize=strict_order)}
    )
    assert [entry.value for entry in ledger] == ["W2"]
    assert "order" not in ledger
    assert ledger.get("order", "W7") is None
    assert state_of(ledger).tombstone("order", "W7") is not None
    assert len(ledger) == 1


def test_new_ids_beyond_the_limit_are_remembered_as_dropped_not_kept() -> None:
    """One admission adds at most `limit` new ids; the rest become drop marks, in order."""
    ledger = Ledger(capacity=100)
    state_of(ledger).admit([found("order", "W0")], source=SRC)
    items = [found("order", f"W{n}") for n in range(6)]
    admitted = state_of(ledger).admit(items, source=SRC, limit=2, tool="search")
    assert [e.value for e in admitted.added] == ["W1", "W2"]
    assert [(d.value, d.tool, d.turn) for d in admitted.dropped] == [
        ("W3", "search", 0),
        ("W4", "search", 0),
        ("W5", "search", 0),
    ]
    assert {e.value for e in ledger} == {"W0", "W1", "W2"}
    assert state_of(ledger).drop_mark("order", "W4") is not None
    assert state_of(ledger).drop_mark("order", "W1") is None
    # Seen again in a narrower result, the id enters for real and loses its mark.
    assert state_of(ledger).admit([found("order", "W4")], source=SRC, limit=2).dropped == []
    assert (
        ledger.get("order", "W4") is not None and state_of(ledger).drop_mark("order", "W4") is None
    )
    assert [d.value for d in state_of(ledger).dropped.values()] == ["W3", "W5"]


def test_the_tool_of_a_drop_mark_defaults_to_the_source() -> None:
    """Without tool=, a mark names the tool of the admission's source."""
    ledger = Ledger()
    dropped = state_of(ledger).admit([found("order", "W1")], source=SRC, limit=0).dropped
    assert [(d.value, d.tool) for d in dropped] == [("W1", "get_order")]


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_a_bad_limit_is_a_usage_error(limit: object) -> None:
    """The limit is a count of ids."""
    with pytest.raises(GuardrailUsageError, match="limit must be an integer"):
        state_of(Ledger()).admit([found("order", "W1")], source=SRC, limit=limit)  # type: ignore[arg-type]


def test_drop_marks_are_bounded_and_never_push_tombstones_out() -> None:
    """Marks are kept apart from tombstones, at most as many as tombstones, oldest out first."""
    ledger = Ledger(capacity=1, tombstones=3)
    state_of(ledger).admit([found("order", "W_a")], source=SRC)
    state_of(ledger).admit([found("order", "W_b")], source=SRC)  # turn 0: W_a is evicted
    flood = [found("order", f"F{n}") for n in range(10)]
    state_of(ledger).admit(flood, source=SRC, limit=0, tool="search")
    assert [t.value for t in ledger.tombstones()] == ["W_a"]
    assert [d.value for d in state_of(ledger).dropped.values()] == ["F7", "F8", "F9"]


def test_no_marks_are_kept_when_no_tombstones_are() -> None:
    """A ledger that keeps no tombstones keeps no drop marks either."""
    ledger = Ledger(tombstones=0)
    admitted = state_of(ledger).admit([found("order", "W1")], source=SRC, limit=0)
    assert [d.value for d in admitted.dropped] == ["W1"] and not state_of(ledger).dropped


def test_ids_used_in_the_current_turn_are_never_evicted() -> None:
    """From turn 1, eviction spares this turn's ids; what still does not fit is taken back."""
    ledger = Ledger(capacity=3)
    state_of(ledger).next_turn()
    state_of(ledger).admit([found("order", "W_old")], source=SRC)
    state_of(ledger).next_turn()
    state_of(ledger).admit([found("order", "W_now")], source=SRC)
    state_of(ledger).touch(ledger["order"])  # W_old used again this turn
    admitted = state_of(ledger).admit([found("order", f"N{n}") for n in range(3)], source=SRC)
    assert [e.value for e in admitted.added] == ["N0"]
    assert admitted.evicted == []
    assert [(d.value, d.turn) for d in admitted.dropped] == [("N1", 2), ("N2", 2)]
    assert {e.value for e in ledger} == {"W_old", "W_now", "N0"}
    assert "order_4" not in ledger and state_of(ledger).drop_mark("order", "N2") is not None
    state_of(ledger).next_turn()  # last turn's ids may go now, least recently used first
    evicted = state_of(ledger).admit([found("order", "N3")], source=SRC).evicted
    assert [e.value for e in evicted] == ["W_now"]  # W_old was used after it


def test_an_evicted_id_taken_back_again_keeps_its_tombstone_and_role() -> None:
    """An evicted id that returns but does not fit is remembered as evicted, under its role."""
    ledger = Ledger(capacity=1)
    state_of(ledger).admit([found("order", "W1")], source=SRC)
    state_of(ledger).admit([found("order", "W2")], source=SRC)  # turn 0: W1 evicted as [order]
    state_of(ledger).next_turn()
    state_of(ledger).touch(ledger["order_2"])
    admitted = state_of(ledger).admit([found("order", "W1")], source=SRC)
    assert admitted.added == [] and [d.value for d in admitted.dropped] == ["W1"]
    tomb = state_of(ledger).tombstone("order", "W1")
    assert tomb is not None and tomb.role == "order"
    with pytest.raises(GuardrailUsageError, match="belonged to an evicted id"):
        ledger.label("order_2", "order")


def test_unpinning_in_a_full_turn_evicts_the_least_recently_used_anyway() -> None:
    """Unpinning gives the room back even when every other id was used this turn."""
    ledger = Ledger(capacity=1)
    state_of(ledger).next_turn()
    state_of(ledger).admit([found("order", "W1")], source=SRC)
    ledger.pin("order")
    state_of(ledger).admit([found("order", "W2")], source=SRC)
    ledger.pin("order", False)
    assert len(ledger) == 1 and [t.value for t in ledger.tombstones()] == ["W1"]


def test_looking_up_a_value_a_normaliser_cannot_read_finds_nothing() -> None:
    """get and lookup treat a kind whose normaliser raises on the value as holding no entry."""
    kinds = {"link": Kind.build("link", normalize="url")}
    ledger = Ledger(kinds=kinds)
    state_of(ledger).admit(
        [Batch.one("link", "https://a.example", "https://a.example", "p")], source=SRC
    )
    assert ledger.get("link", "HTTPS://A.example/") is ledger["link"]
    assert ledger.get("link", "http://[x") is None
    assert state_of(ledger).lookup("http://[x") == []
    assert state_of(ledger).key("link", "http://[x") is None


def test_an_empty_value_is_never_typed_by_the_user() -> None:
    """Nothing (or white space) is no id the user typed, whatever the user wrote."""
    ledger = Ledger()
    state_of(ledger).observe_text("refund it please")
    assert state_of(ledger).typed_by_user("refund")
    assert not state_of(ledger).typed_by_user("")
    assert not state_of(ledger).typed_by_user("  ")


def test_entries_approved_for_nothing_share_one_empty_set() -> None:
    """Admitted, loaded from a save or from a store: no entry holds an empty set of its own.

    Each ``frozenset()`` is a new 216-byte object: one per entry more than doubled a
    ledger's memory per entry (benchmarks/ memory group).
    """
    from guardrail._data.entry import NOTHING
    from guardrail.stores import MemoryStore
    from tests.conftest import ORDERS, shop_guard

    store = MemoryStore()
    guard = shop_guard(store=store)
    with guard.session("s") as ledger:
        guard.record("search_orders", {}, ORDERS)
        admitted = list(ledger)
    saved = Ledger.from_json(ledger.to_json())
    loaded = shop_guard(store=store).ledger_for("s")
    for entries in (admitted, list(saved), list(loaded)):
        assert entries and all(e.approved is NOTHING and e.declined is NOTHING for e in entries)


# -- verbatim means as a tool wrote it -------------------------------------------------------

ORDER = Kind.build("order", normalize=["strip", "prefix:#"])
USER = Source("user", None, "text", 0)
LOOKUP = Source("get_order", "c1", "order_id", 0)
CONFIRM = Source("get_user", "c2", "arguments", 0)  # a lookup that verifies what it took


def typed(ledger: Ledger, value: str) -> None:
    """``value`` typed by the user: admitted unverified, tier user."""
    batch = Batch.one("order", value, ORDER.normalize(value), "text")
    state_of(ledger).admit([batch], source=USER, verified=False, tier="user")


def written(ledger: Ledger, value: str, source: Source = LOOKUP) -> None:
    """``value`` returned by a declared result field (``source``), or confirmed by taking it."""
    path = source.path
    state_of(ledger).admit([Batch.one("order", value, ORDER.normalize(value), path)], source=source)


def ledger_of_orders() -> Ledger:
    return Ledger(kinds={"order": ORDER})


def test_the_spelling_a_tool_wrote_becomes_the_value_of_an_id_the_user_typed() -> None:
    """User typed W5061109, a result wrote #W5061109: the value and source are the result's."""
    ledger = ledger_of_orders()
    typed(ledger, "W5061109")
    state_of(ledger).next_turn()
    written(ledger, "#W5061109")
    entry = ledger["order"]
    assert (entry.value, entry.source, entry.verified, entry.tier) == (
        "#W5061109",
        LOOKUP,
        True,
        "produced",
    )
    assert entry.first_seen == 0 and len(ledger) == 1


def test_a_confirmed_user_spelling_gives_way_to_the_spelling_a_tool_wrote_later() -> None:
    """A lookup that verified W5061109 by taking it; a later result's #W5061109 is the value."""
    ledger = ledger_of_orders()
    typed(ledger, "W5061109")
    written(ledger, "W5061109", CONFIRM)
    assert (ledger["order"].value, ledger["order"].verified) == ("W5061109", True)
    written(ledger, "#W5061109")
    assert (ledger["order"].value, ledger["order"].source) == ("#W5061109", LOOKUP)


def test_the_first_spelling_a_tool_wrote_stays_the_value() -> None:
    """A second tool's spelling, or the user's, matches by the key and changes nothing."""
    ledger = ledger_of_orders()
    written(ledger, "#W5061109")
    written(ledger, "W5061109", Source("search", "c3", "orders[*]", 0))
    typed(ledger, " W5061109")
    written(ledger, "#W5061109")
    entry = ledger["order"]
    assert (entry.value, entry.source) == ("#W5061109", LOOKUP)
    assert len(ledger) == 1 and ledger.get("order", "W5061109") is entry
    data = ledger.to_dict()
    assert all("spellings" not in record for record in data["records"])
    assert Ledger.from_json(ledger.to_json()) == ledger


def test_a_record_an_earlier_version_saved_with_spellings_loads_without_them() -> None:
    """Development versions wrote other spellings in a live record: it loads, the field ignored."""
    data = saved()
    data["records"][0]["spellings"] = ["#W1", "w1"]
    ledger = Ledger.from_json(json.dumps(data))
    assert ledger["order"].value == "W1"
    assert not hasattr(ledger["order"], "spellings")
    assert all("spellings" not in record for record in ledger.to_dict()["records"])
    data["records"][0]["spellings"] = "#W1"  # checked as the field always was: a list of text
    with pytest.raises(GuardrailUsageError):
        Ledger.from_json(json.dumps(data))


@pytest.mark.parametrize("first", ["typed", "tool"])
def test_merge_keeps_the_spelling_a_tool_wrote_whichever_copy_holds_it(first: str) -> None:
    """One copy holds the user's W5061109 (confirmed), the other a result's #W5061109."""
    users, tools = ledger_of_orders(), ledger_of_orders()
    typed(users, "W5061109")
    written(users, "W5061109", CONFIRM)
    typed(tools, "W5061109")
    written(tools, "#W5061109")
    held, new = (users, tools) if first == "typed" else (tools, users)
    held.merge(new)
    entry = held.get("order", "W5061109")
    assert entry is not None
    assert (entry.value, entry.source, entry.verified) == ("#W5061109", LOOKUP, True)


def test_merge_keeps_the_earlier_spelling_a_tool_wrote_as_the_value() -> None:
    """Two copies, each with a spelling a tool wrote: the earlier is the value, either way."""
    early, late = ledger_of_orders(), ledger_of_orders()
    written(early, "#W5061109")
    state_of(late).next_turn()
    written(late, "W5061109", Source("search", "c3", "orders[*]", 1))
    for held, new in ((early, late), (late, early)):
        merged = Ledger.from_json(held.to_json(), kinds={"order": ORDER})
        merged.merge(new)
        entry = merged.get("order", "W5061109")
        assert entry is not None
        assert (entry.value, entry.source) == ("#W5061109", LOOKUP)


def test_a_merge_drops_the_spellings_an_earlier_version_stored() -> None:
    """A held record with the retired spellings field merges into one without it."""
    ledger = ledger_of_orders()
    written(ledger, "#W5061109")
    held = live_record(ledger["order"])
    new = dict(held, turn=held["turn"] + 1, last_used=held["last_used"] + 1)
    merged = merge_record({**held, "spellings": ["W5061109"]}, new, concurrent=True)
    assert "spellings" not in merged and merged["value"] == "#W5061109"


def test_entries_that_collide_after_rekeying_keep_the_spelling_a_tool_wrote() -> None:
    """A user's W5 (confirmed, used later) and a result's #W5 collide: the result's stays."""
    plain = Kind.build("order", normalize="strip")
    ledger = Ledger(kinds={"order": plain})
    state_of(ledger).admit([Batch.one("order", "#W5", "#W5", "orders[*]")], source=LOOKUP)
    state_of(ledger).next_turn()
    state_of(ledger).admit(
        [Batch.one("order", "W5", "W5", "text")], source=USER, verified=False, tier="user"
    )
    state_of(ledger).admit([Batch.one("order", "W5", "W5", "arguments")], source=CONFIRM)
    folded = Ledger.from_json(ledger.to_json(), kinds={"order": ORDER})
    assert len(folded) == 1
    assert folded.get("order", "W5").value == "#W5"  # type: ignore[union-attr]


def test_two_spellings_tools_wrote_in_one_turn_merge_alike_in_either_order() -> None:
    """Copies that each took a tool's spelling at the same turn merge to the same entry."""
    one, two = ledger_of_orders(), ledger_of_orders()
    written(one, "W5061109", Source("search", "c1", "orders[*]", 0))
    written(two, "#W5061109")
    merged = []
    for held, new in ((one, two), (two, one)):
        copy = Ledger.from_json(held.to_json(), kinds={"order": ORDER})
        copy.merge(new)
        entry = copy.get("order", "W5061109")
        assert entry is not None
        merged.append((entry.value, entry.source))
    assert merged[0] == merged[1] == ("#W5061109", LOOKUP)
