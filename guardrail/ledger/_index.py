"""Look-up aids for refusals: the characters a kind's keys use, and its keys in order.

A ledger keeps one :class:`KeyIndex` per kind beside its entries. Adding a
key costs an append; the sorting needed for prefix search (is this value a
cut-short ledger value?) is paid on the refusal path, a little at a time.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, TypeVar

E = TypeVar("E")

#: A key read from its end (the order of :meth:`KeyIndex.ending_with`), at C speed.
_REVERSED: Final = operator.itemgetter(slice(None, None, -1))
#: Most runs of new keys read from their end before they are merged into one.
_RUNS: Final = 8


class KeyIndex:
    """One kind's keys, for the near-miss classification of a refused value.

    ``alphabet`` and ``longest`` (the length of the longest key) only grow:
    a superset is harmless, and beyond ``longest`` a value is near no key
    at all, so its refusal needs no search. ``keys`` and ``recent``
    are sorted, read together as one sorted list without repeats for prefix
    search; new keys wait in ``pending``, are sorted into the small
    ``recent`` when there are enough of them, and ``recent`` joins ``keys``
    only when it has grown to a fraction of it, so a refusal after new ids
    arrived sorts a few hundred keys, not the whole index. Evicted keys stay
    until a rebuild, so adding an id stays O(1). ``shared`` is the prefix
    every key ever added starts with (``"ord_"``), which only shrinks: the
    near-miss search need not vary what every key has.

    ``ends`` holds the same keys ordered from their last character (runs,
    each sorted so; None until a search first asks), for the keys ending as
    a value does: a key one edit from the value either starts or ends with a
    long part of it. It holds the key strings themselves, not reversed
    copies; keys sorted into ``recent`` since wait in ``fresh`` and become a
    run of their own at the next search, and many runs are merged into one.
    """

    __slots__ = (
        "alphabet",
        "ends",
        "fresh",
        "keys",
        "longest",
        "pending",
        "recent",
        "shared",
        "stale",
    )

    def __init__(self) -> None:
        self.alphabet: set[str] = set()
        self.longest = 0
        self.keys: list[str] = []
        self.recent: list[str] = []
        self.pending: list[str] = []
        self.stale = 0
        self.shared: str | None = None  # None: no key yet
        self.ends: list[list[str]] | None = None
        self.fresh: list[str] = []

    def sort_pending(self) -> None:
        """Sort the pending keys into ``recent`` (and ``recent`` into ``keys`` when large).

        ``recent`` may hold a key twice (and ``keys`` a key of ``recent``): readers
        pass over repeats, so taking keys in costs one sort of a sorted run and a
        short unsorted one, at C speed, with no look-up per key.
        """
        recent = self.recent + self.pending
        if self.ends is not None:
            self.fresh += self.pending
        self.pending = []
        recent.sort()  # a sorted run and a short one: merged in linear time
        if len(recent) > max(4096, len(self.keys) // 16):
            merged = self.keys + recent
            merged.sort()
            # A key evicted and seen again may be in both: keep one of each.
            self.keys = list(dict.fromkeys(merged))
            self.recent = []
        else:
            self.recent = recent

    def sorted_from(self, prefix: str) -> Iterator[str]:
        """Indexed keys from the first one not below ``prefix``, sorted, each once."""
        keys, recent = self.keys, self.recent
        i, j = bisect.bisect_left(keys, prefix), bisect.bisect_left(recent, prefix)
        last = None
        while i < len(keys) or j < len(recent):
            if j >= len(recent) or (i < len(keys) and keys[i] < recent[j]):
                key = keys[i]
                i += 1
            else:
                key = recent[j]
                j += 1
            if key != last:
                yield key
                last = key

    def add(self, keys: Iterable[str]) -> None:
        """Take in new keys (O(1) each: they wait in ``pending``)."""
        fresh = list(keys)
        if fresh:
            self.alphabet.update("".join(fresh))
            self.longest = max(self.longest, *map(len, fresh))
            self.pending.extend(fresh)
            start = fresh if self.shared is None else [self.shared, min(fresh), max(fresh)]
            self.shared = _common_prefix(min(start), max(start))

    def tidy(self, table: Mapping[str, object]) -> None:
        """Rebuild from ``table`` when evicted keys abound; sort the pending keys when many."""
        if self.stale > max(64, len(table)):
            self.keys = sorted(table)
            self.recent = []
            self.pending = []
            self.stale = 0
            self.ends, self.fresh = None, []
        elif len(self.pending) > 256:
            self.sort_pending()

    def starting_with(
        self, prefix: str, table: Mapping[str, object], limit: int
    ) -> list[str] | None:
        """Live keys of ``table`` starting with ``prefix`` (itself included); None: over ``limit``.

        Costs at most ``limit`` keys read in order, plus the pending ones.
        """
        self.tidy(table)
        found: list[str] = []
        for read, key in enumerate(self.sorted_from(prefix)):
            if not key.startswith(prefix):
                break
            if read > 4 * limit:  # evicted keys, not yet rebuilt away
                return None
            if key in table:
                if len(found) >= limit:
                    return None
                found.append(key)
        for key in self.pending:
            if key.startswith(prefix) and key in table and key not in found:
                if len(found) >= limit:
                    return None
                found.append(key)
        return found

    def ending_with(self, suffix: str, table: Mapping[str, object], limit: int) -> list[str] | None:
        """Live keys of ``table`` ending with ``suffix``; None: over ``limit``.

        Costs one bisection per run of ``ends`` and at most ``limit`` keys read
        (four times that with evicted keys), plus the pending ones.
        """
        self.tidy(table)
        ends = self._ends()
        found: list[str] = []
        probe = suffix[::-1]
        read = 0
        for run in ends:
            at = bisect.bisect_left(run, probe, key=_REVERSED)
            while at < len(run) and run[at].endswith(suffix):
                key = run[at]
                at += 1
                read += 1
                if read > 4 * limit:
                    return None
                if key in table and key not in found:
                    if len(found) >= limit:
                        return None
                    found.append(key)
        for key in self.pending:
            if key.endswith(suffix) and key in table and key not in found:
                if len(found) >= limit:
                    return None
                found.append(key)
        return found

    def _ends(self) -> list[list[str]]:
        """The runs of keys ordered from their end: built, or the fresh keys made a run."""
        ends = self.ends
        if ends is None:
            ends = self.ends = [sorted(set(self.keys).union(self.recent), key=_REVERSED)]
            self.fresh = []
        elif self.fresh:
            ends.append(sorted(set(self.fresh), key=_REVERSED))
            self.fresh = []
            if len(ends) > _RUNS:  # many small runs: one, sorted again from the keys it holds
                small = [key for run in ends[1:] for key in run]
                ends[1:] = [sorted(set(small), key=_REVERSED)]
                if len(ends[1]) > len(ends[0]) // 8:
                    ends[:] = [sorted(set(ends[0]).union(ends[1]), key=_REVERSED)]
        return ends

    def with_prefix(self, prefix: str, table: Mapping[str, E], limit: int) -> list[E]:
        """Live entries of ``table`` whose key starts with ``prefix`` and is longer."""
        self.tidy(table)
        found: list[E] = []
        for key in self.sorted_from(prefix):
            if not key.startswith(prefix) or len(found) >= limit:
                break
            entry = table.get(key)
            if entry is not None and key != prefix and entry not in found:
                found.append(entry)
        for key in self.pending:
            entry = table.get(key)
            if (
                len(found) < limit
                and entry is not None
                and key != prefix
                and key.startswith(prefix)
                and entry not in found
            ):
                found.append(entry)
        return found


def _common_prefix(first: str, last: str) -> str:
    """The prefix two strings share (of the least and the greatest: the one all between share)."""
    n = 0
    for a, b in zip(first, last, strict=False):
        if a != b:
            break
        n += 1
    return first[:n]
