"""A ledger kept in a store: what changed since the last write, and catching up with the store.

A ledger a store keeps has a journal (``LedgerState.journal``): the
``(kind, key)`` of every id added, used, verified, relabelled, pinned,
evicted, forgotten or marked dropped since the last write. :func:`take`
turns it into one :class:`~guardrail.stores.protocol.Change` holding the
current state of each of those ids (and the meta, if it changed);
:func:`opened` rebuilds a ledger from a whole session (the cyclic
collector paused meanwhile) and :func:`catch_up` takes in what other
writers wrote, by the same merge rule the stores use
(:func:`guardrail.ledger._records.absorb`). Every record is checked field
by field first (:mod:`guardrail.ledger._saved`): a bad one is an error,
never a silently smaller ledger.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

from guardrail._data.entry import Record, gone_record
from guardrail.errors import GuardrailUsageError
from guardrail.ledger._merge import Meta
from guardrail.ledger._rebuild import Rebuilt, rebuilt
from guardrail.ledger._records import absorb, fill, meta_of, names, place, record_of
from guardrail.ledger._state import LedgerState, Name
from guardrail.stores.protocol import Change, Snapshot, damaged


def follow(state: LedgerState, *, all_of_it: bool) -> None:
    """Start journaling ``state``; ``all_of_it``: count everything it holds as unwritten."""
    with state.lock:
        if state.journal is None:
            state.journal = set()
        if all_of_it:
            state.journal.update(names(state))
            _wrote_meta(state, None)


def unwritten(state: LedgerState) -> bool:
    """Whether ``state`` holds ids changed since its last write."""
    return bool(state.journal)


def take(state: LedgerState, base: int) -> tuple[Change, set[Name]]:
    """The unwritten changes as one Change, and the journal they came from (for :func:`undo`)."""
    if not state.journal and not state.pruned and state.written_mark == _mark(state):
        return Change(base), set()  # the allowed path's usual case: nothing to write
    with state.lock:
        changed = state.journal or set()
        state.journal = set()
        turn = state.turn
        found = []
        pruned = []
        for name in changed | state.pruned:
            record = record_of(state, name)
            if record is not None:
                found.append(record)
            elif name in state.pruned:  # past the bound: nothing kept, no row either
                pruned.append(name)
            else:
                found.append(gone_record(*name, turn))
        state.pruned = set()
        meta: dict[str, Any] | None = meta_of(state)
        if meta == state.written_meta:
            meta = None
        elif base == 0 and not found and not pruned and _blank(meta):
            # The store holds no such session, and this one holds nothing to keep: writing
            # it would store a session for every id a check was ever asked about.
            meta = None
    return Change(base, found, meta, pruned), changed | set(pruned)


def _blank(meta: dict[str, Any] | None) -> bool:
    """Whether a session's meta says nothing happened in it: no turn, id, text or refusal."""
    return meta is not None and not (
        meta["turn"]
        or meta["epoch"]
        or meta["kinds"]
        or meta["counters"]
        or meta["user_texts"]
        or meta["refusals"]
    )


def undo(state: LedgerState, changed: set[Name], change: Change) -> None:
    """A write failed: its ids count as unwritten again, its prunings pending (nothing lost)."""
    with state.lock:
        if state.journal is None:
            state.journal = set()
        state.journal.update(changed.difference(change.pruned))
        state.pruned.update(change.pruned)


def written(state: LedgerState, change: Change) -> None:
    """A write succeeded: its meta is what the store holds now."""
    if change.meta is not None:
        _wrote_meta(state, dict(change.meta))


def _mark(state: LedgerState) -> tuple[Any, ...]:
    """The meta fields that change without an id changing: turn, epoch, re-prompts, life."""
    reprompts = state.reprompts
    counts = tuple(reprompts.counts.items()) if reprompts.turn == state.turn else ()
    return (state.turn, state.epoch, counts, state.instance, *_calls(*state.calls.to_meta()))


def _calls(held: list[str], ran: list[str]) -> tuple[Any, ...]:
    """A cheap mark of the held calls: how many of each, and the last of each."""
    return (len(held), held[-1:], len(ran), ran[-1:])


def _wrote_meta(state: LedgerState, meta: dict[str, Any] | None) -> None:
    """Note the meta the store holds for this ledger now (None: unknown, write it).

    The mark comes from the meta written, not from the ledger, which another
    thread may have changed since.
    """
    state.written_meta = meta
    state.written_mark = (
        None
        if meta is None
        else (
            meta["turn"],
            meta["epoch"],
            tuple(meta["refusals"].items()),
            meta.get("instance"),
            *_calls(meta.get("held", []), meta.get("ran", [])),
        )
    )


# -- reading a store back ------------------------------------------------------------------------


def checked(snapshot: Snapshot, session_id: str, store: object) -> tuple[list[Any], Meta | None]:
    """A snapshot's records and meta, every field checked.

    Damaged or missing data (a field that is wrong, a record of no known
    state, a whole session without its meta) is a
    :class:`~guardrail.errors.StoreError` naming the store and the session:
    the guard fails closed, never opening a smaller ledger.
    """
    from guardrail.ledger._saved import validate_records  # pydantic: on reading

    meta = _checked_meta(snapshot, session_id, store)
    try:
        found = validate_records(list(snapshot.records))
    except GuardrailUsageError as exc:
        raise damaged(repr(store), session_id, f"not a ledger's records: {exc}") from None
    return list(found), meta


def opened(state: LedgerState, snapshot: Snapshot, session_id: str, store: object) -> None:
    """Make an empty ledger the whole session ``snapshot`` holds, every record checked first.

    The live records are checked and made entries in one pass
    (:func:`~guardrail.ledger._rebuild.rebuilt`); where that pass is not sure
    of a record, :func:`checked` decides, with the same error for the same
    damage. The cyclic collector waits meanwhile: a session of 10,000 ids
    makes tens of thousands of objects the ledger keeps, and the collector,
    run over and over as they are made, would walk them again and again. It
    runs again (if the program had it on) once what this made and did not
    keep is gone. A synchronous store's read runs paused too (the session
    driver pauses it over the read and this); an asynchronous store's is
    awaited with the collector on, as other tasks run meanwhile.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        _opened(state, snapshot, session_id, store)  # its leftovers go as it returns
    finally:
        if was_on:
            gc.enable()


def _opened(state: LedgerState, snapshot: Snapshot, session_id: str, store: object) -> None:
    """:func:`opened`'s work, with the collector paused."""
    meta = _checked_meta(snapshot, session_id, store)
    found: Rebuilt | list[Any] | None = rebuilt(snapshot.records)
    if found is None:
        found, meta = checked(snapshot, session_id, store)
    load(state, found, meta)


def _checked_meta(snapshot: Snapshot, session_id: str, store: object) -> Meta | None:
    """A snapshot's meta, checked; a whole session without one is damaged."""
    from guardrail.ledger._saved import validate_meta  # pydantic: on reading

    if snapshot.complete and snapshot.version > 0 and snapshot.meta is None:
        # Every guard writes the meta with a session's first change: without it the turn,
        # capacities and counters are lost, and the session would open as something else.
        raise damaged(repr(store), session_id, "its meta (turn, capacities, counters) is missing")
    try:
        return None if snapshot.meta is None else validate_meta(snapshot.meta)
    except GuardrailUsageError as exc:
        raise damaged(repr(store), session_id, f"not a ledger's records: {exc}") from None


def load(state: LedgerState, found: Rebuilt | Sequence[Record], meta: Meta | None) -> None:
    """Make an empty ledger the session that ``found`` and ``meta`` describe (checked ones).

    ``found``: the checked records, or what :func:`~guardrail.ledger._rebuild.rebuilt`
    made of them.
    """
    if isinstance(found, Rebuilt):
        place(state, found.entries, found.marks, meta)
    else:
        fill(state, found, meta)
    with state.lock:
        if state.journal is not None:
            state.journal.clear()
        _wrote_meta(state, meta_of(state) if meta is not None else None)


def catch_up(state: LedgerState, found: Sequence[Record], meta: Meta | None) -> None:
    """Take in what other writers wrote since this ledger's last read (checked records).

    An id this ledger has not changed since its last write takes the
    store's state; one it changed since is merged as a concurrent write is
    (:func:`~guardrail.stores.protocol.merge_record`), and stays unwritten.
    """
    with state.lock:
        journal = state.journal if state.journal is not None else set()
        meta_changed = meta_of(state) != state.written_meta
        absorb(state, found, meta, merged=journal, meta_merged=meta_changed)
        if meta is not None and not meta_changed:
            _wrote_meta(state, meta_of(state))
