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
from types import MappingProxyType
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


#: The fields every ``live`` record has after kind, key, state and turn, in the order a record
#: lists them (see :func:`live_record`).
LIVE_FIELDS: tuple[str, ...] = (
    "value",
    "role",
    "aliases",
    "source",
    "first_seen",
    "last_used",
    "verified",
    "status",
    "pinned",
    "epoch",
)
#: The fields a ``live`` record has only where the entry has some (see :func:`live_record`).
LIVE_OPTIONAL: tuple[str, ...] = (
    "note",
    "tier",
    "outside",
    "mention",
    "approved",
    "declined",
    "seals",
)
#: Fields of ``live`` records that earlier development versions wrote and that no longer mean
#: anything: a record carrying one loads (the field checked for its old type, then ignored).
#: ``spellings`` listed other spellings tools wrote of an id, which the guard no longer needs:
#: it never rewrites an argument.
RETIRED_FIELDS: tuple[str, ...] = ("spellings",)

#: Provenance tiers, most permissive first: a value with several sources keeps the first.
#: ``produced``: a declared field of a successful result; ``minted``: a ``mints=`` parameter
#: of a successful write; ``user``: typed by the user; ``mentioned``: found in the free text
#: of a successful result; ``introduced``: taken on no one's word (a read's argument seen
#: nowhere else, an unsealed result or block read back from a transcript).
TIERS: tuple[str, ...] = ("produced", "minted", "user", "mentioned", "introduced")
_RANK = {tier: rank for rank, tier in enumerate(TIERS)}


#: The tools an entry is approved (or declined) for when it is for none, as most are: one
#: object for all of them (each ``frozenset()`` is a new 216-byte object).
NOTHING: frozenset[str] = frozenset()

#: How an approval of the held call alone is kept in ``Entry.approved``: the tool's name and
#: this (used up as the call runs). ``Entry.seals``, in a session of a guard with a
#: ``secret``, holds each answer's MAC, by :func:`seal_name`.
ONE_CALL = "#call"
#: The seals of an entry with none, as most are (never changed in place: replaced).
NO_SEALS: Mapping[str, str] = MappingProxyType({})


def answer_parts(item: str) -> tuple[str, bool]:
    """An answer kept in ``Entry.approved``: the tool, and whether it is for one call."""
    once = item.endswith(ONE_CALL)
    return (item[: -len(ONE_CALL)] if once else item), once


def seal_name(item: str, approved: bool) -> str:
    """The name of an answer's MAC in ``Entry.seals``: ``+`` for a yes, ``-`` for a no."""
    return ("+" if approved else "-") + item


def tier_rank(tier: str) -> int:
    """A tier's place in :data:`TIERS` (lower is more permissive; unknown tiers last)."""
    return _RANK.get(tier, len(TIERS))


def provenance_order(tier: str, outside: bool) -> float:
    """How permissive a provenance is (lower is more).

    A value an outside party chose comes after one of the same tier that it
    did not, and before the next tier.
    """
    return tier_rank(tier) + (0.5 if outside else 0.0)


def raise_tier(entry: Entry, tier: str, outside: bool) -> bool:
    """Give ``entry`` the more permissive of two provenances; True if it changed.

    A value with several sources keeps the most permissive: the bill's IBAN
    a read later returns in a declared field is produced, not mentioned.
    """
    if provenance_order(tier, outside) < provenance_order(entry.tier, entry.outside):
        entry.tier = tier
        entry.outside = outside
        return True
    return False


#: The source paths of ``produced`` entries whose value no tool result wrote: the ids a call
#: vouched for by taking them (a lookup that verifies on success; its argument, as the model or
#: the user wrote it) and a ledger block read back by compaction (it says no more than the
#: value). Every other produced entry holds the spelling of the declared result place it names.
UNWRITTEN_PATHS: frozenset[str] = frozenset({"arguments", "ledger_block"})


def tool_written(tier: str, path: str) -> bool:
    """Whether an entry of ``tier`` whose source is ``path`` holds the spelling a tool wrote.

    Verbatim means as a tool wrote it: an entry's value is the spelling of the
    result that produced it, the one the ledger block, refusals and re-prompts
    show (see :func:`written_by_tool`).
    """
    return tier == "produced" and path not in UNWRITTEN_PATHS


def written_by_tool(entry: Entry) -> bool:
    """Whether ``entry.value`` is the spelling a tool's result wrote, not a user's or a model's.

    A user-typed id, one a read took and confirmed, a mint and a mention hold
    the spelling they came in with; a declared field of a successful result
    that returns the same id replaces it with its own (:meth:`LedgerState.admit
    <guardrail.ledger._state.LedgerState.admit>`).
    """
    return entry.tier == "produced" and entry.source.path not in UNWRITTEN_PATHS


def implied_tier(verified: bool, tool: str) -> str:
    """The tier an entry has when its record names none: what records written before tiers mean."""
    if verified:
        return "produced"
    return "user" if tool == "user" else "introduced"


@dataclass(frozen=True, slots=True)
class Mention:
    """Where a mentioned value was seen: the call (``read_file(file_path='bill.txt')``), an excerpt.

    The result's tool, the place in it and the turn are the entry's :class:`Source`.
    """

    call: str
    excerpt: str


class Entry:
    """One identifier in the ledger.

    The fields most entries leave as they are (``verified``, ``aliases``,
    ``pinned``, ``outside``, ``mention``, ``approved``, ``declined``,
    ``seals``) are
    class-level defaults: an entry holds one of them only once it is set to
    something else, so a ledger of 100,000 plain entries keeps none of them.
    """

    __slots__ = (
        "__dict__",  # the rare fields an entry sets (see the class docstring)
        "epoch",
        "first_seen",
        "key",
        "kind",
        "last_used",
        "note",
        "role",
        "source",
        "status",
        "tier",
        "value",
    )

    #: Vouched for by a successful call (most are; those typed by the user wait for one).
    verified: bool = True
    #: Other names the entry answers to (its roles before a rename).
    aliases: tuple[str, ...] = ()
    #: Kept whatever the capacity.
    pinned: bool = False
    #: Produced by a field an outside party chooses.
    outside: bool = False
    #: Where it was seen in a result's text, if it was.
    mention: Mention | None = None
    #: The tools the user approved (or declined) this value for, by request.
    approved: frozenset[str] = NOTHING
    declined: frozenset[str] = NOTHING
    #: The MAC of each answer, in a session of a guard with a secret (see ``seal_name``).
    seals: Mapping[str, str] = NO_SEALS

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
        note: str | None = None,
        tier: str | None = None,
        outside: bool = False,
        mention: Mention | None = None,
        approved: frozenset[str] = NOTHING,
        declined: frozenset[str] = NOTHING,
        seals: Mapping[str, str] = NO_SEALS,
    ) -> None:
        self.value = value
        self.kind = kind
        self.key = key
        self.role = role
        self.source = source
        self.first_seen = first_seen
        self.last_used = last_used
        self.status = status
        self.epoch = epoch
        #: A few words from the record the id came from, for the model (never an id source).
        self.note = note
        #: The provenance tier (see :data:`TIERS`).
        self.tier = tier if tier is not None else implied_tier(verified, source.tool)
        set_rare(
            self,
            verified=verified,
            pinned=pinned,
            aliases=aliases,
            outside=outside,
            mention=mention,
            approved=approved,
            declined=declined,
            seals=seals,
        )

    @property
    def confirmed(self) -> bool:
        """Whether the user approved this value for some tool (its tier shows as ``confirmed``)."""
        return bool(self.approved)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field (its live record without ``state`` and ``turn``)."""
        fields = live_record(self)
        del fields["state"], fields["turn"]
        return fields

    def __repr__(self) -> str:
        flags = "" if self.verified else ", unverified"
        flags += ", pinned" if self.pinned else ""
        if self.tier != implied_tier(self.verified, self.source.tool):
            flags += f", {self.tier}"
        flags += ", outside" if self.outside else ""
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
    record: dict[str, Any] = {
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
        **({"note": entry.note} if entry.note is not None else {}),
    }
    # Provenance beyond what ``verified`` and the source imply, only where there is some:
    # a record of an entry with none is the same as before tiers.
    if entry.tier != implied_tier(entry.verified, source.tool):
        record["tier"] = entry.tier
    if entry.outside:
        record["outside"] = True
    if entry.mention is not None:
        record["mention"] = {"call": entry.mention.call, "excerpt": entry.mention.excerpt}
    if entry.approved:
        record["approved"] = sorted(entry.approved)
    if entry.declined:
        record["declined"] = sorted(entry.declined)
    if entry.seals:
        record["seals"] = dict(sorted(entry.seals.items()))
    return record


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
    entry.source = source
    entry.first_seen = record["first_seen"]
    entry.last_used = record["last_used"]
    if record["verified"] is not True:
        entry.verified = record["verified"]
    entry.status = record["status"]
    entry.epoch = record["epoch"]
    entry.note = record.get("note")
    entry.tier = record.get("tier") or implied_tier(entry.verified, source.tool)
    # The rare fields only where they are not the default (see Entry).
    if record["aliases"]:
        entry.aliases = tuple(record["aliases"])
    if record["pinned"]:
        entry.pinned = record["pinned"]
    if record.get("outside", False):
        entry.outside = True
    mention = record.get("mention")
    if mention is not None:
        entry.mention = Mention(mention["call"], mention["excerpt"])
    approved, declined = record.get("approved"), record.get("declined")
    if approved:
        entry.approved = frozenset(approved)
    if declined:
        entry.declined = frozenset(declined)
    seals = record.get("seals")
    if seals:
        entry.seals = dict(seals)
    return entry


def copy_entry(entry: Entry) -> Entry:
    """A private copy of an entry, for another ledger to take in."""
    copy = _allocate(Entry)
    for name in _SLOTS:
        setattr(copy, name, getattr(entry, name))
    set_rare(copy, **{name: getattr(entry, name) for name in RARE_DEFAULTS})
    return copy


#: The fields every entry holds itself (the rare ones are in its ``__dict__``, when set).
_SLOTS = tuple(name for name in Entry.__slots__ if name != "__dict__")
#: The rare fields' defaults (see :class:`Entry`).
RARE_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "verified": True,
        "aliases": (),
        "pinned": False,
        "outside": False,
        "mention": None,
        "approved": NOTHING,
        "declined": NOTHING,
        "seals": NO_SEALS,
    }
)


def set_rare(entry: Entry, **fields: Any) -> None:
    """Set rare fields of an entry of no ledger yet: only those that differ from the default.

    An entry whose rare fields are all their defaults holds no ``__dict__``
    (reading ``entry.__dict__`` would make one: it is never read here).
    """
    for name, value in fields.items():
        default = RARE_DEFAULTS[name]
        if value is not default and not (value == default and type(value) is type(default)):
            setattr(entry, name, value)


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
