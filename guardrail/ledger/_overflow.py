"""What one admission could not keep: entries taken back, and the drop marks it leaves.

Split from :mod:`guardrail.ledger._state` (whose ``admit`` calls these last):
a result of more new ids than fit is recorded whole, then the newest that
still do not fit after eviction are taken out again and remembered as drop
marks, so a later use is refused with "narrow the search".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from guardrail._data.entry import Dropped, Entry, Source, Tombstone

Name = tuple[str, str]


class LedgerState(Protocol):
    """What of :class:`guardrail.ledger._state.LedgerState` these use (it imports them)."""

    size: int
    pinned: int
    capacity: int
    tombstone_capacity: int
    turn: int

    def unlink(self, entry: Entry) -> None: ...
    def changed(self, kind: str, key: str) -> None: ...
    def add_tombstone(self, tomb: Tombstone) -> None: ...
    def add_drop_mark(self, mark: Dropped) -> None: ...


def take_back(
    state: LedgerState, added: list[Entry], revived: Mapping[Name, Tombstone]
) -> list[Entry]:
    """Take out of ``added`` (newest first) what still does not fit after eviction.

    The entries go without a new tombstone (they were never kept; the
    caller marks them dropped); an evicted id that came back gets its
    old tombstone back, so its role stays its own. Returned oldest first.
    """
    taken: list[Entry] = []
    while added and state.size - state.pinned > state.capacity:
        entry = added.pop()
        state.unlink(entry)
        state.changed(entry.kind, entry.key)
        taken.append(entry)
    taken.reverse()
    for entry in taken:  # oldest first, as they were remembered
        tomb = revived.get((entry.kind, entry.key))
        if tomb is not None:
            state.add_tombstone(tomb)
    return taken


def mark_dropped(
    state: LedgerState,
    taken: list[Entry],
    skipped: dict[Name, str],
    tool: str | None,
    source: Source | Mapping[str, Source],
) -> list[Dropped]:
    """Drop marks for the ids of one admission that were not kept, oldest first.

    Kept apart from tombstones (so a flood never pushes a real
    tombstone out) and bounded alike: the newest ``tombstone_capacity``.
    """
    if not taken and not skipped:
        return []
    if tool is None:
        first = source if isinstance(source, Source) else next(iter(source.values()), None)
        tool = first.tool if first is not None else "?"
    turn = state.turn
    dropped = [Dropped(e.value, e.kind, e.key, tool, turn) for e in taken]
    dropped.extend(Dropped(value, kind, key, tool, turn) for (kind, key), value in skipped.items())
    keep = state.tombstone_capacity
    for mark in dropped[-keep:] if keep else ():
        state.add_drop_mark(mark)
        state.changed(mark.kind, mark.key)
    return dropped
