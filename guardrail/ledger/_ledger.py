"""The public ledger: one conversation's identifiers, what a program reads, saves and changes.

:class:`Ledger` wraps a :class:`~guardrail.ledger._state.LedgerState` (the
id tables the guard works on) and shows a program only what it uses.
Saving writes the ledger as records and meta, the same form a store keeps
(format 3); loading reads that form, and the formats 1 and 2 of earlier
versions, through one loader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, cast

from guardrail._data.entry import Entry, Tombstone
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind
from guardrail.ledger._records import absorb, fill, meta_of, records
from guardrail.ledger._state import DEFAULT_CAPACITY, LedgerState

#: The format ``Ledger.to_json`` writes: the session id, the meta and the records.
FORMAT_VERSION = 3


class Ledger:
    """One conversation's identifiers. Build it through ``Guard.session`` or ``from_json``.

    What a program uses: the entries (:meth:`entries`, iteration, ``len``,
    ``role in ledger``, ``ledger[role]``, :meth:`get`, :attr:`roles`,
    :meth:`tombstones`), :meth:`label`, :meth:`pin`, :meth:`forget`,
    :meth:`merge`, saving and loading (:meth:`to_json`, :meth:`from_json`,
    :meth:`to_dict`, :meth:`from_dict`), and ``session_id``, ``capacity``,
    ``turn`` and ``seal_key``. Admission, recency, turns, the user's texts
    and the look-ups the check makes are the guard's business, on the
    state this object wraps.

    Args:
        capacity: The most entries kept; the least recently used go first.
        tombstones: How many evicted ids are remembered (None: ``capacity``).
        kinds: The kinds whose normalisers key the entries (a guard's).
        session_id: The conversation's id, which the ledger's block seals
            are bound to.
    """

    __slots__ = ("_state",)

    def __init__(
        self,
        *,
        capacity: int = DEFAULT_CAPACITY,
        tombstones: int | None = None,
        kinds: Mapping[str, Kind] | None = None,
        session_id: str | None = None,
    ) -> None:
        self._state = LedgerState(
            self, capacity=capacity, tombstones=tombstones, kinds=kinds, session_id=session_id
        )

    # -- reading --------------------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        """The conversation this ledger belongs to (None: a ledger of no session)."""
        return self._state.session_id

    @property
    def capacity(self) -> int:
        """The most entries the ledger keeps (pinned ones apart)."""
        return self._state.capacity

    @property
    def turn(self) -> int:
        """The current turn: how many user messages the guard has seen."""
        return self._state.turn

    @property
    def seal_key(self) -> bytes:
        """The key that seals this ledger's blocks: in memory only, never saved.

        A guard's session derives it from the guard's ``secret`` and the
        session id; a ledger of no session has a random key of its own.
        """
        return self._state.seal_key

    def __len__(self) -> int:
        return self._state.size

    def __iter__(self) -> Iterator[Entry]:
        """Entries from least to most recently used, kind by kind."""
        return iter(self._state)

    def __contains__(self, role: object) -> bool:
        return role in self._state.roles

    def __getitem__(self, role: str) -> Entry:
        """The entry a role (or an alias) names."""
        return self._state.role(role)

    @property
    def roles(self) -> dict[str, str]:
        """Current role -> kind, for a summariser (never values)."""
        return {entry.role: entry.kind for entry in self._state}

    def entries(self) -> list[Entry]:
        """Every entry in order of first appearance (the order a ledger block lists them)."""
        return self._state.entries()

    def tombstones(self) -> list[Tombstone]:
        """Evicted entries still remembered, oldest first."""
        return list(self._state.tombstones.values())

    def get(self, kind: str, value: str) -> Entry | None:
        """The entry of ``kind`` whose value is ``value`` in any written form."""
        return self._state.get(kind, value)

    # -- changing -------------------------------------------------------------------------

    def label(self, role: str, new_role: str) -> Entry:
        """Rename the entry named ``role`` to ``new_role``; the old name stays an alias."""
        return self._state.label(role, new_role)

    def pin(self, role: str, pinned: bool = True) -> Entry:
        """Keep (or stop keeping) an entry; pinned entries do not count against the capacity.

        Unpinning in a full ledger evicts; if every other entry was used
        this turn, the least recently used goes all the same: the program
        asked for the room back.
        """
        return self._state.pin(role, pinned)

    def forget(self, role: str) -> Entry:
        """Drop an entry now, leaving a tombstone (as eviction does)."""
        return self._state.forget(role)

    def merge(self, other: Ledger) -> list[Entry]:
        """Take in ``other``, another copy of this conversation's ledger; the entries evicted.

        Each id the two know of is merged by the one rule stores follow
        (:func:`~guardrail.stores.protocol.merge_record`): an id the program
        let go (evicted or forgotten) stays gone unless the other copy used
        it at a later turn; two live copies become one entry, verified if
        either is, first seen at the earlier turn, last used at the later
        (with that use's status), pinned if either is, under this ledger's
        role with the other's names as aliases where free; a live entry
        beats a drop mark. The turn, counters and user texts take both
        (:func:`~guardrail.stores.protocol.merge_meta`); the capacities and
        the seal key stay this ledger's. Then the least recently used
        entries over capacity are evicted, and returned.
        """
        if other is self:
            return []
        theirs = other._state
        with theirs.lock:  # records are copies: no entry object is shared by two ledgers
            found, their_meta = records(theirs), meta_of(theirs)
        return absorb(self._state, found, their_meta)

    # -- saving and loading ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Everything the ledger holds as records and meta, JSON-safe, round-tripping exactly.

        The records are those a store keeps (see
        :mod:`guardrail.stores.protocol`); the seal key is not saved.
        """
        state = self._state
        with state.lock:  # another thread may be recording into it while it is saved
            return {
                "format": FORMAT_VERSION,
                "session_id": state.session_id,
                "meta": meta_of(state),
                "records": records(state),
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
        from guardrail.ledger._saved import validate_python  # pydantic: only when loading

        return cls._restore(validate_python(data), kinds)

    @classmethod
    def from_json(cls, text: str | bytes, *, kinds: Mapping[str, Kind] | None = None) -> Ledger:
        """Rebuild a ledger from :meth:`to_json` text, every field checked first.

        A wrong field is a :class:`GuardrailUsageError` that names it
        (``records[3].verified: expected a boolean``), and nothing
        half-built is returned. Formats 1 and 2 (earlier versions) load too;
        a seal key saved in them is ignored: a loaded ledger has a key of its
        own, or its guard's for its session. With ``kinds``, each key is what
        its kind's normaliser makes of the value now: the normaliser is
        authoritative (entries that then share a key become one, the verified
        or more recently used; an entry whose value it cannot read is
        dropped, leaving a tombstone).
        """
        from guardrail.ledger._saved import validate_json  # pydantic: only when loading

        return cls._restore(validate_json(text), kinds)

    @classmethod
    def _restore(cls, saved: Any, kinds: Mapping[str, Kind] | None) -> Ledger:
        """A ledger from a checked saved ledger (records in order, its meta)."""
        meta = saved["meta"]
        ledger = cls(
            capacity=meta["capacity"],
            tombstones=meta["tombstone_capacity"],
            session_id=saved["session_id"],
            kinds=kinds,
        )
        fill(ledger._state, saved["records"], meta, ordered=True)
        return ledger

    # -- comparing ------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        """Same ids, roles, tombstones and turns (the seal key is a secret, not content)."""
        if not isinstance(other, Ledger):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        state = self._state
        return f"<Ledger session={state.session_id!r} entries={state.size}/{state.capacity}>"


def state_of(ledger: Ledger, call: str = "") -> LedgerState:
    """The state a ledger wraps: what guardrail's modules work on (see :class:`LedgerState`).

    Anything but a :class:`Ledger` is a usage error, which names ``call`` when given.
    """
    if not isinstance(ledger, Ledger):
        raise GuardrailUsageError(
            f"{call + ' takes' if call else 'expected'} the conversation's Ledger: "
            "guard.ledger, the one `with guard.session(id) as ledger` gives, or "
            f"guard.new_ledger(); not {type(ledger).__name__}"
        )
    return ledger._state


def ledger_of(state: LedgerState) -> Ledger:
    """The public ledger wrapping ``state`` (what a program is handed)."""
    return cast(Ledger, state.ledger)
