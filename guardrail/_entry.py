"""What a ledger holds about one id (an entry, a tombstone, a drop mark) and each as a record.

A record is the one written form of an id's state, the same in a saved
ledger and in a store (see :mod:`guardrail.stores.protocol`): a JSON-safe
mapping with ``kind``, ``key``, ``state`` (``live``, ``evicted``,
``dropped`` or ``gone``) and ``turn``, and the fields of that state. The
functions here are the only place an entry is spelled out field by field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

#: One id's state as a record (see the module docstring).
Record = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Source:
    """Where an entry came from: the tool, its call id, the declared path, the turn.

    One ``Source`` is shared by every id a producer yields in one call.
    User-typed ids have ``tool="user"``.
    """

    tool: str
    call_id: str | None
    path: str
    turn: int


class Entry:
    """One identifier in the ledger."""

    __slots__ = (
        "aliases",
        "epoch",
        "first_seen",
        "key",
        "kind",
        "last_used",
        "pinned",
        "role",
        "source",
        "status",
        "value",
        "verified",
    )

    def __init__(
        self,
        *,
        value: str,
        kind: str,
        key: str,
        role: str,
        source: Source,
        first_seen: int,
        last_used: int,
        verified: bool,
        status: str | None = None,
        pinned: bool = False,
        aliases: tuple[str, ...] = (),
        epoch: int = 0,
    ) -> None:
        self.value = value
        self.kind = kind
        self.key = key
        self.role = role
        self.source = source
        self.first_seen = first_seen
        self.last_used = last_used
        self.verified = verified
        self.status = status
        self.pinned = pinned
        self.aliases = aliases
        self.epoch = epoch

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field (its live record without ``state`` and ``turn``)."""
        fields = live_record(self)
        del fields["state"], fields["turn"]
        return fields

    def __repr__(self) -> str:
        flags = "" if self.verified else ", unverified"
        flags += ", pinned" if self.pinned else ""
        return f"Entry({self.role}={self.value!r}, kind={self.kind!r}{flags})"


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of an evicted entry: enough to say "evicted, look it up again"."""

    value: str
    kind: str
    key: str
    role: str
    evicted_turn: int


@dataclass(frozen=True, slots=True)
class Dropped:
    """An id a result named but the ledger did not keep: the result held more than one call may add.

    A later use is refused with "narrow the search", not as invented.
    """

    value: str
    kind: str
    key: str
    tool: str
    turn: int


class Admitted(NamedTuple):
    """What one admission did: entries added, verified and evicted, and the ids not kept."""

    added: list[Entry]
    verified: list[Entry]
    evicted: list[Entry]
    dropped: list[Dropped]


# -- records ---------------------------------------------------------------------------------


def live_record(entry: Entry) -> dict[str, Any]:
    """An entry as a ``live`` record; its ``turn`` is its last use."""
    source = entry.source
    return {
        "kind": entry.kind,
        "key": entry.key,
        "state": "live",
        "turn": entry.last_used,
        "value": entry.value,
        "role": entry.role,
        "aliases": list(entry.aliases),
        "source": {
            "tool": source.tool,
            "call_id": source.call_id,
            "path": source.path,
            "turn": source.turn,
        },
        "first_seen": entry.first_seen,
        "last_used": entry.last_used,
        "verified": entry.verified,
        "status": entry.status,
        "pinned": entry.pinned,
        "epoch": entry.epoch,
    }


_allocate = object.__new__


def entry_of(record: Record, sources: dict[tuple[Any, ...], Source] | None = None) -> Entry:
    """A checked ``live`` record as an entry of no ledger yet.

    ``sources`` shares one :class:`Source` per call and path, as admission does.
    """
    raw = record["source"]
    origin = (raw["tool"], raw["call_id"], raw["path"], raw["turn"])
    source = sources.get(origin) if sources is not None else None
    if source is None:
        source = Source(*origin)
        if sources is not None:
            sources[origin] = source
    # Fields set directly: the keyword constructor costs twice as much.
    entry = _allocate(Entry)
    entry.value = record["value"]
    entry.kind = record["kind"]
    entry.key = record["key"]
    entry.role = record["role"]
    entry.aliases = tuple(record["aliases"])
    entry.source = source
    entry.first_seen = record["first_seen"]
    entry.last_used = record["last_used"]
    entry.verified = record["verified"]
    entry.status = record["status"]
    entry.pinned = record["pinned"]
    entry.epoch = record["epoch"]
    return entry


def copy_entry(entry: Entry) -> Entry:
    """A private copy of an entry, for another ledger to take in."""
    copy = _allocate(Entry)
    for name in Entry.__slots__:
        setattr(copy, name, getattr(entry, name))
    return copy


def evicted_record(tomb: Tombstone) -> dict[str, Any]:
    """A tombstone as an ``evicted`` record; its ``turn`` is the eviction's."""
    return {
        "kind": tomb.kind,
        "key": tomb.key,
        "state": "evicted",
        "turn": tomb.evicted_turn,
        "value": tomb.value,
        "role": tomb.role,
    }


def tombstone_of(record: Record) -> Tombstone:
    """A checked ``evicted`` record as a tombstone."""
    return Tombstone(record["value"], record["kind"], record["key"], record["role"], record["turn"])


def dropped_record(mark: Dropped) -> dict[str, Any]:
    """A drop mark as a ``dropped`` record; its ``turn`` is the drop's."""
    return {
        "kind": mark.kind,
        "key": mark.key,
        "state": "dropped",
        "turn": mark.turn,
        "value": mark.value,
        "tool": mark.tool,
    }


def drop_mark_of(record: Record) -> Dropped:
    """A checked ``dropped`` record as a drop mark."""
    return Dropped(record["value"], record["kind"], record["key"], record["tool"], record["turn"])


def gone_record(kind: str, key: str, turn: int) -> dict[str, Any]:
    """The record of an id a ledger no longer holds anything of, as of ``turn``."""
    return {"kind": kind, "key": key, "state": "gone", "turn": turn}


#: The order of least recent use, with ties broken the same way in every copy: last use
#: first; then the epoch of the last use (a later change of the ledger within the same
#: turn); then first seen and the key. An attrgetter: a sort of 100,000 entries calls it
#: once each, in C.
recency: Callable[[Entry], tuple[int, int, int, str]] = attrgetter(
    "last_used", "epoch", "first_seen", "key"
)
