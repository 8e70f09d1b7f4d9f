"""Look-up aids for refusals: the characters a kind's keys use, and its keys in order.

A ledger keeps one :class:`KeyIndex` per kind beside its entries. Adding a
key costs an append; the sorting needed for the searches of a refusal (is
this value a cut-short ledger value? which keys start or end as it does?)
is paid on the refusal path, a little at a time: new keys are sorted into a
short run of their own, and runs of like size merged, so a refusal sorts
about the keys that arrived since the last one, never the whole index.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final, TypeVar

E = TypeVar("E")

#: A key read from its end (as :attr:`KeyIndex.ends` holds it), at C speed.
_REVERSED: Final = operator.itemgetter(slice(None, None, -1))
#: Most new keys a search reads one by one rather than sorting them into a run first.
_PENDING: Final = 64


class _Runs:
    """Keys in sorted runs: the keys themselves, or (``reverse``) each read from its end.

    A new run is merged with the one before it while it is at least as
    long (a binary counter: half the additions merge nothing), so there are
    at most about log2 of the keys' number of runs, each key is merged that
    many times over its life, and a run merge is one sort of two sorted
    runs, in linear time at C speed. A key may sit in two runs (an
    evicted key seen again): readers pass over repeats. With ``reverse``
    the runs hold the reversed strings, so sorting and merging them compare
    plain strings, with no key function building a reversed copy of every
    key of a run at each merge.
    """

    __slots__ = ("reverse", "runs")

    def __init__(self, *, reverse: bool = False) -> None:
        self.reverse = reverse
        self.runs: list[list[str]] = []

    def add(self, keys: Iterable[str]) -> None:
        """Sort ``keys`` into a run of their own, and merge runs of like size."""
        run = sorted(map(_REVERSED, keys)) if self.reverse else sorted(keys)
        if not run:
            return
        runs = self.runs
        runs.append(run)
        while len(runs) > 1 and len(runs[-1]) >= len(runs[-2]):
            last = runs.pop()
            merged = runs[-1] + last
            merged.sort()  # two sorted runs: merged in linear time
            runs[-1] = merged

    def __iter__(self) -> Iterator[str]:
        """The keys as stored (reversed, with ``reverse``), run by run."""
        for run in self.runs:
            yield from run

    def from_(self, probe: str) -> Iterator[str]:
        """The keys (as stored) from the first one not below ``probe``, in order.

        Each key once, however many runs hold it.
        """
        tails = [
            map(run.__getitem__, range(bisect.bisect_left(run, probe), len(run)))
            for run in self.runs
        ]
        merged = tails[0] if len(tails) == 1 else heapq.merge(*tails)
        last = None
        for item in merged:
            if item != last:
                yield item
                last = item

    def starting(self, part: str, most: int) -> list[str] | None:
        """The first ``most`` keys (as stored) starting with ``part``, in order, each once.

        All of them when fewer. A bisection and a slice per run, without
        the merge of :meth:`from_`; None where a run repeats a key among the
        ``most`` read of it (then more keys than read may belong in the
        answer: the caller reads :meth:`from_`).
        """
        found: list[str] = []
        for run in self.runs:
            at = bisect.bisect_left(run, part)
            end = min(len(run), at + most)
            stop = at
            while stop < end and run[stop].startswith(part):
                stop += 1
            if stop > at:
                read = run[at:stop]
                if stop - at == most and len(set(read)) < most:
                    return None
                found += read
        if len(self.runs) > 1:
            found.sort()
        if len(found) > 1:
            found = list(dict.fromkeys(found))  # sorted: a repeat follows its first
        return found[:most]


class KeyIndex:
    """One kind's keys, for the near-miss classification of a refused value.

    ``alphabet`` and ``longest`` (the length of the longest key) only grow:
    a superset is harmless, and beyond ``longest`` a value is near no key
    at all, so its refusal needs no search. ``starts`` holds the keys in
    sorted runs (:class:`_Runs`) for prefix search, ``ends`` (None until a
    search first asks) the same keys ordered from their last character, for
    the keys ending as a value does: a key one edit from a value either
    starts or ends with a long part of it. ``starts`` holds the key strings
    themselves, ``ends`` them reversed. New keys wait in ``pending``, read one by one while they are
    few, then sorted into a run of each. Evicted keys stay until a rebuild,
    so adding an id stays O(1). ``shared`` is the prefix every key ever added
    starts with (``"ord_"``), which only shrinks: the near-miss search need
    not vary what every key has.
    """

    __slots__ = (
        "_letters",
        "alphabet",
        "ends",
        "longest",
        "pending",
        "shared",
        "stale",
        "starts",
    )

    def __init__(self) -> None:
        self.alphabet: set[str] = set()
        self.longest = 0
        self.starts = _Runs()
        self.ends: _Runs | None = None
        self.pending: list[str] = []
        self.stale = 0
        self.shared: str | None = None  # None: no key yet
        self._letters: list[str] = []

    def letters(self) -> list[str]:
        """``alphabet`` sorted (sorted again only when it has grown)."""
        if len(self._letters) != len(self.alphabet):
            self._letters = sorted(self.alphabet)
        return self._letters

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
            self.starts = _Runs()
            self.starts.add(table)
            self.ends = None
            self.pending = []
            self.stale = 0
        elif len(self.pending) > _PENDING:
            pending, self.pending = self.pending, []
            self.starts.add(pending)
            if self.ends is not None:
                self.ends.add(pending)

    def starting_with(
        self, prefix: str, table: Mapping[str, object], limit: int
    ) -> list[str] | None:
        """Live keys of ``table`` starting with ``prefix`` (itself included); None: over ``limit``.

        Costs one bisection per run and at most ``limit`` keys read (four
        times that with evicted keys), plus the pending ones.
        """
        self.tidy(table)
        most = 4 * limit + 2
        first = self.starts.starting(prefix, most)
        if first is None:
            first = list(itertools.islice(_holding(self.starts.from_(prefix), prefix), most))
        return self._live(first, str.startswith, prefix, table, limit)

    def ending_with(self, suffix: str, table: Mapping[str, object], limit: int) -> list[str] | None:
        """Live keys of ``table`` ending with ``suffix``; None: over ``limit``.

        Costs what :meth:`starting_with` costs; the first call orders the keys
        from their end.
        """
        self.tidy(table)
        ends = self.ends
        if ends is None:
            ends = self.ends = _Runs(reverse=True)
            ends.add(self.starts)
        back, most = suffix[::-1], 4 * limit + 2
        first = ends.starting(back, most)
        if first is None:
            first = list(itertools.islice(_holding(ends.from_(back), back), most))
        return self._live(list(map(_REVERSED, first)), str.endswith, suffix, table, limit)

    def _live(
        self,
        first: list[str],
        holds: Callable[[str, str], bool],
        part: str,
        table: Mapping[str, object],
        limit: int,
    ) -> list[str] | None:
        """The live keys of ``first`` (the first keys holding ``part``, in order) and pending.

        ``first`` names up to ``4 * limit + 2`` keys: enough to tell when
        more than ``4 * limit + 1`` are read, evicted ones included.
        """
        found: list[str] = []
        for read, key in enumerate(first):
            if read > 4 * limit:  # evicted keys, not yet rebuilt away
                return None
            if key in table:
                if len(found) >= limit:
                    return None
                found.append(key)
        for key in self.pending:
            if holds(key, part) and key in table and key not in found:
                if len(found) >= limit:
                    return None
                found.append(key)
        return found

    def with_prefix(self, prefix: str, table: Mapping[str, E], limit: int) -> list[E]:
        """Live entries of ``table`` whose key starts with ``prefix`` and is longer."""
        self.tidy(table)
        found: list[E] = []
        most = 4 * limit + 2
        first = self.starts.starting(prefix, most)
        # All the keys starting with ``prefix``, or enough of them to find ``limit`` entries:
        # else (many evicted keys among them) read on through every run.
        ordered: Iterable[str] = self.starts.from_(prefix)
        if first is not None and len(first) < most:
            ordered = first
        for key in ordered:
            if not key.startswith(prefix) or len(found) >= limit:
                break
            entry = table.get(key)
            if entry is not None and key != prefix and entry not in found:
                found.append(entry)
        for key in self.pending:
            if key.startswith(prefix) and key != prefix and len(found) < limit:
                entry = table.get(key)
                if entry is not None and entry not in found:
                    found.append(entry)
        return found


def _holding(ordered: Iterator[str], part: str) -> Iterator[str]:
    """The keys of ``ordered`` up to the first one not starting with ``part``."""
    return itertools.takewhile(lambda key: key.startswith(part), ordered)


def _common_prefix(first: str, last: str) -> str:
    """The prefix two strings share (of the least and the greatest: the one all between share)."""
    n = 0
    for a, b in zip(first, last, strict=False):
        if a != b:
            break
        n += 1
    return first[:n]
