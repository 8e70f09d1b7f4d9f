"""The "which one" measure: after compaction, can a reader tell an id argument's entry apart?

``order`` and ``order_2`` are both verbatim in the ledger block; a model
that must cancel "the blender order" still has to know which is which. An
id argument counts as told apart when the block line or the summary for
the role it has carries a fact (a note's part, a status) that no other
entry of its kind in the block shares. Only arguments whose kind has
several entries in the ledger are asked: with one, there is nothing to
tell apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from guardrail.ledger import Entry, Ledger


def rivals(ledger: Ledger, entry: Entry) -> list[str]:
    """The roles of the other entries of ``entry``'s kind."""
    return [other.role for other in ledger if other.kind == entry.kind and other is not entry]


def told_apart(role: str, others: list[str], facts: Mapping[str, Set[str]]) -> bool:
    """Whether ``role``'s facts in a compacted context hold, against each rival, one it lacks.

    No fact at all (no note, no status, or no line: a plain summary) tells nothing apart.
    """
    own = facts.get(role)
    if not own:
        return False
    empty: frozenset[str] = frozenset()
    return all(own - facts.get(other, empty) for other in others)
