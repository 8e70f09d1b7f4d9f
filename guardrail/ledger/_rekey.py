"""Keys under a new normaliser: a ledger's entries re-keyed by the kinds it is given.

The normaliser is authoritative: a saved or stored key that is not what it
makes of the value would vouch for an id nobody saw. Loading a ledger with
a guard's kinds, or handing a saved ledger to a guard's session, re-keys it
here.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter

from guardrail._data.entry import Entry, Tombstone, written_by_tool
from guardrail.kinds import Kind
from guardrail.ledger._index import KeyIndex
from guardrail.ledger._state import LedgerState

_value = attrgetter("value")


def use_kinds(state: LedgerState, kinds: Mapping[str, Kind]) -> None:
    """Normalise with ``kinds`` from now on, re-keying entries whose key they write otherwise.

    The normaliser is authoritative: a saved key that is not what it makes
    of the saved value (an older normaliser, or an edited file) would
    vouch for an id nobody saw. Entries that now share a key become one,
    the one whose value a tool wrote, else the verified (else more recently
    used) one, keeping the other's roles
    as aliases; an entry whose value it can no longer read is dropped,
    leaving a tombstone.
    """
    with state.lock:
        state.kinds = kinds
        for name, table in list(state.tables.items()):
            kind = kinds.get(name)
            if kind is None:
                continue
            try:  # every value at once, in C: a cold load re-keys nothing, mostly
                same = list(map(kind.normalize, map(_value, table.values()))) == list(table)
            except Exception:  # a value it cannot read: each one apart, below
                same = False
            if not same:  # equal lists hold only the tables' own keys (text): nothing to do
                key = kind.key
                _rekey(state, name, [key(entry.value) for entry in table.values()])


def _rank(entry: Entry) -> tuple[bool, bool, int]:
    """Which of two entries that now share a key stays: higher first.

    One whose value a tool wrote (verbatim means as a tool wrote it), then a
    verified one, then the more recently used.
    """
    return written_by_tool(entry), entry.verified, entry.last_used


def _rekey(state: LedgerState, kind: str, keys: list[str | None]) -> None:
    """Rebuild ``kind``'s table under ``keys`` (one per entry, in order), merging collisions."""
    table = state.tables[kind]
    rebuilt: dict[str, Entry] = {}
    unreadable: list[Entry] = []
    for entry, key in zip(list(table.values()), keys, strict=True):
        if key is None:
            unreadable.append(entry)
            continue
        held = rebuilt.get(key)
        if held is None:
            entry.key = key
            rebuilt[key] = entry
            continue
        keep, lose = (held, entry) if _rank(held) >= _rank(entry) else (entry, held)
        keep.key = key
        keep.first_seen = min(keep.first_seen, lose.first_seen)
        if lose.pinned and not keep.pinned:
            keep.pinned = True
        for name in (lose.role, *lose.aliases):
            if state.roles.get(name) is lose:
                state.roles[name] = keep
                if name != keep.role and name not in keep.aliases:
                    keep.aliases = (*keep.aliases, name)
        rebuilt[key] = keep
    state.tables[kind] = rebuilt
    index = state.index[kind] = KeyIndex()
    index.add(rebuilt)
    for key in rebuilt:
        state.drop_tombstone((kind, key))
        state.dropped.pop((kind, key), None)
    state.recount()
    for entry in unreadable:  # gone, as if forgotten; its key may be another entry's now
        for name in (entry.role, *entry.aliases):
            if state.roles.get(name) is entry:
                del state.roles[name]
        if state.tombstone_capacity and entry.key not in rebuilt:
            state.add_tombstone(
                Tombstone(entry.value, entry.kind, entry.key, entry.role, state.turn)
            )
