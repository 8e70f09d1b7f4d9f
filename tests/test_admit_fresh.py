"""A batch of ids all new to a ledger, admitted in one pass, leaves what the loop would.

Every test here admits the same batches into two ledgers alike in all but
one thing: one admits a batch of new ids in one pass where it can
(:func:`guardrail.ledger._fresh.admit_fresh`), the other takes every id
through the loop of ``LedgerState.admit``. Their tables, roles, counters,
records, journals and what each admission reports must be the same after
every step: ids repeated inside a batch or already held, roles taken by a
label or a tombstone, templates, limits, statuses, notes, outside parties,
an unverified admission, eviction.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Ledger
from guardrail._data.batch import Batch, Related
from guardrail._data.entry import NO_SEALS, Entry, Source, copy_entry, live_record
from guardrail.ledger import _state
from guardrail.ledger._fresh import FRESH_AT_LEAST, admit_fresh
from guardrail.ledger._ledger import state_of
from guardrail.ledger._records import meta_of, records
from guardrail.ledger._state import LedgerState

KINDS = ("order", "customer", "c{0}%s")  # braces and a percent sign: roles as written
KEYS = tuple(f"k{i}" for i in range(12))
NOTES = (None, "delivered", Related("customer of k1"), "pending; order of k2")


def _shown(state: LedgerState) -> Any:
    """Everything a ledger shows of itself, in order, down to the object sharing of roles."""
    tables = {kind: [live_record(e) for e in t.values()] for kind, t in state.tables.items()}
    roles = [(name, entry.kind, entry.key) for name, entry in state.roles.items()]
    return (
        tables,
        roles,
        records(state),
        meta_of(state) | {"instance": None},
        dict(state.counters),
        sorted(state.tomb_roles),
        state.size,
        state.pinned,
        state.epoch,
        None if state.journal is None else sorted(state.journal),
        {kind: list(index.pending) for kind, index in state.index.items()},
        [type(e.note) for e in state],
    )


def _admitted(result: Any) -> Any:
    """What an admission reports, as records (entries) and reprs (drop marks)."""
    return [[live_record(e) if isinstance(e, Entry) else repr(e) for e in part] for part in result]


batches = st.lists(
    st.builds(
        lambda kind, keys, statuses, notes, template, outside, tier: Batch(
            kind,
            f"orders[*].{kind}_id",
            template,
            [f" {key}" for key in keys],  # the value as written; the key as normalised
            list(keys),
            None if statuses is None else (statuses * len(keys))[: len(keys)],
            None if notes is None else [NOTES[(i + notes) % 4] for i in range(len(keys))],
            tier,
            outside,
        ),
        st.sampled_from(KINDS),
        st.lists(st.sampled_from(KEYS), max_size=6),
        st.one_of(st.none(), st.lists(st.sampled_from(["paid", None, "open"]), min_size=1)),
        st.one_of(st.none(), st.integers(0, 3)),
        st.sampled_from([None, None, None, "{kind}_{status}"]),
        st.booleans(),
        st.sampled_from([None, None, "mentioned", "user"]),
    ),
    max_size=4,
)
steps = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "admit", "label", "forget", "turn"]),
        batches,
        st.sampled_from([None, None, 2, 0]),
        st.booleans(),
        st.sampled_from(["order_2", "customer", "order_3", "order", "customer_4"]),
    ),
    max_size=8,
)


def _apply(state: LedgerState, step: Any) -> Any:
    action, found, limit, verified, name = step
    if action == "admit":
        source = Source("list_orders", "c1", "orders[*]", state.turn)
        return _admitted(
            state.admit(found, source=source, verified=verified, limit=limit, tool="t")
        )
    try:
        if action == "label":
            first = next(iter(state.roles), None)
            return None if first is None else live_record(state.label(first, f"x_{name}"))
        if action == "forget":
            return live_record(state.forget(name))
    except Exception as exc:  # the same refusal on both sides
        return repr(exc)
    return state.next_turn()


@settings(max_examples=300, deadline=None)
@given(steps=steps, capacity=st.sampled_from([3, 8, 1000]), journaled=st.booleans())
def test_one_pass_admission_leaves_what_the_loop_leaves(
    steps: list[Any], capacity: int, journaled: bool
) -> None:
    fast = state_of(Ledger(capacity=capacity))
    slow = state_of(Ledger(capacity=capacity))
    if journaled:
        fast.journal, slow.journal = set(), set()
    for step in steps:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_state, "FRESH_AT_LEAST", 1)  # every batch tries the one pass
            got = _apply(fast, step)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_state, "admit_fresh", lambda *args: None)
            expected = _apply(slow, step)
        assert got == expected
        assert _shown(fast) == _shown(slow)


def test_a_fresh_batch_takes_the_one_pass() -> None:
    """The batch of a fresh ledger goes through admit_fresh: the twin test compares something."""
    state = state_of(Ledger())
    calls: list[Any] = []
    real = admit_fresh

    def spy(*args: Any) -> Any:
        made = real(*args)
        calls.append(made)
        return made

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_state, "admit_fresh", spy)
        values = [f"A{i}" for i in range(FRESH_AT_LEAST)]
        keys = [value.lower() for value in values]
        small = Batch("customer", "customer_id", None, ["C"], ["c"], None)
        batch = Batch("order", "orders[*].order_id", None, values, keys, None)
        source = Source("t", None, "orders[*].order_id", 0)
        state.admit([small, batch], source=source)
    # A batch of fewer ids takes the id-by-id loop: trying the one pass costs it more.
    assert [[e.role for e in made] for made in calls] == [
        ["order", *(f"order_{i}" for i in range(2, FRESH_AT_LEAST + 1))]
    ]
    assert state.roles["customer"].key == "c"


def test_plain_entries_hold_no_rare_fields() -> None:
    """An entry with every rare field at its default keeps none of them (memory per entry)."""
    state = state_of(Ledger())
    batch = Batch("order", "p", None, ["A"], ["a"], None)
    (entry,) = state.admit([batch], source=Source("t", None, "p", 0)).added
    assert entry.pinned is False and entry.aliases == () and entry.outside is False
    copy = copy_entry(entry)
    assert live_record(copy) == live_record(entry)
    # What the entry holds itself: its slots, none of the rare fields' defaults.
    held = gc.get_referents(entry)
    assert not [x for x in held if type(x) in (tuple, frozenset) or x is NO_SEALS]
    # A label (an alias) is the entry's own; the class default stays as it was.
    state.label("order", "first")
    assert state.roles["order"].aliases == ("order",)
    assert Entry.aliases == ()
    assert ("order",) in gc.get_referents(entry)
    assert ("order",) not in gc.get_referents(copy)
