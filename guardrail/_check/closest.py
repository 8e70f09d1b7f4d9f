"""Where a refused value is closest: cut short, one edit off an entry, or nowhere.

For a value no entry holds exactly, the check asks which entry it may be a
damaged copy of. A parameter of several kinds is searched as the kinds whose
pattern the value fits, so a refusal names the right kind; a value one edit
from several entries of its kind (dense ids: ``L1001``, ``L1002``...) names
none of them, since naming one would be a guess. The search itself is
:mod:`guardrail._check.nearmiss`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from guardrail._check.approvals import operator_listed
from guardrail._check.nearmiss import near_misses, within_reach
from guardrail._check.reprompt import OPERATOR_DETAIL
from guardrail._data.text import ARGUMENT_ELLIPSES
from guardrail._data.verdict import Finding
from guardrail.kinds import Kind
from guardrail.kinds._operator import Catalog
from guardrail.ledger import Entry
from guardrail.ledger._state import LedgerState


def near_or_unknown(
    finding: Callable[..., Finding],
    keys: list[tuple[Kind, str]],
    text: str,
    state: LedgerState,
    operator: Catalog,
) -> Finding:
    """The finding of a value held nowhere exactly: cut short, one edit off, or unknown."""
    # A value of a parameter of several kinds is a near miss, or unknown, of the kinds whose
    # pattern it fits: a plan id is not "close to [line_3]", and a refusal names its kind.
    fits = _fitting(keys, text)
    # Only a value within reach of a kind's keys is searched: a megabyte id costs no search.
    near = [(kind, key) for kind, key in fits if within_reach(kind, key, state)]
    for kind, key in near:
        cut = _truncated(kind, key, state)
        if cut is not None:
            return finding("truncated", kind, cut.role, cut.detail)
    for kind, key in near:
        close, *others = near_misses(kind, key, state)
        if close is not None:
            second = others[0] if others else None
            if second is not None and second.entry.key != close.entry.key:
                # Dense ids (L1001, L1002...): naming one would be a guess.
                roles = f"[{close.entry.role}], [{second.entry.role}]"
                detail = f"one edit from several ledger entries of kind {kind.name!r} ({roles})"
                return finding("mutated", kind, None, detail)
            return finding("mutated", kind, close.entry.role, close.detail)
    kind = fits[0][0]
    listed = operator_listed(kind.name, operator)
    if listed is not None:
        detail = f"{OPERATOR_DETAIL}{kind.name!r} ids the operator declared ({listed})"
        return finding("unknown", kind, None, detail)
    return finding("unknown", kind, None, "appears in no tool result")


def _fitting(keys: list[tuple[Kind, str]], text: str) -> list[tuple[Kind, str]]:
    """The kinds (with keys) a refused value is searched as: those whose pattern it fits.

    Else those with no pattern, else all: a value that fits no kind's shape
    is still searched in each.
    """
    if len(keys) == 1:
        return keys
    fitting = [(kind, key) for kind, key in keys if kind.has_pattern and kind.matches(text)]
    if fitting:
        return fitting
    return [(kind, key) for kind, key in keys if not kind.has_pattern] or keys


class _Cut(NamedTuple):
    """An id cut short: the role of the entry it most likely was (None: no telling), and how."""

    role: str | None
    detail: str


def _truncated(kind: Kind, key: str, state: LedgerState) -> _Cut | None:
    stem = key
    for ellipsis in ARGUMENT_ELLIPSES:
        if stem.endswith(ellipsis):
            stem = stem[: -len(ellipsis)].rstrip()
            matches = state.keys_with_prefix(kind.name, stem) if stem else []
            return _Cut(_most_recent(matches), "ends in an ellipsis")
    if len(stem) < 2:
        return None
    matches = state.keys_with_prefix(kind.name, stem)
    if not matches:
        return None
    return _Cut(_most_recent(matches), "a prefix of a ledger value")


def _most_recent(entries: Sequence[Entry]) -> str | None:
    if not entries:
        return None
    return max(entries, key=lambda entry: entry.last_used).role
