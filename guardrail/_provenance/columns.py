"""Columns: the ids one field of a list of plain records holds, read a column at a time.

Most results are a list of JSON records, and most producers a path that ends
in one field of each (``orders[*].order_id``). For such a producer, where
every record is a plain dict holding the field as text, :func:`plain_columns`
reads the values, their keys (the kind's normaliser run over the column), the
statuses and the default notes as whole columns, each record's shape (its
field names, in order) worked out once per shape rather than once per
record. It gives exactly what :func:`~guardrail._provenance.harvest.leaves`
and the loop of :func:`~guardrail._provenance.harvest.batches_of` give, or
None where the result is not of that form (a record without the field, a
value that is not text, an empty or over-long one, one the normaliser fails
on or that is an example, a declared note): the general path then reads the
producer from the start. Only the declared field is read as an id, as there.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from itertools import compress
from operator import itemgetter
from typing import Any, NamedTuple

from guardrail._data.batch import Related
from guardrail._declare.paths import KEY, Path, _walk
from guardrail._declare.spec import Producer
from guardrail._provenance.notes import (
    DEFAULT_NOTES,
    FIELD_CHARS,
    _first_id,
    _own_id,
    _related,
    default_fields,
    holder_prefix,
    note_of,
    part_of,
    relation,
)

#: Longest string accepted as one identifier; longer values are reported, not recorded.
MAX_ID_LENGTH = 2048


class Shape(NamedTuple):
    """What the default notes read of a record of one shape (its field names, in order).

    ``own``: the field naming the record's own id (its first id field, else
    its first ``..._number``), or None; ``first``: whether that field is an id
    field (``id``, ``..._id``...); ``fields``: the default note fields it has,
    in the order notes read them.
    """

    own: Any
    first: bool
    fields: tuple[str, ...]


#: Shapes worked out, by their field names in order (cleared when full).
_SHAPES: dict[tuple[Any, ...], Shape] = {}
_SHAPES_KEPT = 256


def shape_of(names: tuple[Any, ...]) -> Shape:
    """The :class:`Shape` of records whose field names are ``names``, in order (kept)."""
    shape = _SHAPES.get(names)
    if shape is None:
        own = _own_id(names)
        first = own is not None and _first_id((own,)) is not None
        shape = Shape(own, first, default_fields(names))
        if len(_SHAPES) >= _SHAPES_KEPT:
            _SHAPES.clear()
        _SHAPES[names] = shape
    return shape


class Columns(NamedTuple):
    """What a producer yields from plain records: a batch's columns, each id once."""

    values: list[str]
    keys: list[str]
    statuses: list[str | None] | None
    notes: list[str | None] | None


class Records:
    """The records a path's parent steps reach in one result, shared by its producers.

    ``holders`` is None where any of them is not a plain dict; ``shapes``,
    each one's :class:`Shape`, is worked out when a default note needs it,
    and ``single`` then, the shape of them all where they share one.
    """

    __slots__ = ("holders", "shapes", "single")

    def __init__(self, holders: list[dict[Any, Any]] | None) -> None:
        self.holders = holders
        self.shapes: list[Shape] | None = None
        self.single: Shape | None = None  # the shape of every one, where they have one


#: The :class:`Records` of one result, by the parent steps that reach them.
Walked = dict[tuple[Any, ...], Records]


def records_at(path: Path, value: Any, walked: Walked) -> Records:
    """The records holding ``path``'s last field in ``value`` (walked once per parent steps)."""
    steps = path.steps[:-1]
    found = walked.get(steps)
    if found is None:
        holders = _walk(steps, [value], False)
        plain = not holders or set(map(type, holders)) == {dict}
        found = walked[steps] = Records(holders if plain else None)
    return found


def plain_columns(
    producer: Producer,
    value: Any,
    walked: Walked,
    normalize: Callable[[str], Any],
    excluded: tuple[Set[str], set[str]],
) -> Columns | None:
    """The columns ``producer`` yields from ``value``, or None: not plain records (see above).

    ``excluded``: the kind's example keys, never harvested, and the keys of
    the kind this harvest found already (the new ones are added to it when
    columns are given; nothing changes otherwise).
    """
    path, fields, status = producer.path, producer.note, producer.status
    if path is None or producer.regex is not None or not path.steps or fields not in ((), None):
        return None
    op, field = path.steps[-1]
    records = records_at(path, value, walked) if op == KEY else None
    holders = None if records is None else records.holders
    if records is None or holders is None:
        return None
    try:
        leaves = list(map(itemgetter(field), holders))
    except KeyError:  # a record without the field: the general path passes it by
        return None
    if not leaves:
        return Columns([], [], None, None)
    lengths = set(map(len, leaves)) if set(map(type, leaves)) == {str} else {0}
    if min(lengths) == 0 or max(lengths) > MAX_ID_LENGTH:
        return None
    try:
        keys = list(map(normalize, leaves))
    except Exception:  # the general path counts what it could not read
        return None
    examples, known = excluded
    found = set(keys)
    if set(map(type, keys)) != {str} or "" in found or not examples.isdisjoint(found):
        return None
    statuses = None if status is None else [_text(holder.get(status)) for holder in holders]
    notes = None
    if fields is None and (status is not None or len(leaves) <= DEFAULT_NOTES):
        if records.shapes is None:
            names = list(map(tuple, holders))
            if len(set(names)) == 1:  # one shape, the usual list: its notes read as columns
                records.single = shape_of(names[0])
                records.shapes = [records.single] * len(names)
            else:
                records.shapes = [_SHAPES.get(held) or shape_of(held) for held in names]
        single = records.single
        notes = None if single is None else column_notes(producer, holders, single, value)
        if notes is None:
            notes = default_notes(producer, holders, records.shapes, value)
        if not any(notes):
            notes = None
    if len(found) == len(keys) and known.isdisjoint(found):
        known |= found
        return Columns(leaves, keys, statuses, notes)
    kept = []  # each id once, where first found, and none another producer of its kind found
    for key in keys:
        fresh = key not in known
        if fresh:
            known.add(key)
        kept.append(fresh)
    return Columns(
        list(compress(leaves, kept)),
        list(compress(keys, kept)),
        None if statuses is None else list(compress(statuses, kept)),
        None if notes is None else list(compress(notes, kept)),
    )


def _text(status: Any) -> str | None:
    return status if isinstance(status, str) else None


def default_notes(
    producer: Producer, holders: list[dict[Any, Any]], shapes: list[Shape], root: Any
) -> list[Any]:
    """The default notes of the ids at ``producer``'s field of ``holders`` (each holds it).

    As :func:`~guardrail._provenance.harvest.leaves` plans them: the record's
    own fields where the producer's field is the record's own id field, then
    which record holds the id (the record's own id, else the root's), as
    :func:`~guardrail._provenance.notes.with_relation` joins them.
    """
    assert producer.path is not None
    own = producer.path.steps[-1][1]
    kind, skip = producer.kind, producer.status
    prefix = holder_prefix(kind, own)
    root_related: Any = _UNSEEN
    notes: list[Any] = []
    append = notes.append
    for holder, shape in zip(holders, shapes, strict=True):
        name = shape.own
        note = related = None
        if name == own:  # the record's own id: its own fields describe it
            fields = shape.fields
            if not shape.first or not fields:
                pass
            elif len(fields) == 1 and fields[0] != skip and type(holder[fields[0]]) is str:
                text = holder[fields[0]]  # one field (a status), the usual case
                note = part_of(text) if 0 < len(text) <= FIELD_CHARS else None
            else:
                note = note_of(holder[name] for name in fields if name != skip)
        elif name is not None:  # which record holds it: that record's own id
            related = _related(prefix, holder.get(name))
        if (name is None or name == own) and holder is not root:  # the root's record holds it
            if root_related is _UNSEEN:
                root_related = relation(kind, None, None, root)
            related = root_related
        if related is None:
            append(note)
        else:
            append(Related(related) if note is None else f"{note}; {related}")
    return notes


def column_notes(
    producer: Producer, holders: list[dict[Any, Any]], shape: Shape, root: Any
) -> list[Any] | None:
    """:func:`default_notes` of records that all have ``shape``, a column at a time; or None.

    None where a record's values need the record-by-record reading: a note
    of several fields, a value that is not text, a holder's id to clean or
    to leave out, the root among the records.
    """
    assert producer.path is not None
    own = producer.path.steps[-1][1]
    name, fields = shape.own, shape.fields
    if id(root) in set(map(id, holders)):
        return None  # the root holds an id of its own: no relation (the general loop)
    if name is not None and name != own:  # each id is of the record that holds it
        parents = list(map(itemgetter(name), holders))
        if set(map(type, parents)) != {str}:
            return None
        lengths = set(map(len, parents))
        joined = "".join(parents)  # all printable, no bracket, no double space: clean() strips
        if min(lengths) == 0 or max(lengths) > FIELD_CHARS or joined != clean_joined(joined):
            return None
        prefix = holder_prefix(producer.kind, own)
        return list(map(Related, map(prefix.__add__, map(str.strip, parents))))
    notes: list[Any]
    if name is None or not shape.first or not fields or fields == (producer.status,):
        notes = [None] * len(holders)  # no note of its own
    elif len(fields) == 1:  # one describing field (a date, a name), the usual case
        texts = list(map(itemgetter(fields[0]), holders))
        if set(map(type, texts)) != {str}:
            return None
        shown = {
            text: part_of(text) if 0 < len(text) <= FIELD_CHARS else None for text in set(texts)
        }
        notes = list(map(shown.__getitem__, texts))
    else:
        return None
    related = relation(producer.kind, None, None, root)  # the root's record holds each
    if related is None:
        return notes
    return [Related(related) if note is None else f"{note}; {related}" for note in notes]


def clean_joined(text: str) -> str:
    """``text`` where :func:`~guardrail._provenance.notes.clean` only strips its parts; else ""."""
    if text.isprintable() and "[" not in text and "]" not in text and "  " not in text:
        return text
    return ""


#: Not worked out yet.
_UNSEEN: Any = object()
