"""Records as rows: the short form a store writes, and the records read back from it.

A record (:mod:`guardrail._data.entry`) spelled as a JSON object is mostly its
field names. A row lists the values alone, in a fixed order per state::

    ["live", kind, key, turn, value, role, aliases, [tool, call_id, path, turn],
     first_seen, last_used, verified, status, pinned, epoch]
    ["live", ..., epoch, {"note": ..., "tier": ...}]   # the fields only some entries have
    ["evicted", kind, key, turn, value, role]
    ["dropped", kind, key, turn, value, tool]
    ["gone", kind, key, turn]

It is about half the text, and reading it back makes lists instead of
dictionaries: a cold load parses and builds entries in about half the
time the objects take (10k entries: 25 ms against 49 ms). A record of any
other shape is written as the JSON object it is, and both forms read back
the same.

:class:`Rows` holds what a store parsed: the loader reads the lists
directly (:mod:`guardrail.ledger._rebuild`), and everything else sees
records (dictionaries) as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from guardrail._data.entry import LIVE_FIELDS, LIVE_OPTIONAL, RETIRED_FIELDS, Record

#: The fields of each record state, in the order its row lists them.
FIELDS: dict[str, tuple[str, ...]] = {
    "live": ("state", "kind", "key", "turn", *LIVE_FIELDS),
    "evicted": ("state", "kind", "key", "turn", "value", "role"),
    "dropped": ("state", "kind", "key", "turn", "value", "tool"),
    "gone": ("state", "kind", "key", "turn"),
}
#: A live row's source, in order.
SOURCE: tuple[str, ...] = ("tool", "call_id", "path", "turn")
#: Where a live row holds its source.
SOURCE_AT = FIELDS["live"].index("source")
#: How long a live row is without and with the fields only some entries have.
LIVE_LENGTH = len(FIELDS["live"])
_LIVE_ROW = FIELDS["live"]
#: Every row's (state, length): a row is a list of one of these.
SHAPES = frozenset(
    {(state, len(names)) for state, names in FIELDS.items()} | {("live", LIVE_LENGTH + 1)}
)
#: The fields a live row's last element may hold: those only some entries have, and those
#: earlier development versions wrote (read back as they are; the loader ignores them).
_EXTRA = (*LIVE_OPTIONAL, *RETIRED_FIELDS)
_OPTIONAL = frozenset(_EXTRA)
_NAMES = {state: frozenset(names) for state, names in FIELDS.items()}
_SOURCE_NAMES = frozenset(SOURCE)


def to_row(record: Record) -> list[Any] | Record:
    """A record as the row a store writes; a record of any other shape, as it is."""
    state = record.get("state")
    if type(state) is not str or state not in FIELDS:
        return record
    names = FIELDS[state]
    fields = record.keys()
    extra: dict[str, Any] | None = None
    if fields != _NAMES[state]:
        if state != "live" or not (_NAMES["live"] < fields <= _NAMES["live"] | _OPTIONAL):
            return record
        extra = {name: record[name] for name in _EXTRA if name in record}
    row = [record[name] for name in names]
    if state == "live":
        source = row[SOURCE_AT]
        if type(source) is not dict or source.keys() != _SOURCE_NAMES:
            return record  # its row would read back with a source of another shape
        row[SOURCE_AT] = [source[name] for name in SOURCE]
        if extra is not None:
            row.append(extra)
    return row


def is_row(value: Any) -> bool:
    """Whether a parsed JSON value is a row: a list of a known state and that state's length."""
    if type(value) is not list or not value:
        return False
    names = FIELDS.get(value[0]) if type(value[0]) is str else None
    if names is None:
        return False
    return len(value) == len(names) or (names is _LIVE_ROW and len(value) == LIVE_LENGTH + 1)


def from_row(value: Any) -> Any:
    """What a store parsed of one row, as a record.

    A row of the wrong length or of no known state becomes an object the
    record check refuses (``{"row": [...]}``), so damage is named there,
    never read as something else.
    """
    if type(value) is not list:
        return value
    state = value[0] if value else None
    names = FIELDS.get(state) if type(state) is str else None
    if names is None:
        return {"row": value}
    extra = None
    if state == "live" and len(value) == LIVE_LENGTH + 1:
        extra = value[-1]
        value = value[:-1]
        if type(extra) is not dict or not extra.keys() <= _OPTIONAL:
            return {"row": value}
    if len(value) != len(names):
        return {"row": value}
    record = dict(zip(names, value, strict=True))
    if state == "live":
        source = record["source"]
        if type(source) is list and len(source) == len(SOURCE):
            record["source"] = dict(zip(SOURCE, source, strict=True))
        if extra:
            record.update(extra)
    return record


class Rows(Sequence[Record]):
    """Parsed rows (lists or objects), seen as records: each made a dictionary when read.

    ``values`` is what was parsed, for the loader, which reads lists as they are.
    """

    __slots__ = ("values",)

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...
    def __getitem__(self, index: int | slice) -> Record | Sequence[Record]:
        if isinstance(index, slice):
            return [from_row(value) for value in self.values[index]]
        return from_row(self.values[index])  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[Record]:
        return map(from_row, self.values)

    def __repr__(self) -> str:
        return f"Rows({len(self.values)} records)"
