"""The cold load's one pass: it accepts only what the reference check accepts, and builds alike."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from guardrail._data.entry import LIVE_FIELDS, LIVE_OPTIONAL, TIERS, Entry, entry_of, live_record
from guardrail._data.rows import Rows
from guardrail.errors import GuardrailUsageError
from guardrail.ledger._rebuild import Rebuilt, rebuilt
from guardrail.ledger._saved import validate_records
from guardrail.stores._json import encode_record

SOURCE = {"tool": "get_order", "call_id": "c1", "path": "order_id", "turn": 0}


def live(key: str, **fields: Any) -> dict[str, Any]:
    """A live record as a ledger writes it."""
    record: dict[str, Any] = {
        "kind": "order",
        "key": key,
        "state": "live",
        "turn": 0,
        "value": key,
        "role": f"order_{key}",
        "aliases": [],
        "source": dict(SOURCE),
        "first_seen": 0,
        "last_used": 0,
        "verified": True,
        "status": None,
        "pinned": False,
        "epoch": 1,
    }
    record.update(fields)
    return record


MARKS: tuple[dict[str, Any], ...] = (
    {"kind": "order", "key": "W2", "state": "evicted", "turn": 3, "value": "#W2", "role": "o2"},
    {"kind": "item", "key": "it_1", "state": "dropped", "turn": 1, "value": "it_1", "tool": "s"},
    {"kind": "order", "key": "W3", "state": "gone", "turn": 4},
)

#: Values of every JSON type, with the ones a Python comparison confuses (0, False, 0.0).
ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from([0.0, 1.0, 1.5]),
    st.sampled_from(["", "x", "produced", "haunted", "live", "evicted"]),
    st.lists(st.one_of(st.text(max_size=2), st.integers(0, 1), st.none()), max_size=2),
    st.just(dict(SOURCE)),
    st.just({**SOURCE, "turn": False}),
    st.just({"call": "read(x)", "excerpt": "pay x"}),
    st.just({"call": "read(x)", "excerpt": None}),
    st.just({}),
)
FIELDS = (
    *("kind", "key", "state", "turn", "value", "role", "aliases", "source", "first_seen"),
    *("last_used", "verified", "status", "pinned", "epoch", "note", "tier", "outside"),
    *("mention", "approved", "declined", "spellings", "tool", "extra"),
)


@st.composite
def damaged(draw: st.DrawFn) -> dict[str, Any]:
    """A record of any state, each of a few fields set to a value of any type or taken out."""
    record: dict[str, Any] = copy.deepcopy(draw(st.sampled_from([live("W1"), live("W4"), *MARKS])))
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(FIELDS))
        inner = record.get(field)
        if isinstance(inner, dict) and inner and draw(st.booleans()):
            record = record | {field: dict(inner)}
            target, field = record[field], draw(st.sampled_from([*inner, "extra"]))
        else:
            target = record
        if draw(st.booleans()):
            target.pop(field, None)
        else:
            target[field] = draw(ANY)
    return record


def fields(entry: Entry) -> tuple[Any, ...]:
    """Every slot of an entry, to compare two built apart."""
    return tuple(getattr(entry, name) for name in Entry.__slots__)


@settings(max_examples=400, deadline=None)
@given(st.lists(damaged(), min_size=1, max_size=4))
@example([live("W1"), live("W4", source={**SOURCE, "turn": False})])
@example([live("W1"), live("W4", epoch=True)])
def test_the_one_pass_accepts_only_what_the_reference_check_accepts(records: list[Any]) -> None:
    """A record the reference check refuses is never accepted; one both accept is built alike."""
    agree(records)


def agree(records: list[Any]) -> bool:
    """Assert the one pass refuses what the reference refuses, else builds alike; refused?

    Twice: over the records, and over their rows as a store writes and parses them.
    """
    rows = Rows([json.loads(encode_record(record)) for record in records])
    assert [dict(record) for record in rows] == records  # a row reads back as its record
    refused = [_agree(records, rebuilt(copy.deepcopy(records))), _agree(records, rebuilt(rows))]
    assert refused[0] == refused[1], records
    return refused[0]


def _agree(records: list[Any], fast: Rebuilt | None) -> bool:
    try:
        reference = validate_records(copy.deepcopy(records))
    except GuardrailUsageError:
        assert fast is None, records
        return True
    if fast is None:
        return False  # the reference check decides, as it just did
    sources: dict[tuple[Any, ...], Any] = {}
    built = [entry_of(record, sources) for record in reference if record["state"] == "live"]
    assert [fields(entry) for entry in fast.entries] == [fields(entry) for entry in built]
    assert fast.marks == [record for record in reference if record["state"] != "live"]
    return False


#: One value of each JSON type, and the ones a Python comparison confuses with them.
VALUES: tuple[Any, ...] = (
    *(None, True, False, 0, 1, -1, 0.0, 1.0, "", "x", "produced", "haunted"),
    *([], ["x"], [1], [None], {}, dict(SOURCE), {**SOURCE, "turn": False}),
    *({"call": "c", "excerpt": "e"}, {"call": "c", "excerpt": 1}),
)
#: A record of each shape: a plain live one, one with every optional field, each mark.
SHAPES: tuple[dict[str, Any], ...] = (
    live("W4"),
    live(
        "W4",
        aliases=["a"],
        note="n",
        tier="mentioned",
        outside=True,
        mention={"call": "c", "excerpt": "e"},
        approved=["refund"],
        declined=["pay"],
    ),
    *MARKS,
)
MISSING: Any = object()


def damages() -> list[dict[str, Any]]:
    """Each record of :data:`SHAPES` with one field (or one of its source or mention) changed."""
    out = []
    for shape in SHAPES:
        for field in FIELDS:
            for value in (*VALUES, MISSING):
                record = copy.deepcopy(shape)
                if value is MISSING:
                    record.pop(field, None)
                else:
                    record[field] = copy.deepcopy(value)
                out.append(record)
        for field in ("source", "mention"):
            for inner in (*shape.get(field, {}), "extra"):
                for value in (*VALUES, MISSING):
                    record = copy.deepcopy(shape)
                    if field not in record:
                        continue
                    if value is MISSING:
                        record[field].pop(inner, None)
                    else:
                        record[field][inner] = copy.deepcopy(value)
                    out.append(record)
    return out


def test_no_single_damaged_field_passes_the_one_pass() -> None:
    """Any field of any shape set to any JSON value, or left out: refused as the reference does."""
    # Each after a good record of the same call, whose Source the pass has met already.
    refused = sum(agree([live("W1"), record]) for record in damages())
    assert refused > 1000


#: Values the optional fields of a live record may hold.
OPTIONAL = st.fixed_dictionaries(
    {},
    optional={
        "note": st.text(max_size=5),
        "tier": st.sampled_from(TIERS),
        "outside": st.booleans(),
        "mention": st.builds(
            lambda call, excerpt: {"call": call, "excerpt": excerpt},
            st.text(max_size=3),
            st.text(max_size=3),
        ),
        "approved": st.lists(st.text(max_size=3), max_size=2),
        "declined": st.lists(st.text(max_size=3), max_size=2),
    },
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(OPTIONAL, st.lists(st.text(max_size=3), max_size=2), st.booleans()), max_size=4
    )
)
def test_every_record_a_ledger_writes_takes_the_one_pass(
    shapes: list[tuple[dict[str, Any], list[str], bool]],
) -> None:
    """Live records with any optional fields, and every mark, are built without the reference."""
    records: list[Any] = [
        live(f"W{i}", aliases=aliases, verified=verified, **optional)
        for i, (optional, aliases, verified) in enumerate(shapes)
    ]
    records += copy.deepcopy(list(MARKS))
    fast = rebuilt(records)
    assert fast is not None
    built = [entry_of(record, {}) for record in records if record["state"] == "live"]
    assert [fields(entry) for entry in fast.entries] == [fields(entry) for entry in built]


def test_a_record_with_the_retired_spellings_field_loads_without_it() -> None:
    """Development versions stored other spellings of an id: as a record or a row, it loads.

    The one pass and the reference check both accept it (a list of text) and
    build the entry without it; a wrong type is refused by both.
    """
    old = live("W1", tier="produced", spellings=["#W1"])
    rows = Rows([json.loads(encode_record(old))])
    [reference] = [entry_of(record) for record in validate_records([old])]
    for records in ([old], rows):
        fast = rebuilt(records)
        assert fast is not None
        [entry] = fast.entries
        assert not hasattr(entry, "spellings")
        assert "spellings" not in live_record(entry)
        assert fields(entry) == fields(reference)
    assert agree([live("W1", spellings="#W1")])  # refused alike


def test_entries_of_one_call_share_one_source() -> None:
    """Entries from one call and path share their Source, as admission shares it."""
    fast = rebuilt([live("W1"), live("W2"), live("W3", source={**SOURCE, "call_id": "c2"})])
    assert fast is not None
    one, two, three = fast.entries
    assert one.source is two.source and one.source is not three.source


def test_the_field_lists_are_those_a_live_record_is_written_with() -> None:
    """The field lists the one pass and the memory store read are live_record's."""
    entry = entry_of(
        live(
            "W1",
            note="Kettle",
            tier="mentioned",
            outside=True,
            mention={"call": "read(x)", "excerpt": "pay W1"},
            approved=["pay"],
            declined=["send"],
            seals={"+pay": "0" * 32, "-send": "1" * 32},
        )
    )
    written = live_record(entry)
    assert list(written)[4 : 4 + len(LIVE_FIELDS)] == list(LIVE_FIELDS)
    assert set(written) == {"kind", "key", "state", "turn", *LIVE_FIELDS, *LIVE_OPTIONAL}
