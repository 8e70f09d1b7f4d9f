"""A ledger as records and meta, and the one loader and merge that read them back.

Every id a ledger knows of is one record (:mod:`guardrail._data.entry`);
the session-wide fields are the meta. The same records are a saved ledger
(``Ledger.to_json``) and a session in a store, so one loader rebuilds both
(:func:`fill`), and one merge takes in another copy's records by the store
protocol's rule (:func:`absorb`, with
:func:`~guardrail.stores.protocol.merge_record` and
:func:`~guardrail.stores.protocol.merge_meta`): ``Ledger.merge`` and a
cached session catching up with its store are the same code.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Sequence
from operator import attrgetter, itemgetter
from typing import Any

from guardrail._data.entry import (
    Entry,
    Record,
    Source,
    drop_mark_of,
    dropped_record,
    entry_of,
    evicted_record,
    live_record,
    tombstone_of,
)
from guardrail.ledger._merge import Meta, merge_meta, merge_record
from guardrail.ledger._rekey import use_kinds
from guardrail.ledger._state import LedgerState, Name


def record_of(state: LedgerState, name: Name) -> dict[str, Any] | None:
    """What ``state`` knows of one id: a live, evicted or dropped record, or None (nothing)."""
    kind, key = name
    table = state.tables.get(kind)
    entry = table.get(key) if table is not None else None
    if entry is not None:
        return live_record(entry)
    tomb = state.tombstones.get(name)
    if tomb is not None:
        return evicted_record(tomb)
    mark = state.dropped.get(name)
    if mark is not None:
        return dropped_record(mark)
    return None


def records(state: LedgerState) -> list[dict[str, Any]]:
    """Every id ``state`` knows of as a record: entries in order of first appearance, then marks.

    The order is the one :func:`fill` rebuilds from with ``ordered=True``.
    One record per id, as :func:`record_of` gives it: an id both evicted
    and named again beyond a call's limit is saved as evicted.
    """
    with state.lock:  # another thread may be recording into it meanwhile
        tombs = state.tombstones
        out = [live_record(entry) for entry in state.entries()]
        out += [evicted_record(tomb) for tomb in tombs.values()]
        out += [dropped_record(d) for name, d in state.dropped.items() if name not in tombs]
    return out


def names(state: LedgerState) -> set[Name]:
    """The name of every id ``state`` knows of: its entries, tombstones and drop marks."""
    with state.lock:
        known = {(entry.kind, entry.key) for entry in state}
        known.update(state.tombstones)
        known.update(state.dropped)
    return known


def meta_of(state: LedgerState) -> dict[str, Any]:
    """The session-wide fields of a ledger (see :data:`~guardrail.stores.protocol.Meta`)."""
    return {
        "capacity": state.capacity,
        "tombstone_capacity": state.tombstone_capacity,
        "turn": state.turn,
        "epoch": state.epoch,
        "kinds": list(state.tables),
        "counters": dict(state.counters),
        "user_texts": list(state.user_texts),
        "refusals": state.reprompts.of(state.turn),
        "instance": state.instance,
        "held": state.calls.to_meta()[0],
        "ran": state.calls.to_meta()[1],
    }


# -- reading records back ------------------------------------------------------------------------


_TURN = itemgetter("turn")


def _sort(entries: list[Entry], *fields: str) -> None:
    """Sort ``entries`` by ``fields``, the first the most significant.

    One stable sort per field, least significant first: each compares one
    int or str in C, where a sort by a tuple of them compares tuples. A cold
    load of 100,000 entries sorts about three times faster so.
    """
    for field in reversed(fields):
        entries.sort(key=attrgetter(field))


def fill(
    state: LedgerState, found: Sequence[Record], meta: Meta | None, *, ordered: bool = False
) -> None:
    """Make an empty ledger the one ``found`` (checked records) and ``meta`` describe.

    The one loader: a saved ledger and a stored session both come back
    through it (a stored one by way of :func:`place`). ``ordered``: the
    live records are in order of first appearance and the marks oldest
    first (a saved ledger); else (a store, which keeps no order) they are
    sorted so.
    """
    sources: dict[tuple[Any, ...], Source] = {}  # one per call and path, as admission shares
    entries = [entry_of(record, sources) for record in found if record["state"] == "live"]
    marks = [record for record in found if record["state"] != "live"]
    place(state, entries, marks, meta, ordered=ordered)


def place(
    state: LedgerState,
    entries: list[Entry],
    marks: list[Record],
    meta: Meta | None,
    *,
    ordered: bool = False,
) -> None:
    """Make an empty ledger the one of ``entries`` (of no ledger), ``marks`` and ``meta``.

    Entries take their own role first, a fresh one where another entry
    holds it, then their aliases where free; each table is put in order of
    least recent use; the normalisers re-key what they would write
    otherwise; and a ledger over capacity evicts. ``ordered``: as for
    :func:`fill`.
    """
    with state.lock:
        if meta is not None:
            state.capacity = meta["capacity"]
            state.tombstone_capacity = meta["tombstone_capacity"]
            take_meta(state, meta)
            for kind in meta["kinds"]:
                state.table(kind)
        if not ordered:
            _sort(entries, "first_seen", "kind", "key")
            marks.sort(key=_TURN)
        # Every entry's own role first, then aliases where free: an alias never takes a
        # name that is another entry's role, whichever entry comes first.
        roles = state.roles
        tomb_roles = state.tomb_roles
        keys: dict[str, list[str]] = {}
        named: list[Entry] = []  # the entries whose records give aliases
        kind = None
        table: dict[str, Entry] = {}
        added: list[str] = []
        for entry in entries:
            if entry.kind != kind:  # sorted by kind within a turn: the same as the last, mostly
                kind = entry.kind
                table = state.table(kind)
                added = keys.setdefault(kind, [])
            key = entry.key
            role = entry.role
            if role in roles or role in tomb_roles:
                entry.role = role = state.new_role(kind, key, None, entry.status, entry.source)
            table[key] = entry
            roles[role] = entry
            added.append(key)
            if entry.aliases:
                named.append(entry)
        for entry in named:
            free = tuple(name for name in entry.aliases if not state.role_taken(name))
            if free != entry.aliases:
                entry.aliases = free
            for name in free:
                roles[name] = entry
        for kind, added in keys.items():
            state.index[kind].add(added)
        state.recount()
        for record in marks:
            _put(state, record)
        if ordered:
            _reorder(state, set(keys))
        else:  # in order of first appearance already: by last use, and the rest as it is
            _sort(entries, "last_used", "epoch")
            _reorder_sorted(state, entries, set(keys))
    # The normaliser is authoritative: a key that is not what it makes of the value is re-keyed.
    use_kinds(state, state.kinds)
    with state.lock:
        state.evict_over_capacity(spare_current=False)


def absorb(
    state: LedgerState,
    found: Iterable[Record],
    meta: Meta | None,
    *,
    merged: Container[Name] | None = None,
    meta_merged: bool = True,
) -> list[Entry]:
    """Take another copy's records (checked) into a live ledger; the entries evicted to fit.

    The ids in ``merged`` (None: every id) are merged with what this ledger
    holds by the protocol's rule, :func:`~guardrail.stores.protocol.merge_record`,
    as two concurrent copies are; any other id takes the record as it is
    (a store's newer state of an id this ledger did not change since). The
    meta, when given, is merged by :func:`~guardrail.stores.protocol.merge_meta`
    (taken as it is when not ``meta_merged``). With ``merged=None`` (a copy
    taken in whole) every id of it counts as changed here, for the store
    to be written. The ledger then fits its capacity again: two copies that each
    fit may not fit together, and a merge is no flood, so nothing is spared.
    """
    with state.lock:
        kinds: set[str] = set()
        top = -1  # the latest epoch among the entries taken in
        for theirs in _keyed(state, found):
            name = (theirs["kind"], theirs["key"])
            if merged is None:
                state.changed(*name)
            if merged is None or name in merged:
                mine = record_of(state, name)
                if mine is None and merged is not None:  # changed here, and nothing kept of it
                    mine = {"kind": name[0], "key": name[1], "state": "gone", "turn": state.turn}
                result = merge_record(mine, theirs, concurrent=True)
                if result is mine or result == mine:
                    continue
            else:
                result = theirs
            _unlink(state, name)
            _put(state, result)
            kinds.add(name[0])
            if result["state"] == "live":
                top = max(top, result["epoch"])
        if meta is not None:
            if meta_merged:
                meta = merge_meta(meta_of(state), meta, concurrent=True)
            take_meta(state, meta)
            for kind in meta["kinds"]:
                state.table(kind)
        if top >= state.epoch:
            # Epochs of two copies count apart: no entry taken in may look used in the
            # current epoch, or its next use would not move it (see LedgerState.touch).
            state.epoch = top + 1
        _reorder(state, kinds)
        return state.evict_over_capacity(spare_current=False)


def take_meta(state: LedgerState, meta: Meta) -> None:
    """Set a ledger's turn, counters, user texts and re-prompt counts from checked meta."""
    state.turn = meta["turn"]
    if "instance" in meta:  # the store's life of the session: its approval requests hold
        state.instance = meta["instance"]
    state.calls.take(meta.get("held", ()), meta.get("ran", ()))
    state.epoch = max(state.epoch, meta["epoch"])
    state.counters = dict(meta["counters"])
    state.user_texts.replace(meta["user_texts"])
    state.reprompts.take(meta["turn"], meta["refusals"])


def _keyed(state: LedgerState, found: Iterable[Record]) -> Iterator[Record]:
    """Records under the key the ledger's normaliser makes of their value.

    The normaliser is authoritative: a stored key that is not what it makes
    of the stored value would vouch for an id nobody saw. A live record
    whose value it cannot read is left out. A kind the ledger has no
    normaliser for keeps the keys it came with (as :func:`~guardrail.ledger._rekey.use_kinds`
    does).
    """
    kinds = state.kinds
    for record in found:
        if record["state"] != "live" or record["kind"] not in kinds:
            yield record
            continue
        key = state.key(record["kind"], record["value"])
        if key == record["key"]:
            yield record
        elif key is not None:
            yield {**record, "key": key}


def _unlink(state: LedgerState, name: Name) -> None:
    """Take out whatever the ledger holds for one id, leaving no tombstone: a record says next."""
    kind, key = name
    table = state.tables.get(kind)
    entry = table.get(key) if table is not None else None
    if entry is not None:
        state.unlink(entry)
    state.drop_tombstone(name)
    state.dropped.pop(name, None)


def _put(state: LedgerState, record: Record) -> None:
    """Set one id's state from a checked record (nothing held for it)."""
    kind = record["state"]
    if kind == "live":
        _adopt(state, entry_of(record))
    elif kind == "evicted":
        if state.tombstone_capacity:
            state.add_tombstone(tombstone_of(record))
    elif kind == "dropped":
        state.add_drop_mark(drop_mark_of(record))


def _adopt(state: LedgerState, entry: Entry) -> None:
    """Take in an entry of no ledger: its role if free (else a fresh one), its free aliases."""
    state.table(entry.kind)
    free = [name for name in (entry.role, *entry.aliases) if not state.role_taken(name)]
    if entry.role not in free:
        entry.role = state.new_role(entry.kind, entry.key, None, entry.status, entry.source)
    aliases = tuple(name for name in free if name != entry.role)
    if aliases != entry.aliases:  # an entry with none keeps none of its own (see Entry)
        entry.aliases = aliases
    state.insert(entry)
    state.dropped.pop((entry.kind, entry.key), None)


def _reorder(state: LedgerState, kinds: set[str]) -> None:
    """Each changed kind's table back in order of least recent use."""
    for kind in kinds:
        table = state.tables.get(kind)
        if table:
            ordered = list(table.values())
            _sort(ordered, "last_used", "epoch", "first_seen", "key")
            state.tables[kind] = {entry.key: entry for entry in ordered}


def _reorder_sorted(state: LedgerState, entries: list[Entry], kinds: set[str]) -> None:
    """:func:`_reorder` with ``entries`` (the tables' and others) in order of least recent use."""
    reordered: dict[str, dict[str, Entry]] = {kind: {} for kind in kinds}
    tables = state.tables
    for entry in entries:
        if tables[entry.kind].get(entry.key) is entry:  # an entry the ledger holds
            reordered[entry.kind][entry.key] = entry
    for kind, table in reordered.items():
        if len(table) != len(tables[kind]):  # the table holds entries of before: all of them
            _reorder(state, {kind})
        else:
            tables[kind] = table
