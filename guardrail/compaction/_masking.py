"""Masking: every known identifier, in any written form, named by its role.

:class:`Masker` finds ledger values (and evicted ones, and ones carried
from an earlier block) in text: the values and normalised keys as whole
words, the longest first; any case of a value whose kind ignores case; and
tokens a kind's normaliser maps to a value (``#W8855135`` for
``W8855135``). The summary lint (:mod:`guardrail.compaction._lint`) checks a
summary with it.
"""

from __future__ import annotations

import bisect
import functools
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, compress, count, filterfalse
from typing import NamedTuple

from guardrail._data.text import TOKEN, is_word_char
from guardrail.compaction._block import BlockLine
from guardrail.ledger._state import LedgerState

_TOKENS = re.compile(f"({TOKEN.pattern})")  # split: tokens at odd indices
_RUN = re.compile(r"\w+")
_RUNS = re.compile(r"(\w+)")  # split: runs of word characters at odd indices
_ASCII_RUNS = re.compile(r"(?a)(\w+)")  # the same for ASCII text, half again as fast
#: Punctuation trimmed off either end of a token (curly quotes too).
EDGE = ".,;:!?*\u201c\u201d\u2018\u2019"
ROLE_REF = re.compile(r"\[([A-Za-z_.-][\w.-]*)\]")


class Span(NamedTuple):
    """Where an identifier is written in a text, and the role that names it.

    A ``[role]`` reference already in the text is a span with the role
    ``""``: nothing may be masked over it.
    """

    start: int
    end: int
    role: str


class Written(NamedTuple):
    """An identifier as a text wrote it, and the role it was masked by."""

    text: str
    role: str


class _TokenHit(NamedTuple):
    """A token a normalising kind maps to a known id: the edge punctuation cut off, the role."""

    lead: int
    trail: int
    role: str


class _Anchored(NamedTuple):
    """A form of several words, found through its first run of word characters (the anchor)."""

    offset: int  # where the anchor starts in the form
    form: str
    role: str


class Masker:
    """Finds every known identifier in text, in any written form, and names it by role.

    A masker is a snapshot: it knows the ledger as it was when built.
    """

    def __init__(self, state: LedgerState, carried: Sequence[BlockLine]) -> None:
        self.state = state
        exact: dict[str, str] = {}
        folded: dict[str, str] = {}
        self.kind_of: dict[str, str] = {}
        kinds = state.kinds
        known = [(e.value, e.key, e.role, e.kind) for e in state.entries()]
        known += [(t.value, t.key, t.role, t.kind) for t in state.tombstones.values()]
        # Kinds whose normaliser does more than trim: they may ignore case, and map other
        # spellings to a value.
        normalising = {
            name: kinds[name]
            for name in dict.fromkeys(kind for _, _, _, kind in known)
            if name in kinds and kinds[name].normalize is not str.strip
        }
        kind_of = self.kind_of
        for value, key, role, kind_name in known:
            if role not in kind_of:
                kind_of[role] = kind_name
            if value not in exact and value.strip():
                exact[value] = role
            if key is not value and key not in exact and key.strip():
                exact[key] = role
            # A kind whose normaliser ignores case matches any case of its values.
            kind = normalising.get(kind_name)
            if (
                kind is not None
                and value.upper() != value.lower()
                and kind.key(value.upper()) == kind.key(value.lower()) == key
            ):
                folded.setdefault(value.casefold(), role)
        for line in carried:
            exact.setdefault(line.value, line.role)
            self.kind_of.setdefault(line.role, "unknown")
        self.roles = set(self.kind_of)
        #: No value holds a line break: no identifier spans two lines of a text.
        self.one_line = not any("\n" in form for form in (*exact, *folded))
        self._exact = _Forms(exact, fold=False)
        self._folded = _Forms(folded, fold=True) if folded else None
        self._normalising = list(normalising.values())
        # Every exact form one word (the usual case): the exact matches are the text's words
        # that are values, all of them, so masking replaces words in place.
        self._words_only = not (self._exact.anchored or self._exact.bare)
        self._plain = self._words_only and not (self._folded or self._normalising)
        self._masked = {form: f"[{role}]" for form, role in self._exact.whole.items()}
        shortest = min(map(len, self._exact.whole), default=1)
        self._long = re.compile(rf"\b(\w{{{shortest},}})")  # whole runs this long or longer
        self._long_ascii = re.compile(rf"(?a)\b(\w{{{shortest},}})")
        self._encoded: dict[bytes, str] | None = None  # the one-word values as UTF-8
        # What each distinct token of the text is, for the normalising kinds: the
        # punctuation trimmed off each end and the role, or None. Tokens repeat a lot.
        self._token_roles: dict[str, _TokenHit | None] = {}

    def spans(self, text: str) -> list[Span]:
        """Non-overlapping spans of the identifiers in ``text``, in order; the longest win."""
        pieces = _runs(text)
        return self._spans(text, pieces, self._more_spans(text, pieces))

    def _spans(self, text: str, pieces: list[str], more: list[Span]) -> list[Span]:
        """:meth:`spans`, given ``_runs(text)`` and the :meth:`_more_spans` of ``text``."""
        found = self._exact.spans(text, pieces)
        if not found and not more:
            return []
        refs = [
            Span(m.start(), m.end(), "")
            for m in ROLE_REF.finditer(text)
            if m.group(1) in self.roles
        ]
        if not refs and not more:
            return found  # one left-to-right pass: already ordered and apart
        return _longest_apart(found + more, refs)

    def _more_spans(self, text: str, pieces: list[str]) -> list[Span]:
        """Matches of any case, and of normalised tokens, that the exact matches do not make.

        A match with the very span and role of an exact one-word match is left out
        when every exact form is one word: each such exact match is kept by the
        exact pass, so its twin would lose to it (or to what beats it) anyway.
        """
        more = []
        if self._folded is not None:
            more = self._folded.spans(text, pieces)
            if more and self._words_only:
                whole = self._exact.whole
                more = [s for s in more if whole.get(text[s.start : s.end]) != s.role]
        if self._normalising:
            more += self._normalised_spans(text)
        return more

    def roles_in(self, text: str) -> set[str]:
        """The roles of the identifiers in ``text`` (the roles of :meth:`spans`)."""
        if not self._plain:
            pieces = _runs(text)
            more = self._more_spans(text, pieces)
            if more or not self._words_only:
                return {role for _, _, role in self._spans(text, pieces, more)}
        # Every value is one word: the values written are the text's words that are values,
        # unless one is written inside a [role] reference, which is never masked.
        whole = self._exact.whole
        if self._encoded is None:
            self._encoded = {_utf8(form): form for form in whole}
        present = _words_of(text, whole, self._encoded)
        if "[" in text and self._in_references(text, present):
            return {role for _, _, role in self.spans(text)}
        return {whole[form] for form in present}

    def mask(self, text: str) -> tuple[str, list[Written]]:
        """``text`` with every identifier replaced by ``[role]``, and what was masked by which."""
        out, words, roles = self._mask(text)
        return out, list(map(Written, words, roles))

    def mask_roles(self, text: str) -> tuple[str, list[str]]:
        """:meth:`mask`, with the role of each id masked instead of what was masked by which."""
        out, _, roles = self._mask(text)
        return out, roles

    def _mask(self, text: str) -> tuple[str, list[str], list[str]]:
        """The masked text, the identifiers masked as written, and the role of each."""
        runs_of_text: list[str] | None = None
        more: list[Span] = []
        if self._plain and _RUN.fullmatch(text):
            # One word (a key, a name, an id alone: most strings of a result): it is a value
            # or it is not.
            role = self._exact.whole.get(text)
            return (text, [], []) if role is None else (self._masked[text], [text], [role])
        if not self._plain:
            runs_of_text = _runs(text)
            more = self._more_spans(text, runs_of_text)
        if self._words_only and not more:
            # Every exact form is one word: replace the words that are values, in place,
            # unless another written form (any case, a normalised spelling) is there too.
            whole = self._exact.whole
            plain_ascii = text.isascii()
            if not plain_ascii and not self._any_word(text):
                return text, [], []  # the Unicode pattern is slow: most such texts name no id
            # Words shorter than every value are left in the pieces between: fewer pieces.
            pieces = (self._long_ascii if plain_ascii else self._long).split(text)
            runs = pieces[1::2]
            if whole.keys().isdisjoint(runs):
                return text, [], []
            written = list(compress(runs, map(whole.__contains__, runs)))
            if "[" not in text or not self._in_references(text, written):
                pieces[1::2] = map(self._masked.get, runs, runs)
                return "".join(pieces), written, list(map(whole.__getitem__, written))
        if runs_of_text is None:
            runs_of_text = _runs(text)
        spans = self._spans(text, runs_of_text, more)
        if not spans:
            return text, [], []
        out, words, roles, at = [], [], [], 0
        for start, end, role in spans:
            out += [text[at:start], f"[{role}]"]
            words.append(text[start:end])
            roles.append(role)
            at = end
        out.append(text[at:])
        return "".join(out), words, roles

    def _any_word(self, text: str) -> bool:
        """Whether any one-word value is a whole run of word characters in ``text``.

        What :func:`_words_of` finds, at C speed, stopping at the first found.
        """
        whole = self._exact.whole
        if self._encoded is None:
            self._encoded = {_utf8(form): form for form in whole}
        pieces = _pieces_of(text)
        if not self._encoded.keys().isdisjoint(pieces):
            return True
        return any(
            not whole.keys().isdisjoint(_RUN.findall(piece.decode("utf-8", "surrogatepass")))
            for piece in filterfalse(bytes.isascii, pieces)
        )

    def _in_references(self, text: str, words: Iterable[str]) -> bool:
        """Whether any of ``words`` is written inside a ``[role]`` reference in ``text``."""
        refs = [role for role in ROLE_REF.findall(text) if role in self.roles]
        return bool(refs) and not set(words).isdisjoint(_RUN.findall(" ".join(refs)))

    def _normalised_spans(self, text: str) -> list[Span]:
        """Tokens that a normalising kind maps to a value (or to an evicted one)."""
        pieces = _TOKENS.split(text)
        tokens = pieces[1::2]
        memo = self._token_roles
        for token in set(tokens).difference(memo):
            memo[token] = self._token_role(token)
        hits = list(compress(count(), map(memo.__getitem__, tokens)))
        if not hits:
            return []
        ends = list(accumulate(map(len, pieces)))
        found = []
        for j in hits:
            hit = memo[tokens[j]]
            assert hit is not None
            found.append(Span(ends[2 * j] + hit.lead, ends[2 * j + 1] - hit.trail, hit.role))
        return found

    def _token_role(self, raw: str) -> _TokenHit | None:
        token = raw.strip(EDGE)
        if not token:
            return None
        state = self.state
        for kind in self._normalising:
            key = kind.key(token)  # a token the normaliser cannot read is no id of the kind
            if key is None:
                continue
            entry = state.tables.get(kind.name, {}).get(key)
            tomb = None if entry else state.tombstone(kind.name, key)
            role = entry.role if entry else tomb.role if tomb else None
            if role is not None:
                if self._words_only and self._exact.whole.get(token) == role:
                    return None  # the exact match's twin (see _more_spans)
                lead = len(raw) - len(raw.lstrip(EDGE))
                return _TokenHit(lead, len(raw) - len(token) - lead, role)
        return None


class _Forms:
    """Many literal forms, found in text through their first run of word characters.

    A form matches where it is written, neither end inside a word, the longest
    at the leftmost place first. Such a match always lies over a whole run of
    word characters in the text equal to the form's first run (its anchor):
    before the anchor is the start of the form or a non-word character of it,
    after it a non-word character or the end of the form, where the text may
    not go on with a word character either. So one split of the text into runs
    and one look-up per run, both at C speed, find every candidate, and only
    the candidates are checked in full. A form that is one run is its own
    match. This replaces one regex alternation of every form, which Python's
    engine tries form by form at every position (and takes long to compile).
    """

    def __init__(self, forms: Mapping[str, str], *, fold: bool) -> None:
        self.fold = fold
        #: Forms that are one run of word characters, to their role.
        self.whole: dict[str, str]
        #: Anchor to the longer forms that start with it.
        self.anchored: dict[str, list[_Anchored]] = {}
        bare: dict[str, str] = {}  # forms with no word character at all (rare)
        # Most forms are one word: sorted out at C speed, the others one by one.
        one_word = list(map(_RUN.fullmatch, forms))
        self.whole = dict(compress(forms.items(), one_word))
        for form, role in compress(forms.items(), map(operator.not_, one_word)):
            run = _RUN.search(form)
            if run is None:
                if form:
                    bare[form] = role
            else:
                self.anchored.setdefault(run.group(), []).append(_Anchored(run.start(), form, role))
        self.bare = bare
        self._bare = None
        if bare:
            # Every place one starts (the longest there), overlapping places included.
            alternation = "|".join(re.escape(f) for f in sorted(bare, key=lambda f: (-len(f), f)))
            self._bare = re.compile(f"(?=({alternation}))", re.IGNORECASE if fold else 0)

    def spans(self, text: str, pieces: list[str]) -> list[Span]:
        """Leftmost-longest matches in ``text``, apart; ``pieces`` is ``_runs(text)``."""
        runs = pieces[1::2]
        fold = self.fold
        keys = list(map(str.casefold, runs)) if fold else runs
        whole, anchored = self.whole, self.anchored
        hits = list(compress(count(), map(whole.__contains__, keys)))
        longer = list(compress(count(), map(anchored.__contains__, keys))) if anchored else []
        if not hits and not longer and self._bare is None:
            return []
        ends = list(accumulate(map(len, pieces)))
        found = [
            Span(ends[2 * j], ends[2 * j + 1], whole[keys[j]])
            for j in hits
            if not fold or len(runs[j]) == len(keys[j])
        ]
        if not longer and self._bare is None:
            return found  # whole runs: in order and apart
        size = len(text)
        for j in longer:
            at = ends[2 * j]
            for offset, form, role in anchored[keys[j]]:
                start = at - offset
                end = start + len(form)
                if start < 0 or end > size:
                    continue
                written = text[start:end]
                if (written.casefold() if fold else written) != form:
                    continue
                if start and is_word_char(text[start - 1]) and is_word_char(text[start]):
                    continue
                if end < size and is_word_char(form[-1]) and is_word_char(text[end]):
                    continue
                found.append(Span(start, end, role))
        if self._bare is not None:
            roles = self.bare
            for match in self._bare.finditer(text):
                written = match.group(1)
                named = roles.get(written.casefold() if fold else written)
                if named is not None:
                    found.append(Span(match.start(), match.start() + len(written), named))
        # Left to right; at one place the longest; each match resumes where the last ended.
        found.sort(key=lambda span: (span.start, -span.end))
        apart = []
        resume = 0
        for span in found:
            if span.start >= resume:
                apart.append(span)
                resume = span.end
        return apart


# ASCII bytes that are not word characters, as spaces; every other byte kept.
_NOT_WORD = bytes(
    byte if byte >= 0x80 or is_word_char(chr(byte)) else ord(" ") for byte in range(256)
)


def _runs(text: str) -> list[str]:
    """``text`` split into runs of word characters (odd indices) and what lies between."""
    return (_ASCII_RUNS if text.isascii() else _RUNS).split(text)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # lone surrogates come in JSON too


def _words_of(text: str, words: Mapping[str, str], encoded: Mapping[bytes, str]) -> set[str]:
    """Which of ``words`` (``encoded`` is them as UTF-8) are runs of word characters in ``text``.

    Four times as fast as ``re.findall(r"\\w+", text)`` on large texts: ASCII non-word
    characters become spaces in the UTF-8 bytes, which ``bytes.split`` splits at C speed,
    and the pieces are looked up as bytes. A piece holding other characters (some of
    which are not word characters) is split by the regex as well.
    """
    pieces = _pieces_of(text) if len(text) > _REMEMBERED_CHARS else _remembered_pieces(text)
    present = {encoded[piece] for piece in encoded.keys() & pieces}
    for piece in filterfalse(bytes.isascii, pieces):
        runs = _RUN.findall(piece.decode("utf-8", "surrogatepass"))
        present.update(run for run in runs if run in words)
    return present


#: Texts up to this long keep their pieces for the next search (a few of them, the latest
#: used): the system prompt opens every compaction of a conversation, and often of every
#: conversation of an agent.
_REMEMBERED_CHARS = 65_536


def _pieces_of(text: str) -> frozenset[bytes]:
    """The UTF-8 pieces of ``text`` between ASCII non-word characters."""
    return frozenset(_utf8(text).translate(_NOT_WORD).split())


_remembered_pieces = functools.lru_cache(maxsize=16)(_pieces_of)


def _longest_apart(found: list[Span], taken: list[Span]) -> list[Span]:
    """The longest spans first, each kept only if it overlaps none kept before (nor ``taken``)."""
    chosen = sorted(taken)
    starts = [span.start for span in chosen]
    for span in sorted(found, key=lambda s: (s.start - s.end, s.start)):
        at = bisect.bisect_right(starts, span.start)
        if (at and chosen[at - 1].end > span.start) or (
            at < len(chosen) and chosen[at].start < span.end
        ):
            continue
        starts.insert(at, span.start)
        chosen.insert(at, span)
    return [span for span in chosen if span.role]
