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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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
)
_SEPARATOR = "; "
_ELLIPSIS = "…"
_TOKEN = re.compile(r"[^\s,;()]+")


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
    parts = []
    for value in values:
        text = _scalar(value) if value is not None else None
        if text and len(text) <= FIELD_CHARS:
            parts.append(text)
    if len(parts) == 1:
        return _part(parts[0]) or None  # one field (a status), the usual case
    return compose(parts) if parts else None


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
    """A note as it may be shown, whatever wrote it (a store, a saved ledger): clean, bounded."""
    return _clip(clean(note[: NOTE_CHARS * 4]), NOTE_CHARS)


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
