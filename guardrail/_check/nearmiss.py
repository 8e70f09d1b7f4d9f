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

import math
import unicodedata
from collections.abc import Iterator, KeysView, Mapping, Sequence
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
    if text.isascii():  # NFKC leaves ASCII as it is, and the table maps no ASCII character
        return text
    return unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)


class NearMiss(NamedTuple):
    """The ledger entry a value is a near miss of, and how it differs (for the re-prompt)."""

    entry: Entry
    detail: str


def near_miss(
    kind: Kind, key: str, state: LedgerState, *, hidden: str | None = None
) -> NearMiss | None:
    """A ledger entry of ``kind`` one edit, one swap or only look-alike letters away from ``key``.

    The search runs from the query's side: every variant one edit away is
    built over the characters the kind's keys use and looked up in the
    kind's table, so its cost depends on the value's length, not on the
    size of the ledger. A value out of :func:`within_reach` is near no key
    and costs nothing. ``hidden``: a key the search passes over (asked again
    without the entry it found, it tells one near entry from several).
    """
    search = _Search.of(kind, key, state)
    return None if search is None else next(search.hits(hidden), None)


def near_misses(kind: Kind, key: str, state: LedgerState) -> tuple[NearMiss | None, ...]:
    """:func:`near_miss`, and when it finds one, the search again passing over it.

    What the two calls give, with the keys near the value read once, and the
    second search resumed where the first stopped: the variants are met in
    one fixed order, so the first one after the first hit that names another
    key is what a search passing over that key finds first.
    """
    search = _Search.of(kind, key, state)
    if search is None:
        return (None,)
    hits = search.hits()
    first = next(hits, None)
    if first is None:
        return (first,)
    found = first.entry.key
    return first, next((hit for hit in hits if hit.entry.key != found), None)


class _Search(NamedTuple):
    """What a near-miss search of one value reads before it looks for variants."""

    kind: Kind
    key: str
    held: Mapping[str, Entry]
    letters: list[str]
    shared: str
    cut: int
    near: list[str]
    far: list[str]
    start: int

    @classmethod
    def of(cls, kind: Kind, key: str, state: LedgerState) -> _Search | None:
        """The search of ``key`` as ``kind``; None when it is near no key (out of reach)."""
        held = state.tables.get(kind.name)
        if not held or not within_reach(kind, key, state):
            return None
        index = state.index.get(kind.name)
        shared = (index.shared if index is not None else None) or ""
        near: list[str] | None = None
        far: list[str] | None = None
        cut = len(key) + 1
        start = 0
        if index is None:
            letters = sorted(state.alphabet(kind.name))
        else:
            with state.lock:
                letters = index.letters()
                # The keys that share the value's first characters are few once those reach
                # past what every key shares: read them, and build variants only before that.
                spread = max(2, len(letters))
                cut = len(shared) + max(1, math.ceil(math.log(max(1, len(held) / _NEAR), spread)))
                while cut <= len(key):
                    near = index.starting_with(key[:cut], held, _NEAR)
                    if near is not None:
                        break
                    cut += 1
                # And the keys that end as the value does, for the edits before ``cut``: they
                # leave the value's end as it is. Few keys share a long end.
                start = min(cut, len(key) - 1)
                for _ in range(_FAR_TRIES):
                    if start <= len(shared):
                        break
                    far = index.ending_with(key[start:], held, _NEAR)
                    if far is not None:
                        break
                    start -= 1
        if far is None:
            start = 0
        return cls(kind, key, held, letters, shared, cut, near or [], far or [], start)

    def hits(self, hidden: str | None = None) -> Iterator[NearMiss]:
        """The near entries in the order the search meets them (passing over ``hidden``).

        A key may come more than once (the same letter dropped at two places
        of a run of it).
        """
        key, held = self.key, self.held
        folded = self.kind.key(skeleton(key))
        if folded is not None and folded not in (key, hidden):
            entry = held.get(folded)
            if entry is not None:
                yield NearMiss(entry, "look-alike characters (homoglyphs)")
        variants = _variants(
            key,
            self.letters,
            held.keys(),
            self.shared,
            self.cut,
            self.near,
            self.far,
            self.start,
        )
        for candidate, detail in variants:
            if candidate != hidden:
                yield NearMiss(held[candidate], detail)


def within_reach(kind: Kind, key: str, state: LedgerState) -> bool:
    """Whether ``key`` is short enough to be near a key of ``kind``.

    That is no longer than the kind's longest key plus :data:`MARGIN`.
    Beyond it no search runs, so a refusal costs what reading the value costs.
    """
    return len(key) <= state.longest_key(kind.name) + MARGIN


def _first_variant(
    key: str,
    letters: list[str],
    keys: KeysView[str],
    shared: str = "",
    cut: int | None = None,
    near: Sequence[str] = (),
    hidden: str | None = None,
    far: Sequence[str] = (),
    start: int = 0,
) -> tuple[str, str] | None:
    """The first variant of :func:`_variants` that is not ``hidden``, else None.

    Called with ``key``, ``letters`` and ``keys`` alone, it builds every
    variant: the plain search the faster readings must agree with.
    """
    variants = _variants(key, letters, keys, shared, cut, near, far, start)
    return next((hit for hit in variants if hit[0] != hidden), None)


def _variants(  # noqa: PLR0912 (one branch per class of edit and where it is read)
    key: str,
    letters: list[str],
    keys: KeysView[str],
    shared: str = "",
    cut: int | None = None,
    near: Sequence[str] = (),
    far: Sequence[str] = (),
    start: int = 0,
) -> Iterator[tuple[str, str]]:
    """The variants of ``key`` one swap or one edit away that are ``keys``, with how they differ.

    The variants are met in a fixed order: swaps, a character changed, one
    added, one missing, each by position, then by letter. Every key starts
    with ``shared``, so a position within it takes one letter only. An edit
    at ``cut`` or after leaves ``key[:cut]`` as it is: such variants are
    read from ``near``, the keys starting with it, rather than built. The
    many variants of one position are built in one comprehension and tested
    against the keys at C speed; only a batch that holds a hit is looked at
    one by one, and the detail text is built for the hits alone. With
    ``start``, a character changed before ``start`` or missing up to it
    leaves ``key[start:]`` as it is: such variants are read from ``far``,
    the keys ending with it. A generator: a caller that wants the next hit
    after the first (one passing over a key) resumes it rather than starting
    again.
    """
    n = len(key)
    cut = n + 1 if cut is None else cut
    affordable = n * (n + 1) * len(letters) <= _BUDGET
    neighbours, swapped, changed, inserted, dropped = _read_near(key, cut, near, keys, affordable)
    # The variants before ``start`` are read from ``far`` (read only when affordable), the
    # rest built: from ``start`` on (from 0 when ``far`` is not read).
    read_far = bool(start) and affordable
    far_neighbours, far_changed, far_dropped, far_inserted = (
        _read_far(key, start, far, keys) if read_far else ([], [], [], [])
    )
    built = start if read_far else 0
    fixed = len(shared)
    # A value that starts as every key does has no swap within that start to try.
    first = fixed if key.startswith(shared) else 0
    for hit in far_neighbours:
        yield hit[3], "two neighbouring characters swapped"
    batch = [
        f"{key[:i]}{key[i + 1]}{key[i]}{key[i + 2 :]}"
        for i in range(max(first, built - 1), min(n - 1, cut))
        if key[i] != key[i + 1] and (i >= fixed or key[i + 1] == shared[i])
    ]
    if not keys.isdisjoint(batch):
        for candidate in batch:
            if candidate in keys:
                yield candidate, "two neighbouring characters swapped"
    for hit in neighbours:
        yield hit[3], "two neighbouring characters swapped"
    if n <= _ALL_SWAPS_UP_TO:
        for i in range(first, min(n, cut)):
            head, here, after = key[:i], key[i], i + 1
            batch = [
                f"{head}{key[j]}{key[after:j]}{here}{key[j + 1 :]}"  # one string built, not four
                for j in range(i + 2, n)
                if here != key[j] and (i >= fixed or key[j] == shared[i])
            ]
            if not keys.isdisjoint(batch):
                for candidate in batch:
                    if candidate in keys:
                        yield candidate, "two characters swapped"
        for hit in swapped:
            yield hit[3], "two characters swapped"
    for hit in far_changed:
        yield hit[3], f"one character changed (position {hit[0] + 1})"
    for i in range(start, min(n, cut) if affordable else 0):
        head, tail = key[:i], key[i + 1 :]
        batch = [f"{head}{letter}{tail}" for letter in _letters(letters, shared, i)]
        if not keys.isdisjoint(batch):
            for candidate in batch:
                if candidate[i] != key[i] and candidate in keys:
                    yield candidate, f"one character changed (position {i + 1})"
    for hit in changed:
        yield hit[3], f"one character changed (position {hit[0] + 1})"
    for hit in far_dropped:
        yield hit[3], f"one character added (position {hit[0] + 1})"
    batch = [key[:i] + key[i + 1 :] for i in range(built, min(n, cut))]
    if not keys.isdisjoint(batch):
        for i, candidate in enumerate(batch, built):
            if candidate in keys:
                yield candidate, f"one character added (position {i + 1})"
    for hit in dropped:
        yield hit[3], f"one character added (position {hit[0] + 1})"
    for hit in far_inserted:
        yield hit[3], f"one character missing (position {hit[0] + 1})"
    for i in range(start + 1 if start else 0, min(n + 1, cut) if affordable else 0):
        head, tail = key[:i], key[i:]
        batch = [f"{head}{letter}{tail}" for letter in _letters(letters, shared, i)]
        if not keys.isdisjoint(batch):
            for candidate in batch:
                if candidate in keys:
                    yield candidate, f"one character missing (position {i + 1})"
    for hit in inserted:
        yield hit[3], f"one character missing (position {hit[0] + 1})"


#: Most keys sharing a value's first characters read in place of building variants.
_NEAR: Final = 16
#: Most ends of a value tried before building the variants near its start instead.
_FAR_TRIES: Final = 3

#: A variant found among the keys near a value: its position (and a second one, for a swap),
#: its letter (for a change or an insertion) and the key: ordered as the search meets them.
_Hit = tuple[int, int, str, str]


def _letters(letters: list[str], shared: str, i: int) -> list[str] | str:
    """The letters a variant may put at position ``i``: within ``shared``, only its own."""
    return shared[i] if i < len(shared) else letters


def _read_near(
    key: str, cut: int, near: Sequence[str], keys: KeysView[str], affordable: bool
) -> tuple[list[_Hit], list[_Hit], list[_Hit], list[_Hit], list[_Hit]]:
    """The keys of ``near`` two neighbours swapped, two swapped, one changed, missing or added.

    Each list in the order the search would meet them (by position, then
    letter) among the edits at ``cut`` or after: ``near`` starts with
    ``key[:cut]``. One character changed or missing only when ``affordable``.
    """
    n = len(key)
    found: tuple[list[_Hit], ...] = ([], [], [], [], [])
    for other in near:
        if other not in keys:
            continue
        m = len(other)
        if m == n - 1:
            at = _dropped_at(key, other, cut)
            if at is not None and at >= cut:  # before ``cut``: a variant built, or read from far
                found[4].append((at, 0, "", other))
            continue
        if m not in (n, n + 1):
            continue
        at = cut
        while at < n and other[at] == key[at]:
            at += 1
        if at >= n and m == n:
            continue
        if m == n:
            rest = other[at + 1 :]
            if rest == key[at + 1 :]:
                if affordable:
                    found[2].append((at, 0, other[at], other))
                continue
            # Two swapped: the first difference and one later, the rest alike.
            later = next((j for j in range(at + 1, n) if other[j] != key[j]), n)
            if (
                later < n
                and other[at] == key[later]
                and other[later] == key[at]
                and other[later + 1 :] == key[later + 1 :]
            ):
                if later == at + 1:
                    found[0].append((at, at + 1, "", other))
                elif n <= _ALL_SWAPS_UP_TO:
                    found[1].append((at, later, "", other))
        elif affordable and other[at + 1 :] == key[at:]:
            letter = other[at]
            first = at  # the same letter put earlier in a run of it gives the same key
            while first > 0 and key[first - 1] == letter:
                first -= 1
            found[3].append((first, 0, letter, other))
    for hits in found:
        if len(hits) > 1:
            hits.sort()
    return found[0], found[1], found[2], found[3], found[4]


def _dropped_at(key: str, other: str, start: int = 0) -> int | None:
    """Where one character of ``key`` dropped gives ``other`` (first such place), else None.

    ``other`` and ``key`` agree up to ``start``.
    """
    n = len(key)
    at = start
    while at < n - 1 and other[at] == key[at]:
        at += 1
    if other[at:] != key[at + 1 :]:
        return None
    while at > 0 and key[at - 1] == key[at]:  # the same letter dropped earlier in its run
        at -= 1
    return at


def _read_far(
    key: str, start: int, far: Sequence[str], keys: KeysView[str]
) -> tuple[list[_Hit], list[_Hit], list[_Hit], list[_Hit]]:
    """The keys of ``far`` two neighbours swapped, one changed, one added, before ``start``.

    And one missing up to ``start``. Each list in the order the search would
    meet them (by position, then letter): ``far`` ends with ``key[start:]``.
    """
    n = len(key)
    neighbours: list[_Hit] = []
    changed: list[_Hit] = []
    dropped: list[_Hit] = []
    inserted: list[_Hit] = []
    for other in far:
        if other not in keys:
            continue
        m = len(other)
        if m == n - 1:
            at = _dropped_at(key, other)
            if at is not None and at < start:  # from ``start`` on: built, or read from near
                dropped.append((at, 0, "", other))
            continue
        if m not in (n, n + 1):
            continue
        at = 0
        while at < start and other[at] == key[at]:
            at += 1
        if m == n:
            if at < start and other[at + 1 : start] == key[at + 1 : start]:
                changed.append((at, 0, other[at], other))
            elif (
                at + 1 < start
                and other[at] == key[at + 1]
                and other[at + 1] == key[at]
                and other[at + 2 : start] == key[at + 2 : start]
            ):
                neighbours.append((at, at + 1, "", other))
        elif other[at + 1 : start + 1] == key[at:start]:
            letter = other[at]
            first = at  # the same letter put earlier in a run of it gives the same key
            while first > 0 and key[first - 1] == letter:
                first -= 1
            inserted.append((first, 0, letter, other))
    for hits in (neighbours, changed, dropped, inserted):
        hits.sort()
    return neighbours, changed, dropped, inserted
