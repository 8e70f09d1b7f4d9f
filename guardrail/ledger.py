"""The ledger: one conversation's identifiers, verbatim, with roles and provenance.

Identifiers enter from tool results (verified) or from what the user typed
(unverified until a successful ``read`` call confirms them). Each entry has
a role, the name a summary uses for it; roles are unique and stable, and a
relabel keeps the old name as an alias. A full ledger evicts the entry used
least recently, never by first-seen and never one used in the current turn,
and leaves a bounded tombstone so a later use is reported as evicted rather
than invented. One call adds a bounded number of new ids; those it named but
the ledger did not keep are remembered (bounded too) as dropped.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from guardrail._harvest import Batch
from guardrail._index import KeyIndex
from guardrail._text import has_token
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import _RUN_WORDS, Kind

if TYPE_CHECKING:
    from guardrail._saved import SavedLedger

FORMAT_VERSION = 2
DEFAULT_CAPACITY = 1000
USER_TEXTS_KEPT = 16
#: Kinds (by run length) whose keys in the user texts are kept worked out.
_TYPED_KEYS_KEPT = 64
_ROLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


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
        """A JSON-safe dict of every field."""
        return {
            "value": self.value,
            "kind": self.kind,
            "key": self.key,
            "role": self.role,
            "aliases": list(self.aliases),
            "source": {
                "tool": self.source.tool,
                "call_id": self.source.call_id,
                "path": self.source.path,
                "turn": self.source.turn,
            },
            "first_seen": self.first_seen,
            "last_used": self.last_used,
            "verified": self.verified,
            "status": self.status,
            "pinned": self.pinned,
            "epoch": self.epoch,
        }

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
    """What one :meth:`Ledger._admit` did: entries added, verified and evicted, ids not kept."""

    added: list[Entry]
    verified: list[Entry]
    evicted: list[Entry]
    dropped: list[Dropped]


class Ledger:
    """One conversation's identifiers. Build it through ``Guard.session`` or ``from_json``.

    What a program uses: the entries (:meth:`entries`, iteration, ``len``,
    ``role in ledger``, ``ledger[role]``, :meth:`get`, :attr:`roles`,
    :meth:`tombstones`), :meth:`label`, :meth:`pin`, :meth:`forget`,
    :meth:`merge`, saving and loading (:meth:`to_json`, :meth:`from_json`,
    :meth:`to_dict`, :meth:`from_dict`), and ``session_id``, ``capacity``,
    ``turn`` and ``seal_key``. Admission, recency, turns, the user's texts,
    the look-ups the check makes and the drop marks are the guard's
    business: those methods and attributes start with an underscore.
    """

    def __init__(
        self,
        *,
        capacity: int = DEFAULT_CAPACITY,
        tombstones: int | None = None,
        kinds: Mapping[str, Kind] | None = None,
        session_id: str | None = None,
    ) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise GuardrailUsageError(
                f"ledger capacity must be a positive integer, not {capacity!r}"
            )
        self.capacity = capacity
        self._tombstone_capacity = capacity if tombstones is None else max(0, tombstones)
        self.session_id = session_id
        self.turn = 0
        # Bumped whenever ids are added or a turn starts; a use reorders an entry for
        # eviction only once per epoch, so repeated allowed calls cost no reordering.
        self._epoch = 0
        #: Per-kind tables, normalised key -> entry, ordered from least to most recently used.
        self._by_kind: dict[str, dict[str, Entry]] = {}
        self._roles: dict[str, Entry] = {}
        self._counters: dict[str, int] = {}
        self._tombstones: dict[tuple[str, str], Tombstone] = {}
        self._tomb_roles: set[str] = set()  # roles evicted ids still hold
        #: Ids named by a result beyond what one call may add, oldest first (bounded).
        self._dropped: dict[tuple[str, str], Dropped] = {}
        self._index: dict[str, KeyIndex] = {}
        self._size = 0
        self._pinned = 0  # pinned entries do not count against the capacity
        self._user_texts: deque[str] = deque(maxlen=USER_TEXTS_KEPT)
        #: Per (kind, words): the user texts and kind last read, and the keys written in them.
        self._typed_keys: dict[tuple[str, int], tuple[tuple[str, ...], Kind, frozenset[str]]] = {}
        #: Refusals per tool in the current turn, for bounding re-prompts (a new turn clears it).
        self._refusals: dict[str, int] = {}
        self._kinds: Mapping[str, Kind] = kinds or {}
        self._lock = threading.RLock()
        #: The key that seals the ledger blocks compaction writes for this ledger. It is
        #: saved with the ledger and never shown to a model.
        self.seal_key: bytes = secrets.token_bytes(32)
        #: The (kind, key) of every id changed since the guard last wrote the ledger to its
        #: store; None while no store keeps it (see guardrail._journal).
        self._journal: set[tuple[str, str]] | None = None
        #: The meta as last written to the store, to write it again only when it changed.
        self._written_meta: dict[str, Any] | None = None
        #: What the meta's changing fields were when written: a cheap "nothing changed".
        self._written_mark: tuple[Any, ...] | None = None

    # -- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Entry]:
        """Entries from least to most recently used, kind by kind."""
        # Snapshots: another thread may be recording while this one reads.
        for table in list(self._by_kind.values()):
            yield from list(table.values())

    def __contains__(self, role: object) -> bool:
        return role in self._roles

    def __getitem__(self, role: str) -> Entry:
        """The entry a role (or an alias) names."""
        try:
            return self._roles[role]
        except KeyError:
            raise KeyError(f"no ledger role {role!r}; roles: {sorted(self.roles)}") from None

    @property
    def roles(self) -> dict[str, str]:
        """Current role -> kind, for a summariser (never values)."""
        return {entry.role: entry.kind for entry in self}

    def entries(self) -> list[Entry]:
        """Every entry in order of first appearance (the order a ledger block lists them)."""
        # The role table is filled as entries arrive; aliases only repeat an entry.
        with self._lock:
            return list(dict.fromkeys(self._roles.values()))

    def tombstones(self) -> list[Tombstone]:
        """Evicted entries still remembered, oldest first."""
        return list(self._tombstones.values())

    def _drop_marks(self) -> list[Dropped]:
        """Ids results named but the ledger did not keep, still remembered, oldest first."""
        return list(self._dropped.values())

    def _key(self, kind: str, value: str) -> str | None:
        """``value`` as the ledger keys it for ``kind``, or None where the normaliser fails."""
        known = self._kinds.get(kind)
        return known.key(value) if known is not None else value.strip()

    def get(self, kind: str, value: str) -> Entry | None:
        """The entry of ``kind`` whose value is ``value`` in any written form."""
        table = self._by_kind.get(kind)
        key = None if table is None else self._key(kind, value)
        return None if key is None or table is None else table.get(key)

    def _lookup(self, value: str, *, exclude: Iterable[str] = ()) -> list[Entry]:
        """Entries of any kind (but those in ``exclude``) that ``value`` names.

        A kind whose normaliser cannot read ``value`` has no entry for it.
        """
        found = []
        for kind, table in list(self._by_kind.items()):
            if kind in exclude:
                continue
            key = self._key(kind, value)
            entry = None if key is None else table.get(key)
            if entry is not None:
                found.append(entry)
        return found

    def _tombstone(self, kind: str, key: str) -> Tombstone | None:
        """The tombstone of an evicted ``(kind, key)``, if still remembered."""
        return self._tombstones.get((kind, key)) if self._tombstones else None

    def _drop_mark(self, kind: str, key: str) -> Dropped | None:
        """The mark of an id a result named but the ledger did not keep, if still remembered."""
        return self._dropped.get((kind, key)) if self._dropped else None

    def _longest_key(self, kind: str) -> int:
        """The length of the longest key ``kind`` has had (evicted ones included)."""
        index = self._index.get(kind)
        return 0 if index is None else index.longest

    def _alphabet(self, kind: str) -> frozenset[str]:
        """Every character seen in ``kind``'s keys (a superset)."""
        index = self._index.get(kind)
        if index is None:
            return frozenset()
        with self._lock:
            return frozenset(index.alphabet)

    def _keys_with_prefix(self, kind: str, prefix: str, *, limit: int = 8) -> list[Entry]:
        """Live entries of ``kind`` whose key starts with ``prefix`` and is longer."""
        index = self._index.get(kind)
        table = self._by_kind.get(kind)
        if index is None or not table:
            return []
        with self._lock:
            return index.with_prefix(prefix, table, limit)

    # -- changing -------------------------------------------------------------------------

    def _next_turn(self) -> int:
        """Start a new turn (a user message and everything up to the next one).

        The re-prompt counts start again: the user has spoken since the refusals.
        """
        self.turn += 1
        self._refusals.clear()
        self._epoch += 1
        return self.turn

    def _touch(self, entry: Entry) -> None:
        """Mark ``entry`` used now; the allowed path of a check calls this.

        Recency is kept per epoch (the span between two changes of the
        ledger): eviction happens only when ids are added, so the order
        among entries used since the last addition cannot matter yet.
        """
        if entry.epoch != self._epoch:
            with self._lock:
                entry.epoch = self._epoch
                entry.last_used = self.turn
                if self._journal is not None:
                    self._journal.add((entry.kind, entry.key))
                table = self._by_kind[entry.kind]
                if table.pop(entry.key, None) is entry:
                    table[entry.key] = entry

    def _admit(
        self,
        batches: Iterable[Batch],
        *,
        source: Source | Mapping[str, Source],
        verified: bool = True,
        limit: int | None = None,
        tool: str | None = None,
    ) -> Admitted:
        """Record harvested ids: the entries added, verified by this call, and evicted.

        Ids come in :class:`~guardrail._harvest.Batch` columns, in order: a
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
        fit are taken out again, newest first, as drop marks too.
        """
        if limit is not None and (type(limit) is not int or limit < 0):
            raise GuardrailUsageError(f"limit must be an integer >= 0 or None, not {limit!r}")
        added: list[Entry] = []
        upgraded: list[Entry] = []
        skipped: dict[tuple[str, str], str] = {}  # (kind, key) -> value of new ids beyond limit
        revived: dict[tuple[str, str], Tombstone] = {}  # tombstones of evicted ids seen again
        room = sys.maxsize if limit is None else limit
        turn = self.turn
        by_kind = self._by_kind
        roles = self._roles
        counters = self._counters
        with self._lock:
            tomb_roles = self._tomb_roles
            marks = self._dropped
            for kind, path, template, values, keys, statuses in batches:
                where = source if isinstance(source, Source) else source[path]
                table = by_kind.get(kind)
                if table is None:
                    table = by_kind[kind] = {}
                    self._index[kind] = KeyIndex()
                fresh: list[str] = []  # new keys, for the near-miss index
                size = len(added)
                # Default roles with no tombstone to honour: number them here, in a local.
                plain = not template and not self._tombstones
                start = number = counters.get(kind, 0)
                for value, key, status in zip(
                    values, keys, statuses if statuses is not None else repeat(None), strict=False
                ):
                    entry = table.get(key)
                    if entry is not None:
                        if verified and not entry.verified:
                            entry.verified = True
                            entry.source = where
                            upgraded.append(entry)
                        if status is not None and status != entry.status:
                            entry.status = status
                            if self._journal is not None:
                                self._journal.add((kind, key))
                        self._touch(entry)
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
                        role = self._new_role(kind, key, template, status, where)
                    # Fields set directly: the keyword constructor cost twice as much.
                    entry = _allocate(Entry)
                    entry.value = value
                    entry.kind = kind
                    entry.key = key
                    entry.role = role
                    entry.source = where
                    entry.first_seen = turn
                    entry.last_used = turn
                    entry.verified = verified
                    entry.status = status
                    entry.pinned = False
                    entry.aliases = ()
                    entry.epoch = 0  # as Entry() has it until the admission ends
                    table[key] = entry
                    roles[role] = entry
                    fresh.append(key)
                    if not plain and self._tombstones:
                        tomb = self._tombstones.get((kind, key))
                        if tomb is not None:  # back under its old role (restored if taken back)
                            revived[(kind, key)] = tomb
                            self._drop_tombstone((kind, key))
                    if marks:  # in the ledger for real now: no longer "not kept"
                        marks.pop((kind, key), None)
                    added.append(entry)
                if number != start:
                    counters[kind] = number
                if fresh:
                    self._size += len(added) - size
                    self._index[kind].add(fresh)
            if added:
                self._epoch += 1
                for entry in added:
                    entry.epoch = self._epoch
            journal = self._journal
            if journal is not None:
                journal.update([(entry.kind, entry.key) for entry in added])
                journal.update([(entry.kind, entry.key) for entry in upgraded])
            evicted = self._evict_over_capacity()
            taken = self._take_back(added, revived)
            dropped = self._mark_dropped(taken, skipped, tool, source)
        return Admitted(added, upgraded, evicted, dropped)

    def label(self, role: str, new_role: str) -> Entry:
        """Rename the entry named ``role`` to ``new_role``; the old name stays as an alias."""
        _check_role_name(new_role)
        with self._lock:
            entry = self[role]
            if new_role == entry.role:
                return entry
            holder = self._roles.get(new_role)
            if holder is not None and holder is not entry:
                raise GuardrailUsageError(
                    f"role {new_role!r} already names {holder.value!r}; pick another name"
                )
            if holder is None and new_role in self._tomb_roles:
                raise GuardrailUsageError(
                    f"role {new_role!r} belonged to an evicted id; pick another name"
                )
            entry.aliases = (*entry.aliases, entry.role)
            entry.role = new_role
            self._roles[new_role] = entry
            self._changed(entry.kind, entry.key)
            return entry

    def pin(self, role: str, pinned: bool = True) -> Entry:
        """Keep (or stop keeping) an entry; pinned entries do not count against the capacity.

        Unpinning in a full ledger evicts; if every other entry was used
        this turn, the least recently used goes all the same: the program
        asked for the room back.
        """
        with self._lock:
            entry = self[role]
            if entry.pinned != pinned:
                entry.pinned = pinned
                self._pinned += 1 if pinned else -1
                self._changed(entry.kind, entry.key)
                self._evict_over_capacity()
                self._evict_over_capacity(spare_current=False)
            return entry

    def forget(self, role: str) -> Entry:
        """Drop an entry now, leaving a tombstone (as eviction does)."""
        with self._lock:
            entry = self[role]
            self._remove(entry)
            return entry

    def _observe_text(self, text: str) -> None:
        """Keep a user text (bounded) for recognising ids typed with no pattern."""
        self._user_texts.append(text)

    def _typed_by_user(self, value: str, kind: Kind | None = None) -> bool:
        """Whether the user texts kept hold ``value``: as a whole token, or by ``kind``'s key.

        Verbatim is one pass over each text, whatever the value (see
        :func:`has_token`). With a ``kind``, a run of the user's words that
        the kind's normaliser reads as the value's key counts too
        (``Ana@Example.com.`` for ``ana@example.com`` under ``email``), as a
        pattern's match would: the keys of the kept texts are worked out
        once per kind and reused until the next user text.
        """
        if not value.strip():
            return False  # nothing typed is no id the user typed
        texts = tuple(self._user_texts)
        if any(has_token(text, value) for text in texts):
            return True
        key = kind.key(value) if kind is not None else None
        if kind is None or not key:
            return False
        words = max(_RUN_WORDS, len(value.split()))
        cached = self._typed_keys.get((kind.name, words))
        # The texts are compared by identity first: the same strings, nothing to redo.
        if cached is None or cached[0] != texts or cached[1] is not kind:
            keys = frozenset().union(*(kind.keys_in(text, words=words) for text in texts))
            if len(self._typed_keys) >= _TYPED_KEYS_KEPT:
                self._typed_keys.clear()
            cached = (texts, kind, keys)
            self._typed_keys[kind.name, words] = cached
        return key in cached[2]

    # -- internals ------------------------------------------------------------------------

    def _new_role(
        self, kind: str, key: str, template: str | None, status: str | None, source: Source
    ) -> str:
        tomb = self._tombstones.get((kind, key)) if self._tombstones else None
        if tomb is not None and tomb.role not in self._roles:
            # An id that comes back keeps the role summaries already use for it.
            return tomb.role
        if template:
            number = self._counters.get(kind, 0) + 1
            fields = {"kind": kind, "n": number, "tool": source.tool, "status": status}
            try:
                base = template.format_map(_Fields(fields))
            except (ValueError, IndexError):
                base = kind
            base = "".join(c if c in _ROLE_CHARS else "_" for c in base) or kind
            self._counters[kind] = number
            return self._free_role(base)
        while True:
            number = self._counters.get(kind, 0) + 1
            self._counters[kind] = number
            role = kind if number == 1 else f"{kind}_{number}"
            if not self._role_taken(role):
                return role

    def _changed(self, kind: str, key: str) -> None:
        """Note that the id ``(kind, key)`` changed, for the next write to the store."""
        if self._journal is not None:
            self._journal.add((kind, key))

    def _role_taken(self, role: str) -> bool:
        return role in self._roles or role in self._tomb_roles

    def _free_role(self, base: str) -> str:
        role, suffix = base, 1
        while self._role_taken(role):
            suffix += 1
            role = f"{base}_{suffix}"
        return role

    def _insert(self, entry: Entry) -> None:
        self._by_kind[entry.kind][entry.key] = entry
        self._roles[entry.role] = entry
        for alias in entry.aliases:
            self._roles[alias] = entry
        self._index[entry.kind].add((entry.key,))
        self._size += 1
        self._pinned += entry.pinned
        if self._tombstones:
            self._drop_tombstone((entry.kind, entry.key))

    def _remove(self, entry: Entry) -> None:
        del self._by_kind[entry.kind][entry.key]
        for name in (entry.role, *entry.aliases):
            if self._roles.get(name) is entry:
                del self._roles[name]
        self._index[entry.kind].stale += 1  # the key stays in the index until a rebuild
        self._size -= 1
        self._pinned -= entry.pinned
        self._changed(entry.kind, entry.key)
        if self._tombstone_capacity:
            self._add_tombstone(
                Tombstone(entry.value, entry.kind, entry.key, entry.role, self.turn)
            )

    def _add_tombstone(self, tomb: Tombstone) -> None:
        self._tombstones[(tomb.kind, tomb.key)] = tomb
        self._tomb_roles.add(tomb.role)
        while len(self._tombstones) > self._tombstone_capacity:
            self._drop_tombstone(next(iter(self._tombstones)))

    def _drop_tombstone(self, key: tuple[str, str]) -> None:
        tomb = self._tombstones.pop(key, None)
        if tomb is not None:
            self._tomb_roles.discard(tomb.role)

    def _evict_over_capacity(self, *, spare_current: bool = True) -> list[Entry]:
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
        while self._size - self._pinned > self.capacity:
            victim: Entry | None = None
            for table in self._by_kind.values():
                for entry in table.values():
                    if not entry.pinned:
                        if entry.last_used != current and (
                            victim is None or entry.last_used < victim.last_used
                        ):
                            victim = entry
                        break
            if victim is None:  # every candidate was used this turn (or is pinned)
                break
            self._remove(victim)
            evicted.append(victim)
        return evicted

    def _take_back(
        self, added: list[Entry], revived: Mapping[tuple[str, str], Tombstone]
    ) -> list[Entry]:
        """Take out of ``added`` (newest first) what still does not fit after eviction.

        The entries go without a new tombstone (they were never kept; the
        caller marks them dropped); an evicted id that came back gets its
        old tombstone back, so its role stays its own. Returned oldest first.
        """
        taken: list[Entry] = []
        while added and self._size - self._pinned > self.capacity:
            entry = added.pop()
            del self._by_kind[entry.kind][entry.key]
            del self._roles[entry.role]
            self._index[entry.kind].stale += 1
            self._size -= 1
            self._changed(entry.kind, entry.key)
            taken.append(entry)
        taken.reverse()
        for entry in taken:  # oldest first, as they were remembered
            tomb = revived.get((entry.kind, entry.key))
            if tomb is not None:
                self._add_tombstone(tomb)
        return taken

    def _mark_dropped(
        self,
        taken: list[Entry],
        skipped: dict[tuple[str, str], str],
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
        turn = self.turn
        dropped = [Dropped(e.value, e.kind, e.key, tool, turn) for e in taken]
        dropped.extend(
            Dropped(value, kind, key, tool, turn) for (kind, key), value in skipped.items()
        )
        keep = self._tombstone_capacity
        marks = self._dropped
        journal = self._journal
        for mark in dropped[-keep:] if keep else ():
            where = (mark.kind, mark.key)
            marks.pop(where, None)  # named again: the newest mark, last to go
            marks[where] = mark
            if journal is not None:
                journal.add(where)
        while len(marks) > keep:
            del marks[next(iter(marks))]
        return dropped

    # -- persistence ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Everything the ledger holds, JSON-safe, in an order that round-trips exactly."""
        with self._lock:  # another thread may be recording into it while it is saved
            return {
                "format": FORMAT_VERSION,
                "session_id": self.session_id,
                "capacity": self.capacity,
                "tombstone_capacity": self._tombstone_capacity,
                "turn": self.turn,
                "epoch": self._epoch,
                "kinds": list(self._by_kind),
                "counters": dict(self._counters),
                "entries": [entry.to_dict() for entry in self],
                "roles": {name: entry.role for name, entry in self._roles.items()},
                "tombstones": [
                    {
                        "value": t.value,
                        "kind": t.kind,
                        "key": t.key,
                        "role": t.role,
                        "evicted_turn": t.evicted_turn,
                    }
                    for t in self._tombstones.values()
                ],
                "dropped": [
                    {"value": d.value, "kind": d.kind, "key": d.key, "tool": d.tool, "turn": d.turn}
                    for d in self._dropped.values()
                ],
                "user_texts": list(self._user_texts),
                "refusals": dict(self._refusals),
                "seal_key": self.seal_key.hex(),
            }

    def to_json(self) -> str:
        """The ledger as JSON text; ``Ledger.from_json`` restores it exactly."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, kinds: Mapping[str, Kind] | None = None
    ) -> Ledger:
        """Rebuild a ledger from :meth:`to_dict` output, every field checked first.

        See :meth:`from_json`; this is the same for a mapping.
        """
        from guardrail._saved import validate_python  # pydantic: only when loading

        return cls._restore(validate_python(data), kinds)

    @classmethod
    def from_json(cls, text: str | bytes, *, kinds: Mapping[str, Kind] | None = None) -> Ledger:
        """Rebuild a ledger from :meth:`to_json` text, every field checked first.

        A wrong field is a :class:`GuardrailUsageError` that names it
        (``entries[3].verified: expected a boolean``), and nothing half-built
        is returned. Format 1 loads too, with a fresh seal key. With
        ``kinds``, each key is what its kind's normaliser makes of the value
        now: the normaliser is authoritative (entries that then share a key
        become one, the verified or more recently used; an entry whose value
        it cannot read is dropped, leaving a tombstone).
        """
        from guardrail._saved import validate_json  # pydantic: only when loading

        return cls._restore(validate_json(text), kinds)

    @classmethod
    def _restore(cls, data: SavedLedger, kinds: Mapping[str, Kind] | None) -> Ledger:
        """A ledger from checked saved fields; the checks no schema can make happen here."""
        ledger = cls(
            capacity=data["capacity"],
            tombstones=data["tombstone_capacity"],
            session_id=data["session_id"],
        )
        ledger.turn = data["turn"]
        ledger._epoch = data["epoch"]
        ledger._counters = data["counters"]
        for kind in data["kinds"]:
            ledger._by_kind[kind] = {}
            ledger._index[kind] = KeyIndex()
        at: dict[tuple[str, str], int] = {}  # (kind, key) -> index, for saying which collide
        by_role: dict[str, Entry] = {}
        role_at: dict[str, int] = {}
        sources: dict[tuple[str, str | None, str, int], Source] = {}
        for i, raw in enumerate(data["entries"]):
            kind, key, role = raw["kind"], raw["key"], raw["role"]
            if (kind, key) in at:
                raise _not_saved(
                    f"entries[{i}]: {kind} key {key!r} is also entries[{at[kind, key]}]'s"
                )
            if role in role_at:
                raise _not_saved(
                    f"entries[{i}].role: {role!r} is also entries[{role_at[role]}]'s role"
                )
            at[kind, key] = role_at[role] = i
            src = raw["source"]
            origin = (src["tool"], src["call_id"], src["path"], src["turn"])
            source = sources.get(origin)
            if source is None:  # one Source per call and path, as admission shares it
                source = sources[origin] = Source(*origin)
            entry = _allocate(Entry)
            entry.value = raw["value"]
            entry.kind = kind
            entry.key = key
            entry.role = role
            entry.aliases = tuple(raw["aliases"])
            entry.source = source
            entry.first_seen = raw["first_seen"]
            entry.last_used = raw["last_used"]
            entry.verified = raw["verified"]
            entry.status = raw["status"]
            entry.pinned = raw["pinned"]
            entry.epoch = raw["epoch"]
            if kind not in ledger._by_kind:
                ledger._by_kind[kind] = {}
                ledger._index[kind] = KeyIndex()
            ledger._insert(entry)
            by_role[role] = entry
        # The role table in its saved order: each name a role or an alias of the entry it names.
        roles: dict[str, Entry] = {}
        for name, role in data["roles"].items():
            named = by_role.get(role)
            if named is None:
                raise _not_saved(f"roles[{name!r}]: {role!r} is no entry's role")
            if name != role and name not in named.aliases:
                raise _not_saved(
                    f"roles[{name!r}]: {name!r} is neither the role nor an alias of the entry "
                    f"{role!r} names"
                )
            roles[name] = named
        for role, entry in by_role.items():
            if roles.get(role) is not entry:
                raise _not_saved(f"entries[{role_at[role]}]: its role {role!r} is not in roles")
        ledger._roles = roles
        # Marks of ids that are live again mean nothing: the live entry wins, as in merge().
        for raw_tomb in data["tombstones"]:
            if (raw_tomb["kind"], raw_tomb["key"]) not in at:
                ledger._add_tombstone(
                    Tombstone(
                        raw_tomb["value"],
                        raw_tomb["kind"],
                        raw_tomb["key"],
                        raw_tomb["role"],
                        raw_tomb["evicted_turn"],
                    )
                )
        for raw_drop in data["dropped"]:
            if (raw_drop["kind"], raw_drop["key"]) not in at:
                mark = Dropped(
                    raw_drop["value"],
                    raw_drop["kind"],
                    raw_drop["key"],
                    raw_drop["tool"],
                    raw_drop["turn"],
                )
                ledger._dropped[(mark.kind, mark.key)] = mark
        ledger._user_texts.extend(data["user_texts"])
        ledger._refusals = data["refusals"]
        ledger.seal_key = bytes.fromhex(data["seal_key"])
        if kinds is not None:
            ledger._use_kinds(kinds)
        return ledger

    def _use_kinds(self, kinds: Mapping[str, Kind]) -> None:
        """Normalise with ``kinds`` from now on, re-keying entries whose key they write otherwise.

        The normaliser is authoritative: a saved key that is not what it makes
        of the saved value (an older normaliser, or an edited file) would
        vouch for an id nobody saw. Entries that now share a key become one,
        the verified (else more recently used) one, keeping the other's roles
        as aliases; an entry whose value it can no longer read is dropped,
        leaving a tombstone.
        """
        with self._lock:
            self._kinds = kinds
            for name, table in list(self._by_kind.items()):
                kind = kinds.get(name)
                if kind is None:
                    continue
                keys = [kind.key(entry.value) for entry in table.values()]
                if all(new == old for new, old in zip(keys, table, strict=True)):
                    continue
                self._rekey(name, keys)

    def _rekey(self, kind: str, keys: list[str | None]) -> None:
        """Rebuild ``kind``'s table under ``keys`` (one per entry, in order), merging collisions."""
        table = self._by_kind[kind]
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
            keep, lose = (
                (held, entry)
                if (held.verified, held.last_used) >= (entry.verified, entry.last_used)
                else (entry, held)
            )
            keep.key = key
            keep.first_seen = min(keep.first_seen, lose.first_seen)
            keep.pinned = keep.pinned or lose.pinned
            for name in (lose.role, *lose.aliases):
                if self._roles.get(name) is lose:
                    self._roles[name] = keep
                    if name != keep.role and name not in keep.aliases:
                        keep.aliases = (*keep.aliases, name)
            rebuilt[key] = keep
        self._by_kind[kind] = rebuilt
        index = self._index[kind] = KeyIndex()
        index.add(rebuilt)
        for key in rebuilt:
            self._drop_tombstone((kind, key))
            self._dropped.pop((kind, key), None)
        self._count()
        for entry in unreadable:  # gone, as if forgotten; its key may be another entry's now
            for name in (entry.role, *entry.aliases):
                if self._roles.get(name) is entry:
                    del self._roles[name]
            if self._tombstone_capacity and entry.key not in rebuilt:
                self._add_tombstone(
                    Tombstone(entry.value, entry.kind, entry.key, entry.role, self.turn)
                )

    def _count(self) -> None:
        """Recount the entries and pinned entries after tables were rebuilt."""
        self._size = sum(len(table) for table in self._by_kind.values())
        self._pinned = sum(entry.pinned for entry in self)

    # -- merging two copies ---------------------------------------------------------------

    def merge(self, other: Ledger) -> list[Entry]:
        """Fold ``other``, another copy of this conversation's ledger, into this one.

        A ledger only grows: entries are united by (kind, key), each verified
        if either copy verified it, first seen at the earlier turn, last used
        at the later, with the status of the copy that used it last, pinned
        if either pinned it, and the names of both where free. An entry of
        ``other`` whose role names another id here gets a fresh role.
        Tombstones and drop marks are united (minus ids live in either) and
        bounded; user texts are united in order; turn and counters take the
        larger, refusals those of the later turn (the larger of each where the
        turn is the same); the seal key and capacities stay this ledger's.
        Then, as after any admission, the least recently used entries over
        capacity are evicted: they are returned.
        """
        if other is self:
            return []
        with other._lock:  # copies, so no entry object is shared between two ledgers
            theirs = [_copy_entry(entry) for entry in other.entries()]
            their_tombs = list(other._tombstones.values())
            their_drops = list(other._dropped.values())
            their_texts = list(other._user_texts)
            their_counters = dict(other._counters)
            their_refusals = dict(other._refusals)
            their_turn, their_epoch = other.turn, other._epoch
        with self._lock:
            changed: set[str] = set()  # kinds whose recency order must be restored
            for entry in theirs:
                table = self._by_kind.get(entry.kind)
                mine = table.get(entry.key) if table is not None else None
                if mine is None:
                    self._adopt(entry)
                    changed.add(entry.kind)
                elif self._combine(mine, entry):
                    changed.add(entry.kind)
                self._changed(entry.kind, entry.key)
            self._merge_marks(their_tombs, their_drops)
            for tomb in their_tombs:
                self._changed(tomb.kind, tomb.key)
            for drop in their_drops:
                self._changed(drop.kind, drop.key)
            for text in their_texts:
                if text not in self._user_texts:
                    self._user_texts.append(text)
            for name, number in their_counters.items():
                self._counters[name] = max(number, self._counters.get(name, 0))
            # Refusals are counted per turn: a later turn's counts replace an earlier one's.
            if their_turn > self.turn:
                self._refusals = their_refusals
            elif their_turn == self.turn:
                for tool, count in their_refusals.items():
                    self._refusals[tool] = max(count, self._refusals.get(tool, 0))
            self.turn = max(self.turn, their_turn)
            self._epoch = max(self._epoch, their_epoch)
            for kind in changed:
                # Least recently used first, ties in one order whichever copy is merged into.
                ordered = sorted(self._by_kind[kind].values(), key=_recency)
                self._by_kind[kind] = {entry.key: entry for entry in ordered}
            # Two copies that each fit may not fit together, even with every entry used this
            # turn: a merge is no flood, so nothing is spared and the ledger fits again.
            return self._evict_over_capacity(spare_current=False)

    def _adopt(self, entry: Entry) -> None:
        """Take in an entry of another copy (a private copy of it) that this ledger lacks."""
        if entry.kind not in self._by_kind:
            self._by_kind[entry.kind] = {}
            self._index[entry.kind] = KeyIndex()
        self._drop_tombstone((entry.kind, entry.key))
        self._dropped.pop((entry.kind, entry.key), None)
        free = [name for name in (entry.role, *entry.aliases) if not self._role_taken(name)]
        if entry.role not in free:
            entry.role = self._new_role(entry.kind, entry.key, None, entry.status, entry.source)
        entry.aliases = tuple(name for name in free if name != entry.role)
        self._insert(entry)

    def _combine(self, mine: Entry, theirs: Entry) -> bool:
        """Fold another copy's facts about one id into ``mine``; whether its recency changed."""
        if theirs.verified and not mine.verified:
            mine.verified = True
            mine.value = theirs.value  # the form the verifying result wrote
            mine.source = theirs.source
        mine.first_seen = min(mine.first_seen, theirs.first_seen)
        if _status_order(theirs) > _status_order(mine):
            mine.status = theirs.status
        later = theirs.last_used > mine.last_used
        if later:
            mine.last_used = theirs.last_used
        mine.epoch = max(mine.epoch, theirs.epoch)
        if theirs.pinned and not mine.pinned:
            mine.pinned = True
            self._pinned += 1
        for name in (theirs.role, *theirs.aliases):
            if name != mine.role and name not in mine.aliases and not self._role_taken(name):
                mine.aliases = (*mine.aliases, name)
                self._roles[name] = mine
        return later

    def _merge_marks(self, tombs: list[Tombstone], drops: list[Dropped]) -> None:
        """Unite another copy's tombstones and drop marks with these, minus live ids, bounded."""

        def live(kind: str, key: str) -> bool:
            table = self._by_kind.get(kind)
            return table is not None and key in table

        grew = False
        for tomb in tombs:
            held = self._tombstones.get((tomb.kind, tomb.key))
            if live(tomb.kind, tomb.key) or (
                held is not None
                and (held.evicted_turn, held.role) >= (tomb.evicted_turn, tomb.role)
            ):
                continue
            self._drop_tombstone((tomb.kind, tomb.key))
            self._tombstones[(tomb.kind, tomb.key)] = tomb
            grew = True
        if grew:  # oldest first again, then as many as the ledger keeps
            ordered = sorted(self._tombstones.values(), key=attrgetter("evicted_turn"))
            ordered = ordered[max(0, len(ordered) - self._tombstone_capacity) :]
            self._tombstones = {(t.kind, t.key): t for t in ordered}
            self._tomb_roles = {t.role for t in ordered}
        grew = False
        for mark in drops:
            held_mark = self._dropped.get((mark.kind, mark.key))
            if live(mark.kind, mark.key) or (
                held_mark is not None and (held_mark.turn, held_mark.tool) >= (mark.turn, mark.tool)
            ):
                continue
            self._dropped[(mark.kind, mark.key)] = mark
            grew = True
        if grew:
            marks = sorted(self._dropped.values(), key=attrgetter("turn"))
            marks = marks[max(0, len(marks) - self._tombstone_capacity) :]
            self._dropped = {(d.kind, d.key): d for d in marks}

    def __eq__(self, other: object) -> bool:
        """Same ids, roles, tombstones and turns; the seal key is a secret, not content."""
        if not isinstance(other, Ledger):
            return NotImplemented
        mine, theirs = self.to_dict(), other.to_dict()
        del mine["seal_key"], theirs["seal_key"]
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Ledger session={self.session_id!r} entries={self._size}/{self.capacity}>"


_allocate = object.__new__


def _not_saved(problem: str) -> GuardrailUsageError:
    """The error for a saved ledger whose fields are each fine but do not fit together."""
    return GuardrailUsageError(
        f"not a saved ledger: {problem}; fix that field, or save the ledger again with "
        "Ledger.to_json()"
    )


def _copy_entry(entry: Entry) -> Entry:
    """A private copy of an entry, for another ledger to take in."""
    copy = _allocate(Entry)
    for name in Entry.__slots__:
        setattr(copy, name, getattr(entry, name))
    return copy


def _recency(entry: Entry) -> tuple[int, int, str]:
    """The order of least recent use, with ties broken the same way in every copy."""
    return (entry.last_used, entry.first_seen, entry.key)


def _status_order(entry: Entry) -> tuple[int, bool, str]:
    """Which copy's status wins: the one used last, then any status over none."""
    return (entry.last_used, entry.status is not None, entry.status or "")


class _Fields(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return key


def _check_role_name(role: str) -> None:
    if not isinstance(role, str) or not role or not set(role) <= _ROLE_CHARS:
        raise GuardrailUsageError(
            f"role {role!r} must be a non-empty name of letters, digits, '_', '-' or '.'"
        )
    if role[0].isdigit():
        raise GuardrailUsageError(f"role {role!r} must not start with a digit")
