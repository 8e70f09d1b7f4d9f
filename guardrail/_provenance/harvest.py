"""Harvest: a tool result in, the identifiers at its declared places out, as columns.

Only declared places are read: JSON paths into structured results, the
``Id`` fields of models, dataclasses and TypedDicts, and for plain-text
outputs the whole text (``$``) or a regex declared for that one tool. Prose
is never scanned for things that look like ids. What a result yields goes
to the ledger as :class:`Batch` columns, one per producer that found
something, the one form ids travel in from any source to a ledger.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import replace
from itertools import repeat
from typing import Any, NamedTuple, cast

from guardrail._data.batch import Batch
from guardrail._declare.paths import EACH, KEY, Path
from guardrail._declare.spec import Producer, ToolSpec, type_producers
from guardrail._provenance import columns
from guardrail._provenance.columns import Walked, plain_columns
from guardrail._provenance.notes import (
    DEFAULT_NOTES,
    _first_id,
    _own_id,
    _related,
    declared_note,
    default_note,
    holder_prefix,
    relation,
    with_relation,
)
from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind, id_text

#: Longest string accepted as one identifier; longer values are reported, not recorded.
MAX_ID_LENGTH = columns.MAX_ID_LENGTH
#: Longest result text read as a Python literal (``{'order_id': '#W1'}``, as some agent
#: runtimes send a tool's return value); a longer one is read as plain text. Reading one
#: costs ten times or more what JSON of its size does, so the bound is well below any for JSON.
MAX_LITERAL_CHARS = 100_000


class Harvest(NamedTuple):
    """What one result yielded: the batches of ids, and the problems met (never fatal).

    Batches hold only producers that found something.
    """

    batches: list[Batch]
    problems: list[str]


class _Leaves(NamedTuple):
    """What one producer reaches in a result, as columns: the values, statuses and notes.

    ``statuses`` (``notes``) is None when the producer reads no status (note).
    """

    values: list[Any]
    statuses: list[str | None] | None
    notes: list[str | None] | None = None


def _looks_like_json(text: str) -> bool:
    return not plain_text(text)


#: Result types that never hold ids for a tool with no result paths (no annotations to read).
OPAQUE_TYPES: frozenset[type] = frozenset({type(None), bool, int, float, dict, tuple})


def opaque(result: Any) -> bool:
    """Whether ``result`` holds nothing to harvest for a tool that declares no result paths.

    True unless it is a model or a dataclass (or a list of them), or text or
    bytes to parse; decided without walking or parsing anything.
    """
    tp = type(result)
    if tp in OPAQUE_TYPES:
        return True
    if isinstance(result, str):
        return not _looks_like_json(result)
    if isinstance(result, (bytes, bytearray, memoryview)):
        return False
    sample = result[0] if isinstance(result, list) and result else result
    tp = type(sample)
    return not (hasattr(tp, "model_fields") or hasattr(tp, "__dataclass_fields__"))


def plain_text(text: str) -> bool:
    """Whether a text result is read as plain text: it does not look like JSON."""
    head = text[:1]
    if head.isspace():
        head = text.lstrip()[:1]
    if not head:
        return True
    if head in '{["-' or head.isdigit():
        return False
    return head not in "tfn" or text.strip() not in ("true", "false", "null")


#: The scalars a path below the root never reaches into (nor a pattern, which reads text).
_SCALAR_TYPES: frozenset[type] = frozenset({type(None), bool, int, float, str})


def quiet_results(spec: ToolSpec, *, mentions: bool) -> frozenset[type]:
    """The types of result that bring nothing in, after a call whose every id was held.

    Recording such a result adds nothing to the ledger and reports nothing
    above DEBUG, so a caller may skip it when DEBUG is off. ``str`` stands
    for a text that is :func:`plain_text` (a JSON text is decoded and read).
    ``mentions``: the guard takes mentions or keeps result text, which any
    result may hold. A tool that mints or confirms its arguments always records.

    - no declared result paths: whatever :func:`opaque` reads as holding nothing
      (annotations are read only on models, dataclasses and lists);
    - declared paths, none at the root and no pattern: scalars and plain text,
      which no path below the root reaches into, unless the failure rule has
      a function (one that raises is reported as a warning).
    """
    if spec.mints or spec.confirms_arguments or mentions:
        return frozenset()
    if not spec.produces:
        return OPAQUE_TYPES | {str}
    reads_text = any(
        producer.regex is not None or producer.path is None or producer.path.is_root
        for producer in spec.produces
    )
    if reads_text or spec.fails.checks:
        return frozenset()
    return _SCALAR_TYPES


def yields_nothing(spec: ToolSpec, result: Any) -> bool:
    """Whether :func:`harvest` is sure to find nothing in ``result`` and report nothing.

    A tool that declares no result paths and returns an :func:`opaque`
    result costs nothing after it runs.
    """
    return not spec.produces and opaque(result)


def decode(result: Any, problems: list[str]) -> tuple[Any, str | None]:
    """The structured value and the plain text of a result (either may be missing).

    The plain text, which ``re:`` producers read, is a text that is not JSON,
    or the decoded text of a JSON string or scalar: never the text of a JSON
    object or array, whose fields only paths may read.
    """
    if isinstance(result, (bytes, bytearray, memoryview)):
        try:
            result = bytes(result).decode("utf-8")
        except UnicodeDecodeError:
            problems.append("result is bytes that are not UTF-8 text; nothing harvested")
            return None, None
    if not isinstance(result, str):
        return result, None
    text = result
    if _looks_like_json(text):
        try:
            value = json.loads(text)
        except RecursionError:
            problems.append("result is JSON nested too deeply to parse; nothing harvested")
            return None, None
        except ValueError:
            literal = _python_literal(text, problems)
            if literal is _NOT_LITERAL:
                return text, text
            return literal, None
        if isinstance(value, (dict, list)):
            return value, None
        return value, value if isinstance(value, str) else text
    return text, text


#: What :func:`_python_literal` returns for a text that is not a plain Python literal.
_NOT_LITERAL: Any = object()
#: A quoted string as ``repr`` writes one: no prefix, escapes allowed, no raw line break.
_STRING = "|".join((r"'(?:[^'\\\n]|\\.)*'", r'"(?:[^"\\\n]|\\.)*"'))
#: The tokens of a dict or list as ``repr`` writes it: strings, numbers, True, False,
#: None, and runs of brackets, commas, colons and white space. A text is such a literal
#: when removing them leaves nothing: one pass, no backtracking from token to token.
_LITERAL_TOKENS = re.compile(
    rf"{_STRING}"
    r"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?(?![\w.])"
    r"|(?:True|False|None)(?!\w)"
    r"|[{}\[\],:\s]+"
)
#: What differs from JSON in such a text: its strings, and the three names.
_NOT_JSON = re.compile(rf"({_STRING})|True|False|None")
_NAMES = {"True": "true", "False": "false", "None": "null"}


def _python_literal(text: str, problems: list[str]) -> Any:
    """A dict or list written as Python's ``repr`` writes it, or :data:`_NOT_LITERAL`.

    Some runtimes send a tool's return value as ``str(value)``:
    ``{'order_id': '#W1', 'ok': True}``. It is read like JSON, and nothing in
    it is ever run: the text must consist of quoted strings, numbers,
    ``True``, ``False``, ``None``, brackets, commas and colons only (a call,
    any other name, a tuple, bytes or arithmetic make it plain text); it is
    then rewritten as JSON and parsed as JSON, so a set, a key that is not a
    string or deep nesting fail as they would there. A string with a
    backslash escape is read by :func:`ast.literal_eval`, that one string
    token alone. Text over :data:`MAX_LITERAL_CHARS` is not read.
    """
    if text.lstrip()[:1] not in ("{", "["):
        return _NOT_LITERAL
    if len(text) > MAX_LITERAL_CHARS:
        problems.append(
            f"result is text of over {MAX_LITERAL_CHARS} characters that is not JSON; "
            "read as plain text"
        )
        return _NOT_LITERAL
    if _LITERAL_TOKENS.sub("", text):
        return _NOT_LITERAL  # something no such literal holds: a call, a name, a tuple...
    try:
        value = json.loads(_NOT_JSON.sub(_as_json, text))
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return _NOT_LITERAL
    return value if isinstance(value, (dict, list)) else _NOT_LITERAL


def _as_json(match: re.Match[str]) -> str:
    """One string or name of a Python literal, written as JSON."""
    token = match.group()
    if match.group(1) is None:
        return _NAMES[token]
    if "\\" in token:
        return json.dumps(ast.literal_eval(token), ensure_ascii=False)  # one string token
    if token[0] == '"':
        return token  # no escape and no double quote inside: already JSON
    body = token[1:-1]
    return f'"{body}"' if '"' not in body else json.dumps(body, ensure_ascii=False)


def leaves(
    producer: Producer, value: Any, text: str | None, own_ids: dict[int, Any] | None = None
) -> _Leaves:
    """The values a producer reaches, with the status beside each where it reads one.

    ``own_ids``: the field naming each record's own id met so far in this result, by the
    record's ``id()`` (shared by the producers of one harvest, which read the same records).
    """
    if producer.regex is not None:
        if text is None:
            return _Leaves([], None)
        group = 1 if producer.regex.groups else 0
        return _Leaves([m.group(group) for m in producer.regex.finditer(text)], None)
    path = producer.path
    assert path is not None
    if path.is_root:
        return _Leaves([value.strip() if isinstance(value, str) else value], None)
    fields = producer.note
    if producer.status is None and fields == ():
        return _Leaves(path.extract(value), None)
    if producer.status is None and fields is None:
        found = path.extract(value)
        if len(found) > DEFAULT_NOTES:  # a flood: no default notes, no cost per id
            return _Leaves(found, None)
    values: list[Any] = []
    statuses: list[str | None] | None = None if producer.status is None else []
    notes: list[str | None] | None = None if fields == () else []
    last_op, own = path.steps[-1]  # a default note describes the record whose own id this is
    own = own if last_op == KEY else None
    kind = producer.kind
    # Default notes of plain records, planned once per producer: the record's own id field
    # is read once per record (and shared with the other producers), how a related record
    # is named once per producer, and the root's relation once per result.
    planned = fields is None and own is not None
    own_ids = {} if own_ids is None else own_ids
    prefix = holder_prefix(kind, own) if planned else ""
    root_related: Any = _UNSEEN
    for leaf, holder in path.extract_with_parents(value):
        values.append(leaf)
        if statuses is not None:
            if isinstance(holder, Mapping):
                status = holder.get(producer.status)
            else:  # a model or dataclass holds its status as an attribute
                status = getattr(holder, cast(str, producer.status), None)
            statuses.append(status if isinstance(status, str) else None)
        if notes is None:
            continue
        # Text for the model only: a note is never harvested and never verifies. A bare id
        # in a list (its holder the list) has no record: it keeps the note it has.
        if planned and type(holder) is dict:
            name = own_ids.get(id(holder), _UNSEEN)
            if name is _UNSEEN:
                name = own_ids[id(holder)] = _own_id(holder)
            # As default_note and relation read a record (see guardrail._provenance.notes):
            # the note when the record's first id field holds this id, the relation when the
            # record names itself otherwise (its own id field, else its ``..._number``).
            first = name if name is not None and _first_id((name,)) else None
            note = default_note(holder, producer.status) if first == own else None
            if name is not None and name != own:
                related = _related(prefix, holder.get(name))
            elif holder is value:
                related = None
            else:
                if root_related is _UNSEEN:
                    root_related = relation(kind, None, None, value)
                related = root_related
            notes.append(with_relation(note, related))
            continue
        if fields is not None:
            note = declared_note(holder, fields)
        else:
            note = default_note(holder, producer.status, own)
        if not isinstance(holder, (list, tuple)):
            note = with_relation(note, relation(kind, own, holder, value))
        notes.append(note)
    if notes is not None and not any(notes):
        notes = None
    return _Leaves(values, statuses, notes)


#: Not looked up yet.
_UNSEEN: Any = object()


def _structured_producers(value: Any, problems: list[str]) -> tuple[Producer, ...]:
    """Producers read from the annotations of a model, dataclass or list of them."""
    sample = value[0] if isinstance(value, list) and value else value
    tp = type(sample)
    if not (hasattr(tp, "model_fields") or hasattr(tp, "__dataclass_fields__")):
        return ()
    try:
        found = type_producers(cast(Any, tp))
    except GuardrailUsageError as exc:
        problems.append(str(exc))
        return ()
    if sample is value:
        return found
    return tuple(
        replace(p, path=Path(f"[*].{p.path.text}", ((EACH, None), *p.path.steps)))
        for p in found
        if p.path is not None
    )


def harvest(spec: ToolSpec, result: Any, kinds: Mapping[str, Kind]) -> Harvest:
    """Every identifier ``spec`` declares in ``result``, each kind's normaliser applied.

    A tool that declares no result paths is read by the ``Id`` annotations
    of the model or dataclass it returned. Duplicates are reported once.
    Example values of a kind are never harvested: they are placeholders,
    whatever a tool says.
    """
    problems: list[str] = []
    value, text = decode(result, problems)
    return batches_of(spec, value, text, problems, kinds)


def batches_of(
    spec: ToolSpec, value: Any, text: str | None, problems: list[str], kinds: Mapping[str, Kind]
) -> Harvest:
    """The batches of a decoded result (see :func:`decode`), and the problems met reading it."""
    # A tool that declares no result paths is read by the annotations of what it returned.
    plan = spec.produces or _structured_producers(value, problems)
    if not plan:
        return Harvest([], problems)
    seen: dict[str, set[str]] = {}  # keys already found, per kind
    own_ids: dict[
        int, Any
    ] = {}  # the field naming each record's own id, read once for every producer
    batches: list[Batch] = []
    skipped = 0
    unreadable = 0  # values the kind's normaliser failed on: skipped, the rest still recorded
    walked: Walked = {}  # the records each path's parent steps reach, walked once
    for producer in plan:
        name = producer.kind
        kind = kinds[name]
        normalize = kind.normalize
        examples = kind.examples
        known = seen.setdefault(name, set())
        # A field of a list of plain records, read a column at a time where it can be.
        columns = plain_columns(producer, value, walked, normalize, (examples, known))
        if columns is not None:
            if columns.values:
                batches.append(_batch(spec, producer, *columns))
            continue
        values: list[str] = []
        keys: list[str] = []
        statuses: list[str | None] | None = None if producer.status is None else []
        reach = leaves(producer, value, text, own_ids)
        notes: list[str | None] | None = None if reach.notes is None else []
        found = reach.statuses if reach.statuses is not None else repeat(None)
        noted = reach.notes if reach.notes is not None else repeat(None)
        for leaf, status, note in zip(reach.values, found, noted, strict=False):
            raw = leaf if type(leaf) is str else id_text(leaf)
            if raw is None or not raw or len(raw) > MAX_ID_LENGTH:
                skipped += leaf is not None
                continue
            try:
                key = normalize(raw)
            except Exception:
                key = None
            if type(key) is not str:
                unreadable += 1
                continue
            if not key or key in examples:
                skipped += 1
                continue
            if key in known:
                continue
            known.add(key)
            values.append(raw)
            keys.append(key)
            if statuses is not None:
                statuses.append(status)
            if notes is not None:
                notes.append(note)
        if values:
            batches.append(_batch(spec, producer, values, keys, statuses, notes))
    if skipped:
        problems.append(
            f"{skipped} value(s) at declared paths were not identifiers "
            f"(not text or numbers, empty, example values, or over {MAX_ID_LENGTH} characters)"
        )
    if unreadable:
        problems.append(unreadable_problem(unreadable))
    return Harvest(batches, problems)


def _batch(
    spec: ToolSpec,
    producer: Producer,
    values: list[str],
    keys: list[str],
    statuses: list[str | None] | None,
    notes: list[str | None] | None,
) -> Batch:
    """The batch of what ``producer`` of ``spec`` found."""
    outside = producer.outside or spec.outside
    return Batch(
        producer.kind,
        producer.source,
        producer.role,
        values,
        keys,
        statuses,
        notes,
        outside=outside,
    )


def unreadable_problem(count: int) -> str:
    """The problem reported for ``count`` values a kind's normaliser could not read."""
    return (
        f"{count} value(s) at declared paths could not be read by their kind's normaliser "
        "(it failed or gave no text); skipped, the rest recorded"
    )


def append_id(
    batches: list[Batch], kind: str, path: str, value: str, key: str, role: str | None = None
) -> None:
    """Add one id to ``batches``, in order: to the last batch when its kind and path are these."""
    last = batches[-1] if batches else None
    if last is None or last.kind != kind or last.path != path:
        batches.append(Batch.one(kind, value, key, path, role=role))
    else:
        last.values.append(value)
        last.keys.append(key)
