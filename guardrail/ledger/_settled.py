"""Settled ids: a result whose every id the ledger holds as the result would leave it.

A read that returns only ids the ledger holds, each verified, produced by a
field a tool wrote, with the status and note the result gives, changes
nothing in the ledger but when they were used. :func:`settled` checks that,
under the ledger's lock, and then marks them used, as
:meth:`~guardrail.ledger._state.LedgerState.admit` would; where any id
would change (new, unverified, another tier or status, a new note, a ledger
over its capacity), it changes nothing and says so, and the caller admits the
batches in full.
"""

from __future__ import annotations

from collections.abc import Iterable

from guardrail._data.batch import Related
from guardrail._data.entry import UNWRITTEN_PATHS, Entry
from guardrail.ledger._state import LedgerState

#: One id as an admission would take it: kind, key, status, note (None: none read), outside.
Held = tuple[str, str, str | None, str | None, bool]


def settled(state: LedgerState, ids: Iterable[Held]) -> bool:
    """Whether admitting ``ids`` as a believed result would only mark them used.

    ``ids``: one ``(kind, key, status, note, outside)`` per id of a
    harvest (each once per kind, of the tier ``produced``; a status or note
    None: none read). If so, they are marked used (in order, as an admission
    marks them) and True is returned; otherwise nothing changes.
    """
    with state.lock:
        if state.size - state.pinned > state.capacity:
            return False  # an admission would evict
        tables = state.tables
        held: list[Entry] = []
        try:
            for kind, key, status, note, outside in ids:
                entry = tables[kind][key]
                if (
                    not entry.verified
                    or entry.tier != "produced"
                    or entry.source.path in UNWRITTEN_PATHS
                    or (entry.outside and not outside)  # the result would raise its provenance
                    or (status is not None and status != entry.status)
                    or (
                        note is not None
                        and note != entry.note
                        and (type(note) is not Related or entry.note is None)
                    )
                ):
                    return False
                held.append(entry)
        except KeyError:  # a kind or an id the ledger does not hold
            return False
        epoch = state.epoch
        for entry in held:
            if entry.epoch != epoch:
                state.touch(entry)
        return True
