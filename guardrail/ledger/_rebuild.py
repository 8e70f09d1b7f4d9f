"""A stored session's records checked and made entries in one pass: the cold load's way.

A worker opening a session it has not cached reads every record. The
reference check (:mod:`guardrail.ledger._saved`, pydantic in strict mode)
copies each record, and the loader then reads the copy again to make an
entry; here one pass does both, and accepts only what the reference check
surely accepts: exact types (a ``bool`` is no count), counts of zero or
more, no field missing, none unknown. At the first record it does not
accept, it gives up (None), and the reference check decides: it names the
record and the field at fault, so damaged data fails closed as before,
and the same data gets the same answer either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from guardrail._data.entry import (
    LIVE_OPTIONAL,
    RETIRED_FIELDS,
    TIERS,
    Entry,
    Mention,
    Record,
    Source,
    implied_tier,
)
from guardrail._data.rows import FIELDS, LIVE_LENGTH, SOURCE, Rows, from_row

_LIVE = frozenset(FIELDS["live"])
#: A live record's values in the order of its row, in one call.
_live_values = itemgetter(*FIELDS["live"])
_source_values = itemgetter(*SOURCE)
#: The fields a live record has only where the entry has some (see ``live_record``), and those
#: earlier development versions wrote (checked as the reference check does, then ignored).
_OPTIONAL = frozenset((*LIVE_OPTIONAL, *RETIRED_FIELDS))
_LIVE_ALL = _LIVE | _OPTIONAL
_MARKS = {state: frozenset(FIELDS[state]) for state in ("evicted", "dropped", "gone")}
_SOURCE = frozenset(SOURCE)
_MENTION = frozenset(("call", "excerpt"))
_TIERS = frozenset(TIERS)
_allocate = object.__new__


class Rebuilt(NamedTuple):
    """Checked records: the live ones as entries of no ledger, the others as they were."""

    entries: list[Entry]
    marks: list[Record]


def rebuilt(records: Iterable[Any]) -> Rebuilt | None:
    """``records`` checked and the live ones made entries, or None: let the reference check decide.

    ``records`` may be :class:`~guardrail._data.rows.Rows` as a store parsed
    them: their lists are read as they are, never made dictionaries first.
    One :class:`~guardrail._data.entry.Source` per call and path is shared, as
    admission shares it. An entry's aliases are every name its record
    gives; the loader keeps the free ones.
    """
    entries: list[Entry] = []
    marks: list[Record] = []
    sources: dict[tuple[Any, ...], Source] = {}
    add = entries.append
    for record in records.values if isinstance(records, Rows) else records:
        shape = type(record)
        if shape is list:  # a row: ["live", kind, key, turn, value, ...]
            if not record or record[0] != "live":
                record = from_row(record)  # a mark, checked as a record below
            else:
                if len(record) == LIVE_LENGTH:
                    row, extra = record, None
                elif (
                    len(record) == LIVE_LENGTH + 1
                    and type(record[-1]) is dict
                    and record[-1].keys() <= _OPTIONAL
                ):
                    row, extra = record[:-1], record[-1]
                else:
                    return None
                entry = _entry(row, extra, sources)
                if entry is None:
                    return None
                add(entry)
                continue
        elif shape is not dict:
            return None
        state = record.get("state")
        if state == "live":
            fields = record.keys()
            if fields == _LIVE:  # most records: no note, no provenance beyond the implied
                entry = _entry(_live_values(record), None, sources)
            elif _LIVE < fields <= _LIVE_ALL:
                entry = _entry(_live_values(record), record, sources)
            else:
                return None
            if entry is None:
                return None
            add(entry)
        elif type(state) is str and _mark(record, state):
            marks.append(record)
        else:
            return None
    return Rebuilt(entries, marks)


def _entry(
    row: Sequence[Any], extra: dict[str, Any] | None, sources: dict[tuple[Any, ...], Source]
) -> Entry | None:
    """A live record's values, in a row's order, as an entry; None where the check might refuse.

    ``extra``: where the fields only some entries have are, if anywhere.
    """
    (
        _,
        kind,
        key,
        turn,
        value,
        role,
        aliases,
        raw,
        first_seen,
        last_used,
        verified,
        status,
        pinned,
        epoch,
    ) = row
    if not (
        type(kind) is str
        and type(key) is str
        and type(value) is str
        and type(role) is str
        and type(turn) is int
        and turn >= 0
        and type(first_seen) is int
        and first_seen >= 0
        and type(last_used) is int
        and last_used >= 0
        and type(epoch) is int
        and epoch >= 0
        and type(verified) is bool
        and type(pinned) is bool
        and (status is None or type(status) is str)
        and type(aliases) is list
        and (not aliases or _strings(aliases))
    ):
        return None
    if type(raw) is list and len(raw) == 4:  # a row's source
        tool, call_id, path, at = raw
    elif type(raw) is dict and raw.keys() == _SOURCE:  # a record's
        tool, call_id, path, at = _source_values(raw)
    else:
        return None
    # Checked before the look-up, whose equality is looser than the check (0 == False).
    if not (
        type(tool) is str
        and (call_id is None or type(call_id) is str)
        and type(path) is str
        and type(at) is int
        and at >= 0
    ):
        return None
    origin = (tool, call_id, path, at)
    source = sources.get(origin)
    if source is None:
        source = sources[origin] = Source(tool, call_id, path, at)
    # Fields set directly: the keyword constructor costs twice as much.
    entry: Entry = _allocate(Entry)
    entry.value = value
    entry.kind = kind
    entry.key = key
    entry.role = role
    if aliases:  # the rare fields only where they are not the default (see Entry)
        entry.aliases = tuple(aliases)
    entry.source = source
    entry.first_seen = first_seen
    entry.last_used = last_used
    if not verified:
        entry.verified = verified
    entry.status = status
    if pinned:
        entry.pinned = pinned
    entry.epoch = epoch
    if extra is None:
        entry.note = None
        entry.tier = implied_tier(verified, tool)
        return entry
    return entry if _provenance(entry, extra) else None


def _provenance(entry: Entry, record: dict[str, Any]) -> bool:
    """Set the fields a live record has only where the entry has some; False if one is wrong."""
    note = record.get("note")
    tier = record.get("tier")
    outside = record.get("outside", False)
    mention = record.get("mention")
    approved = record.get("approved", ())
    declined = record.get("declined", ())
    seals = record.get("seals", {})
    spellings = record.get("spellings", ())  # retired: checked as the reference check does
    if not (
        ("note" not in record or type(note) is str)
        and (tier is None or (type(tier) is str and tier in _TIERS))
        and ("tier" not in record or tier is not None)
        and type(outside) is bool
        and (
            mention is None
            or (
                type(mention) is dict
                and mention.keys() == _MENTION
                and type(mention["call"]) is str
                and type(mention["excerpt"]) is str
            )
        )
        and ("mention" not in record or mention is not None)
        and (type(approved) is list or "approved" not in record)
        and (type(declined) is list or "declined" not in record)
        and _strings(approved)
        and _strings(declined)
        and type(seals) is dict
        and _strings(seals)
        and _strings(seals.values())
        and (type(spellings) is list or "spellings" not in record)
        and _strings(spellings)
    ):
        return False
    entry.note = note
    entry.tier = tier or implied_tier(entry.verified, entry.source.tool)
    if outside:
        entry.outside = outside
    if mention is not None:
        entry.mention = Mention(mention["call"], mention["excerpt"])
    if approved:
        entry.approved = frozenset(approved)
    if declined:
        entry.declined = frozenset(declined)
    if seals:
        entry.seals = seals
    return True


def _mark(record: dict[str, Any], state: str) -> bool:
    """Whether an evicted, dropped or gone record is surely what the reference check accepts."""
    fields = _MARKS.get(state)
    if fields is None or record.keys() != fields:
        return False
    turn = record["turn"]
    return (
        type(record["kind"]) is str
        and type(record["key"]) is str
        and type(turn) is int
        and turn >= 0
        and all(type(record[name]) is str for name in ("value", "role", "tool") if name in fields)
    )


def _strings(values: Any) -> bool:
    """Whether every item of a list is a ``str`` (an empty one: yes, at once)."""
    return not values or all(type(value) is str for value in values)
