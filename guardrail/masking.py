"""Masking and summary lint: every known identifier, in any written form, named by its role.

:class:`Masker` finds ledger values (and evicted ones, and ones carried
from an earlier block) in text: the values and normalised keys as whole
words, the longest first; any case of a value whose kind ignores case; and
tokens a kind's normaliser maps to a value (``#W8855135`` for
``W8855135``). :func:`lint` checks a summary with it: values are scrubbed
to their role, near misses and cut-short ids too, other strings of an
enforced kind's shape are flagged, and so are roles that do not exist.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from guardrail.block import BlockLine
from guardrail.kinds import Kind
from guardrail.ledger import Ledger
from guardrail.nearmiss import near_miss

_TOKEN = re.compile(r"[^\s\"'`,;()\[\]{}<>]+")
_EDGE = ".,;:!?*\u201c\u201d\u2018\u2019"  # and curly quotes
_ELLIPSES = ("…", "...")
ROLE_REF = re.compile(r"\[([A-Za-z_.-][\w.-]*)\]")
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class LintIssue:
    """One thing the summary lint found: what was written, the role, and what was done."""

    problem: Literal["value", "near_miss", "truncated", "example", "unknown", "unknown_role"]
    text: str
    role: str | None
    action: Literal["scrubbed", "flagged"]
    detail: str = ""


class Masker:
    """Finds every known identifier in text, in any written form, and names it by role."""

    def __init__(self, ledger: Ledger, carried: Sequence[BlockLine]) -> None:
        self.ledger = ledger
        exact: dict[str, str] = {}
        folded: dict[str, str] = {}
        self.kind_of: dict[str, str] = {}
        kinds = ledger.kinds
        known = [(e.value, e.key, e.role, e.kind) for e in ledger.entries()]
        known += [(t.value, t.key, t.role, t.kind) for t in ledger.tombstones()]
        for value, key, role, kind_name in known:
            self.kind_of.setdefault(role, kind_name)
            kind = kinds.get(kind_name)
            for form in (value, key):
                if form.strip():
                    exact.setdefault(form, role)
            # A kind whose normaliser ignores case matches any case of its values.
            if (
                kind is not None
                and value.upper() != value.lower()
                and kind.normalize(value.upper()) == kind.normalize(value.lower()) == key
            ):
                folded.setdefault(value.casefold(), role)
        for line in carried:
            exact.setdefault(line.value, line.role)
            self.kind_of.setdefault(line.role, "unknown")
        self.roles = set(self.kind_of)
        self._exact = exact
        self._folded = folded
        self._literal = _literal_pattern(exact, 0)
        self._literal_folded = _literal_pattern(folded, re.IGNORECASE)
        # Kinds whose normaliser does more than trim may map other spellings to a value.
        self._normalising = [
            kinds[name]
            for name in {kind for _, _, _, kind in known}
            if name in kinds and kinds[name].normalize is not str.strip
        ]

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """Non-overlapping ``(start, end, role)`` of identifiers in ``text``, longest first."""
        found: list[tuple[int, int, str]] = []
        if self._literal is not None:
            found += _literal_spans(self._literal, text, self._exact.__getitem__)
        if self._literal_folded is not None:
            folded = self._folded
            found += _literal_spans(self._literal_folded, text, lambda f: folded[f.casefold()])
        if self._normalising:
            for start, end, token in _tokens(text):
                for kind in self._normalising:
                    key = kind.normalize(token)
                    entry = self.ledger.by_kind.get(kind.name, {}).get(key)
                    tomb = None if entry else self.ledger.tombstone(kind.name, key)
                    role = entry.role if entry else tomb.role if tomb else None
                    if role is not None:
                        found.append((start, end, role))
                        break
        if not found:
            return []
        refs = [
            (m.start(), m.end(), "") for m in ROLE_REF.finditer(text) if m.group(1) in self.roles
        ]
        if not refs and not self._literal_folded and not self._normalising:
            return found  # one left-to-right search: already ordered and apart
        return _longest_apart(found, refs)

    def mask(self, text: str) -> tuple[str, list[tuple[str, str]]]:
        """``text`` with every identifier replaced by ``[role]``, and the (written, role) pairs."""
        spans = self.spans(text)
        if not spans:
            return text, []
        out, done, at = [], [], 0
        for start, end, role in spans:
            out += [text[at:start], f"[{role}]"]
            done.append((text[start:end], role))
            at = end
        out.append(text[at:])
        return "".join(out), done


def _longest_apart(
    found: list[tuple[int, int, str]], taken: list[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    """The longest spans first, each kept only if it overlaps none kept before (nor ``taken``)."""
    chosen = sorted(taken)
    starts = [span[0] for span in chosen]
    for span in sorted(found, key=lambda s: (s[0] - s[1], s[0])):
        at = bisect.bisect_right(starts, span[0])
        if (at and chosen[at - 1][1] > span[0]) or (at < len(chosen) and chosen[at][0] < span[1]):
            continue
        starts.insert(at, span[0])
        chosen.insert(at, span)
    return [span for span in chosen if span[2]]


def _literal_pattern(forms: Mapping[str, str], flags: int) -> re.Pattern[str] | None:
    """One regex for many literal forms, longest first, none ending inside a longer word.

    The start is checked by :func:`_literal_spans`: a look-behind in front of
    each form would make the search many times slower.
    """
    if not forms:
        return None
    parts = []
    for form in sorted(forms, key=lambda f: (-len(f), f)):
        tail = r"(?!\w)" if _WORD.match(form[-1]) else ""
        parts.append(f"{re.escape(form)}{tail}")
    return re.compile("|".join(parts), flags)


def _literal_spans(
    pattern: re.Pattern[str], text: str, role_of: Callable[[str], str]
) -> list[tuple[int, int, str]]:
    """Matches of ``pattern`` that do not start inside a word (``W12`` is not in ``XW12``)."""
    spans = []
    at = 0
    while (match := pattern.search(text, at)) is not None:
        start = match.start()
        if start and _WORD.match(text[start - 1]) and _WORD.match(text[start]):
            at = start + 1
            continue
        spans.append((start, match.end(), role_of(match.group())))
        at = match.end()
    return spans


def _tokens(text: str) -> Iterable[tuple[int, int, str]]:
    """Word-like tokens with surrounding punctuation trimmed: ``(start, end, token)``."""
    for match in _TOKEN.finditer(text):
        token = match.group()
        start, end = match.start(), match.end()
        lead = len(token) - len(token.lstrip(_EDGE))
        trail = len(token) - len(token.rstrip(_EDGE))
        if lead + trail < len(token):
            yield start + lead, end - trail, token[lead : len(token) - trail]


def lint(summary: str, masker: Masker) -> tuple[str, list[LintIssue]]:
    """Scrub ids and near misses from a summary; flag unknown id-shaped strings and roles.

    A value in any written form, a near miss of one (one edit, a swap,
    look-alike letters) and an id cut short (``W10000…``) that can only be
    one ledger entry are replaced by ``[role]``. A cut-short id that could
    be several, a string of an enforced kind's shape the ledger does not
    hold (or a tool-description example), and a ``[role]`` that does not
    exist are left as written and flagged.
    """
    ledger = masker.ledger
    text, found = masker.mask(summary)
    issues = [LintIssue("value", written, role, "scrubbed") for written, role in found]
    judge = _Judge(ledger)
    replacements: list[tuple[int, int, str]] = []
    inside_roles = {m.start(1) for m in ROLE_REF.finditer(text)}
    for match in _TOKEN.finditer(text):
        start, raw = match.start(), match.group()
        if start in inside_roles:
            continue
        stem = next((raw[: -len(e)] for e in _ELLIPSES if raw.endswith(e)), None)
        if stem is not None:
            issue = judge.truncated(raw, stem.rstrip(".").strip(_EDGE), cut=True)
            span = (start, match.end())
        else:
            token = raw.strip(_EDGE)
            issue = judge.token(token)
            offset = start + raw.find(token)
            span = (offset, offset + len(token))
        if issue is not None:
            issues.append(issue)
            if issue.action == "scrubbed" and issue.role is not None:
                replacements.append((*span, issue.role))
    for start, end, role in sorted(replacements, reverse=True):
        text = f"{text[:start]}[{role}]{text[end:]}"
    for match in ROLE_REF.finditer(text):
        role = match.group(1)
        if role not in masker.roles and role not in ledger:
            issues.append(LintIssue("unknown_role", match.group(), None, "flagged", "no such role"))
    return text, issues


_ID_LIKE = re.compile(r"(?=.*\d)(?=.*[A-Za-z_-]).{4,}")


class _Judge:
    """Decides what one token of a summary is, against the ledger (cheap tests first)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        enforced = [kind for kind in ledger.kinds.values() if kind.enforce]
        self.patterned = [kind for kind in enforced if kind.has_pattern]
        self.any_shape = _any_shape(self.patterned)
        self.held = [kind for kind in enforced if ledger.by_kind.get(kind.name)]
        self.ends = {
            kind.name: {key[-2:] for key in ledger.by_kind[kind.name]} for kind in self.held
        }

    def token(self, token: str) -> LintIssue | None:
        """An issue for a whole token, or None when it is fine (or not an id at all)."""
        ledger = self.ledger
        shaped = []
        if self.any_shape is None or self.any_shape.fullmatch(token):
            shaped = [kind for kind in self.patterned if kind.matches(token)]
        if shaped:
            if any(ledger.get(kind.name, token) for kind in shaped):
                return None
            near = self._near(token, shaped)
            if near is not None:
                return near
            example = next((k for k in shaped if k.normalize(token) in k.examples), None)
            if example is not None:
                return LintIssue("example", token, None, "flagged", f"a {example.name} placeholder")
            detail = f"{shaped[0].name}-shaped, not in the ledger"
            return LintIssue("unknown", token, None, "flagged", detail)
        if not _ID_LIKE.fullmatch(token) or ledger.lookup(token):
            return None
        # Not of any kind's shape, yet an edit or a cut away from a ledger value?
        candidates = [
            kind
            for kind in self.held
            if ledger.keys_with_prefix(kind.name, kind.normalize(token)[:2], limit=1)
            or kind.normalize(token)[-2:] in self.ends[kind.name]
        ]
        return self.truncated(token, token, cut=False) or self._near(token, candidates)

    def _near(self, token: str, kinds: Sequence[Kind]) -> LintIssue | None:
        for kind in kinds:
            hit = near_miss(kind, kind.normalize(token), self.ledger)
            if hit is not None:
                entry, detail = hit
                return LintIssue("near_miss", token, entry.role, "scrubbed", detail)
        return None

    def truncated(self, written: str, stem: str, *, cut: bool) -> LintIssue | None:
        """An id cut short: scrubbed when only one entry starts so, flagged when several do."""
        if len(stem) < (3 if cut else 4):
            return None
        roles: list[str] = []
        for name in self.ledger.by_kind:
            key = self.ledger.normalize(name, stem)
            for entry in self.ledger.keys_with_prefix(name, key, limit=3):
                if (cut or len(entry.key) <= 2 * len(key)) and entry.role not in roles:
                    roles.append(entry.role)
        if len(roles) == 1:
            return LintIssue("truncated", written, roles[0], "scrubbed", "cut short")
        if roles:
            could = " or ".join(f"[{role}]" for role in roles)
            return LintIssue("truncated", written, None, "flagged", f"cut short; could be {could}")
        return None


def _any_shape(kinds: Sequence[Kind]) -> re.Pattern[str] | None:
    """One pattern matching what any of ``kinds`` matches, to skip plain words quickly."""
    if not kinds:
        return None
    try:
        return re.compile("|".join(f"(?:{kind.pattern})" for kind in kinds))
    except re.error:  # inline flags that only work at the start of one pattern
        return None
