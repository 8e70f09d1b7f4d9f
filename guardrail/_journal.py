"""A ledger as a store's records: what changed since the last write, and reading records back.

A ledger a store keeps has a journal (``Ledger._journal``): the ``(kind,
key)`` of every id added, used, verified, relabelled, pinned, evicted,
forgotten or marked dropped since the last write. :func:`take` turns it
into one :class:`~guardrail.stores.Change` holding the current state of
each of those ids (and the meta, if it changed); :func:`fill` builds a
ledger from a whole session and :func:`absorb` folds in what other writers
wrote, by the same merge rule the stores use. Every record is checked field
by field first (``guardrail._saved``): a bad one is an error, never a
silently smaller ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from guardrail._index import KeyIndex
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Dropped, Entry, Ledger, Source, Tombstone, _recency
from guardrail.stores._protocol import Change, Meta, Record, Snapshot, merge_meta, merge_record

Key = tuple[str, str]


def live_record(entry: Entry) -> dict[str, Any]:
    """An entry as a live record."""
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


def record_of(ledger: Ledger, name: Key) -> dict[str, Any]:
    """What ``ledger`` knows of one id now: live, evicted, dropped, or gone."""
    kind, key = name
    table = ledger._by_kind.get(kind)
    entry = table.get(key) if table is not None else None
    if entry is not None:
        return live_record(entry)
    tomb = ledger._tombstones.get(name)
    if tomb is not None:
        return {
            "kind": kind,
            "key": key,
            "state": "evicted",
            "turn": tomb.evicted_turn,
            "value": tomb.value,
            "role": tomb.role,
        }
    mark = ledger._dropped.get(name)
    if mark is not None:
        return {
            "kind": kind,
            "key": key,
            "state": "dropped",
            "turn": mark.turn,
            "value": mark.value,
            "tool": mark.tool,
        }
    return {"kind": kind, "key": key, "state": "gone", "turn": ledger.turn}


def meta_of(ledger: Ledger) -> dict[str, Any]:
    """The session-wide fields of a ledger."""
    return {
        "capacity": ledger.capacity,
        "tombstone_capacity": ledger._tombstone_capacity,
        "seal_key": ledger.seal_key.hex(),
        "turn": ledger.turn,
        "epoch": ledger._epoch,
        "kinds": list(ledger._by_kind),
        "counters": dict(ledger._counters),
        "user_texts": list(ledger._user_texts),
        "refusals": dict(ledger._refusals),
    }


def everything(ledger: Ledger) -> set[Key]:
    """Every id a ledger knows of: its entries, tombstones and drop marks."""
    with ledger._lock:
        names = {(entry.kind, entry.key) for entry in ledger}
        names.update(ledger._tombstones)
        names.update(ledger._dropped)
    return names


def follow(ledger: Ledger, *, all_of_it: bool) -> None:
    """Start journaling ``ledger``; ``all_of_it``: count everything it holds as unwritten."""
    with ledger._lock:
        if ledger._journal is None:
            ledger._journal = set()
        if all_of_it:
            ledger._journal.update(everything(ledger))
            _wrote_meta(ledger, None)


def take(ledger: Ledger, base: int) -> tuple[Change, set[Key]]:
    """The unwritten changes as one Change, and the journal they came from (for :func:`undo`)."""
    if not ledger._journal and ledger._written_mark == _mark(ledger):
        return Change(base), set()  # the allowed path's usual case: nothing to write
    with ledger._lock:
        names = ledger._journal or set()
        ledger._journal = set()
        records = [record_of(ledger, name) for name in names]
        meta: dict[str, Any] | None = meta_of(ledger)
        if meta == ledger._written_meta:
            meta = None
    return Change(base, records, meta), names


def undo(ledger: Ledger, names: set[Key]) -> None:
    """A write failed: its ids count as unwritten again (nothing is lost)."""
    with ledger._lock:
        if ledger._journal is None:
            ledger._journal = set()
        ledger._journal.update(names)


def written(ledger: Ledger, change: Change) -> None:
    """A write succeeded: its meta is what the store holds now."""
    if change.meta is not None:
        _wrote_meta(ledger, dict(change.meta))


def _mark(ledger: Ledger) -> tuple[Any, ...]:
    """The meta fields that change without an id changing: turn, epoch, refusals."""
    return (ledger.turn, ledger._epoch, tuple(ledger._refusals.items()))


def _wrote_meta(ledger: Ledger, meta: dict[str, Any] | None) -> None:
    """Note the meta the store holds for this ledger now (None: unknown, write it).

    The mark comes from the meta written, not from the ledger, which another
    thread may have changed since.
    """
    ledger._written_meta = meta
    ledger._written_mark = (
        None if meta is None else (meta["turn"], meta["epoch"], tuple(meta["refusals"].items()))
    )


# -- reading records back ------------------------------------------------------------------------


def checked(snapshot: Snapshot, session_id: str, store: object) -> tuple[list[Any], Meta | None]:
    """A snapshot's records and meta, every field checked; a bad one names session and store."""
    from guardrail._saved import validate_meta, validate_records  # pydantic: only when reading

    try:
        records = validate_records(list(snapshot.records))
        meta = None if snapshot.meta is None else validate_meta(snapshot.meta)
    except GuardrailUsageError as exc:
        raise GuardrailUsageError(
            f"session {session_id!r} in {store!r} holds data that is not a ledger's: {exc}. "
            "Delete the session (store.delete(session_id)) or restore it from a backup"
        ) from None
    return list(records), meta


def fill(ledger: Ledger, records: Sequence[Record], meta: Meta | None) -> None:
    """Make an empty ledger the session that ``records`` and ``meta`` describe (checked ones)."""
    with ledger._lock:
        if meta is not None:
            ledger.capacity = meta["capacity"]
            ledger._tombstone_capacity = meta["tombstone_capacity"]
            ledger.seal_key = bytes.fromhex(meta["seal_key"])
            _take_meta(ledger, meta)
            for kind in meta["kinds"]:
                _kind(ledger, kind)
        # In order of first appearance, as the role table lists entries.
        entries = sorted(
            (r for r in records if r["state"] == "live"),
            key=lambda r: (r["first_seen"], r["kind"], r["key"]),
        )
        # Every entry's own role first, then aliases where free: an alias never takes a
        # name that is another entry's role, whichever entry comes first.
        placed: list[tuple[Entry, Record]] = []
        keys: dict[str, list[str]] = {}
        sources: dict[tuple[Any, ...], Source] = {}  # one per call and path, as admission shares
        for record in entries:
            entry = _entry(record, sources)
            entry.aliases = ()  # given below, where free
            kind = entry.kind
            _kind(ledger, kind)
            if ledger._role_taken(entry.role):
                entry.role = ledger._new_role(kind, entry.key, None, entry.status, entry.source)
            ledger._by_kind[kind][entry.key] = entry
            ledger._roles[entry.role] = entry
            keys.setdefault(kind, []).append(entry.key)
            placed.append((entry, record))
        for entry, record in placed:
            free = [name for name in record["aliases"] if not ledger._role_taken(name)]
            if free:
                entry.aliases = tuple(free)
                for name in free:
                    ledger._roles[name] = entry
        for kind, added in keys.items():
            ledger._index[kind].add(added)
        ledger._count()
        marks = sorted((r for r in records if r["state"] != "live"), key=lambda r: r["turn"])
        for record in marks:
            _put(ledger, record)
        _settle(ledger, {record["kind"] for record in entries})
        if ledger._journal is not None:
            ledger._journal.clear()
        _wrote_meta(ledger, meta_of(ledger) if meta is not None else None)
    # The normaliser is authoritative: a key that is not what it makes of the value is re-keyed.
    ledger._use_kinds(ledger._kinds)
    with ledger._lock:
        ledger._evict_over_capacity(spare_current=False)


def absorb(ledger: Ledger, records: Iterable[Record], meta: Meta | None) -> None:
    """Fold what other writers wrote into a live ledger (checked records).

    An id this ledger has not changed since its last write takes the
    store's state; one it changed since is merged as a concurrent write
    is (:func:`~guardrail.stores.merge_record`), and stays unwritten.
    """
    with ledger._lock:
        journal = ledger._journal if ledger._journal is not None else set()
        kinds: set[str] = set()
        for theirs in _keyed(ledger, records):
            name = (theirs["kind"], theirs["key"])
            if name in journal:
                mine = record_of(ledger, name)
                result = merge_record(mine, theirs, concurrent=True)
                if result is mine:
                    continue
            else:
                result = theirs
            _unlink(ledger, name)
            _put(ledger, result)
            kinds.add(name[0])
        if meta is not None:
            mine_meta = meta_of(ledger)
            changed = mine_meta != ledger._written_meta
            _take_meta(ledger, merge_meta(mine_meta, meta, concurrent=True) if changed else meta)
            ledger.seal_key = bytes.fromhex(meta["seal_key"])  # the first writer's, everywhere
            for kind in meta["kinds"]:
                _kind(ledger, kind)
            if not changed:
                _wrote_meta(ledger, meta_of(ledger))
        _settle(ledger, kinds)
        ledger._evict_over_capacity(spare_current=False)


def _keyed(ledger: Ledger, records: Iterable[Record]) -> Iterator[Record]:
    """Records under the key the ledger's normaliser makes of their value.

    The normaliser is authoritative: a stored key that is not what it makes
    of the stored value would vouch for an id nobody saw. A live record
    whose value it cannot read is left out.
    """
    for record in records:
        if record["state"] != "live":
            yield record
            continue
        key = ledger._key(record["kind"], record["value"])
        if key == record["key"]:
            yield record
        elif key is not None:
            yield {**record, "key": key}


def _kind(ledger: Ledger, kind: str) -> None:
    """Give ``kind`` its (empty) table, so kinds keep the order the session first saw them."""
    if kind not in ledger._by_kind:
        ledger._by_kind[kind] = {}
        ledger._index[kind] = KeyIndex()


def _take_meta(ledger: Ledger, meta: Meta) -> None:
    ledger.turn = meta["turn"]
    ledger._epoch = max(ledger._epoch, meta["epoch"])
    ledger._counters = dict(meta["counters"])
    ledger._user_texts.clear()
    ledger._user_texts.extend(meta["user_texts"])
    ledger._refusals = dict(meta["refusals"])


def _unlink(ledger: Ledger, name: Key) -> None:
    """Take out whatever ledger holds for one id, leaving no tombstone: the store says what next."""
    kind, key = name
    table = ledger._by_kind.get(kind)
    entry = table.pop(key, None) if table is not None else None
    if entry is not None:
        for role in (entry.role, *entry.aliases):
            if ledger._roles.get(role) is entry:
                del ledger._roles[role]
        ledger._index[kind].stale += 1
        ledger._size -= 1
        ledger._pinned -= entry.pinned
    ledger._drop_tombstone(name)
    ledger._dropped.pop(name, None)


def _put(ledger: Ledger, record: Record) -> None:
    """Set one id's state from a checked record (nothing held for it)."""
    state = record["state"]
    kind, key = record["kind"], record["key"]
    if state == "live":
        entry = _entry(record)
        ledger._adopt(entry)  # a role another id holds here gives this one a fresh role
    elif state == "evicted":
        if ledger._tombstone_capacity:
            ledger._add_tombstone(
                Tombstone(record["value"], kind, key, record["role"], record["turn"])
            )
    elif state == "dropped":
        ledger._dropped[(kind, key)] = Dropped(
            record["value"], kind, key, record["tool"], record["turn"]
        )
        while len(ledger._dropped) > ledger._tombstone_capacity:
            del ledger._dropped[next(iter(ledger._dropped))]


def _entry(record: Record, sources: dict[tuple[Any, ...], Source] | None = None) -> Entry:
    """A checked live record as an entry of no ledger yet; ``sources`` shares equal sources."""
    raw = record["source"]
    origin = (raw["tool"], raw["call_id"], raw["path"], raw["turn"])
    source = sources.get(origin) if sources is not None else None
    if source is None:
        source = Source(*origin)
        if sources is not None:
            sources[origin] = source
    entry = object.__new__(Entry)
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


def _settle(ledger: Ledger, kinds: set[str]) -> None:
    """Each changed kind's table back in order of least recent use."""
    for kind in kinds:
        table = ledger._by_kind.get(kind)
        if table:
            ordered = sorted(table.values(), key=_recency)
            ledger._by_kind[kind] = {entry.key: entry for entry in ordered}
