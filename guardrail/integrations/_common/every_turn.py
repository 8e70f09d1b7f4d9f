"""The ledger block in the model's instructions at every model call, for every adapter.

Each adapter can put the current ID LEDGER block (the entries used last,
within a token budget: :func:`guardrail.compaction.recent_block`) after the
model's own instructions before every model call, so the ledger a refusal
tells the model to copy from is there from the first tool result on, not
only after a compaction. The block is rebuilt from the ledger each time and
never read back, and a guard with a secret seals it.
"""

from __future__ import annotations

from collections.abc import Callable

from guardrail._guard.facade import Guard
from guardrail.compaction import DEFAULT_BLOCK_TOKENS, recent_block
from guardrail.ledger import Ledger

__all__ = ["DEFAULT_BLOCK_TOKENS", "block_for", "check_budget", "with_block"]


def check_budget(max_tokens: int) -> int:
    """``max_tokens``, checked where the adapter is built rather than at its first model call.

    A block of an empty ledger is written with it: a budget no block fits in
    (or no number) is the usage error :func:`recent_block` raises.
    """
    recent_block(Ledger(), max_tokens=max_tokens)
    return max_tokens


def block_for(
    guard: Guard,
    ledger: Ledger,
    max_tokens: int = DEFAULT_BLOCK_TOKENS,
    tokens: Callable[[str], int] | None = None,
) -> str:
    """The every-turn block of ``ledger``, sealed where ``guard`` seals (it has a secret)."""
    return recent_block(ledger, max_tokens=max_tokens, tokens=tokens, sealed=guard.seals_results)


def with_block(instructions: str | None, block: str) -> str:
    """The model's own instructions, then the block (the block alone where there are none)."""
    return f"{instructions.rstrip()}\n\n{block}" if instructions else block
