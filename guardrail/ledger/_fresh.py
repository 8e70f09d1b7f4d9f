"""Fresh ids: a batch none of whose ids a ledger holds, admitted as columns.

The usual admission of a large result into a ledger that has not seen its
ids: every id is new, takes the next default role of its kind, and nothing
is refreshed, revived or remembered as dropped. :func:`admit_fresh` makes
the entries in one pass and puts them into the tables with one update each,
exactly as :meth:`~guardrail.ledger._state.LedgerState.admit` would one by
one; a batch that is not such a batch is left to that loop, untouched. That
loop gives the ids already held their notes after (:func:`take_notes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any, Protocol

from guardrail._data.batch import Batch, Related
from guardrail._data.entry import Entry, Source

_allocate = object.__new__

#: The fewest ids a batch has for :func:`admit_fresh` to be tried: below it, the checks that
#: it is a batch of new ids cost more than the id-by-id loop saves (a read's few ids, most
#: often held already, the usual result in a conversation).
FRESH_AT_LEAST = 8


def fresh_roles(kind: str, start: int, count: int) -> list[str]:
    """The default roles ``count`` new ids of ``kind`` take after ``start`` were numbered."""
    # str.format run by map: a third cheaper than an f-string per id (braces in a kind kept).
    numbered = kind.replace("{", "{{").replace("}", "}}") + "_{}"
    roles = list(map(numbered.format, range(start + 1, start + count + 1)))
    if start == 0 and roles:
        roles[0] = kind  # the first of a kind is the kind itself
    return roles


class LedgerState(Protocol):
    """What of :class:`guardrail.ledger._state.LedgerState` this uses (it imports this)."""

    size: int
    turn: int
    counters: dict[str, int]
    roles: dict[str, Entry]
    tomb_roles: set[str]

    @property
    def index(self) -> Mapping[str, Any]: ...  # kind -> its KeyIndex


def admit_fresh(
    state: LedgerState,
    batch: Batch,
    table: dict[str, Entry],
    where: Source,
    provenance: tuple[str, bool],
    verified: bool,
) -> list[Entry] | None:
    """The entries of a batch of ids all new to ``table`` (its kind's), put in the ledger.

    ``provenance``: the tier and whether an outside party chose the ids.
    None, with nothing changed, where the batch is not one of distinct new
    ids whose default roles are all free, or its columns differ in length.
    Each takes the next default role of its kind; entries keep epoch 0
    until the admission ends, as the loop of ``admit`` leaves them.
    """
    kind, values, keys, statuses, notes = (
        batch.kind,
        batch.values,
        batch.keys,
        batch.statuses,
        batch.notes,
    )
    count = len(keys)
    if (
        not count
        or len(values) != count
        or (statuses is not None and len(statuses) != count)
        or (notes is not None and len(notes) != count)
        or len(set(keys)) != count
        or (table and not table.keys().isdisjoint(keys))
    ):
        return None
    start = state.counters.get(kind, 0)
    names = fresh_roles(kind, start, count)
    roles, tomb_roles = state.roles, state.tomb_roles
    if not roles.keys().isdisjoint(names) or (tomb_roles and not tomb_roles.isdisjoint(names)):
        return None
    tier, outside = provenance
    turn = state.turn
    made: list[Entry] = []
    append = made.append
    for value, key, role, status, note in zip(
        values,
        keys,
        names,
        repeat(None) if statuses is None else statuses,
        repeat(None) if notes is None else notes,
        strict=False,  # of one length, checked above (repeat has none)
    ):
        # Fields set directly (the keyword constructor costs twice as much); the rare
        # fields keep their class defaults (see Entry).
        entry = _allocate(Entry)
        entry.value = value
        entry.kind = kind
        entry.key = key
        entry.role = role
        entry.source = where
        entry.first_seen = turn
        entry.last_used = turn
        entry.status = status
        entry.note = note
        entry.epoch = 0
        entry.tier = tier
        append(entry)
    if outside:
        for entry in made:
            entry.outside = True
    if verified is not True:
        for entry in made:
            entry.verified = verified
    table.update(zip(keys, made, strict=True))
    roles.update(zip(names, made, strict=True))
    state.counters[kind] = start + count
    state.size += count
    state.index[kind].add(keys)
    return made


def take_notes(
    table: dict[str, Entry],
    keys: Sequence[str],
    notes: Sequence[str | None] | None,
    changed: set[tuple[str, str]] | None,
) -> None:
    """Give each entry of ``keys`` still in ``table`` its note from ``notes`` (None: keep its own).

    An id seen again with another note takes the new one, as it takes a new
    status (a :class:`~guardrail._data.batch.Related` note only where it has
    none); each entry changed is added to ``changed`` (the journal, for the
    store; None: no store keeps the ledger). ``notes`` None: the batch read none.
    """
    if notes is None:
        return
    for key, note in zip(keys, notes, strict=False):
        if note is None:
            continue
        entry = table.get(key)
        if entry is not None and type(note) is Related and entry.note is not None:
            continue  # which record names it: no description, never one in place of a note
        if entry is not None and entry.note != note:
            entry.note = note
            if changed is not None:
                changed.add((entry.kind, entry.key))
