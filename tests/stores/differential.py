"""Stores against the memory store: any sequence of writes, stale bases included, same rows."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail.errors import SessionDeleted
from guardrail.stores import MemoryStore, Store
from guardrail.stores.protocol import Change

from .conformance import by_key, live, meta

names = st.sampled_from(["order", "order_2", "typed", "pending_order", "x"])
turns = st.integers(min_value=0, max_value=6)
statuses = st.one_of(st.none(), st.sampled_from(["", "pending", "refunded", "Zürich", "b"]))


@st.composite
def records(draw: st.DrawFn, keys: tuple[str, ...] = ("W1",)) -> dict[str, Any]:
    """A record of any state, as ledgers write them, with fields that collide often."""
    key = draw(st.sampled_from(keys))
    state = draw(st.sampled_from(["live", "evicted", "gone", "dropped"]))
    turn = draw(turns)
    if state != "live":
        return {"kind": "order", "key": key, "state": state, "turn": turn, "value": key}
    return live(
        key,
        turn=turn,
        value=draw(st.sampled_from([key, f"#{key}"])),
        role=draw(names),
        aliases=draw(st.lists(names, max_size=3, unique=True)),
        first_seen=draw(st.integers(0, turn)),
        verified=draw(st.booleans()),
        status=draw(statuses),
        pinned=draw(st.booleans()),
        epoch=draw(st.integers(0, 4)),
        source={"tool": draw(st.sampled_from(["a", "b"])), "call_id": None, "path": "$", "turn": 0},
    )


@st.composite
def metas(draw: st.DrawFn) -> dict[str, Any]:
    """A session meta with counters, texts and kinds that overlap between two writers."""
    words = st.sampled_from(["refund W1", "hello", "ü", "x", "y", "z"])
    return meta(
        turn=draw(turns),
        epoch=draw(turns),
        kinds=draw(st.lists(st.sampled_from(["order", "item", "user"]), max_size=4)),
        counters=draw(st.dictionaries(st.sampled_from(["order", "item"]), st.integers(0, 9))),
        user_texts=draw(st.lists(words, max_size=20)),
        refusals=draw(st.dictionaries(st.sampled_from(["refund", "get"]), st.integers(0, 3))),
    )


@st.composite
def writes(draw: st.DrawFn) -> tuple[int, list[dict[str, Any]], dict[str, Any] | None] | None:
    """One step: None (delete the session), or (which earlier write is the base, records, meta)."""
    if draw(st.integers(0, 9)) == 0:
        return None
    chosen = draw(st.lists(records(("W1", "W2")), max_size=2))
    unique = list({(r["kind"], r["key"]): r for r in chosen}.values())
    # Mostly the latest write or one just before: rows written at the base itself are common.
    back = draw(st.sampled_from([0, 0, 1, 2, 6]))
    return back, unique, draw(st.one_of(st.none(), metas()))


def same_as_memory(store: Store, *, examples: int = 25) -> None:
    """Plays random write sequences on ``store`` and on a MemoryStore: same rows, same answers.

    A base names an earlier write of the sequence (so the two stores' versions, which
    differ, line up), possibly a stale one: the stores must merge what it never saw, and
    refuse alike a base from before a delete.
    """
    played = [0]

    @settings(max_examples=examples, deadline=None)
    @given(st.lists(writes(), min_size=1, max_size=8))
    def same(steps: list[Any]) -> None:
        played[0] += 1
        session = f"differential-{played[0]}"
        memory = MemoryStore()
        versions: dict[int, list[int]] = {id(memory): [0], id(store): [0]}
        for step in steps:
            refused = []
            for target in (memory, store):
                history = versions[id(target)]
                if step is None:
                    target.delete(session)
                    history.append(0)
                    continue
                back, records, written_meta = step
                base = history[max(0, len(history) - 1 - back)]
                try:
                    written = target.apply(session, Change(base, records, written_meta))
                except SessionDeleted:  # based on a life of the session deleted since
                    refused.append(True)
                    history.append(base)
                    continue
                refused.append(False)
                history.append(written.version)
            assert len(set(refused)) <= 1
            mine, theirs = memory.load(session), store.load(session)
            assert (mine is None) == (theirs is None)
            if mine is not None and theirs is not None:
                assert by_key(theirs) == by_key(mine)
                assert theirs.meta == mine.meta
        store.delete(session)

    same()
