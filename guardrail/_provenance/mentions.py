"""Mentions: values of a kind's shape in the free text of a successful result.

A declared result field says what an id is; free text only shows a string
of an id's shape (the IBAN inside a bill, the URL in a colleague's Slack
message, or the attacker's IBAN planted in a transaction subject). So a
kind declared ``mentions="ask"`` (or ``"refuse"``) takes such values as
``mentioned``: allowed on reads, and on a write or an egress read asked of
the user (or refused) with the evidence of where they were seen. Free text
is every string of a result that no declared producer of that result
covers; keys are not text. Mentions never verify and never become produced.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from guardrail._data.batch import Batch
from guardrail._data.entry import Entry, Mention, Source
from guardrail._data.text import excerpt, shorten
from guardrail._declare.paths import EACH, INDEX, KEY, KEYS, VALUES, Step
from guardrail._declare.spec import Producer, ToolSpec
from guardrail._provenance.columns import MAX_ID_LENGTH
from guardrail.kinds import Kind
from guardrail.ledger._state import LedgerState
from guardrail.ledger._texts import ResultText

#: The most characters of free text one result is searched for mentions (a bound on cost).
MAX_TEXT = 200_000
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def mention_kinds(kinds: Mapping[str, Kind]) -> list[Kind]:
    """The kinds whose mentions are taken (a ``mentions`` policy other than ``"ignore"``)."""
    return [kind for kind in kinds.values() if kind.mentions != "ignore" and kind.has_pattern]


def free_texts(value: Any, producers: Sequence[Producer]) -> Iterator[tuple[str, str, int]]:
    """``(place, text, scanned)`` for every string of ``value`` no producer's path covers.

    A model or dataclass is read as its fields. ``place`` is written as a
    path (``[2].subject``; ``$`` for a plain-text result). ``scanned`` is how
    many of the text's characters are within :data:`MAX_TEXT`, counted over
    the whole result: a search for mentions reads no further, within one
    string too, and the walk ends where the budget does.
    """
    paths = [p.path.steps for p in producers if p.path is not None]
    budget = [MAX_TEXT]

    def walk(node: Any, steps: list[tuple[str, Any]]) -> Iterator[tuple[str, str, int]]:
        if budget[0] <= 0:
            return
        if isinstance(node, str):
            if not any(_covers(path, steps) for path in paths):
                scanned = min(len(node), budget[0])
                budget[0] -= len(node)
                yield _place(steps), node, scanned
            return
        if hasattr(type(node), "model_fields"):
            node = {name: getattr(node, name, None) for name in type(node).model_fields}
        elif dataclasses.is_dataclass(node) and not isinstance(node, type):
            node = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
        if isinstance(node, Mapping):
            for key, item in node.items():
                yield from walk(item, [*steps, (KEY, key)])
        elif isinstance(node, (list, tuple)):
            for index, item in enumerate(node):
                yield from walk(item, [*steps, (INDEX, index)])

    yield from walk(value, [])


def _covers(path: tuple[Step, ...], steps: list[tuple[str, Any]]) -> bool:
    """Whether a producer's path reaches the string at ``steps`` (a concrete place)."""
    if len(path) != len(steps):
        return False
    for (kind, arg), (step, at) in zip(path, steps, strict=True):
        if kind == KEYS:
            return False  # a path ending in keys takes keys, not this string
        if kind == KEY and not (step == KEY and at == arg):
            return False
        if kind == EACH and step != INDEX:
            return False
        if kind == INDEX and not (step == INDEX and at in (arg, None)):
            return False
        if kind == VALUES and step != KEY:
            return False
    return True


def _place(steps: list[tuple[str, Any]]) -> str:
    if not steps:
        return "$"
    text = ""
    for step, at in steps:
        text += f"[{at}]" if step == INDEX else (f".{at}" if text else str(at))
    return text


def call_text(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """A call as the user would recognise it: ``read_file(file_path='bill.txt')``, cut short.

    Only its declared identifier arguments are shown: other values may be
    anything, and are neither logged nor kept.
    """
    names = list(dict.fromkeys(param.name for param in spec.params))
    shown = ", ".join(
        f"{name}={_REPR.repr(arguments[name])}" for name in names[:3] if name in arguments
    )
    return shorten(f"{spec.name}({shown})", 160)


def mentioned(
    value: Any,
    producers: Sequence[Producer],
    kinds: Sequence[Kind],
    *,
    call: str,
    limit: int,
) -> tuple[list[Batch], list[Mention]]:
    """The mentions in one decoded result: one batch per kind and place, and each one's evidence.

    The mentions come in the batches' order, one per value (a value is
    taken once per kind, where it is first seen). The search stops at
    ``limit`` values (no more than that can come in from one result), and
    past :data:`MAX_TEXT` characters of free text; each value's evidence is
    the text around where it was found. So it costs one pass over at most
    that much text, whatever the result holds.
    """
    batches: list[Batch] = []
    evidence: list[Mention] = []
    seen: set[tuple[str, str]] = set()
    for place, text, scanned in free_texts(value, producers):
        # Read a little past the budget, so an id that starts within it is read whole.
        end = scanned + 2 * MAX_ID_LENGTH
        for kind in kinds:
            values: list[str] = []
            keys: list[str] = []
            for at, token, key in kind.ids_at(text, end=end):
                if at >= scanned:
                    break
                if len(token) > MAX_ID_LENGTH or (kind.name, key) in seen:
                    continue
                seen.add((kind.name, key))
                values.append(token)
                keys.append(key)
                evidence.append(Mention(call, excerpt(text, token, at)))
                if len(seen) >= limit:
                    break
            if values:
                batches.append(Batch(kind.name, place, None, values, keys, None, tier="mentioned"))
            if len(seen) >= limit:
                return batches, evidence
    return batches, evidence


class MentionKinds(Protocol):
    """What :func:`mentioned_in` reads of the registry: the kinds that take mentions."""

    mentions: list[Kind]
    text_kinds: bool


def mentioned_in(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    value: Any,
    registry: MentionKinds,
    state: LedgerState,
    call_id: str | None,
    *,
    limit: int,
) -> tuple[list[Batch], list[Mention]] | None:
    """The mentions in a successful result of ``spec`` (None: nothing to read).

    ``value``: the result decoded (:func:`~guardrail._provenance.harvest.decode`), as the
    failure rule and the harvest read it: a JSON text is parsed once for all three.
    At most ``limit`` values are looked for (the most one call may add).

    Where a kind with no pattern takes mentions, the result's free texts are
    kept in the ledger's :class:`~guardrail.ledger._texts.ResultTexts`.
    """
    if value is None:
        return None
    call = call_text(spec, arguments)
    if registry.text_kinds:
        turn = state.turn
        for place, text, _ in free_texts(value, spec.produces):
            source = Source(spec.name, call_id, place, turn)
            state.result_texts.add(ResultText(text, source, call, spec.outside))
    found = mentioned(value, spec.produces, registry.mentions, call=call, limit=limit)
    if spec.outside:  # an outside party wrote all of it
        found = ([batch._replace(outside=True) for batch in found[0]], found[1])
    return found


def admit_mentions(
    state: LedgerState,
    found: tuple[list[Batch], list[Mention]],
    *,
    tool: str,
    call_id: str | None,
    room: int,
) -> list[Entry]:
    """Bring one result's mentions into the ledger as ``mentioned``; the entries added.

    At most ``room`` new ones (what the result's cap leaves), and only into
    free room: a mention never evicts an entry (a produced or confirmed one
    least of all). A value the ledger holds already is left as it is, but
    an unverified one with no evidence yet keeps this one (the IBAN the
    user typed is also the one in the bill).
    """
    batches, evidence = found
    with state.lock:
        room = min(room, state.capacity - (state.size - state.pinned))
        kept: list[Batch] = []
        shown: dict[tuple[str, str], Mention] = {}
        mentions = iter(evidence)
        for batch in batches:
            values: list[str] = []
            keys: list[str] = []
            table = state.tables.get(batch.kind) or {}
            for value, key in zip(batch.values, batch.keys, strict=True):
                mention = next(mentions)
                held = table.get(key)
                if held is not None:
                    if not held.verified and held.mention is None:
                        held.mention = mention
                        state.changed(held.kind, held.key)
                elif room > 0:
                    room -= 1
                    values.append(value)
                    keys.append(key)
                    shown[(batch.kind, key)] = mention
            if values:
                kept.append(batch._replace(values=values, keys=keys))
        if not kept:
            return []
        turn = state.turn
        sources = {batch.path: Source(tool, call_id, batch.path, turn) for batch in kept}
        admitted = state.admit(kept, source=sources, verified=False, tier="mentioned", tool=tool)
        for entry in admitted.added:
            entry.mention = shown.get((entry.kind, entry.key))
        return admitted.added
