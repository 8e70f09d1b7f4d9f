"""The ledger block in every turn: the most recently used entries within a token budget.

A refusal tells the model to copy a value "from the ID LEDGER"; before any
compaction the model has one only if the adapter puts it in the model's
instructions at every model call. :func:`recent_block` writes that block: the
block :func:`~guardrail.compaction._block.render_block` writes, of the entries
used last, as many as fit ``max_tokens`` (the header, the seal and the line
saying how many are left out counted in), then a line naming how many
entries it leaves out (they are in the ledger still: a call may use them).

The block is text for the model, rebuilt from the ledger at every call and
never read back: nothing written into a model's instructions reaches the
ledger. A guard with a secret seals it, as compaction seals its block.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any, cast

from guardrail._data.entry import Entry
from guardrail.compaction._block import _EMPTY, render_block, seal
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Ledger
from guardrail.ledger._ledger import state_of
from guardrail.ledger._state import LedgerState

#: The token budget of the every-turn block unless told otherwise: the ids of a long task
#: on the tau-airline corpus. ``python benchmarks/every_turn_block.py`` measures what it
#: shows there; the compaction page gives the figures.
DEFAULT_BLOCK_TOKENS = 1000
#: The least budget a block may be given: the header, a line and a seal.
MIN_BLOCK_TOKENS = 40
_LEFT_OUT = "({count} less recently used {noun} not shown: still in the ledger)"


class _Shown:
    """A ledger state that lists only some of its entries: what :func:`render_block` reads."""

    __slots__ = ("_shown", "_state")

    def __init__(self, state: LedgerState, shown: list[Entry]) -> None:
        self._state = state
        self._shown = shown

    def entries(self) -> list[Entry]:
        return self._shown

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._shown)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


def quarter_tokens(text: str) -> int:
    """Characters / 4, rounded up: the every-turn block's token estimate unless told otherwise."""
    return -(-len(text) // 4)


def check_budget(max_tokens: object) -> int:
    """``max_tokens`` if it is a budget a block fits in; else a usage error saying what to pass."""
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or max_tokens < MIN_BLOCK_TOKENS
    ):
        raise GuardrailUsageError(
            f"max_tokens is the every-turn ledger block's budget, an integer >= "
            f"{MIN_BLOCK_TOKENS} (default {DEFAULT_BLOCK_TOKENS}), not {max_tokens!r}"
        )
    return max_tokens


def recent_block(
    ledger: Ledger,
    *,
    max_tokens: int = DEFAULT_BLOCK_TOKENS,
    tokens: Callable[[str], int] | None = None,
    sealed: bool = False,
) -> str:
    """The ledger block of the entries used last, within ``max_tokens``, for the model.

    Pinned entries come first, then the others from the most recently used
    (a refusal that names an entry marks it used, so the entry a re-prompt
    points at is shown); a block of the whole ledger lists them as the full
    block does, a shorter one as they were first seen. The last line says
    how many entries are left out. ``tokens`` counts a text's tokens
    (characters / 4 by default); ``sealed`` adds the seal line compaction's
    block carries (a guard with a ``secret``).

    Only what may be shown is rendered: the entries are taken from the most
    recently used on, as many as the budget may hold, so the block costs
    the same in a ledger of two hundred entries or of a million.
    """
    state = state_of(ledger, "recent_block()")
    budget = check_budget(max_tokens)
    count = tokens or quarter_tokens
    with state.lock:
        total = state.size
        ranked = _by_recency(state)
        taken: list[Entry] = []
        noted: dict[str, list[str]] = {}  # each role's note parts, read once

        def block_of(shown: int) -> str | None:
            """The block of the ``shown`` entries used last, or None if it exceeds the budget."""
            while len(taken) < shown:
                taken.append(next(ranked))
            if shown == total:  # the whole ledger, listed as the full block lists it
                text = _written(state, state.entries(), 0, sealed, noted)
            else:
                listed = sorted(taken[:shown], key=_first_appearance(state))
                text = _written(state, listed, total - shown, sealed, noted)
            return text if count(text) <= budget else None

        # Short of the whole, more entries never make the block shorter (the columns only
        # widen). A first few entries give the cost of one; each next count is as many more as
        # the rest of the budget should hold, and halving once one does not fit: a handful of
        # renderings, each of no more entries than fit.
        empty = _written(state, [], total, sealed)
        spare = count(empty)
        low, high, best, cost = 0, total, None, spare
        probe = min(total, 16)
        while low < high:
            text = block_of(probe)
            if text is None:
                high = probe - 1
            else:
                low, best, cost = probe, text, count(text)
                if probe == total:
                    return text  # the common case: the whole ledger fits
            if low >= high:
                break
            middle = (low + high + 1) // 2
            if best is None:
                probe = middle
                continue
            each = max((cost - spare) / low, 1e-9)
            if high == total and spare + each * total <= 2 * budget:
                # The whole may fit (it has no line on entries left out): tried first, at no
                # more than twice what fits.
                probe = total
                continue
            probe = min(high, low + max(1, int((budget - cost) / each)))
            if text is None:
                probe = min(probe, middle)  # the guess went too far once: no further than half
    # ``best`` is the block of ``low`` entries; None: not even the header and the count fit.
    return best if best is not None else empty


def _by_recency(state: LedgerState) -> Iterator[Entry]:
    """The entries, pinned first, then from the most recently used on, taken one by one.

    Each kind's table runs from least to most recently used: its order breaks
    the ties of one epoch (entries added by one result, then one of them
    used). The kinds are merged lazily, so taking the first few costs a few.
    """
    if state.pinned:  # few, and found only when there are any
        pinned = [e for table in state.tables.values() for e in table.values() if e.pinned]
        yield from sorted(pinned, key=lambda e: (e.last_used, e.epoch, e.first_seen), reverse=True)

    def newest(table: dict[str, Entry]) -> Iterator[tuple[tuple[int, int, int, int], Entry]]:
        last = len(table) - 1
        for back, entry in enumerate(reversed(table.values())):
            if not entry.pinned:
                yield (entry.last_used, entry.epoch, last - back, entry.first_seen), entry

    tables = [newest(table) for table in state.tables.values()]
    for _, entry in heapq.merge(*tables, key=itemgetter(0), reverse=True):
        yield entry


def _first_appearance(state: LedgerState) -> Callable[[Entry], tuple[int, int, int]]:
    """A sort key listing entries as first seen: by turn, kind by kind, then by role number."""
    kinds = {kind: at for at, kind in enumerate(state.tables)}

    def key(entry: Entry) -> tuple[int, int, int]:
        number = entry.role.rpartition("_")[2]
        return (
            entry.first_seen,
            kinds.get(entry.kind, 0),
            int(number) if number.isdigit() else 1,
        )

    return key


def _written(
    state: LedgerState,
    shown: list[Entry],
    left_out: int,
    sealed: bool,
    parts: dict[str, list[str]] | None = None,
) -> str:
    """The block of ``shown``, with the line on the ``left_out`` entries, sealed if asked.

    ``parts`` keeps each role's note parts from one rendering to the next.
    """
    block = render_block(cast(LedgerState, _Shown(state, shown)), (), (), parts=parts)
    if left_out:
        if not shown:
            block = block.replace("\n" + _EMPTY, "")  # not "no identifiers": none fit
        noun = "entry" if left_out == 1 else "entries"
        block += "\n" + _LEFT_OUT.format(count=left_out, noun=noun)
    return seal(block, state) if sealed else block
