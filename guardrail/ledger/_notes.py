"""Notes taken into entries: the latest a result gave for each id it named."""

from __future__ import annotations

from collections.abc import Sequence

from guardrail._entry import Entry


def take_notes(
    table: dict[str, Entry],
    keys: Sequence[str],
    notes: Sequence[str | None] | None,
    changed: set[tuple[str, str]] | None,
) -> None:
    """Give each entry of ``keys`` still in ``table`` its note from ``notes`` (None: keep its own).

    An id seen again with another note takes the new one, as it takes a new
    status; each entry changed is added to ``changed`` (the journal, for the
    store; None: no store keeps the ledger). ``notes`` None: the batch read none.
    """
    if notes is None:
        return
    for key, note in zip(keys, notes, strict=False):
        if note is None:
            continue
        entry = table.get(key)
        if entry is not None and entry.note != note:
            entry.note = note
            if changed is not None:
                changed.add((entry.kind, entry.key))
