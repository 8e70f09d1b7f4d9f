"""Notes: a few words from the record an id came from, so a model can tell one id from another.

``order`` and ``order_2`` are two orders; "Kettle K2; delivered" and
"Vortex 900 blender; pending" say which is which. A note is read beside the
id, from the fields its producer names (``Id("order", note=["items[*].name",
"status"])``) or, by default, from the short text fields a record usually
describes itself with (``name``, ``title``, ``status``, ``date``...).

A note is text for the model, nothing more: it is never harvested and never
verifies anything. It is cleaned when read (one line, printable, no square
brackets, so it cannot forge a block line or a ``[role]``) and bounded
(:data:`NOTE_FIELDS` fields, :data:`NOTE_CHARS` characters); ids of other
entries inside it are shown by role when the ledger is written
(:func:`by_role`).

An id inside a nested record (an order's items, a reservation's flights),
or in a field of a record with an id of its own (a reservation's origin),
also keeps which record holds it (``item of W1000002``, shown ``item of
[order_2]``; ``origin of [reservation_2]``). What a block shows of a note
is chosen when the block is written (:func:`choose`): for each kind, an
entry's first part, then the shortest of its other parts that tell it
apart from the other entries of its kind in that block. One part comes
from the conversation rather than a result: ``named by the user``, for an
id the user's texts name where its kind has others (:func:`named_by_user`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

from guardrail._data.batch import Related
from guardrail._data.entry import Entry
from guardrail._declare.paths import Path

#: At most this many fields make a note.
NOTE_FIELDS = 4
#: A note is at most this many characters (a field's value at most :data:`FIELD_CHARS`).
NOTE_CHARS = 80
#: At most this many characters of one field's value.
FIELD_CHARS = 40
#: At most this many items of a list field (``items[*].name``).
LIST_ITEMS = 3
#: Default notes are read where one producer finds at most this many ids in a result: a
#: list of thousands is not told apart one by one, and a flood costs no more than its ids.
DEFAULT_NOTES = 1000
#: The fields a record usually describes itself with, read when a producer names none.
DEFAULT_FIELDS = (
    "name",
    "title",
    "label",
    "description",
    "status",
    "state",
    "type",
    "date",
    "created_at",
    "brand",
    "last_four",
    "amount",
    "price",
)
#: Lines of one kind alike in first part and status beyond which each is told apart by its
#: rarest parts rather than weighed against every other one: the work stays linear.
MAX_RIVALS = 32
#: A stored note: its own fields (at most :data:`NOTE_CHARS`), then which record holds it.
STORED_CHARS = 2 * NOTE_CHARS + 2
#: The part a block adds to an entry whose value the user named, where its kind has others.
NAMED = "named by the user"
#: At most this many characters of each kept user text are read for the ids it names.
NAMED_CHARS = 20_000
_SEPARATOR = "; "
_ELLIPSIS = "…"
_TOKEN = re.compile(r"[^\s,;()]+")
_WORD_RUN = re.compile(r"\w+")
_EDGES = "\"'`()[]{}<>.,;:!?"
#: The words of the user texts read last, by their first :data:`NAMED_CHARS` characters.
_WORDS_KEPT = 32
_WORDS_READ: dict[str, frozenset[str]] = {}


_DEFAULT_SET = frozenset(DEFAULT_FIELDS)


def clean(text: str) -> str:
    """``text`` as a note may hold it: one line of printable characters, no square brackets.

    A line break, a tab or any other character that does not print (a
    direction override among them) becomes a space; ``[`` and ``]`` become
    parentheses, so the only ``[role]`` a note shows is one the ledger wrote.
    """
    if text.isprintable() and "[" not in text and "]" not in text and "  " not in text:
        return text.strip()  # the usual case: nothing to change (str.isprintable is C)
    printable = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(printable.replace("[", "(").replace("]", ")").split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + _ELLIPSIS


def _scalar(value: Any) -> str | None:
    """The text of a scalar a note can show (a string, a number), else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def _part(text: str) -> str:
    """One field's value as a note shows it: cleaned, at most :data:`FIELD_CHARS` long.

    Only its start is read: a field of a megabyte costs no more than one of a line.
    """
    return _clip(clean(text[: FIELD_CHARS * 4]), FIELD_CHARS)


def compose(parts: Sequence[str]) -> str | None:
    """A note of field values: each cleaned and clipped, joined, bounded; None when empty."""
    kept = []
    for part in parts:
        text = _part(part)
        if text and text not in kept:
            kept.append(text)
        if len(kept) == NOTE_FIELDS:
            break
    return _clip(_SEPARATOR.join(kept), NOTE_CHARS) if kept else None


def relation(kind: str, field: str | None, holder: Any, root: Any) -> str | None:
    """Which record holds an id of ``kind`` found at ``field`` of ``holder``: ``item of W1000002``.

    An id in a field of a record that has an id of its own (a reservation's
    ``origin``; a searched flight's, named by its ``flight_number``) is that
    field of it: ``origin of ZFA04Y``, ``origin of HAT136``. An id in a
    record nested in ``root`` (an order's items, a reservation's flights)
    is an id of ``kind`` of the root's record, when the root has an id of
    its own (its first id field holds a text or a number): ``flight of
    ZFA04Y``. The record's id is shown by role in a block. None otherwise.
    """
    if field is not None and isinstance(holder, Mapping):
        name = _own_id(holder.keys())
        if name is not None and name != field:
            return _related(holder_prefix(kind, field), holder.get(name))
    if holder is root or not isinstance(root, Mapping):
        return None
    name = _first_id(root.keys())
    return _related(holder_prefix(kind, None), root.get(name)) if name is not None else None


def holder_prefix(kind: str, field: Any) -> str:
    """How a note names the record holding an id of ``kind`` found at ``field``: ``origin of ``.

    An id field (``customer_id``) says its kind; another (``origin``) says its
    name; None (an id of a record nested in the root's) says the kind. Kept
    per kind and field: every id of a column shares one.
    """
    prefix = _PREFIXES.get((kind, field))
    if prefix is None:
        label = kind if field is None or _first_id((field,)) else str(field)
        prefix = f"{clean(label)[:FIELD_CHARS]} of "
        if len(_PREFIXES) >= _PREFIXES_KEPT:
            _PREFIXES.clear()
        _PREFIXES[(kind, field)] = prefix
    return prefix


#: :func:`holder_prefix` by kind and field (cleared when full).
_PREFIXES: dict[tuple[str, Any], str] = {}
_PREFIXES_KEPT = 256


def _own_id(fields: Iterable[Any]) -> Any:
    """The field naming a record's own id: its first id field, else its first ``..._number``.

    A flight names itself by its ``flight_number``, an invoice by its
    ``invoice_number``: the airport in a searched flight's ``origin`` is the
    origin of that flight.
    """
    number = None
    for name in fields:  # one pass: a record's fields are read for every id it holds
        if isinstance(name, str):
            if name == "id" or name.endswith(("_id", "Id", "_ID")):
                return name
            if number is None and name.endswith("_number"):
                number = name
    return number


def _related(prefix: str, parent: Any) -> str | None:
    text = _scalar(parent)
    if not text or len(text) > FIELD_CHARS:
        return None
    return prefix + clean(text)


def with_relation(note: str | None, related: str | None) -> str | None:
    """A note as stored: the record's own fields, then the record that holds it.

    With no field of its own it is :class:`Related`: it fills an empty note only.
    """
    if related is None:
        return note
    return Related(related) if note is None else f"{note}{_SEPARATOR}{related}"


def declared_note(holder: Any, fields: Sequence[Path]) -> str | None:
    """The note of the record ``holder`` from the declared ``fields`` (paths into it)."""
    parts = []
    for field in fields:
        found = []
        for value in field.extract(holder):  # a list of names is its names
            items = value if isinstance(value, (list, tuple)) else [value]
            found += [_scalar(item) for item in items]
        texts = list(dict.fromkeys(text for text in found if text))  # two legs, one date
        if texts:
            parts.append(", ".join(texts[:LIST_ITEMS]))
    return compose(parts)


def default_note(holder: Any, skip: str | None, key: str | None = None) -> str | None:
    """The note of ``holder`` from its short text fields among :data:`DEFAULT_FIELDS`.

    ``skip`` is a field shown apart (the producer's status). ``key`` is the
    field holding the id (None: the id is the record's key, ``.~``): a record
    describes itself, not the others it names, so the note is read only when
    ``key`` is the record's first id field (``id``, ``..._id``, ``...Id``): an
    order's ``customer_id`` takes no note from the order. Only a mapping or an
    object with those attributes has any; a long text is no note.
    """
    if type(holder) is dict:  # the usual holder, read without a call per field
        names = holder.keys() & _DEFAULT_SET
        if not names or (key is not None and _first_id(holder) != key):
            return None
        values = [holder[name] for name in _in_order(names) if name != skip]
    elif isinstance(holder, Mapping):
        if key is not None and _first_id(holder) != key:
            return None
        values = [holder.get(name) for name in DEFAULT_FIELDS if name != skip]
    elif hasattr(type(holder), "model_fields") or hasattr(holder, "__dataclass_fields__"):
        fields = getattr(type(holder), "model_fields", None) or holder.__dataclass_fields__
        if key is not None and _first_id(fields) != key:
            return None
        values = [getattr(holder, name, None) for name in DEFAULT_FIELDS if name != skip]
    else:
        return None
    return note_of(values)


def note_of(values: Iterable[Any]) -> str | None:
    """The note of a record's default field ``values``, in order: the short texts and numbers."""
    parts = []
    for value in values:
        text = _scalar(value) if value is not None else None
        if text and len(text) <= FIELD_CHARS:
            parts.append(text)
    if len(parts) == 1:
        return part_of(parts[0])  # one field (a status), the usual case
    return compose(parts) if parts else None


def default_fields(names: Iterable[Any]) -> tuple[str, ...]:
    """The :data:`DEFAULT_FIELDS` among a record's field ``names``, in the order notes read them."""
    held = _DEFAULT_SET.intersection(names)
    return tuple(name for name in DEFAULT_FIELDS if name in held) if held else ()


#: One field's value as a note shows it, by the value (statuses, dates and names repeat).
_PARTS: dict[str, str | None] = {}
_PARTS_KEPT = 4096
_UNREAD = "\x00"  # no note: a part is cleaned of characters that do not print


def part_of(text: str) -> str | None:
    """A note of one field's value (:func:`_part`, None when nothing is left), kept per value."""
    note = _PARTS.get(text, _UNREAD)
    if note is not _UNREAD:  # (a get, not `in` and a lookup: another thread may clear it)
        return note
    note = _part(text) or None
    if len(_PARTS) >= _PARTS_KEPT:
        _PARTS.clear()
    _PARTS[text] = note
    return note


def _first_id(fields: Iterable[Any]) -> Any:
    """The first field name that names an id (``id``, ``..._id``, ``...Id``), or None."""
    for name in fields:
        if isinstance(name, str) and (name == "id" or name.endswith(("_id", "Id", "_ID"))):
            return name
    return None


def _in_order(names: set[str]) -> list[str]:
    """``names`` in the order of :data:`DEFAULT_FIELDS` (one name, the usual case, as is)."""
    return list(names) if len(names) == 1 else [n for n in DEFAULT_FIELDS if n in names]


def bounded(note: str) -> str:
    """A note as it may be kept, whatever wrote it (a store, a saved ledger): clean, bounded."""
    return _clip(clean(note[: STORED_CHARS * 4]), STORED_CHARS)


def parts(note: str) -> list[str]:
    """The parts of a note (its fields, the record holding it), each once, in order."""
    return list(dict.fromkeys(part for part in note.split(_SEPARATOR) if part))


def named_by_user(entries: Sequence[Entry], texts: Iterable[str]) -> set[str]:
    """The roles of ``entries`` the user named: a fact that tells an id from others of its kind.

    ``texts``: the user's texts the ledger keeps. An entry counts when its
    value is a word of them (as typed, or inside quotes or punctuation), its
    kind has other entries among ``entries`` the user did not name (a lone
    id needs no telling apart, nor one of a kind the user named whole), and
    a result produced or vouched for it: an id the user typed and nothing
    confirmed shows ``unverified`` already. The part a block
    shows is :data:`NAMED`, never the user's words; it adds no entry and
    verifies nothing. The work is one pass over each text (read to
    :data:`NAMED_CHARS`, once while it is kept) and a look-up per entry and
    text, however many ids the texts name.
    """
    kinds: dict[str, int] = {}
    for entry in entries:
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
    asked = [e for e in entries if kinds[e.kind] > 1]
    if not asked:
        return set()
    held = [_words(text) for text in texts]
    named = [entry for entry in asked if any(entry.value in words for words in held)]
    counts: dict[str, int] = {}
    for entry in named:
        counts[entry.kind] = counts.get(entry.kind, 0) + 1
    # Where the user named every one of a kind, naming tells none of them apart.
    return {e.role for e in named if e.verified and counts[e.kind] < kinds[e.kind]}


def _words(text: str) -> frozenset[str]:
    """The words of a user text's first :data:`NAMED_CHARS` characters, trimmed, and their runs.

    Worked out once per text: a kept text is read again at every block until it goes.
    """
    head = text[:NAMED_CHARS]  # a text within the bound is itself: its hash is kept
    found = _WORDS_READ.get(head)
    if found is None:
        words = head.split()  # each word, and without the punctuation around it, and its runs
        found = frozenset(words).union(map(str.strip, words, repeat(_EDGES, len(words))))
        found |= frozenset(_WORD_RUN.findall(head))
        if len(_WORDS_READ) >= _WORDS_KEPT:
            _WORDS_READ.clear()
        _WORDS_READ[head] = found
    return found


class Noted(NamedTuple):
    """One line of a block that has a note: its role, kind, status and note parts."""

    role: str
    kind: str
    status: str | None
    parts: list[str]


def choose(lines: Iterable[Noted]) -> dict[str, str]:
    """``{role: note}`` as a block shows them: what tells each line from the others of its kind.

    A note shows its first part (the record's name, as its producer lists
    fields), then, shortest first, each other part that tells it from more
    of the other lines of its kind (one with another status is told apart
    already), until every one is told apart, nothing more helps, or
    :data:`NOTE_FIELDS` parts are shown; the parts keep their order, and
    the note is at most :data:`NOTE_CHARS` long. A kind's lone line shows
    its first part. Among more than :data:`MAX_RIVALS` lines alike in first
    part and status, each takes its rarest parts instead.
    """
    kinds: dict[str, list[Noted]] = {}
    for line in lines:
        if line.parts:
            kinds.setdefault(line.kind, []).append(line)
    shown: dict[str, str] = {}
    for group in kinds.values():
        if len(group) == 1:
            (line,) = group
            shown[line.role] = _shown(line.parts[0])
            continue
        holders: dict[str, set[int]] = {}
        statuses: dict[str | None, set[int]] = {}
        for at, line in enumerate(group):
            for part in line.parts:
                holders.setdefault(part, set()).add(at)
            statuses.setdefault(line.status, set()).add(at)
        classes: dict[tuple[str, str | None], set[int]] = {}
        for at, line in enumerate(group):
            parts = line.parts
            # The lines the first part and the status do not tell apart (this one among them).
            key = (parts[0], line.status)
            same = classes.get(key)
            if same is None:
                same = classes[key] = holders[key[0]] & statuses[key[1]]
            if len(same) > MAX_RIVALS:
                chosen = _rarest(parts, holders)
            else:
                chosen = _telling(at, parts, same, holders)
            shown[line.role] = _shown(_SEPARATOR.join(parts[i] for i in sorted(chosen)))
    return shown


def _telling(at: int, parts: list[str], same: set[int], holders: dict[str, set[int]]) -> set[int]:
    """The parts shown of line ``at``: its first, then, shortest first, those telling it apart.

    ``same``: the lines its first part and status do not tell it from (itself
    among them); ``holders``: the lines that hold each part.
    """
    pending = same - {at}
    chosen = {0}
    order = sorted(range(1, len(parts)), key=lambda i: len(parts[i]))
    while pending and order and len(chosen) < NOTE_FIELDS:
        best, told = 0, 0
        for i in order:
            count = len(pending) - len(pending & holders[parts[i]])
            if count > told:
                best, told = i, count
                if count == len(pending):
                    break
        if not told:
            break
        chosen.add(best)
        order.remove(best)
        pending &= holders[parts[best]]
    return chosen


def _rarest(parts: list[str], holders: dict[str, set[int]]) -> set[int]:
    """The parts shown of a line among too many alike to weigh each: its first, then its rarest.

    Shortest among equally rare, up to the first part no other line holds.
    The work is bounded by the line's own parts, however many lines are alike.
    """
    chosen = {0}
    for i in sorted(range(1, len(parts)), key=lambda i: (len(holders[parts[i]]), len(parts[i]))):
        if len(chosen) == NOTE_FIELDS:
            break
        chosen.add(i)
        if len(holders[parts[i]]) == 1:
            break
    return chosen


def _shown(note: str) -> str:
    """A chosen note within :data:`NOTE_CHARS`, never cut inside a ``[role]``."""
    if len(note) <= NOTE_CHARS:
        return note
    cut = _clip(note, NOTE_CHARS)
    opened = cut.rfind("[")
    return cut if opened < cut.rfind("]") else cut[:opened].rstrip() + _ELLIPSIS


def by_role(note: str, lookup: Callable[[str], str | None]) -> str:
    """``note`` with every word that names a ledger entry shown as its ``[role]``.

    ``lookup`` gives the role a word names, or None. A note is text for the
    model: an id in it is shown by the name the model uses for it, and is no
    more than text.
    """

    def named(match: re.Match[str]) -> str:
        word = match.group()
        role = lookup(word)
        return f"[{role}]" if role is not None else word

    return _TOKEN.sub(named, note)
