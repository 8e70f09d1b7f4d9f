"""The ledger: verbatim entries, stable roles, eviction by last use, exact JSON round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import GuardrailUsageError, Kind, Ledger, Source
from guardrail._harvest import Batch
from guardrail.ledger import USER_TEXTS_KEPT, Dropped

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
    added = ledger._admit(
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
    roles = [e.role for e in ledger._admit(items, source=SRC).added]
    assert roles == ["damaged_order", "damaged_order_2", "get_order-3"]


def test_known_ids_are_refreshed_not_duplicated() -> None:
    """Seeing an id again updates its status and verification, never adds a second entry."""
    ledger = Ledger()
    ledger._admit([found("order", "W1")], source=SRC, verified=False)
    again = ledger._admit([found("order", "W1", status="shipped")], source=SRC)
    assert again.added == [] and [e.value for e in again.verified] == ["W1"]
    entry = ledger["order"]
    assert entry.verified and entry.status == "shipped" and len(ledger) == 1


def test_relabel_keeps_the_old_role_as_an_alias() -> None:
    """Summaries written with the old role still resolve after a relabel."""
    ledger = Ledger()
    ledger._admit([found("order", "W1"), found("order", "W2")], source=SRC)
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
    ledger._admit([found("order", "W_old_but_used")], source=SRC)
    ledger._next_turn()
    ledger._admit([found("order", "W_idle")], source=SRC)
    ledger._next_turn()
    ledger._touch(ledger["order"])
    evicted = ledger._admit([found("order", "W_new")], source=SRC).evicted
    assert [e.value for e in evicted] == ["W_idle"]
    assert {e.value for e in ledger} == {"W_old_but_used", "W_new"}


def test_pinned_entries_stay_and_do_not_count_against_capacity() -> None:
    """A pinned entry is never evicted and leaves the capacity to the others."""
    ledger = Ledger(capacity=1)
    ledger._admit([found("order", "W1")], source=SRC)
    ledger.pin("order")
    assert ledger._admit([found("order", "W2")], source=SRC).evicted == []
    assert len(ledger) == 2
    assert [e.value for e in ledger._admit([found("order", "W3")], source=SRC).evicted] == ["W2"]
    ledger.pin("order", False)
    assert [e.value for e in ledger] == ["W3"]


def test_a_result_larger_than_capacity_is_recorded_before_eviction() -> None:
    """All ids of one result are admitted before any is evicted, so none is half-recorded."""
    ledger = Ledger(capacity=3)
    result = ledger._admit([found("order", f"W{n}") for n in range(5)], source=SRC)
    assert len(result.added) == 5 and len(result.evicted) == 2 and len(ledger) == 3


def test_tombstones_are_bounded_and_returning_ids_keep_their_role() -> None:
    """Evicted ids leave bounded tombstones; an id that comes back gets its old role."""
    ledger = Ledger(capacity=1, tombstones=2)
    for n in range(4):
        ledger._admit([found("order", f"W{n}")], source=SRC)
    assert [t.value for t in ledger.tombstones()] == ["W1", "W2"]
    tomb = ledger._tombstone("order", "W1")
    assert tomb is not None and tomb.role == "order_2"
    assert ledger._admit([found("order", "W1")], source=SRC).added[0].role == "order_2"
    assert ledger._tombstone("order", "W1") is None


def test_roles_of_evicted_ids_are_not_reused() -> None:
    """A role names one id forever: new ids never take a tombstone's role."""
    ledger = Ledger(capacity=1)
    ledger._admit([found("order", "W1")], source=SRC)
    ledger._admit([found("order", "W2")], source=SRC)
    with pytest.raises(GuardrailUsageError, match="belonged to an evicted id"):
        ledger.label("order_2", "order")


def test_user_texts_are_bounded_and_matched_as_whole_tokens() -> None:
    """Only the last texts are kept; a value counts as typed only as a whole token."""
    ledger = Ledger()
    ledger._observe_text("I stay at the Grand Hyatt, room 12.")
    assert ledger._typed_by_user("Grand Hyatt")
    assert not ledger._typed_by_user("Grand Hy")
    assert not ledger._typed_by_user("1")
    for n in range(USER_TEXTS_KEPT):
        ledger._observe_text(f"text {n}")
    assert not ledger._typed_by_user("Grand Hyatt")


def test_prefix_search_sees_pending_and_merged_keys_but_not_evicted_ones() -> None:
    """Prefix look-ups stay right while keys are added and evicted."""
    ledger = Ledger(capacity=400)
    ledger._admit([found("order", f"W{n:04d}") for n in range(600)], source=SRC)
    assert {e.value for e in ledger._keys_with_prefix("order", "W059", limit=20)} == {
        f"W059{n}" for n in range(10)
    }
    assert ledger._keys_with_prefix("order", "W000") == []  # evicted
    ledger._admit([found("order", "W0001x")], source=SRC)
    assert [e.value for e in ledger._keys_with_prefix("order", "W0001")] == ["W0001x"]


def test_json_round_trip_is_exact() -> None:
    """A saved ledger loads back equal, and saves to the same text."""
    ledger = Ledger(capacity=2, tombstones=5, session_id="s")
    ledger._admit([found("order", "W1", status="paid"), found("user", "u1")], source=SRC)
    ledger._next_turn()
    ledger.label("order", "paid_order")
    ledger.pin("paid_order")
    ledger._admit([found("order", "W2"), found("order", "W3")], source=SRC, verified=False)
    assert [t.value for t in ledger.tombstones()] == ["u1"]
    ledger._observe_text("hello W2")
    ledger._refusals["refund"] = 2
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
            ledger._next_turn()
        ledger._admit([Batch.one(kind, value, value, "p")], source=SRC, verified=n % 2 == 0)
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
    ledger._admit([found("order", "W1")], source=SRC)
    assert json.loads(json.dumps(ledger["order"].to_dict()))["source"]["call_id"] == "call_1"


# -- loading a saved ledger: every field validated --------------------------------------------


def saved(**changes: Any) -> dict[str, Any]:
    """A saved two-entry ledger (format 2) as a dict, with ``changes`` applied to it."""
    ledger = Ledger(capacity=5, session_id="s")
    ledger._admit([found("order", "W1"), found("order", "W2")], source=SRC)
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


# -- merging two copies of one conversation's ledger ------------------------------------------


def test_merge_unites_entries_and_keeps_the_stronger_facts() -> None:
    """Verified if either, first seen earliest, last used latest, pinned if either."""
    mine, theirs = Ledger(session_id="s"), Ledger(session_id="s")
    mine._admit([found("order", "W1", status="paid")], source=SRC, verified=False)
    theirs._next_turn()
    theirs._next_turn()
    theirs._admit([found("order", "W1", status="refunded"), found("order", "W2")], source=SRC)
    theirs.pin("order")
    theirs._refusals["refund"] = 2
    mine._refusals["refund"] = 1
    mine.merge(theirs)
    w1 = mine.get("order", "W1")
    assert w1 is not None
    assert (w1.verified, w1.pinned, w1.first_seen, w1.last_used) == (True, True, 0, 2)
    assert w1.status == "refunded"  # from the copy that used it last
    assert mine.turn == 2
    assert mine._refusals == {"refund": 2}
    assert mine.get("order", "W2") is not None


def test_merge_takes_the_refusals_of_the_later_turn() -> None:
    """Refusals count per turn: an older turn's counts never raise a newer turn's."""
    mine, theirs = Ledger(session_id="s"), Ledger(session_id="s")
    theirs._refusals["refund"] = 3
    mine._next_turn()
    mine._refusals["cancel"] = 1
    mine.merge(theirs)
    assert mine._refusals == {"cancel": 1}
    same = Ledger(session_id="s")
    same._next_turn()
    same._refusals.update(cancel=2, refund=1)
    mine.merge(same)
    assert mine._refusals == {"cancel": 2, "refund": 1}
    mine._next_turn()
    assert mine._refusals == {}


def test_merge_renames_an_entry_whose_role_is_taken() -> None:
    """An id of the other copy whose role names another id here gets a fresh role."""
    mine, theirs = Ledger(), Ledger()
    mine._admit([found("order", "W1")], source=SRC)
    theirs._admit([found("order", "W2")], source=SRC)
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
    mine._admit([found("order", "W1"), found("order", "W2")], source=SRC)
    theirs._next_turn()
    theirs._admit([found("order", "W3")], source=SRC)
    key = mine.seal_key
    evicted = mine.merge(theirs)
    assert mine.seal_key == key
    assert len(mine) == 2
    assert [entry.value for entry in evicted] == ["W1"]
    assert mine._tombstone("order", "W1") is not None


def test_merge_drops_tombstones_and_drop_marks_of_live_ids() -> None:
    """An id live in either copy is live in the merge: its tombstone and drop mark go."""
    mine, theirs = Ledger(), Ledger()
    mine._admit([found("order", "W1"), found("order", "W2")], source=SRC)
    mine.forget("order")
    mine._dropped[("order", "W3")] = Dropped("W3", "order", "W3", "search", 0)
    theirs._admit([found("order", "W1"), found("order", "W3"), found("order", "W4")], source=SRC)
    theirs.forget("order_3")
    mine.merge(theirs)
    assert mine._tombstone("order", "W1") is None
    assert mine.get("order", "W1") is not None
    assert mine._drop_mark("order", "W3") is None
    assert mine._tombstone("order", "W4") is not None


def content(ledger: Ledger) -> dict[str, Any]:
    """What a ledger knows, without the names it gives (nor their numbers) or its order."""
    data = ledger.to_dict()
    entries = {}
    for entry in data["entries"]:
        entry = dict(entry)
        del entry["role"], entry["aliases"], entry["epoch"], entry["source"]
        entries[(entry["kind"], entry["key"])] = entry
    return {
        "entries": entries,
        "tombstones": {(t["kind"], t["key"]) for t in data["tombstones"]},
        "turn": data["turn"],
        "refusals": data["refusals"],
        "user_texts": set(data["user_texts"]),
    }


def copy_of(ops: list[tuple[str, int]], capacity: int, *, base: Ledger | None = None) -> Ledger:
    """A ledger built from ``base`` (a saved copy) by a short program of operations."""
    fresh = Ledger(capacity=capacity, tombstones=64)  # room for every tombstone
    ledger = Ledger.from_json(base.to_json()) if base is not None else fresh
    for op, n in ops:
        value = f"W{n}"
        if op == "turn":
            ledger._next_turn()
        elif op == "user":
            ledger._observe_text(f"text {n}")
            ledger._admit([found("order", value)], source=SRC, verified=False)
        elif op == "read":
            ledger._admit([found("order", value, status=f"s{n % 3}")], source=SRC)
        elif op == "pin":
            entry = ledger.get("order", value)
            if entry is not None:
                ledger.pin(entry.role)
        elif op == "forget":
            entry = ledger.get("order", value)
            if entry is not None:
                ledger.forget(entry.role)
        elif op == "refuse":
            ledger._refusals[f"t{n % 2}"] = ledger._refusals.get(f"t{n % 2}", 0) + 1
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
            assert kept is not None or ab._tombstone(entry.kind, entry.key) is not None
            if kept is not None:
                assert kept.verified >= entry.verified
                assert kept.last_used >= entry.last_used
    for entry in ab:  # nothing appears that neither side held, and nothing is verified anew
        sides = [s.get(entry.kind, entry.key) for s in (a, b)]
        assert any(sides)
        assert entry.verified == any(s.verified for s in sides if s is not None)
    for side in (a, b):  # role numbers only grow (a fresh role may take one more)
        assert all(ab._counters[kind] >= n for kind, n in side._counters.items())
    assert len(ab) - sum(entry.pinned for entry in ab) <= capacity
    assert Ledger.from_json(ab.to_json()) == ab


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
    assert ledger._tombstone("order", "W7") is not None
    assert len(ledger) == 1


def test_new_ids_beyond_the_limit_are_remembered_as_dropped_not_kept() -> None:
    """One admission adds at most `limit` new ids; the rest become drop marks, in order."""
    ledger = Ledger(capacity=100)
    ledger._admit([found("order", "W0")], source=SRC)
    items = [found("order", f"W{n}") for n in range(6)]
    admitted = ledger._admit(items, source=SRC, limit=2, tool="search")
    assert [e.value for e in admitted.added] == ["W1", "W2"]
    assert [(d.value, d.tool, d.turn) for d in admitted.dropped] == [
        ("W3", "search", 0),
        ("W4", "search", 0),
        ("W5", "search", 0),
    ]
    assert {e.value for e in ledger} == {"W0", "W1", "W2"}
    assert ledger._drop_mark("order", "W4") is not None
    assert ledger._drop_mark("order", "W1") is None
    # Seen again in a narrower result, the id enters for real and loses its mark.
    assert ledger._admit([found("order", "W4")], source=SRC, limit=2).dropped == []
    assert ledger.get("order", "W4") is not None and ledger._drop_mark("order", "W4") is None
    assert [d.value for d in ledger._drop_marks()] == ["W3", "W5"]


def test_the_tool_of_a_drop_mark_defaults_to_the_source() -> None:
    """Without tool=, a mark names the tool of the admission's source."""
    ledger = Ledger()
    dropped = ledger._admit([found("order", "W1")], source=SRC, limit=0).dropped
    assert [(d.value, d.tool) for d in dropped] == [("W1", "get_order")]


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_a_bad_limit_is_a_usage_error(limit: object) -> None:
    """The limit is a count of ids."""
    with pytest.raises(GuardrailUsageError, match="limit must be an integer"):
        Ledger()._admit([found("order", "W1")], source=SRC, limit=limit)  # type: ignore[arg-type]


def test_drop_marks_are_bounded_and_never_push_tombstones_out() -> None:
    """Marks are kept apart from tombstones, at most as many as tombstones, oldest out first."""
    ledger = Ledger(capacity=1, tombstones=3)
    ledger._admit([found("order", "W_a")], source=SRC)
    ledger._admit([found("order", "W_b")], source=SRC)  # turn 0: W_a is evicted
    flood = [found("order", f"F{n}") for n in range(10)]
    ledger._admit(flood, source=SRC, limit=0, tool="search")
    assert [t.value for t in ledger.tombstones()] == ["W_a"]
    assert [d.value for d in ledger._drop_marks()] == ["F7", "F8", "F9"]


def test_no_marks_are_kept_when_no_tombstones_are() -> None:
    """A ledger that keeps no tombstones keeps no drop marks either."""
    ledger = Ledger(tombstones=0)
    admitted = ledger._admit([found("order", "W1")], source=SRC, limit=0)
    assert [d.value for d in admitted.dropped] == ["W1"] and ledger._drop_marks() == []


def test_ids_used_in_the_current_turn_are_never_evicted() -> None:
    """From turn 1, eviction spares this turn's ids; what still does not fit is taken back."""
    ledger = Ledger(capacity=3)
    ledger._next_turn()
    ledger._admit([found("order", "W_old")], source=SRC)
    ledger._next_turn()
    ledger._admit([found("order", "W_now")], source=SRC)
    ledger._touch(ledger["order"])  # W_old used again this turn
    admitted = ledger._admit([found("order", f"N{n}") for n in range(3)], source=SRC)
    assert [e.value for e in admitted.added] == ["N0"]
    assert admitted.evicted == []
    assert [(d.value, d.turn) for d in admitted.dropped] == [("N1", 2), ("N2", 2)]
    assert {e.value for e in ledger} == {"W_old", "W_now", "N0"}
    assert "order_4" not in ledger and ledger._drop_mark("order", "N2") is not None
    ledger._next_turn()  # last turn's ids may go now, least recently used first
    evicted = ledger._admit([found("order", "N3")], source=SRC).evicted
    assert [e.value for e in evicted] == ["W_now"]  # W_old was used after it


def test_an_evicted_id_taken_back_again_keeps_its_tombstone_and_role() -> None:
    """An evicted id that returns but does not fit is remembered as evicted, under its role."""
    ledger = Ledger(capacity=1)
    ledger._admit([found("order", "W1")], source=SRC)
    ledger._admit([found("order", "W2")], source=SRC)  # turn 0: W1 evicted as [order]
    ledger._next_turn()
    ledger._touch(ledger["order_2"])
    admitted = ledger._admit([found("order", "W1")], source=SRC)
    assert admitted.added == [] and [d.value for d in admitted.dropped] == ["W1"]
    tomb = ledger._tombstone("order", "W1")
    assert tomb is not None and tomb.role == "order"
    with pytest.raises(GuardrailUsageError, match="belonged to an evicted id"):
        ledger.label("order_2", "order")


def test_unpinning_in_a_full_turn_evicts_the_least_recently_used_anyway() -> None:
    """Unpinning gives the room back even when every other id was used this turn."""
    ledger = Ledger(capacity=1)
    ledger._next_turn()
    ledger._admit([found("order", "W1")], source=SRC)
    ledger.pin("order")
    ledger._admit([found("order", "W2")], source=SRC)
    ledger.pin("order", False)
    assert len(ledger) == 1 and [t.value for t in ledger.tombstones()] == ["W1"]


def test_looking_up_a_value_a_normaliser_cannot_read_finds_nothing() -> None:
    """get and lookup treat a kind whose normaliser raises on the value as holding no entry."""
    kinds = {"link": Kind.build("link", normalize="url")}
    ledger = Ledger(kinds=kinds)
    ledger._admit([Batch.one("link", "https://a.example", "https://a.example", "p")], source=SRC)
    assert ledger.get("link", "HTTPS://A.example/") is ledger["link"]
    assert ledger.get("link", "http://[x") is None
    assert ledger._lookup("http://[x") == []
    assert ledger._key("link", "http://[x") is None


def test_an_empty_value_is_never_typed_by_the_user() -> None:
    """Nothing (or white space) is no id the user typed, whatever the user wrote."""
    ledger = Ledger()
    ledger._observe_text("refund it please")
    assert ledger._typed_by_user("refund")
    assert not ledger._typed_by_user("")
    assert not ledger._typed_by_user("  ")
