"""A ledger's state: the id tables, roles, eviction and look-ups, for the modules that run a guard.

:class:`LedgerState` is the working half of a :class:`~guardrail.ledger.Ledger` (which
wraps it and shows a program only what it uses): guardrail's own interface, documented
here so the check, the engine, compaction and the journal use names, not private members:

- look-ups for the check: :attr:`LedgerState.tables` (kind -> normalised
  key -> entry), :meth:`~LedgerState.key`, :meth:`~LedgerState.get`,
  :meth:`~LedgerState.lookup`, :meth:`~LedgerState.tombstone`,
  :meth:`~LedgerState.drop_mark`, :meth:`~LedgerState.typed_by_user`, and
  the near-miss aids :meth:`~LedgerState.longest_key`,
  :meth:`~LedgerState.alphabet`, :meth:`~LedgerState.keys_with_prefix`;
- changes: :meth:`~LedgerState.touch` (the allowed path),
  :meth:`~LedgerState.admit` (a result's ids), :meth:`~LedgerState.next_turn`
  and :meth:`~LedgerState.observe_text` (the user spoke),
  :meth:`~LedgerState.label`, :meth:`~LedgerState.pin`,
  :meth:`~LedgerState.forget`, and :func:`guardrail.ledger._rekey.use_kinds`
  (keys under new normalisers);
- conversation state beside the tables: :attr:`~LedgerState.reprompts` and
  :attr:`~LedgerState.user_texts`.

Records, loading, merging: :mod:`guardrail.ledger._records`; journal:
:mod:`guardrail._guard.journal`.
"""

from __future__ import annotations

import gc
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import repeat
from operator import attrgetter
from typing import Any

from guardrail._data.batch import Batch
from guardrail._data.entry import (
    UNWRITTEN_PATHS,
    Admitted,
    Dropped,
    Entry,
    Source,
    Tombstone,
    raise_tier,
    tool_written,
)
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind
from guardrail.ledger._calls import HeldCalls
from guardrail.ledger._fresh import FRESH_AT_LEAST, admit_fresh, take_notes
from guardrail.ledger._index import KeyIndex
from guardrail.ledger._overflow import mark_dropped, take_back
from guardrail.ledger._reprompts import Reprompts
from guardrail.ledger._roles import check_role_name, templated
from guardrail.ledger._texts import ResultTexts, UserTexts

DEFAULT_CAPACITY = 1000
"""The entries a ledger keeps when no capacity is given (pinned ones apart)."""


Name = tuple[str, str]  # (kind, key): what names one id in a ledger and in a store

_allocate = object.__new__
_TIER = {True: "produced", False: "introduced"}  # an admission's tier when it names none
_PINNED = attrgetter("pinned")


class LedgerState:
    """The id tables of one conversation, and what changes them.

    Attributes, read by guardrail's modules (changed only through the
    methods, the loader and the journal):

    - ``tables``: kind -> normalised key -> entry, each table ordered from
      least to most recently used (the allowed path reads it directly);
    - ``roles``: every role and alias -> its entry, in order of first
      appearance; ``tombstones`` and ``dropped``: ``(kind, key)`` -> the
      tombstone or drop mark, oldest first, bounded by
      ``tombstone_capacity``;
    - ``turn`` and ``epoch`` (bumped at every change of the tables: a use
      reorders an entry once per epoch), ``counters`` (the numbers default
      roles took), ``user_texts`` (the last ones, a
      :class:`~guardrail.ledger._texts.UserTexts`), ``reprompts``;
    - ``kinds`` (the normalisers keys are made with), ``session_id``,
      ``capacity``, ``seal_key`` (in memory only: see
      :meth:`guardrail.Guard`'s ``secret``), ``lock`` (held by every
      change; reads of a table take a snapshot);
    - ``journal``: the names of the ids changed since the last write to a
      store, or None while no store keeps this ledger
      (:mod:`guardrail._guard.journal`), and ``pruned``, those whose mark went past
      the tombstone bound (their rows are deleted); ``after_change``: what to run after
      a change no scope's end will write (:meth:`persist`);
    - ``ledger``: the public :class:`~guardrail.ledger.Ledger` wrapping it
      (typed through :func:`guardrail.ledger._ledger.ledger_of`).
    """

    def __init__(
        self,
        ledger: object,
        *,
        capacity: int,
        tombstones: int | None,
        kinds: Mapping[str, Kind] | None,
        session_id: str | None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise GuardrailUsageError(
                f"ledger capacity must be a positive integer, not {capacity!r}"
            )
        self.ledger = ledger
        self.capacity = capacity
        self.tombstone_capacity = capacity if tombstones is None else max(0, tombstones)
        self.session_id = session_id
        self.turn = 0
        self.epoch = 0
        self.tables: dict[str, dict[str, Entry]] = {}
        self.roles: dict[str, Entry] = {}
        self.counters: dict[str, int] = {}
        self.tombstones: dict[Name, Tombstone] = {}
        self.tomb_roles: set[str] = set()  # roles evicted ids still hold
        self.dropped: dict[Name, Dropped] = {}
        self.index: dict[str, KeyIndex] = {}
        self.size, self.pinned = 0, 0  # pinned entries do not count against the capacity
        self.user_texts, self.result_texts = UserTexts(), ResultTexts()
        self.reprompts = Reprompts()
        self.kinds: Mapping[str, Kind] = kinds or {}
        self.lock = threading.RLock()
        #: Seals this ledger's blocks. Random unless the guard derives it (never saved).
        self.seal_key: bytes = secrets.token_bytes(32)
        #: This life of the ledger: a random value its approval requests are bound to, kept
        #: with the session in the store (a session deleted or expired starts with a new one).
        self.instance: str = secrets.token_urlsafe(12)
        #: Seals the user's answers kept on entries, in a session of a guard with a secret
        #: (None: answers are kept as plain tool names, and taken as the store holds them).
        self.answer_key: bytes | None = None
        #: The calls held for the user's answer, by call id, and those that ran since.
        self.calls = HeldCalls()
        self.journal: set[Name] | None = None
        #: Ids whose tombstone or drop mark went past the bound since the last write (journaled
        #: ledgers only): the next write deletes their rows from the store.
        self.pruned: set[Name] = set()
        #: Run after a change no scope will write (the default session writes itself there).
        self.after_change: Callable[[], None] | None = None
        #: The meta as last written to the store, and a cheap mark of its changing fields.
        self.written_meta: dict[str, Any] | None = None
        self.written_mark: tuple[Any, ...] | None = None

    def persist(self) -> None:
        """After a change: write it where no scope's end will (``after_change``; else nothing)."""
        if (hook := self.after_change) is not None:
            hook()

    # -- reading --------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Entry]:
        """Entries from least to most recently used, kind by kind."""
        # Snapshots: another thread may be recording while this one reads.
        for table in list(self.tables.values()):
            yield from list(table.values())

    def entries(self) -> list[Entry]:
        """Every entry in order of first appearance (the order a ledger block lists them)."""
        with self.lock:  # the role table is filled as entries arrive; aliases only repeat one
            return list(dict.fromkeys(self.roles.values()))

    def role(self, name: str) -> Entry:
        """The entry a role (or an alias) names; a KeyError listing the roles otherwise."""
        try:
            return self.roles[name]
        except KeyError:
            known = sorted({entry.role: None for entry in self})
            raise KeyError(f"no ledger role {name!r}; roles: {known}") from None

    def key(self, kind: str, value: str) -> str | None:
        """``value`` as the ledger keys it for ``kind``, or None where the normaliser fails."""
        return known.key(value) if (known := self.kinds.get(kind)) is not None else value.strip()

    def get(self, kind: str, value: str) -> Entry | None:
        """The entry of ``kind`` whose value is ``value`` in any written form."""
        table = self.tables.get(kind)
        key = None if table is None else self.key(kind, value)
        return None if key is None or table is None else table.get(key)

    def lookup(self, value: str, *, exclude: Iterable[str] = ()) -> list[Entry]:
        """Entries of any kind (but those in ``exclude``) that ``value`` names.

        A kind whose normaliser cannot read ``value`` has no entry for it.
        """
        found = []
        for kind, table in list(self.tables.items()):
            if kind in exclude:
                continue
            key = self.key(kind, value)
            entry = None if key is None else table.get(key)
            if entry is not None:
                found.append(entry)
        return found

    def tombstone(self, kind: str, key: str) -> Tombstone | None:
        """The tombstone of an evicted ``(kind, key)``, if still remembered."""
        return self.tombstones.get((kind, key)) if self.tombstones else None

    def drop_mark(self, kind: str, key: str) -> Dropped | None:
        """The mark of an id a result named but the ledger did not keep, if still remembered."""
        return self.dropped.get((kind, key)) if self.dropped else None

    def longest_key(self, kind: str) -> int:
        """The length of the longest key ``kind`` has had (evicted ones included)."""
        index = self.index.get(kind)
        return 0 if index is None else index.longest

    def alphabet(self, kind: str) -> frozenset[str]:
        """Every character seen in ``kind``'s keys (a superset)."""
        index = self.index.get(kind)
        if index is None:
            return frozenset()
        with self.lock:
            return frozenset(index.alphabet)

    def keys_with_prefix(self, kind: str, prefix: str, *, limit: int = 8) -> list[Entry]:
        """Live entries of ``kind`` whose key starts with ``prefix`` and is longer."""
        index = self.index.get(kind)
        table = self.tables.get(kind)
        if index is None or not table:
            return []
        with self.lock:
            return index.with_prefix(prefix, table, limit)

    def typed_by_user(self, value: str, kind: Kind | None = None) -> bool:
        """Whether the user texts kept hold ``value`` (see :meth:`UserTexts.holds`)."""
        return self.user_texts.holds(value, kind)

    # -- the conversation -----------------------------------------------------------------

    def next_turn(self) -> int:
        """Start a new turn (a user message and everything up to the next one)."""
        self.turn += 1
        self.epoch += 1
        return self.turn

    def observe_text(self, text: str) -> None:
        """Keep a user text (bounded) for recognising ids typed with no pattern."""
        self.user_texts.add(text)

    def touch(self, entry: Entry) -> None:
        """Mark ``entry`` used now; the allowed path of a check calls this.

        Recency is kept per epoch (the span between two changes of the
        ledger): eviction happens only when ids are added, so the order
        among entries used since the last addition cannot matter yet. An
        entry looked up before a merge replaced it touches its successor.
        """
        if entry.epoch != self.epoch:
            with self.lock:
                table = self.tables[entry.kind]
                held = table.pop(entry.key, None)
                if held is None:
                    return  # evicted or forgotten since it was looked up
                table[entry.key] = held
                held.epoch = self.epoch
                held.last_used = self.turn
                if self.journal is not None:
                    self.journal.add((entry.kind, entry.key))

    def admit(
        self,
        batches: Iterable[Batch],
        *,
        source: Source | Mapping[str, Source],
        verified: bool = True,
        limit: int | None = None,
        tool: str | None = None,
        tier: str | None = None,
    ) -> Admitted:
        """Record harvested ids: the entries added, verified by this call, and evicted.

        Ids come in :class:`~guardrail._provenance.harvest.Batch` columns, in order: a
        result of tens of thousands of ids is admitted without building an
        object or calling a helper per id. ``source`` is one Source, or one
        per declared path. An id already present is refreshed (and verified,
        when ``verified``); a new one gets a role. All ids are added before
        any is evicted, so a result is never half-recorded.

        At most ``limit`` new ids are added (None: no bound); each new id
        beyond it is not kept but remembered as :class:`Dropped`, under
        ``tool`` (by default the source's tool), so a later use is refused
        with "narrow the search": one result listing 10,000 ids must not
        push every real id and its tombstone out. From turn 1 on, eviction
        spares the ids used in the current turn; new ids that still do not
        fit are taken out again, newest first, as drop marks too. ``tier``:
        the provenance of batches that name none (default: ``produced`` when
        ``verified``, else ``introduced``); an id already present keeps the
        more permissive (:func:`~guardrail._data.entry.raise_tier`). An id
        already present whose value no tool wrote (the user's spelling, a
        lookup's argument) takes the spelling of a declared result field that
        returns it, with that field as its source
        (:func:`~guardrail._data.entry.written_by_tool`); one a tool wrote
        keeps its spelling (another spelling of it matches by the key).
        """
        if limit is not None and (type(limit) is not int or limit < 0):
            raise GuardrailUsageError(f"limit must be an integer >= 0 or None, not {limit!r}")
        # The cyclic collector waits while the entries are made (as a cold load does, see
        # guardrail._guard.journal.opened): run over and over as a result's tens of thousands
        # of entries are made, it would walk them again and again. It runs again after.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return self._admit(batches, source, verified, limit, tool, tier)
        finally:
            if paused:
                gc.enable()

    def _admit(
        self,
        batches: Iterable[Batch],
        source: Source | Mapping[str, Source],
        verified: bool,
        limit: int | None,
        tool: str | None,
        tier: str | None,
    ) -> Admitted:
        """:meth:`admit`'s work, with the collector paused."""
        added: list[Entry] = []
        upgraded: list[Entry] = []
        skipped: dict[Name, str] = {}  # (kind, key) -> value of new ids beyond limit
        revived: dict[Name, Tombstone] = {}  # tombstones of evicted ids seen again
        room = sys.maxsize if limit is None else limit
        turn, tables, roles, counters = self.turn, self.tables, self.roles, self.counters
        with self.lock:
            tomb_roles = self.tomb_roles
            marks = self.dropped
            for batch in batches:
                kind, path, template, values, keys, statuses, notes = batch[:7]
                where = source if isinstance(source, Source) else source[path]
                level, outside = batch.tier or tier or _TIER[verified], batch.outside
                table = tables.get(kind)
                if table is None:
                    table = tables[kind] = {}
                    self.index[kind] = KeyIndex()
                fresh: list[str] = []  # new keys, for the near-miss index
                size = len(added)
                # Default roles with no tombstone to honour: number them here, in a local.
                plain = not template and not self.tombstones
                start = number = counters.get(kind, 0)
                if plain and not marks and FRESH_AT_LEAST <= len(keys) <= room:  # in one go
                    made = admit_fresh(self, batch, table, where, (level, outside), verified)
                    if made is not None:
                        room -= len(made)
                        added += made
                        continue
                for value, key, status in zip(
                    values, keys, statuses if statuses is not None else repeat(None), strict=False
                ):
                    entry = table.get(key)
                    if entry is not None:
                        if self.again(entry, value, status, where, (level, outside), verified):
                            upgraded.append(entry)
                        continue
                    if not room:  # beyond what one call may add: remembered, not kept
                        skipped[(kind, key)] = value
                        continue
                    room -= 1
                    if plain:  # the default role: the kind, then kind_2, kind_3... in order seen
                        while True:
                            number += 1
                            role = kind if number == 1 else f"{kind}_{number}"
                            if role not in roles and role not in tomb_roles:
                                break
                    else:
                        role = self.new_role(kind, key, template, status, where)
                    # Fields set directly: the keyword constructor cost twice as much.
                    entry = _allocate(Entry)
                    entry.value = value
                    entry.kind = kind
                    entry.key = key
                    entry.role = role
                    entry.source = where
                    entry.first_seen = turn
                    entry.last_used = turn
                    if verified is not True:  # the rare fields keep their class defaults
                        entry.verified = verified
                    entry.status = status
                    entry.note = None  # given below with the rest of the batch's notes
                    entry.epoch = 0  # as Entry() has it until the admission ends
                    entry.tier = level
                    if outside:
                        entry.outside = outside
                    table[key] = entry
                    roles[role] = entry
                    fresh.append(key)
                    if not plain and self.tombstones:
                        tomb = self.tombstones.get((kind, key))
                        if tomb is not None:  # back under its old role (restored if taken back)
                            revived[(kind, key)] = tomb
                            self.drop_tombstone((kind, key))
                    if marks:  # in the ledger for real now: no longer "not kept"
                        marks.pop((kind, key), None)
                    added.append(entry)
                take_notes(table, keys, notes, self.journal)  # new ids take theirs too
                if number != start:
                    counters[kind] = number
                if fresh:
                    self.size += len(added) - size
                    self.index[kind].add(fresh)
            if added:
                self.epoch += 1
                for entry in added:
                    entry.epoch = self.epoch
            if (journal := self.journal) is not None:
                journal.update([(entry.kind, entry.key) for entry in (*added, *upgraded)])
            evicted = self.evict_over_capacity()
            taken = take_back(self, added, revived)
            dropped = mark_dropped(self, taken, skipped, tool, source)
        return Admitted(added, upgraded, evicted, dropped)

    def again(
        self,
        entry: Entry,
        value: str,
        status: str | None,
        where: Source,
        provenance: tuple[str, bool],
        verified: bool,
    ) -> bool:
        """An id held, named again by an admission (see :meth:`admit`); True: that verified it."""
        level, outside = provenance
        upgraded = verified and (
            (not entry.verified or entry.tier != "produced" or entry.source.path in UNWRITTEN_PATHS)
            and self.upgrade(entry, value, where, spelled=tool_written(level, where.path))
        )
        fresh_status = status is not None and status != entry.status
        if fresh_status:
            entry.status = status
        if raise_tier(entry, level, outside) or fresh_status:
            self.changed(entry.kind, entry.key)
        self.touch(entry)
        return upgraded

    def upgrade(self, entry: Entry, value: str, source: Source, *, spelled: bool) -> bool:
        """A believed result returned ``entry``'s id as ``value``; True if that verified it.

        ``spelled``: a declared result field wrote ``value``. Verbatim means as
        a tool wrote it: an entry whose value no tool wrote (the user's
        spelling, a lookup's argument) takes this spelling and source, the
        one the ledger block and refusals show; the user's spelling stays
        matchable by the key. An entry a tool wrote keeps its value (the
        first spelling a tool wrote). Otherwise (a lookup that confirms what
        it took) an unverified entry is verified, its source the confirming
        call's.
        """
        written = entry.tier == "produced" and entry.source.path not in UNWRITTEN_PATHS
        if spelled and written:
            return False
        if spelled:
            entry.value = value
            self.changed(entry.kind, entry.key)
        elif entry.verified:
            return False
        entry.source = source
        if entry.verified:
            return False
        entry.verified = True
        return True

    def backdate(self, entry: Entry, *, first_seen: int, last_used: int) -> None:
        """Give an entry just admitted the turns an earlier copy of it had (a ledger block's).

        It counts as unused in this epoch, so its next use marks it used now.
        """
        with self.lock:
            entry.first_seen = first_seen
            entry.last_used = last_used
            entry.epoch = min(entry.epoch, self.epoch - 1)

    def label(self, role: str, new_role: str) -> Entry:
        """Rename the entry named ``role`` to ``new_role``; the old name stays an alias."""
        check_role_name(new_role)
        with self.lock:
            entry = self.role(role)
            if new_role == entry.role:
                return entry
            holder = self.roles.get(new_role)
            if holder is not None and holder is not entry:
                raise GuardrailUsageError(
                    f"role {new_role!r} already names {holder.value!r}; pick another name"
                )
            if holder is None and new_role in self.tomb_roles:
                raise GuardrailUsageError(
                    f"role {new_role!r} belonged to an evicted id; pick another name"
                )
            entry.aliases = (*entry.aliases, entry.role)
            entry.role = new_role
            self.roles[new_role] = entry
            self.changed(entry.kind, entry.key)
            return entry

    def pin(self, role: str, pinned: bool = True) -> Entry:
        """Keep (or stop keeping) an entry; pinned entries do not count against the capacity.

        Unpinning in a full ledger evicts; if every other entry was used
        this turn, the least recently used goes all the same: the program
        asked for the room back.
        """
        with self.lock:
            entry = self.role(role)
            if entry.pinned != pinned:
                entry.pinned = pinned
                self.pinned += 1 if pinned else -1
                self.changed(entry.kind, entry.key)
                self.evict_over_capacity()
                self.evict_over_capacity(spare_current=False)
            return entry

    def forget(self, role: str) -> Entry:
        """Drop an entry now, leaving a tombstone (as eviction does)."""
        with self.lock:
            entry = self.role(role)
            self.remove(entry)
            return entry

    # -- roles ----------------------------------------------------------------------------

    def new_role(
        self, kind: str, key: str, template: str | None, status: str | None, source: Source
    ) -> str:
        """A free role for a new id: its old one if it was evicted, a template's, or the kind's."""
        tomb = self.tombstones.get((kind, key)) if self.tombstones else None
        if tomb is not None and tomb.role not in self.roles:
            # An id that comes back keeps the role summaries already use for it.
            return tomb.role
        if template:
            number = self.counters.get(kind, 0) + 1
            self.counters[kind] = number
            return self._free_role(templated(template, kind, number, source.tool, status))
        while True:
            number = self.counters.get(kind, 0) + 1
            self.counters[kind] = number
            role = kind if number == 1 else f"{kind}_{number}"
            if not self.role_taken(role):
                return role

    def role_taken(self, role: str) -> bool:
        """Whether ``role`` names an entry, or an evicted id still remembered."""
        return role in self.roles or role in self.tomb_roles

    def _free_role(self, base: str) -> str:
        role, suffix = base, 1
        while self.role_taken(role):
            suffix, role = suffix + 1, f"{base}_{suffix + 1}"
        return role

    # -- the tables -----------------------------------------------------------------------

    def changed(self, kind: str, key: str) -> None:
        """Note that the id ``(kind, key)`` changed, for the next write to the store."""
        if (journal := self.journal) is not None:
            journal.add((kind, key))

    def table(self, kind: str) -> dict[str, Entry]:
        """``kind``'s table, made (empty) if the ledger has none yet."""
        table = self.tables.get(kind)
        if table is None:
            table = self.tables[kind] = {}
            self.index[kind] = KeyIndex()
        return table

    def insert(self, entry: Entry) -> None:
        """Put an entry of no ledger in its table, under its role and aliases (free ones)."""
        self.table(entry.kind)[entry.key] = entry
        self.roles[entry.role] = entry
        for alias in entry.aliases:
            self.roles[alias] = entry
        self.index[entry.kind].add((entry.key,))
        self.size += 1
        self.pinned += entry.pinned
        if self.tombstones:
            self.drop_tombstone((entry.kind, entry.key))

    def unlink(self, entry: Entry) -> None:
        """Take an entry out of its table and the role table, leaving nothing behind."""
        del self.tables[entry.kind][entry.key]
        for name in (entry.role, *entry.aliases):
            if self.roles.get(name) is entry:
                del self.roles[name]
        self.index[entry.kind].stale += 1  # the key stays in the index until a rebuild
        self.size -= 1
        self.pinned -= entry.pinned

    def remove(self, entry: Entry) -> None:
        """Evict or forget an entry: out of the tables, leaving a tombstone."""
        self.unlink(entry)
        self.changed(entry.kind, entry.key)
        if self.tombstone_capacity:
            self.add_tombstone(Tombstone(entry.value, entry.kind, entry.key, entry.role, self.turn))

    def add_tombstone(self, tomb: Tombstone) -> None:
        """Remember an evicted id (the oldest tombstone goes when there are too many)."""
        self.tombstones[(tomb.kind, tomb.key)] = tomb
        self.tomb_roles.add(tomb.role)
        while len(self.tombstones) > self.tombstone_capacity:
            oldest = next(iter(self.tombstones))
            self.drop_tombstone(oldest)
            if self.journal is not None:
                self.pruned.add(oldest)

    def drop_tombstone(self, name: Name) -> None:
        """Forget the tombstone of ``name``, if there is one (its role is free again)."""
        tomb = self.tombstones.pop(name, None)
        if tomb is not None:
            self.tomb_roles.discard(tomb.role)

    def add_drop_mark(self, mark: Dropped) -> None:
        """Remember an id not kept, as the newest mark (the oldest go when there are too many)."""
        where = (mark.kind, mark.key)
        self.dropped.pop(where, None)  # named again: the newest mark, last to go
        self.dropped[where] = mark
        while len(self.dropped) > self.tombstone_capacity:
            oldest = next(iter(self.dropped))
            del self.dropped[oldest]
            if self.journal is not None:
                self.pruned.add(oldest)

    def recount(self) -> None:
        """Recount the entries and pinned entries after tables were rebuilt."""
        self.size = sum(len(table) for table in self.tables.values())
        self.pinned = sum(map(_PINNED, self))

    def evict_over_capacity(self, *, spare_current: bool = True) -> list[Entry]:
        """Evict the least recently used entries until the ledger fits.

        Last use, not first sight: the order still being refunded at turn 40
        was first seen at turn 12. From turn 1 on (a program that observes
        the user), entries used in the current turn are spared
        (``spare_current``): what the conversation works with now never makes
        room for a result's flood. Each kind's table runs from least to most
        recently used, so its first unpinned entry is its only candidate.
        """
        current = self.turn if spare_current and self.turn > 0 else None
        evicted: list[Entry] = []
        while self.size - self.pinned > self.capacity:
            victim: Entry | None = None
            for table in self.tables.values():
                for entry in table.values():
                    if not entry.pinned:
                        if entry.last_used != current and (
                            victim is None or entry.last_used < victim.last_used
                        ):
                            victim = entry
                        break
            if victim is None:  # every candidate was used this turn (or is pinned)
                break
            self.remove(victim)
            evicted.append(victim)
        return evicted
