"""Re-prompt counts: conversation state kept beside a ledger's id tables.

How many times a tool was refused in the current turn bounds re-prompts
(``RepromptLimitExceeded``). The counts belong to the conversation, not to
any id: they live beside the tables, hold for one turn, and are saved in
the session's meta and merged by
:func:`~guardrail.stores.protocol.merge_meta`.
"""

from __future__ import annotations

from collections.abc import Mapping


class Reprompts:
    """Refusals per tool in one turn, for bounding re-prompts.

    Conversation state, kept beside the id tables: the counts hold for
    ``turn`` only, so a new turn starts them again without anyone clearing
    them. Saved in the session's meta (``refusals``, the counts of the
    meta's turn) and merged by :func:`~guardrail.stores.protocol.merge_meta`.
    """

    __slots__ = ("counts", "turn")

    def __init__(self) -> None:
        self.turn = 0
        self.counts: dict[str, int] = {}

    def add(self, tool: str, turn: int) -> int:
        """Count one more refusal of ``tool`` in ``turn``; the count so far."""
        if turn != self.turn:
            self.turn, self.counts = turn, {}
        count = self.counts.get(tool, 0) + 1
        self.counts[tool] = count
        return count

    def discount(self, tool: str, turn: int) -> None:
        """Take back one count of ``tool`` in ``turn``: a call put to the user, not a re-prompt."""
        count = self.counts.get(tool, 0) if turn == self.turn else 0
        if count > 0:
            self.counts[tool] = count - 1

    def of(self, turn: int) -> dict[str, int]:
        """The counts of ``turn`` (none for any other turn)."""
        return dict(self.counts) if turn == self.turn else {}

    def take(self, turn: int, counts: Mapping[str, int]) -> None:
        """Hold ``counts`` as the counts of ``turn``."""
        self.turn, self.counts = turn, dict(counts)
