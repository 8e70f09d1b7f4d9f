"""Look-up aids for refusals: the characters a kind's keys use, and its keys in order.

A ledger keeps one :class:`KeyIndex` per kind beside its entries. Adding a
key costs an append; the sorting needed for the searches of a refusal (is
this value a cut-short ledger value? which keys start or end as it does?)
is paid on the refusal path, a little at a time: new keys are sorted into a
short run of their own, and runs of like size merged, so a refusal sorts
about the keys that arrived since the last one, never the whole index. Up to
a bound, new keys are not sorted at once but found by a scan of their text,
and sorted once the scans have cost about what sorting them does: a
conversation that adds ids between refusals pays for no sort at most of them.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, TypeVar

E = TypeVar("E")

#: A key read from its end (as :attr:`KeyIndex.ends` holds it), at C speed.
_REVERSED: Final = operator.itemgetter(slice(None, None, -1))
#: Most new keys a search reads one by one rather than sorting them into a run first.
_PENDING: Final = 64
#: Most new keys left unsorted past :data:`_PENDING`: a search finds those it wants by a scan
#: of their text, at C speed, until the scans have read them :data:`_SCANS` times (about what
#: sorting them into both orders costs), then they are sorted into runs.
_TAIL: Final = 2048
_SCANS: Final = 8
#: What separates the new keys in their text; a key holding it sends the search back to
#: reading them one by one.
_SEP: Final = "\n"


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
    themselves, ``ends`` them reversed. New keys wait in ``pending``, read
    one by one while they are few, then found by a scan of their text, then
    sorted into a run of each. Evicted keys stay until a rebuild,
    so adding an id stays O(1). ``shared`` is the prefix every key ever added
    starts with (``"ord_"``), which only shrinks: the near-miss search need
    not vary what every key has.
    """

    __slots__ = (
        "_letters",
        "_scanned",
        "_text",
        "_texted",
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
        self._untext()

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
            self._untext()
        elif len(self.pending) > _PENDING and (
            len(self.pending) > _TAIL
            or self._scanned >= _SCANS * len(self.pending)
            or self._tail() is None
        ):
            pending, self.pending = self.pending, []
            self.starts.add(pending)
            if self.ends is not None:
                self.ends.add(pending)
            self._untext()

    def _untext(self) -> None:
        """Forget the text of the new keys (none are left, or they are read one by one)."""
        self._text: str | None = _SEP
        self._texted = 0  # how many of the new keys the text holds
        self._scanned = 0  # keys read by scans of it since

    def _tail(self) -> str | None:
        """The new keys as one text, each between two :data:`_SEP`; None if one holds it."""
        text, pending = self._text, self.pending
        if text is not None and self._texted < len(pending):
            fresh = pending[self._texted :]
            chunk = _SEP.join(fresh)
            if chunk.count(_SEP) != len(fresh) - 1:  # a key holds the separator
                self._text = None
                return None
            text = self._text = f"{text}{chunk}{_SEP}"
            self._texted = len(pending)
        return text

    def _pending_with(self, part: str, ends: bool) -> list[str]:
        """The new keys (not yet sorted) starting, or with ``ends`` ending, with ``part``.

        In the order they came, repeats included: what reading them one by one gives.
        """
        pending = self.pending
        if not pending:
            return []
        text = self._tail() if len(pending) > _PENDING and part else None
        if text is None:
            holds = str.endswith if ends else str.startswith
            return [key for key in pending if holds(key, part)]
        self._scanned += len(pending)
        found: list[str] = []
        if _SEP in part:  # no new key holds the separator
            return found
        if ends:
            needle = part + _SEP
            at = text.find(needle, 1)
            while at >= 0:
                end = at + len(part)
                found.append(text[text.rfind(_SEP, 0, at) + 1 : end])
                at = text.find(needle, end + 1)
        else:
            needle = _SEP + part
            at = text.find(needle)
            while at >= 0:
                end = text.index(_SEP, at + 1)
                found.append(text[at + 1 : end])
                at = text.find(needle, end)
        return found

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
        return self._live(first, False, prefix, table, limit)

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
        return self._live(list(map(_REVERSED, first)), True, suffix, table, limit)

    def _live(
        self,
        first: list[str],
        ends: bool,
        part: str,
        table: Mapping[str, object],
        limit: int,
    ) -> list[str] | None:
        """The live keys of ``first`` (the first keys holding ``part``, in order) and new ones.

        ``ends``: the keys end with ``part`` (else start with it).

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
        for key in self._pending_with(part, ends):
            if key in table and key not in found:
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
        for key in self._pending_with(prefix, False):
            if key != prefix and len(found) < limit:
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
