"""Near misses: a ledger value one edit, one swap or only look-alike letters away.

The search runs from the query's side: every variant one edit away is built
over the characters the kind's keys use and looked up in the kind's table,
so a refusal costs what the value's length costs, whatever the size of the
ledger. A value longer than any key of its kind is near none and is not
searched at all, and the edits built over the alphabet are bounded by a
budget. Look-alike letters from other scripts and full-width forms are
folded first (NFKC, then a table of confusables).
"""

from __future__ import annotations

import unicodedata
from collections.abc import KeysView
from typing import Final, NamedTuple

from guardrail.kinds import Kind
from guardrail.ledger import Entry
from guardrail.ledger._state import LedgerState

#: Longest value for which every pair of characters is tried as a swap (beyond it, neighbours).
_ALL_SWAPS_UP_TO: Final = 32
#: Characters a value may have beyond the longest key of its kind and still be searched: room
#: for an ellipsis or a few invisible characters. Longer values are near no key at all.
MARGIN: Final = 8
#: Most characters of variants built for one kind of edit over the kind's alphabet (a value of
#: n characters and an alphabet of a letters cost n * n * a). A ledger whose keys use thousands
#: of characters would otherwise make one refusal cost seconds; past it those edits are not
#: searched and the value is reported as unknown, which refuses it all the same.
_BUDGET: Final = 1 << 24

# Letters from other scripts that render like Latin ones; NFKC folds full-width forms first.
_CONFUSABLES: Final = str.maketrans(
    {
        "А": "A",
        "В": "B",
        "Е": "E",
        "К": "K",
        "М": "M",
        "Н": "H",
        "О": "O",
        "Р": "P",
        "С": "C",
        "Т": "T",
        "Х": "X",
        "У": "Y",
        "І": "I",
        "Ј": "J",
        "Ѕ": "S",
        "Ԛ": "Q",
        "Ԝ": "W",
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "у": "y",
        "х": "x",
        "і": "i",
        "ј": "j",
        "ѕ": "s",
        "ԁ": "d",
        "ԛ": "q",
        "ԝ": "w",
        "һ": "h",
        "ӏ": "l",
        "Α": "A",
        "Β": "B",
        "Ε": "E",
        "Ζ": "Z",
        "Η": "H",
        "Ι": "I",
        "Κ": "K",
        "Μ": "M",
        "Ν": "N",
        "Ο": "O",
        "Ρ": "P",
        "Τ": "T",
        "Υ": "Y",
        "Χ": "X",
        "ο": "o",
        "ν": "v",
        "α": "a",
        "ι": "i",
        "κ": "k",
        "ρ": "p",
        "τ": "t",
        "υ": "u",
        "χ": "x",
        "З": "3",
        "з": "3",
        "б": "6",
        "Ꮎ": "O",
        "Ɩ": "l",
        "ǀ": "l",
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
        "\u200b": "",
        "\u200c": "",
        "\u200d": "",
        "\ufeff": "",
    }
)


def skeleton(text: str) -> str:
    """``text`` with full-width forms folded and look-alike letters mapped to Latin ones."""
    return unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)


class NearMiss(NamedTuple):
    """The ledger entry a value is a near miss of, and how it differs (for the re-prompt)."""

    entry: Entry
    detail: str


def near_miss(kind: Kind, key: str, state: LedgerState) -> NearMiss | None:
    """A ledger entry of ``kind`` one edit, one swap or only look-alike letters away from ``key``.

    The search runs from the query's side: every variant one edit away is
    built over the characters the kind's keys use and looked up in the
    kind's table, so its cost depends on the value's length, not on the
    size of the ledger. A value out of :func:`within_reach` is near no key
    and costs nothing.
    """
    table = state.tables.get(kind.name)
    if not table or not within_reach(kind, key, state):
        return None
    folded = kind.key(skeleton(key))
    if folded is not None and folded != key:
        entry = table.get(folded)
        if entry is not None:
            return NearMiss(entry, "look-alike characters (homoglyphs)")
    hit = _first_variant(key, sorted(state.alphabet(kind.name)), table.keys())
    if hit is None:
        return None
    candidate, detail = hit
    return NearMiss(table[candidate], detail)


def within_reach(kind: Kind, key: str, state: LedgerState) -> bool:
    """Whether ``key`` is short enough to be near a key of ``kind``.

    That is no longer than the kind's longest key plus :data:`MARGIN`.
    Beyond it no search runs, so a refusal costs what reading the value costs.
    """
    return len(key) <= state.longest_key(kind.name) + MARGIN


def _first_variant(key: str, letters: list[str], keys: KeysView[str]) -> tuple[str, str] | None:
    """The first variant of ``key`` one swap or one edit away that is one of ``keys``.

    The many variants of one kind (a letter changed or added at one position)
    are built in one comprehension and tested against the keys at C speed;
    only a batch that holds a hit is looked at one by one, and the detail
    text is built for the hit alone.
    """
    n = len(key)
    for i in range(n - 1):
        if key[i] != key[i + 1]:
            candidate = key[:i] + key[i + 1] + key[i] + key[i + 2 :]
            if candidate in keys:
                return candidate, "two neighbouring characters swapped"
    if n <= _ALL_SWAPS_UP_TO:
        for i in range(n):
            for j in range(i + 2, n):
                if key[i] != key[j]:
                    candidate = key[:i] + key[j] + key[i + 1 : j] + key[i] + key[j + 1 :]
                    if candidate in keys:
                        return candidate, "two characters swapped"
    affordable = n * (n + 1) * len(letters) <= _BUDGET
    for i in range(n if affordable else 0):
        head, tail = key[:i], key[i + 1 :]
        batch = [f"{head}{letter}{tail}" for letter in letters]
        if not keys.isdisjoint(batch):
            for letter, candidate in zip(letters, batch, strict=True):
                if letter != key[i] and candidate in keys:
                    return candidate, f"one character changed (position {i + 1})"
    for i in range(n):
        candidate = key[:i] + key[i + 1 :]
        if candidate in keys:
            return candidate, f"one character added (position {i + 1})"
    for i in range(n + 1 if affordable else 0):
        head, tail = key[:i], key[i:]
        batch = [f"{head}{letter}{tail}" for letter in letters]
        if not keys.isdisjoint(batch):
            for candidate in batch:
                if candidate in keys:
                    return candidate, f"one character missing (position {i + 1})"
    return None
