"""Records as JSON text and back, fast: the stores' one encoding, of rows.

A row is a record's short form (:mod:`guardrail._data.rows`).

Text from a JSON request may hold a lone surrogate (``"\\ud83d"``, half an
emoji cut off): a ``str`` holds it, but no UTF-8 codec encodes it, so a
database driver refuses the whole write. The JSON text written here escapes
each one (``\\ud83d``, which reads back as the same character), and
:func:`has_surrogates` tells a store which names and ids it must store
another way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from guardrail._data.entry import Record
from guardrail._data.rows import SHAPES, Rows, from_row, is_row, to_row

#: One encoder for every record: json.dumps with options builds a new encoder per call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SURROGATE = re.compile("[\ud800-\udfff]")


def encode(value: Any) -> str:
    """One value as JSON text that any UTF-8 codec encodes: lone surrogates escaped."""
    text = _encode(value)
    if has_surrogates(text):
        # A surrogate can only stand inside a JSON string, where its escape means the same.
        return _SURROGATE.sub(_escaped, text)
    return text


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate, which no UTF-8 codec encodes."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")  # a few times faster than searching for one
    except UnicodeEncodeError:
        return True
    return False


def decode(text: str) -> Any:
    """One JSON text."""
    return json.loads(text)


def encode_record(record: Record) -> str:
    """A record as the JSON text of its row: what every store writes."""
    return encode(to_row(record))


def decode_record(text: str | bytes) -> Record:
    """One stored row's JSON text as a record; a ValueError if it holds anything else."""
    value = json.loads(text)
    if type(value) is not dict and not is_row(value):
        raise ValueError(f"a row holds a JSON {type(value).__name__}, not a record")
    return from_row(value)  # type: ignore[no-any-return]


def decode_rows(texts: Iterable[str | bytes]) -> Rows:
    """Each row's JSON text parsed alone: exactly one row (an array) or record (an object) each.

    A row holding anything else (two values, text after the value, a value
    of another type) is a ValueError naming what it holds: rows are never
    parsed together, so no row can pass for two records. pydantic-core's
    parser (a dependency already) reads a row about twice as fast as the
    standard library's; both refuse text after the value.
    """
    values = _parsed(texts, (list, dict))
    try:  # every row's (state, length) at once: a call per row would cost a third of the parse
        shapes = {(value[0], len(value)) for value in values if type(value) is list}
    except (IndexError, TypeError):  # an empty list, or one led by a list or an object
        shapes = {("", -1)}
    if not shapes <= SHAPES:
        bad = next(value for value in values if type(value) is list and not is_row(value))
        raise ValueError(f"a row holds a JSON list that is not a record's row: {bad!r:.80}")
    return Rows(values)


def _parsed(texts: Iterable[str | bytes], kinds: tuple[type, ...]) -> list[Any]:
    """Each text parsed alone, each a value of one of ``kinds``."""
    from pydantic_core import from_json  # here: `import guardrail` does not load it

    texts = texts if isinstance(texts, list) else list(texts)
    try:  # each row alone, in C
        out: list[Any] = list(map(from_json, texts))
    except ValueError:
        pass  # one of them needs the standard library (below), or names the row at fault
    else:
        if set(map(type, out)).issubset(kinds):
            return out
    out = []
    append = out.append
    for text in texts:
        try:
            value = from_json(text)
        except ValueError:  # it refuses an escaped lone surrogate, which json reads back
            value = json.loads(text)  # and refuses text after the value alike
        if type(value) not in kinds:
            raise ValueError(f"a row holds a JSON {type(value).__name__}, not a record")
        append(value)
    return out
