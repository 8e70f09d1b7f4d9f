"""The summary lint: what a summary still writes of the ledger's ids, scrubbed or flagged.

:func:`lint` checks a summary with a :class:`~guardrail.compaction._masking.Masker`:
values are scrubbed to their role, near misses and cut-short ids too, other
strings of an enforced kind's shape are flagged, and so are roles that do not
exist.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from guardrail._check.nearmiss import near_miss
from guardrail._data.entry import Entry
from guardrail._data.text import ELLIPSES, TOKEN
from guardrail.compaction._masking import EDGE, ROLE_REF, Masker, Span
from guardrail.kinds import Kind
from guardrail.ledger._state import LedgerState


@dataclass(frozen=True)
class LintIssue:
    """One thing the summary lint found: what was written, the role, and what was done."""

    problem: Literal["value", "near_miss", "truncated", "example", "unknown", "unknown_role"]
    text: str
    role: str | None
    action: Literal["scrubbed", "flagged"]
    detail: str = ""


def lint(summary: str, masker: Masker) -> tuple[str, list[LintIssue]]:
    """Scrub ids and near misses from a summary; flag unknown id-shaped strings and roles.

    A value in any written form, a near miss of one (one edit, a swap,
    look-alike letters) and an id cut short (``W10000…``) that can only be
    one ledger entry are replaced by ``[role]``. A cut-short id that could
    be several, a string of an enforced kind's shape the ledger does not
    hold (or a tool-description example), and a ``[role]`` that does not
    exist are left as written and flagged.
    """
    state = masker.state
    text, found = masker.mask(summary)
    issues = [LintIssue("value", written, role, "scrubbed") for written, role in found]
    judge = _Judge(state)
    # A summary repeats its words ("User:", "called", a role): each distinct token is judged
    # once, and the text is walked again, for where they are, only when some token is at
    # fault. The tokens inside ``[role]`` references are not judged: each is the reference's
    # name, so a token written only there is left out.
    tokens = TOKEN.findall(text)
    outside = Counter(tokens)
    outside.subtract(ROLE_REF.findall(text))
    judged: dict[str, LintIssue | None] = {}
    # Each token's pieces at fault, with their offsets and issues.
    at_fault: dict[str, list[tuple[int, str, LintIssue]]] = {}
    fine = judge.fine
    for raw in outside:
        if raw in fine or outside[raw] <= 0:
            continue
        if judge.always_fine(raw):
            fine.add(raw)
            continue
        of_raw = []
        for at, piece in _pieces(raw, judged, judge):
            if piece in judged:
                issue = judged[piece]
            else:
                issue = judged[piece] = _judge(piece, judge)
            if issue is not None:
                of_raw.append((at, piece, issue))
        if of_raw:
            at_fault[raw] = of_raw
    replacements: list[Span] = []
    if at_fault:
        inside_roles = {m.start(1) for m in ROLE_REF.finditer(text)}
        for match in TOKEN.finditer(text):
            faults = at_fault.get(match.group())
            if faults is None or match.start() in inside_roles:
                continue
            for at, piece, fault in faults:
                issues.append(fault)
                if fault.action == "scrubbed" and fault.role is not None:
                    replacements.append(_covered(piece, match.start() + at, fault.role))
    for start, end, role in sorted(replacements, reverse=True):
        text = f"{text[:start]}[{role}]{text[end:]}"
    for match in ROLE_REF.finditer(text):
        role = match.group(1)
        if role not in masker.roles and role not in state.roles:
            issues.append(LintIssue("unknown_role", match.group(), None, "flagged", "no such role"))
    return text, issues


#: What joins a name to its value in a token of a summary: ``order_id=#W1``, ``order:W1``.
_PAIR = re.compile(r"[=:]")


def _pieces(raw: str, judged: dict[str, LintIssue | None], judge: _Judge) -> list[tuple[int, str]]:
    """What of one token to judge, each with its offset: the token, or its ``key=value`` parts.

    A token that is fine whole but holds ``=`` or ``:`` is judged part by part,
    so ``order_id=#W2378157`` is read as the value it names. (Known values
    were masked before, so no ledger value is split here.)
    """
    if _PAIR.search(raw) is None:
        return [(0, raw)]
    if raw not in judged:
        judged[raw] = _judge(raw, judge)
    if judged[raw] is not None:
        return [(0, raw)]
    pieces, at = [], 0
    for part in _PAIR.split(raw):
        if part.strip(EDGE):
            pieces.append((at, part))
        at += len(part) + 1
    return pieces


def _judge(raw: str, judge: _Judge) -> LintIssue | None:
    """The issue of one token of a summary, or None when it is fine."""
    if raw.endswith(ELLIPSES):  # one test for most tokens, which end in neither
        stem = next(raw[: -len(e)] for e in ELLIPSES if raw.endswith(e))
        return judge.truncated(raw, stem.rstrip(".").strip(EDGE), cut=True)
    return judge.token(raw.strip(EDGE))


def _covered(raw: str, start: int, role: str) -> Span:
    """The span an issue of the token ``raw``, written at ``start``, replaces in the summary.

    A cut-short token whole; any other without the punctuation at its ends,
    as :func:`_judge` read it.
    """
    if raw.endswith(ELLIPSES):
        return Span(start, start + len(raw), role)
    token = raw.strip(EDGE)
    lead = start + raw.find(token)
    return Span(lead, lead + len(token), role)


_ID_LIKE = re.compile(r"(?=.*\d)(?=.*[A-Za-z_-]).{4,}")

#: Tokens fine whatever a ledger holds (see :meth:`_Judge.always_fine`), by the pattern of
#: the shapes they were judged against: summaries write the same words compaction after
#: compaction ("User:", "called", "economy"). Bounded: a set that grows past
#: :data:`_FINE_MAX` words starts again empty, and so does the whole past :data:`_FINE_SHAPES`.
_FINE: dict[str, set[str]] = {}
_FINE_MAX = 100_000
_FINE_SHAPES = 16


def _fine_words(shape: re.Pattern[str] | None) -> set[str]:
    """The tokens known fine against ``shape`` (a set of its own when there is no shape)."""
    if shape is None:
        return set()
    words = _FINE.get(shape.pattern)
    if words is None or len(words) > _FINE_MAX:
        if len(_FINE) >= _FINE_SHAPES:
            _FINE.clear()
        words = _FINE[shape.pattern] = set()
    return words


class _Judge:
    """Decides what one token of a summary is, against the ledger (cheap tests first)."""

    def __init__(self, state: LedgerState) -> None:
        self.state = state
        enforced = [kind for kind in state.kinds.values() if kind.enforce]
        self.patterned = [kind for kind in enforced if kind.has_pattern]
        self.any_shape = _any_shape(self.patterned)
        self.held = [kind for kind in enforced if state.tables.get(kind.name)]
        # The last two characters of every key of each kind held, and the first two (a key
        # starting otherwise starts no key, with no search of the ledger's index): each
        # worked out the first time a token asks (most summaries ask of no kind, or of few).
        self._ends: dict[str, set[str]] = {}
        self._heads: dict[str, set[str]] = {}
        #: Tokens fine whatever the ledger holds, shared by every judge of the same shapes.
        self.fine = _fine_words(self.any_shape)

    def always_fine(self, raw: str) -> bool:
        """Whether no ledger could make the token ``raw`` an issue.

        As :func:`_judge` and :func:`_pieces` read it, no piece of it is cut
        short, of an enforced kind's shape, or id-like.
        """
        if self.any_shape is None:
            return False
        if _PAIR.search(raw) is None:
            return self._plain(raw)
        return self._plain(raw) and all(
            self._plain(part) for part in _PAIR.split(raw) if part.strip(EDGE)
        )

    def _plain(self, piece: str) -> bool:
        assert self.any_shape is not None
        if piece.endswith(ELLIPSES):
            return False
        token = piece.strip(EDGE)
        return not self.any_shape.fullmatch(token) and not _ID_LIKE.fullmatch(token)

    def token(self, token: str) -> LintIssue | None:
        """An issue for a whole token, or None when it is fine (or not an id at all)."""
        state = self.state
        shaped = []
        if self.any_shape is None or self.any_shape.fullmatch(token):
            shaped = [kind for kind in self.patterned if kind.matches(token)]
        if shaped:
            if any(state.get(kind.name, token) for kind in shaped):
                return None
            near = self._near(token, shaped)
            if near is not None:
                return near
            example = next((k for k in shaped if k.key(token) in k.examples), None)
            if example is not None:
                return LintIssue("example", token, None, "flagged", f"a {example.name} placeholder")
            detail = f"{shaped[0].name}-shaped, not in the ledger"
            return LintIssue("unknown", token, None, "flagged", detail)
        if not _ID_LIKE.fullmatch(token) or any(state.get(k, token) for k in state.tables):
            return None
        # Not of any kind's shape, yet an edit or a cut away from a ledger value?
        candidates = []
        for kind in self.held:
            key = kind.key(token)
            if key is not None and (
                self._with_prefix(kind.name, key[:2], limit=1)
                or key[-2:] in self._ends_of(kind.name)
            ):
                candidates.append(kind)
        return self.truncated(token, token, cut=False) or self._near(token, candidates)

    def _near(self, token: str, kinds: Sequence[Kind]) -> LintIssue | None:
        for kind in kinds:
            key = kind.key(token)
            if key is None:
                continue
            try:
                hit = near_miss(kind, key, self.state)
            except Exception:  # the normaliser failed on a look-alike of the token: no id
                continue
            if hit is not None:
                return LintIssue("near_miss", token, hit.entry.role, "scrubbed", hit.detail)
        return None

    def _ends_of(self, kind: str) -> set[str]:
        """The last two characters of every key of ``kind`` the ledger holds."""
        ends = self._ends.get(kind)
        if ends is None:
            ends = self._ends[kind] = {key[-2:] for key in self.state.tables.get(kind, ())}
        return ends

    def _heads_of(self, kind: str) -> set[str]:
        """The first two characters of every key of ``kind`` the ledger holds."""
        heads = self._heads.get(kind)
        if heads is None:
            heads = self._heads[kind] = {key[:2] for key in self.state.tables.get(kind, ())}
        return heads

    def _with_prefix(self, kind: str, prefix: str, *, limit: int) -> list[Entry]:
        """The ledger's live entries of ``kind`` whose key starts with ``prefix`` and is longer."""
        if len(prefix) >= 2 and prefix[:2] not in self._heads_of(kind):
            return []
        return self.state.keys_with_prefix(kind, prefix, limit=limit)

    def truncated(self, written: str, stem: str, *, cut: bool) -> LintIssue | None:
        """An id cut short: scrubbed when only one entry starts so, flagged when several do."""
        if len(stem) < (3 if cut else 4):
            return None
        roles: list[str] = []
        for name in self.state.tables:
            key = self.state.key(name, stem)
            if key is None:
                continue
            for entry in self._with_prefix(name, key, limit=3):
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
