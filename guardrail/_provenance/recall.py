"""Recall: the harvest of a record a tool returned before, read again without the walk.

What a result yields (its batches: values, keys, statuses, notes) depends on
the tool's spec, the guard's kinds and the result alone, never on a ledger.
A read that returns the record it returned before (``get_order`` twice, or
once per turn) yields the very batches, so for a tool whose every producer
reads one top-level field, the last such records are kept with their
batches, and a result equal to one of them takes its batches as they are:
no walk, no normaliser, no note read again.

Equal means the same fields in the same order, each value of the same exact
type and equal (``1``, ``1.0`` and ``True`` are three results: their notes
and ids differ). Only plain records are kept: a ``dict`` of at most
:data:`MAX_FIELDS` fields, each a ``str`` (at most :data:`MAX_CHARS`
characters), ``int``, ``float`` other than zero (``0.0`` and ``-0.0`` are
equal but write differently), ``bool`` or None, that was a success and gave
no problem. A tool whose failure rule runs a function, or that mints,
confirms its arguments, or records under a guard that reads mentions, is
never recalled: what it records depends on more than the result.

Whether the ids need recording at all is the ledger's question
(:func:`guardrail.ledger._settled.settled`); this module only spares the walk.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from itertools import repeat
from typing import Any, NamedTuple

from guardrail._data.batch import Batch
from guardrail._declare.paths import KEY
from guardrail._declare.spec import ToolSpec
from guardrail.ledger._settled import Held, settled
from guardrail.ledger._state import LedgerState

#: At most this many fields in a record kept (a wider one is walked each time).
MAX_FIELDS = 32
#: At most this many characters in each text field of a record kept.
MAX_CHARS = 256
#: At most this many records kept per tool (the oldest goes first).
MAX_KEPT = 64
#: The longest text :func:`as_record` decodes: past it no record could be recalled (at most
#: :data:`MAX_FIELDS` fields of :data:`MAX_CHARS` characters), and a text is decoded once,
#: by the record.
SMALL_TEXT = 16_384

_SCALARS = frozenset({str, int, float, bool, type(None)})


class Kept(NamedTuple):
    """A record kept: what it yielded, as batches and as one row per id."""

    batches: tuple[Batch, ...]
    ids: tuple[Held, ...]


def _shape(result: dict[Any, Any]) -> list[Any]:
    """A record's fields in order, and the exact type of each field and value.

    With its values (the key it is kept under), what tells two records apart.
    :meth:`Recall.get` writes it out inline.
    """
    return [*result, *map(type, result), *map(type, result.values())]


class Recall:
    """The batches of a tool's last plain records, by their values.

    One per compiled plan (a kind or tool declared later compiles a new one).
    Shared by every session: it holds what results yield, not what a ledger did.
    """

    __slots__ = ("_kept", "_lock")

    def __init__(self) -> None:
        self._kept: dict[tuple[Any, ...], tuple[list[Any], Kept]] = {}  # by values
        self._lock = threading.Lock()

    @classmethod
    def of(cls, spec: ToolSpec, *, mentions: bool) -> Recall | None:
        """A recall for ``spec``'s results, or None where its records cannot be recalled.

        ``mentions``: the guard takes mentions or keeps result text.
        """
        if mentions or spec.mints or spec.confirms_arguments or spec.fails.checks:
            return None
        for producer in spec.produces:
            path = producer.path
            if producer.regex is not None or path is None or len(path.steps) != 1:
                return None
            if path.steps[0][0] != KEY:
                return None
        return cls() if spec.produces else None

    def get(self, result: dict[Any, Any]) -> Kept | None:
        """What a record equal to ``result`` yielded, if one was kept."""
        try:
            shape, kept = self._kept[tuple(result.values())]
        except (KeyError, TypeError):  # not kept; a value that is a list or a mapping
            return None
        if [*result, *map(type, result), *map(type, result.values())] != shape:
            return None
        return kept

    def keep(self, result: dict[Any, Any], batches: Sequence[Batch]) -> None:
        """Keep the batches of a successful ``result`` that gave no problem, if it is plain."""
        if len(result) > MAX_FIELDS:
            return
        for name, value in result.items():
            tp = type(value)
            if (
                type(name) is not str
                or tp not in _SCALARS
                or (tp is str and len(value) > MAX_CHARS)
                or (tp is float and not value)
            ):
                return
        ids: list[Held] = []
        for batch in batches:
            if batch.tier is not None:
                return
            statuses = batch.statuses if batch.statuses is not None else repeat(None)
            notes = batch.notes if batch.notes is not None else repeat(None)
            for key, status, note in zip(batch.keys, statuses, notes, strict=False):
                ids.append((batch.kind, key, status, note, batch.outside))
        values = tuple(result.values())
        with self._lock:
            kept = self._kept
            kept.pop(values, None)
            kept[values] = (_shape(result), Kept(tuple(batches), tuple(ids)))
            while len(kept) > MAX_KEPT:
                del kept[next(iter(kept))]


def as_record(result: Any) -> Any:
    """The dict a short JSON object text holds, else ``result`` as it is.

    The record reads a JSON object text as the object it holds, the failure
    rule and the harvest alike (:func:`~guardrail._provenance.harvest.decode`),
    so a runtime that reports a read's result as JSON text finds its kept
    records as one that reports the dict does.
    """
    if type(result) is not str or len(result) > SMALL_TEXT or result[:1] != "{":
        return result
    try:
        value = json.loads(result)
    except (ValueError, RecursionError):
        return result
    return value if type(value) is dict else result


def settles(recall: Recall, result: Any, state: LedgerState) -> bool:
    """Whether ``result`` equals a kept record whose ids ``state`` holds as it would leave them.

    If so, they are marked used (:func:`~guardrail.ledger._settled.settled`) and
    the record is done: the full record would change nothing else and, below
    DEBUG, log nothing. The caller sees to the rest (a trusted, successful
    result of an allowed call; DEBUG off) and reads a JSON text with
    :func:`as_record` first.
    """
    if type(result) is not dict:
        return False
    kept = recall.get(result)
    return kept is not None and settled(state, kept.ids)


class Recalls:
    """One :class:`Recall` per tool, made again when the tool's plan is compiled again.

    So nothing kept under an older plan (another kind's normaliser, another
    declaration) is read under a newer one.
    """

    __slots__ = ("_by_tool",)

    def __init__(self) -> None:
        self._by_tool: dict[str, tuple[object, Recall | None]] = {}

    def of(self, spec: ToolSpec, plan: object, *, mentions: bool) -> Recall | None:
        """The recall of ``spec``'s tool under ``plan`` (made at its first use)."""
        made_for, recall = self._by_tool.get(spec.name, (None, None))
        if made_for is not plan:
            recall = Recall.of(spec, mentions=mentions)
            self._by_tool[spec.name] = (plan, recall)
        return recall
