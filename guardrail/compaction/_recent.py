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

from collections.abc import Callable, Iterator
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
    points at is shown); they are listed in the order the full block lists
    them. The last line says how many entries are left out. ``tokens``
    counts a text's tokens (characters / 4 by default); ``sealed`` adds the
    seal line compaction's block carries (a guard with a ``secret``).
    """
    state = state_of(ledger, "recent_block()")
    budget = check_budget(max_tokens)
    count = tokens or quarter_tokens
    with state.lock:
        # Each kind's table runs from least to most recently used: its order breaks the ties
        # of one epoch (entries added by one result, then one of them used).
        ranked = [
            (entry.pinned, entry.last_used, entry.epoch, rank, entry.first_seen)
            for table in state.tables.values()
            for rank, entry in enumerate(table.values())
        ]
        entries = [entry for table in state.tables.values() for entry in table.values()]
        listed = state.entries()
    order = [
        entries[at] for at in sorted(range(len(entries)), key=ranked.__getitem__, reverse=True)
    ]
    whole = _written(state, listed, 0, sealed)
    if not order or count(whole) <= budget:
        return whole  # the common case: the whole ledger fits, one rendering

    # Short of the whole, more entries never make the block shorter (the columns only widen).
    # A first guess from the whole block's cost per entry, a probe an eighth away, then
    # halving what is left: a handful of renderings however long the ledger.
    def fits(shown: int) -> str | None:
        chosen = set(map(id, order[:shown]))
        text = _written(state, [e for e in listed if id(e) in chosen], len(order) - shown, sealed)
        return text if count(text) <= budget else None

    low, high = 0, len(order) - 1
    best: str | None = None
    guess = min(high, len(order) * budget // max(count(whole), 1))
    for probe in (guess, None):
        if probe is None:  # the second probe: an eighth beyond the first, or short of it
            step = max(1, guess // 8)
            probe = min(high, guess + step) if low == guess else max(low, guess - step)
        if not low <= probe <= high:
            break
        text = fits(probe)
        if text is not None:
            low, best = probe, text
        else:
            high = probe - 1
    while low < high:
        middle = (low + high + 1) // 2
        text = fits(middle)
        if text is not None:
            low, best = middle, text
        else:
            high = middle - 1
    # ``best`` is the block of ``low`` entries; None: not even the header and the count fit.
    return best if best is not None else _written(state, [], len(order), sealed)


def _written(state: LedgerState, shown: list[Entry], left_out: int, sealed: bool) -> str:
    """The block of ``shown``, with the line on the ``left_out`` entries, sealed if asked."""
    block = render_block(cast(LedgerState, _Shown(state, shown)), (), ())
    if left_out:
        if not shown:
            block = block.replace("\n" + _EMPTY, "")  # not "no identifiers": none fit
        noun = "entry" if left_out == 1 else "entries"
        block += "\n" + _LEFT_OUT.format(count=left_out, noun=noun)
    return seal(block, state) if sealed else block
