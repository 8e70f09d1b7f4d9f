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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

from guardrail.errors import GuardrailUsageError

Normalizer = Callable[[str], str]
NormalizeSpec = str | Sequence[str] | Normalizer | None

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


def _number(value: str) -> str:
    """``7``, ``7.0`` and ``007`` are one number; anything else is left as it is."""
    text = value.strip()
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text
    if not number.is_finite():
        return text
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def _url(value: str) -> str:
    """One URL however its scheme, host case and trailing slash are written."""
    text = value.strip()
    parts = urlsplit(text if "://" in text else "//" + text)
    host = (parts.hostname or "").lower()
    if parts.port is not None and parts.port not in (80, 443):
        host = f"{host}:{parts.port}"
    path = parts.path.rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{host}{path}{query}"


def _email(value: str) -> str:
    return value.strip().casefold()


def _casefold(value: str) -> str:
    return value.casefold()


def _upper(value: str) -> str:
    return value.upper()


def _strip_prefix(prefix: str) -> Normalizer:
    def strip_prefix(value: str) -> str:
        return value[len(prefix) :] if value.startswith(prefix) else value

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
    if len(steps) == 1:
        return steps[0]

    def normalize(value: str) -> str:
        for step in steps:
            value = step(value)
        return value

    return normalize


def _identity(value: str) -> str:
    return value


def _scanning_pattern(pattern: str) -> str:
    """The pattern for finding ids inside prose: anchors dropped, word edges required."""
    body = pattern
    if body.startswith("^"):
        body = body[1:]
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
    ) -> Kind:
        """Validate and compile a kind; a bad name, pattern or normaliser is a usage error."""
        if not isinstance(name, str) or not _KIND_NAME.fullmatch(name):
            raise GuardrailUsageError(
                f"kind name {name!r} must start with a letter and hold only letters, "
                "digits and underscores (it becomes a ledger role)"
            )
        if pattern is not None and not isinstance(pattern, str):
            raise GuardrailUsageError(f"kind {name!r}: pattern must be a regex string")
        normalizer = compile_normalizer(normalize, kind=name)
        if isinstance(examples, str):
            examples = [examples]
        return cls(
            name=name,
            pattern=pattern,
            normalize=normalizer,
            examples=frozenset(normalizer(example) for example in examples),
            enforce=enforce,
            description=description,
        )

    def with_examples(self, examples: Iterable[str]) -> Kind:
        """This kind, also refusing ``examples`` (written forms; normalised here)."""
        extra = frozenset(self.normalize(example) for example in examples)
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
            token = match.group(0).strip(_QUOTES_AND_PUNCTUATION)
            if token:
                yield token

    @property
    def has_pattern(self) -> bool:
        """Whether ids of this kind can be recognised in prose."""
        return self._scan is not None
