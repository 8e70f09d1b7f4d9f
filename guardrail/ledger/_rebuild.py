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

from collections.abc import Iterable
from typing import Any, NamedTuple

from guardrail._entry import (
    LIVE_FIELDS,
    LIVE_OPTIONAL,
    TIERS,
    Entry,
    Mention,
    Record,
    Source,
    implied_tier,
)

_LIVE = frozenset(("kind", "key", "state", "turn", *LIVE_FIELDS))
#: The fields a live record has only where the entry has some (see ``live_record``).
_LIVE_ALL = _LIVE | frozenset(LIVE_OPTIONAL)
_MARKS = {
    "evicted": frozenset(("kind", "key", "state", "turn", "value", "role")),
    "dropped": frozenset(("kind", "key", "state", "turn", "value", "tool")),
    "gone": frozenset(("kind", "key", "state", "turn")),
}
_SOURCE = frozenset(("tool", "call_id", "path", "turn"))
_MENTION = frozenset(("call", "excerpt"))
_TIERS = frozenset(TIERS)
#: Shared by every entry approved for nothing (most): one object, not one per entry.
_NOTHING: frozenset[str] = frozenset()
_allocate = object.__new__


class Rebuilt(NamedTuple):
    """Checked records: the live ones as entries of no ledger, the others as they were."""

    entries: list[Entry]
    marks: list[Record]


def rebuilt(records: Iterable[Any]) -> Rebuilt | None:
    """``records`` checked and the live ones made entries, or None: let the reference check decide.

    One :class:`~guardrail._entry.Source` per call and path is shared, as
    admission shares it. An entry's aliases are every name its record
    gives; the loader keeps the free ones.
    """
    entries: list[Entry] = []
    marks: list[Record] = []
    sources: dict[tuple[Any, ...], Source] = {}
    add = entries.append
    for record in records:
        if type(record) is not dict:
            return None
        state = record.get("state")
        if state == "live":
            entry = _entry(record, sources)
            if entry is None:
                return None
            add(entry)
        elif type(state) is str and _mark(record, state):
            marks.append(record)
        else:
            return None
    return Rebuilt(entries, marks)


def _entry(record: dict[str, Any], sources: dict[tuple[Any, ...], Source]) -> Entry | None:
    """A live record as an entry, or None if the reference check might refuse it."""
    fields = record.keys()
    plain = fields == _LIVE  # most records: no note, no provenance beyond the implied
    if not plain and not (_LIVE <= fields <= _LIVE_ALL):
        return None
    kind = record["kind"]
    key = record["key"]
    value = record["value"]
    role = record["role"]
    turn = record["turn"]
    first_seen = record["first_seen"]
    last_used = record["last_used"]
    epoch = record["epoch"]
    verified = record["verified"]
    status = record["status"]
    pinned = record["pinned"]
    aliases = record["aliases"]
    raw = record["source"]
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
        and _strings(aliases)
        and type(raw) is dict
        and raw.keys() == _SOURCE
    ):
        return None
    tool = raw["tool"]
    call_id = raw["call_id"]
    path = raw["path"]
    at = raw["turn"]
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
    entry.aliases = tuple(aliases)
    entry.source = source
    entry.first_seen = first_seen
    entry.last_used = last_used
    entry.verified = verified
    entry.status = status
    entry.pinned = pinned
    entry.epoch = epoch
    if plain:
        entry.note = None
        entry.tier = implied_tier(verified, source.tool)
        entry.outside = False
        entry.mention = None
        entry.approved = entry.declined = _NOTHING
        return entry
    return entry if _provenance(entry, record) else None


def _provenance(entry: Entry, record: dict[str, Any]) -> bool:
    """Set the fields a live record has only where the entry has some; False if one is wrong."""
    note = record.get("note")
    tier = record.get("tier")
    outside = record.get("outside", False)
    mention = record.get("mention")
    approved = record.get("approved", ())
    declined = record.get("declined", ())
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
    ):
        return False
    entry.note = note
    entry.tier = tier or implied_tier(entry.verified, entry.source.tool)
    entry.outside = outside
    entry.mention = None if mention is None else Mention(mention["call"], mention["excerpt"])
    entry.approved = frozenset(approved) if approved else _NOTHING
    entry.declined = frozenset(declined) if declined else _NOTHING
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
