"""The calls held for the user's answer, by call id: each runs at most once per answer.

A runtime adapter holds a call whose ids wait for the user
(:meth:`HeldCalls.hold`), and runs it once the answer lets it through
(:meth:`HeldCalls.runs`); the same call id brought back again (a message
answered twice, a resumed run replayed) does not run again. Kept in the
session's meta (``held``, ``ran``: the last :data:`CALLS_KEPT` of each) so
every worker sharing a store sees the same, and merged by union.
"""

from __future__ import annotations

from collections.abc import Iterable

#: How many call ids a ledger keeps of each: held, and held then run.
CALLS_KEPT = 256


class HeldCalls:
    """The call ids held for an answer, and those of them that ran since."""

    __slots__ = ("held", "ran")

    def __init__(self) -> None:
        self.held: dict[str, None] = {}
        self.ran: dict[str, None] = {}

    def hold(self, call_id: str) -> bool:
        """Note that the call waits for the user; whether that is news (to be written)."""
        if call_id in self.held or call_id in self.ran:
            return False
        _add(self.held, call_id)
        return True

    def has_run(self, call_id: str) -> bool:
        """Whether the call was held and has run since: it does not run again."""
        return call_id in self.ran

    def runs(self, call_id: str, *, held: bool = False) -> bool:
        """The call runs on the user's answer (``held``: whether or not it was held here).

        Whether that is news (to be written): a call never held runs freely.
        """
        if call_id in self.ran or not (held or call_id in self.held):
            return False
        self.held.pop(call_id, None)
        _add(self.ran, call_id)
        return True

    def to_meta(self) -> tuple[list[str], list[str]]:
        """The held and run call ids, oldest first, for the session's meta."""
        return list(self.held), list(self.ran)

    def take(self, held: Iterable[str], ran: Iterable[str]) -> None:
        """Hold what a meta holds (another copy's calls are united with these)."""
        for call_id in ran:
            self.held.pop(call_id, None)
            _add(self.ran, call_id)
        for call_id in held:
            if call_id not in self.ran:
                _add(self.held, call_id)


def _add(ids: dict[str, None], call_id: str) -> None:
    ids.pop(call_id, None)
    ids[call_id] = None
    while len(ids) > CALLS_KEPT:
        del ids[next(iter(ids))]
