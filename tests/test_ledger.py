"""The ledger: verbatim entries, stable roles, eviction by last use, exact JSON round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import GuardrailUsageError, Kind, Ledger, Source
from guardrail.harvest import Found
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


def test_new_ids_beyond_the_limit_are_remembered_as_dropped_not_kept() -> None:
    """One admission adds at most `limit` new ids; the rest become drop marks, in order."""
    ledger = Ledger(capacity=100)
    ledger.admit([found("order", "W0")], source=SRC)
    items = [found("order", f"W{n}") for n in range(6)]
    admitted = ledger.admit(items, source=SRC, limit=2, tool="search")
    assert [e.value for e in admitted.added] == ["W1", "W2"]
    assert [(d.value, d.tool, d.turn) for d in admitted.dropped] == [
        ("W3", "search", 0),
        ("W4", "search", 0),
        ("W5", "search", 0),
    ]
    assert {e.value for e in ledger} == {"W0", "W1", "W2"}
    assert ledger.dropped("order", "W4") is not None
    assert ledger.dropped("order", "W1") is None
    # Seen again in a narrower result, the id enters for real and loses its mark.
    assert ledger.admit([found("order", "W4")], source=SRC, limit=2).dropped == []
    assert ledger.get("order", "W4") is not None and ledger.dropped("order", "W4") is None
    assert [d.value for d in ledger.dropped_marks()] == ["W3", "W5"]


def test_the_tool_of_a_drop_mark_defaults_to_the_source() -> None:
    """Without tool=, a mark names the tool of the admission's source."""
    ledger = Ledger()
    dropped = ledger.admit([found("order", "W1")], source=SRC, limit=0).dropped
    assert [(d.value, d.tool) for d in dropped] == [("W1", "get_order")]


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_a_bad_limit_is_a_usage_error(limit: object) -> None:
    """The limit is a count of ids."""
    with pytest.raises(GuardrailUsageError, match="limit must be an integer"):
        Ledger().admit([found("order", "W1")], source=SRC, limit=limit)  # type: ignore[arg-type]


def test_drop_marks_are_bounded_and_never_push_tombstones_out() -> None:
    """Marks are kept apart from tombstones, at most as many as tombstones, oldest out first."""
    ledger = Ledger(capacity=1, tombstones=3)
    ledger.admit([found("order", "W_a")], source=SRC)
    ledger.admit([found("order", "W_b")], source=SRC)  # turn 0: W_a is evicted
    flood = [found("order", f"F{n}") for n in range(10)]
    ledger.admit(flood, source=SRC, limit=0, tool="search")
    assert [t.value for t in ledger.tombstones()] == ["W_a"]
    assert [d.value for d in ledger.dropped_marks()] == ["F7", "F8", "F9"]


def test_no_marks_are_kept_when_no_tombstones_are() -> None:
    """A ledger that keeps no tombstones keeps no drop marks either."""
    ledger = Ledger(tombstones=0)
    admitted = ledger.admit([found("order", "W1")], source=SRC, limit=0)
    assert [d.value for d in admitted.dropped] == ["W1"] and ledger.dropped_marks() == []


def test_ids_used_in_the_current_turn_are_never_evicted() -> None:
    """From turn 1, eviction spares this turn's ids; what still does not fit is taken back."""
    ledger = Ledger(capacity=3)
    ledger.next_turn()
    ledger.admit([found("order", "W_old")], source=SRC)
    ledger.next_turn()
    ledger.admit([found("order", "W_now")], source=SRC)
    ledger.touch(ledger["order"])  # W_old used again this turn
    admitted = ledger.admit([found("order", f"N{n}") for n in range(3)], source=SRC)
    assert [e.value for e in admitted.added] == ["N0"]
    assert admitted.evicted == []
    assert [(d.value, d.turn) for d in admitted.dropped] == [("N1", 2), ("N2", 2)]
    assert {e.value for e in ledger} == {"W_old", "W_now", "N0"}
    assert "order_4" not in ledger and ledger.dropped("order", "N2") is not None
    ledger.next_turn()  # last turn's ids may go now, least recently used first
    evicted = ledger.admit([found("order", "N3")], source=SRC).evicted
    assert [e.value for e in evicted] == ["W_now"]  # W_old was used after it


def test_an_evicted_id_taken_back_again_keeps_its_tombstone_and_role() -> None:
    """An evicted id that returns but does not fit is remembered as evicted, under its role."""
    ledger = Ledger(capacity=1)
    ledger.admit([found("order", "W1")], source=SRC)
    ledger.admit([found("order", "W2")], source=SRC)  # turn 0: W1 evicted as [order]
    ledger.next_turn()
    ledger.touch(ledger["order_2"])
    admitted = ledger.admit([found("order", "W1")], source=SRC)
    assert admitted.added == [] and [d.value for d in admitted.dropped] == ["W1"]
    tomb = ledger.tombstone("order", "W1")
    assert tomb is not None and tomb.role == "order"
    with pytest.raises(GuardrailUsageError, match="belonged to an evicted id"):
        ledger.label("order_2", "order")


def test_unpinning_in_a_full_turn_evicts_the_least_recently_used_anyway() -> None:
    """Unpinning gives the room back even when every other id was used this turn."""
    ledger = Ledger(capacity=1)
    ledger.next_turn()
    ledger.admit([found("order", "W1")], source=SRC)
    ledger.pin("order")
    ledger.admit([found("order", "W2")], source=SRC)
    ledger.pin("order", False)
    assert len(ledger) == 1 and [t.value for t in ledger.tombstones()] == ["W1"]


def test_looking_up_a_value_a_normaliser_cannot_read_finds_nothing() -> None:
    """get and lookup treat a kind whose normaliser raises on the value as holding no entry."""
    kinds = {"link": Kind.build("link", normalize="url")}
    ledger = Ledger(kinds=kinds)
    ledger.admit([Found("link", "https://a.example", "https://a.example", "p")], source=SRC)
    assert ledger.get("link", "HTTPS://A.example/") is ledger["link"]
    assert ledger.get("link", "http://[x") is None
    assert ledger.lookup("http://[x") == []
    assert ledger.key("link", "http://[x") is None
