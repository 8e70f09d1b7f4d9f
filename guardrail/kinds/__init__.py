"""Kinds: what an identifier is, how it is written, and how two spellings are one.

A kind names a class of identifiers (``order``, ``user``, ``url``). It may
carry a format pattern (to recognise ids the user typed and to lint
summaries), a normaliser (``#W8855135`` and ``W8855135`` are one order) and
the example values quoted in tool descriptions, which models copy and which
are never valid.

Inside: ``_operator`` (the ids of a kind the operator knows before a
conversation starts: a catalog, a loader, a policy text; tier ``operator``),
``_presets`` (the ready-made kinds ``like=`` names), ``_normalizers``
(the built-in normalisers, composed and run to a fixed point) and ``_words``
(common English words, which a pattern should not take for ids).
"""

from __future__ import annotations

import math
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, get_args

from guardrail.errors import BroadPatternWarning, GuardrailUsageError
from guardrail.kinds._normalizers import Normalizer, NormalizeSpec, compile_normalizer

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "BroadPatternWarning",
    "Kind",
    "KindOptions",
    "NormalizeSpec",
    "Normalizer",
    "compile_normalizer",
    "id_text",
]


class KindOptions(TypedDict, total=False):
    """What a kind is besides its name: the options of ``Guard.add_kind`` and :meth:`Kind.build`.

    Attributes:
        pattern: A regex of the kind's shape, for recognising ids the user
            types and for linting summaries (default: none).
        normalize: How two written forms are one id: a built-in normaliser's
            name (``"strip"``, ``"upper"``, ``"email"``, ``"url"``,
            ``"number"``, ``"prefix:#"``...), a list of them applied in
            turn, or a function (default: trimming white space).
        examples: Placeholder values quoted in tool descriptions, which a
            model may copy; they are never valid ids.
        enforce: False makes the kind advisory: its findings are logged but
            never refuse a call (default: True).
        description: What the kind is, in words, for documentation.
        like: A ready-made kind whose pattern, normaliser and description
            this one takes: ``"email"``, ``"uuid"``, ``"url"``, ``"phone"``,
            ``"iban"`` or ``"prefixed:<prefix>"`` (``"prefixed:cus_"``); it
            replaces ``pattern`` and ``normalize``, which are then not given.
        user_typed: What a value the user typed may do on a write or an
            egress read: ``"verify"`` (a tool must confirm it first; the
            default), ``"allow"`` (the user's word settles it: recipients,
            e-mails, channel names) or ``"ask"`` (the user approves the call).
        mentions: Values of the kind's pattern seen in the free text of a
            successful result: ``"ignore"`` (not taken; the default), or taken
            as ``mentioned`` (allowed on reads) and on a write or egress read
            ``"ask"`` the user or ``"refuse"``; or ``"read"``: any read may take
            them, egress reads too (a link a colleague posted may be fetched),
            and a write asks. A mention in the result of a tool declared
            ``outside=True`` follows the stricter of this and ``outside``.
        outside: Values of a result field declared ``Id(kind, outside=True)``
            on a write or egress read: ``"allow"`` (the default), ``"ask"`` or
            ``"refuse"``.
        operator: Values the operator declared (tier ``operator``) on a write
            or egress read: ``"allow"`` (the operator vouches for them; the
            default), ``"ask"`` (the user approves the call) or ``"verify"``
            (a tool must return the value first, as for a value the user
            typed). Reads take them whatever the policy.
        operator_ids: Values of the kind the operator knows before the
            conversation starts (a plan catalog, SKUs): a list, or a loader
            (a function returning one; in a manifest ``"module:function"``)
            called once per guard, or once per session with the session id
            where ``operator_per="session"``. Given to ``Guard.add_kind``
            only; see ``Guard.add_operator_ids``.
        operator_per: When a loader of ``operator_ids`` runs: ``"guard"``
            (once; the default) or ``"session"``.
    """

    pattern: str | None
    normalize: NormalizeSpec
    examples: Iterable[str]
    enforce: bool
    description: str
    like: str | None
    user_typed: UserTyped
    mentions: Mentions
    outside: Outside
    operator: Operator
    operator_ids: Any
    operator_per: str


#: The policies of a kind (see :class:`KindOptions`), the first of each the default.
UserTyped = Literal["verify", "allow", "ask"]
Mentions = Literal["ignore", "ask", "refuse", "read"]
Outside = Literal["allow", "ask", "refuse"]
Operator = Literal["allow", "ask", "verify"]
POLICIES: dict[str, tuple[str, ...]] = {
    "user_typed": get_args(UserTyped),
    "mentions": get_args(Mentions),
    "outside": get_args(Outside),
    "operator": get_args(Operator),
}
#: Options of ``Guard.add_kind`` that declare operator ids, not the kind itself.
OPERATOR_OPTIONS: Final = frozenset({"operator_ids", "operator_per"})


_KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_QUOTES_AND_PUNCTUATION = "\"'`“”‘’.,;:!?()[]{}<>"


def id_text(value: Any) -> str | None:
    """An identifier value as text: strings, integers and finite numbers; None for the rest.

    Booleans, None, containers and objects are never identifiers.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


def _keys(normalize: Normalizer, values: Iterable[str]) -> frozenset[str]:
    """The keys of ``values``; a value the normaliser cannot read has none (it is no id)."""
    keys = set()
    for value in values:
        try:
            key = normalize(value)
        except Exception:
            continue
        if type(key) is str:
            keys.add(key)
    return frozenset(keys)


#: Brackets a token keeps when it holds their partner: ``(415) 555-0132``, ``…/Foo_(bar)``.
_PAIRS: Final = {"(": ")", "[": "]", "{": "}"}
_PAIRED: Final = {closer: opener for opener, closer in _PAIRS.items()}
_BRACKETS: Final = (*_PAIRS, *_PAIRED)


def trim(token: str) -> str:
    """``token`` without the quotes and punctuation around it (``"ana@x.io".`` -> ``ana@x.io``).

    A bracket whose partner is inside the token stays, as part of the id
    (``(415) 555-0132``, ``…/Foo_(bar)``); one that wraps the whole token, or
    has no partner, goes (``(cus_41ZpA9)``, ``…/Foo_(bar))``). Linear in the
    token's length: the brackets of what is left are counted as its ends move.
    """
    start, end = _trimmed(token)
    return token[start:end]


def _trimmed(token: str) -> tuple[int, int]:
    """Where :func:`trim`'s result starts and ends in ``token``."""
    start, end = 0, len(token)
    # How many of each bracket token[start:end] holds, kept up to date as the ends move
    # (counting the piece again at each step made a URL ending in 100,000 ")" quadratic).
    held = {bracket: token.count(bracket) for bracket in _BRACKETS}
    while start < end:
        moved = False
        first = token[start]
        if first in _QUOTES_AND_PUNCTUATION:
            closer = _PAIRS.get(first)
            if (
                closer is None
                # no partner strictly inside: none in the piece but, maybe, its last character
                or held[closer] - (token[end - 1] == closer) <= 0
                or held[first] > held[closer]
            ):
                if first in held:
                    held[first] -= 1
                start += 1
                moved = True
        if start < end and token[end - 1] in _QUOTES_AND_PUNCTUATION:
            last = token[end - 1]
            opener = _PAIRED.get(last)
            if opener is None or held[last] > held[opener]:
                if last in held:
                    held[last] -= 1
                end -= 1
                moved = True
        if not moved:
            break
    return start, end


#: Words of prose: what runs of user text are made of when matched after a normaliser.
_WORD: Final = re.compile(r"\S+")
#: The longest run of words, and of characters, read as one written id.
_RUN_WORDS: Final = 6
_RUN_CHARS: Final = 256


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside guardrail: where a warning is seen."""
    level = 1
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("guardrail."):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _scanning_pattern(pattern: str) -> str:
    """The pattern for finding ids inside prose: anchors dropped, word edges required."""
    body = pattern
    body = body.removeprefix("^")
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    return rf"(?<![\w])(?:{body})(?![\w])"


@dataclass(frozen=True, eq=False)
class Kind:
    """What an identifier is: name, optional pattern, normaliser and examples.

    Build one with :meth:`Kind.build` (or ``Guard.add_kind``), which checks
    the arguments. ``examples`` holds normalised values. ``enforce=False``
    makes a kind advisory: its findings are logged but never refuse a call
    (IATA airport codes that a model maps from city names with world
    knowledge, say).
    """

    name: str
    pattern: str | None = None
    normalize: Normalizer = field(default=str.strip, repr=False)
    examples: frozenset[str] = frozenset()
    enforce: bool = True
    description: str = ""
    #: A further test of an id found in text, given its key (an IBAN's check digits): an id
    #: of the kind's shape that fails it is not taken from text.
    accept: Callable[[str], bool] | None = field(default=None, repr=False)
    user_typed: UserTyped = "verify"
    mentions: Mentions = "ignore"
    outside: Outside = "allow"
    operator: Operator = "allow"
    _full: re.Pattern[str] | None = field(default=None, init=False, repr=False)
    _scan: re.Pattern[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.pattern is None:
            return
        try:
            object.__setattr__(self, "_full", re.compile(self.pattern))
            object.__setattr__(self, "_scan", re.compile(_scanning_pattern(self.pattern)))
        except re.error as exc:
            raise GuardrailUsageError(
                f"kind {self.name!r}: bad pattern {self.pattern!r}: {exc}"
            ) from None

    @classmethod
    def build(cls, name: str, /, **options: Unpack[KindOptions]) -> Kind:
        """Validate and compile a kind; a bad name, option, pattern or normaliser is a usage error.

        A pattern that takes plain English words as ids (``close``,
        ``please``) is warned about here (:class:`BroadPatternWarning`).

        Args:
            name: The kind's name, a letter then letters, digits and
                underscores (it becomes the default ledger role of its ids).
            **options: See :class:`KindOptions`.
        """
        unknown = sorted(set(options) - KindOptions.__optional_keys__)
        if unknown:
            known = ", ".join(sorted(KindOptions.__optional_keys__))
            raise GuardrailUsageError(f"kind {name!r}: no option {unknown[0]!r} (options: {known})")
        keeps = sorted(OPERATOR_OPTIONS & set(options))
        if keeps:
            raise GuardrailUsageError(
                f"kind {name!r}: {keeps[0]} declares operator ids, which a guard keeps: pass it "
                "to guard.add_kind (or use guard.add_operator_ids), not to Kind.build"
            )
        pattern = options.get("pattern")
        normalize = options.get("normalize")
        examples = options.get("examples", ())
        description = options.get("description", "")
        like = options.get("like")
        if not isinstance(name, str) or not _KIND_NAME.fullmatch(name):
            raise GuardrailUsageError(
                f"kind name {name!r} must start with a letter and hold only letters, "
                "digits and underscores (it becomes a ledger role)"
            )
        accept = None
        if like is not None:
            from guardrail.kinds._presets import preset

            if pattern is not None or normalize is not None:
                raise GuardrailUsageError(
                    f"kind {name!r}: like={like!r} gives the pattern and the normaliser; "
                    "pass like= alone, or pattern= and normalize= without it"
                )
            ready = preset(like, kind=name)
            pattern, normalizer, accept = ready.pattern, ready.normalize, ready.accept
            description = description or ready.description
        else:
            if pattern is not None and not isinstance(pattern, str):
                raise GuardrailUsageError(f"kind {name!r}: pattern must be a regex string")
            normalizer = compile_normalizer(normalize, kind=name)
        if isinstance(examples, str):
            examples = [examples]
        for option, allowed in POLICIES.items():
            given = options.get(option, allowed[0])
            if given not in allowed:
                raise GuardrailUsageError(
                    f"kind {name!r}: {option} is one of {', '.join(map(repr, allowed))}, "
                    f"not {given!r}"
                )
        kind = cls(
            name=name,
            pattern=pattern,
            normalize=normalizer,
            examples=_keys(normalizer, examples),
            enforce=options.get("enforce", True),
            description=description,
            accept=accept,
            user_typed=options.get("user_typed", "verify"),
            mentions=options.get("mentions", "ignore"),
            outside=options.get("outside", "allow"),
            operator=options.get("operator", "allow"),
        )
        words = kind.plain_words()
        if words:
            shown = ", ".join(repr(word) for word in words[:5])
            warnings.warn(
                BroadPatternWarning(
                    f"kind {name!r}: the pattern {pattern!r} takes plain words as ids "
                    f"({shown}{', ...' if len(words) > 5 else ''}), so most user messages "
                    "would seem to name some. Narrow it (a prefix, digits, a length), or use "
                    "a ready-made kind (like='email', 'uuid', 'url', 'phone', 'iban', "
                    "'prefixed:cus_')",
                    kind=name,
                    words=tuple(words),
                ),
                stacklevel=_caller_level(),
            )
        return kind

    def with_examples(self, examples: Iterable[str]) -> Kind:
        """This kind, also refusing ``examples`` (written forms; normalised here)."""
        extra = _keys(self.normalize, examples)
        if extra <= self.examples:
            return self
        return replace(self, examples=self.examples | extra)

    def key(self, text: str) -> str | None:
        """``text`` normalised, or None where the normaliser fails or gives no text.

        For every path but the allowed one (which calls ``normalize`` directly
        and falls back to the full check): a value no normaliser can read is
        malformed, never a crash.
        """
        try:
            key = self.normalize(text)
        except Exception:
            return None
        return key if type(key) is str else None

    def matches(self, value: str) -> bool:
        """Whether ``value`` has this kind's shape (always true for a kind with no pattern)."""
        return self._full is None or self._full.fullmatch(value) is not None

    def find(self, text: str) -> Iterator[str]:
        """Every id of this kind's shape written in ``text``, trimmed of quotes and punctuation."""
        for _, token in self._written(text):
            yield token

    def _written(self, text: str, end: int | None = None) -> Iterator[tuple[int, str]]:
        """``(at, token)`` for each match in ``text[:end]``, trimmed; ``at`` is where it starts.

        A match that reaches ``end`` (short of the text's end) is left out: the
        text goes on, so the id may go on too.
        """
        if self._scan is None:
            return
        stop = len(text) if end is None or end >= len(text) else end
        for match in self._scan.finditer(text, 0, stop):
            if match.end() == stop < len(text):
                continue
            written = match.group(0)
            first, last = _trimmed(written)
            if last > first:
                yield match.start() + first, written[first:last]

    def ids_at(self, text: str, *, end: int | None = None) -> Iterator[tuple[int, str, str]]:
        """:meth:`ids_in`, lazily, with where each id starts: ``(at, written, key)``.

        ``end`` bounds the search: only ``text[:end]`` is read, and an id that
        reaches ``end`` before the text ends is not taken. A written form seen
        again is not normalised again.
        """
        keys: dict[str, str | None] = {}
        for at, token in self._written(text, end):
            if token in keys:
                key = keys[token]
            else:
                key = self.key(token)  # None: a token the normaliser cannot read is no id
                if not key or key in self.examples or not (self.accept is None or self.accept(key)):
                    key = None
                keys[token] = key
            if key is not None:
                yield at, token, key

    def ids_in(self, text: str) -> list[tuple[str, str]]:
        """The ids of this kind written in ``text``, as ``(written, key)`` pairs, in order.

        What ``observe_user`` takes from a user's message: each match of the
        pattern, trimmed of quotes and punctuation, that the normaliser can
        read, that is no placeholder example and that passes :attr:`accept`.
        A kind with no pattern finds nothing here (see :meth:`keys_in`).
        """
        return [(token, key) for _, token, key in self.ids_at(text)]

    def plain_words(self) -> list[str]:
        """The common English words this kind's pattern takes as ids: none, for a good pattern.

        Each word is tried as written mid-sentence and at a sentence's start
        (``close``, ``Close``); what :meth:`ids_in` takes of it is listed.
        """
        if self._scan is None:
            return []
        from guardrail.kinds._words import COMMON_WORDS

        return [
            word
            for word in sorted(COMMON_WORDS)
            if self.ids_in(word) or self.ids_in(word.capitalize())
        ]

    def keys_in(self, text: str, *, words: int = _RUN_WORDS) -> set[str]:
        """The keys of every run of up to ``words`` words of ``text``, each trimmed first.

        How a value with no pattern is recognised in what the user wrote:
        ``Ana@Example.com.`` is the e-mail ``ana@example.com`` under the
        ``email`` normaliser, as a pattern's match would be. The words of a
        run are joined by one space, however they were spaced. Runs longer
        than 256 characters, and runs the normaliser cannot read, give no key.
        """
        written = _WORD.findall(text)
        keys: set[str] = set()
        for first in range(len(written)):
            run = ""
            for word in written[first : first + max(1, words)]:
                run = f"{run} {word}" if run else word  # one space between words, however typed
                if len(run) > _RUN_CHARS:
                    break
                token = trim(run)
                key = self.key(token) if token else None
                if key:
                    keys.add(key)
        return keys

    @property
    def has_pattern(self) -> bool:
        """Whether ids of this kind can be recognised in prose."""
        return self._scan is not None
