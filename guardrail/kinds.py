"""Kinds: what an identifier is, how it is written, and how two spellings are one.

A kind names a class of identifiers (``order``, ``user``, ``url``). It may
carry a format pattern (to recognise ids the user typed and to lint
summaries), a normaliser (``#W8855135`` and ``W8855135`` are one order) and
the example values quoted in tool descriptions, which models copy and which
are never valid.
"""

from __future__ import annotations

import math
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Final
from urllib.parse import urlsplit

from guardrail.errors import BroadPatternWarning, GuardrailUsageError

Normalizer = Callable[[str], str]
NormalizeSpec = str | Sequence[str] | Normalizer | None

_KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_QUOTES_AND_PUNCTUATION = "\"'`“”‘’.,;:!?()[]{}<>"
#: Rounds a normaliser that runs to a fixed point runs before it gives up on a stable value.
_ROUNDS: Final = 8


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


#: Longest text, and largest power of ten, a number normaliser reads as a number: an id of
#: 1e999999999 would otherwise be expanded to a billion digits. Beyond them a value is text.
_NUMBER_CHARS: Final = 100
_NUMBER_EXPONENT: Final = 100
# Exact for every number within those bounds: the default context rounds to 28 digits, which
# would make 1.00000000000000000000000000001 the same key as 1.
_EXACT = Context(prec=2 * (_NUMBER_CHARS + _NUMBER_EXPONENT))


def _number(value: str) -> str:
    """``7``, ``7.0`` and ``007`` are one number; anything else is left as it is (stripped).

    Numbers written with more than a hundred characters or a power of ten
    beyond a hundred are left as text too: they are no one's id, and
    expanding them would cost what an attacker wants it to.
    """
    text = value.strip()
    if len(text) > _NUMBER_CHARS:
        return text
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text
    if not number.is_finite() or abs(number.adjusted()) > _NUMBER_EXPONENT:
        return text
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(_EXACT), "f")


_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# What urlsplit removes anywhere (tabs, line breaks) and from the start (controls, spaces):
# removed first, so the text parsed is the text indexed.
_URL_REMOVED: Final = str.maketrans("", "", "\t\r\n")
_URL_LEADING: Final = "".join(map(chr, range(0x21)))
_HOST_PORT: Final = re.compile(r"(\[[^\[\]]*\]|[^:\[\]]*)(?::([0-9]*))?")
#: Longest text read as a URL. Longer is no URL a server takes, and urlsplit keeps what it
#: parsed in a cache: a megabyte argument would stay in memory.
_URL_LONGEST: Final = 8192


def _url(value: str) -> str:
    """One URL however its scheme's and host's case, default port and trailing slash are written.

    Everything that changes where a request goes is kept: the scheme, the
    user information, a port that is not the scheme's default, the query
    and the fragment. A URL written without a scheme stays without one, so
    it is never the same key as one that has a scheme. Raises ValueError
    for what is no URL (``http://[x``, a port that is no number, over 8,192
    characters).
    """
    if len(value) > _URL_LONGEST:
        raise ValueError(f"not a URL: longer than {_URL_LONGEST:,} characters")
    text = value
    for _ in range(_ROUNDS):  # stripping a slash can bare a space that goes next round
        before = text
        text = _url_once(text)
        if text == before:
            return text
    raise ValueError("not a URL: its normal form does not settle")


def _url_once(value: str) -> str:
    text = value.translate(_URL_REMOVED).strip().lstrip(_URL_LEADING)
    parts = urlsplit(text)
    scheme = parts.scheme
    if not (scheme and text[len(scheme) + 1 : len(scheme) + 3] == "//"):
        scheme = ""  # no "scheme://": read it all as host and path, and write no scheme
        parts = urlsplit("//" + text)
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    host_port = _HOST_PORT.fullmatch(hostinfo)
    if host_port is None:
        raise ValueError(f"not a URL: {hostinfo!r} is not a host and port")
    host, digits = host_port.group(1).lower(), host_port.group(2)
    port = int(digits) if digits else None  # ValueError past 4,300 digits: not a port either
    if port is not None and port > 65535:
        raise ValueError(f"not a URL: port {port} is out of range")
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    head = f"{scheme}://" if scheme else ""
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{head}{userinfo}{at}{host}{parts.path.rstrip('/')}{query}{fragment}".strip()


def _email(value: str) -> str:
    """One e-mail address however written: ``<mailto:Ana@Example.com>.`` is ``ana@example.com``.

    White space, quotes, angle brackets, a ``mailto:`` scheme (and its
    ``?subject=`` query) and trailing full stops go; the address is
    case-folded as a whole (the domain is case-insensitive, and no mail
    system people use tells ``Ana`` from ``ana``).
    """
    text = value
    for _ in range(len(value) + 1):  # each round that changes anything shortens the text
        before = text
        text = text.strip().strip("\"'").rstrip(".").strip()
        if text[:1] == "<" and text[-1:] == ">":
            text = text[1:-1]
        if text[:7].casefold() == "mailto:":
            text = text[7:].split("?", 1)[0]
        if text == before:
            break
    return text.casefold()


def _casefold(value: str) -> str:
    return value.casefold()


def _upper(value: str) -> str:
    return value.upper()


def _strip_prefix(prefix: str) -> Normalizer:
    """Strip every leading ``prefix``: ``##W1`` is ``W1``, as ``#W1`` is."""
    repeated = re.compile(f"(?:{re.escape(prefix)})*")

    def strip_prefix(value: str) -> str:
        if not value.startswith(prefix):
            return value
        end = repeated.match(value)
        return value[end.end() :] if end is not None else value

    strip_prefix.__name__ = f"strip_prefix_{prefix!r}"
    return strip_prefix


_BUILTIN_NORMALIZERS: dict[str, Normalizer] = {
    "strip": str.strip,
    "casefold": _casefold,
    "lower": _casefold,
    "upper": _upper,
    "number": _number,
    "url": _url,
    "email": _email,
}


def _one_normalizer(name: str, *, kind: str) -> Normalizer:
    if name.startswith("prefix:") and len(name) > len("prefix:"):
        return _strip_prefix(name[len("prefix:") :])
    try:
        return _BUILTIN_NORMALIZERS[name]
    except KeyError:
        known = ", ".join([*sorted(_BUILTIN_NORMALIZERS), "prefix:<text>"])
        raise GuardrailUsageError(
            f"kind {kind!r}: unknown normaliser {name!r}; use one of {known}, or a callable"
        ) from None


def compile_normalizer(spec: NormalizeSpec, *, kind: str = "?") -> Normalizer:
    """Turn a normaliser spec into one function.

    ``None`` strips surrounding white space (never meaningful in an id); a
    name or a list of names composes the built-ins in order (``"strip"``,
    ``"casefold"``, ``"upper"``, ``"prefix:#"``, ``"number"``, ``"url"``,
    ``"email"``); a callable is used as it is.
    """
    if spec is None:
        return str.strip
    if callable(spec):
        return spec
    names = [spec] if isinstance(spec, str) else list(spec)
    if not all(isinstance(name, str) for name in names):
        raise GuardrailUsageError(f"kind {kind!r}: normalize takes names or one callable")
    steps = [_one_normalizer(name, kind=kind) for name in names]
    if not steps:
        return _identity
    if len(steps) == 1:  # every built-in is idempotent on its own: no rounds to run
        return steps[0]
    leading = _leading_tokens(names)
    if leading is not None:
        return leading
    return _to_fixed_point(steps, kind)


def _leading_tokens(names: Sequence[str]) -> Normalizer | None:
    """``strip`` and ``prefix:`` steps composed, as one pass to their fixed point, or None.

    Such steps only take white space and prefixes off the front (and white
    space off the end). When no prefix begins or ends with white space and
    none begins another, at most one of them can take the next characters,
    so the order the steps run in does not matter: the fixed point is the
    value less its longest leading run of white space and prefixes, found
    by one regular expression whatever the number of rounds (``# # # …W1``
    would need one round per ``#``). None for any other composition.
    """
    strip = "strip" in names
    prefixes = sorted({name[len("prefix:") :] for name in names if name.startswith("prefix:")})
    if not all(name == "strip" or name.startswith("prefix:") for name in names):
        return None
    for prefix in prefixes:
        if prefix[0].isspace() or prefix[-1].isspace():
            return None
        if any(other != prefix and other.startswith(prefix) for other in prefixes):
            return None
    tokens = [re.escape(prefix) for prefix in prefixes] + ([r"\s"] if strip else [])
    run = re.compile(f"(?:{'|'.join(tokens)})*")
    starts = tuple(prefixes)

    def strip_leading(value: str) -> str:
        if strip:  # the end is then clean for good: prefixes never end in white space
            value = value.strip()
        if not value.startswith(starts):  # the usual case: nothing to take off the front
            return value
        for prefix in starts:  # the next usual case: one prefix, then the id itself
            if value.startswith(prefix):
                rest = value[len(prefix) :]
                if not rest.startswith(starts) and not (strip and rest[:1].isspace()):
                    return rest
        taken = run.match(value)  # a starred group: it always matches, if only ""
        return value[taken.end() :] if taken is not None else value

    return strip_leading


def _to_fixed_point(steps: Sequence[Normalizer], kind: str) -> Normalizer:
    """The composed steps, run until the value no longer changes.

    A composition of idempotent steps need not be idempotent (``strip``
    then ``prefix:#`` turns ``#  W1`` into ``  W1``); a key that changes
    when normalised again would make one id two keys. A value still
    changing after a few rounds is no id: ValueError, which the check
    reports as malformed. (``strip`` and ``prefix:`` alone settle in one
    pass: :func:`_leading_tokens`.)
    """

    def normalize(value: str) -> str:
        for _ in range(_ROUNDS):
            before = value
            for step in steps:
                value = step(value)
            if value == before:
                return value
        raise ValueError(f"kind {kind!r}: the normaliser does not settle on one value")

    return normalize


def _identity(value: str) -> str:
    return value


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


def trim(token: str) -> str:
    """``token`` without the quotes and punctuation around it (``"ana@x.io".`` -> ``ana@x.io``).

    A bracket whose partner is inside the token stays, as part of the id
    (``(415) 555-0132``, ``…/Foo_(bar)``); one that wraps the whole token, or
    has no partner, goes (``(cus_41ZpA9)``, ``…/Foo_(bar))``).
    """
    start, end = 0, len(token)
    while start < end:
        moved = False
        first = token[start]
        if first in _QUOTES_AND_PUNCTUATION:
            closer = _PAIRS.get(first)
            piece = token[start:end]
            if (
                closer is None
                or closer not in token[start + 1 : end - 1]
                or piece.count(first) > piece.count(closer)
            ):
                start += 1
                moved = True
        if start < end and token[end - 1] in _QUOTES_AND_PUNCTUATION:
            last = token[end - 1]
            opener = _PAIRED.get(last)
            piece = token[start:end]
            if opener is None or piece.count(last) > piece.count(opener):
                end -= 1
                moved = True
        if not moved:
            break
    return token[start:end]


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
    def build(
        cls,
        name: str,
        *,
        pattern: str | None = None,
        normalize: NormalizeSpec = None,
        examples: Iterable[str] = (),
        enforce: bool = True,
        description: str = "",
        like: str | None = None,
    ) -> Kind:
        """Validate and compile a kind; a bad name, pattern or normaliser is a usage error.

        ``like`` gives the kind the pattern, normaliser and description of a
        ready-made one: ``"email"``, ``"uuid"``, ``"url"``, ``"phone"``,
        ``"iban"`` or ``"prefixed:<prefix>"`` (``"prefixed:cus_"``); it
        replaces ``pattern`` and ``normalize``, which are then not given.
        A pattern that takes plain English words as ids (``close``,
        ``please``) is warned about here (:class:`BroadPatternWarning`).
        """
        if not isinstance(name, str) or not _KIND_NAME.fullmatch(name):
            raise GuardrailUsageError(
                f"kind name {name!r} must start with a letter and hold only letters, "
                "digits and underscores (it becomes a ledger role)"
            )
        accept = None
        if like is not None:
            from guardrail._presets import preset

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
        kind = cls(
            name=name,
            pattern=pattern,
            normalize=normalizer,
            examples=_keys(normalizer, examples),
            enforce=enforce,
            description=description,
            accept=accept,
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
        if self._scan is None:
            return
        for match in self._scan.finditer(text):
            token = trim(match.group(0))
            if token:
                yield token

    def ids_in(self, text: str) -> list[tuple[str, str]]:
        """The ids of this kind written in ``text``, as ``(written, key)`` pairs, in order.

        What ``observe_user`` takes from a user's message: each match of the
        pattern, trimmed of quotes and punctuation, that the normaliser can
        read, that is no placeholder example and that passes :attr:`accept`.
        A kind with no pattern finds nothing here (see :meth:`keys_in`).
        """
        found = []
        for token in self.find(text):
            key = self.key(token)  # None: a token the normaliser cannot read is no id
            if key and key not in self.examples and (self.accept is None or self.accept(key)):
                found.append((token, key))
        return found

    def plain_words(self) -> list[str]:
        """The common English words this kind's pattern takes as ids: none, for a good pattern.

        Each word is tried as written mid-sentence and at a sentence's start
        (``close``, ``Close``); what :meth:`ids_in` takes of it is listed.
        """
        if self._scan is None:
            return []
        from guardrail._words import COMMON_WORDS

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
