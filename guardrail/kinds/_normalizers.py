"""The built-in normalisers: how two written forms of one identifier become one key.

``strip``, ``upper``, ``lower``/``casefold``, ``email``, ``url``, ``number``, ``phone``
(``phone:+1``: with a default country code)
and ``prefix:<text>``, composed in the order a kind lists them and run to a
fixed point (:func:`compile_normalizer`). Below the kinds, so a ready-made
kind (:mod:`guardrail.kinds._presets`) and a kind built by hand use the same ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Context, Decimal, InvalidOperation
from typing import Final
from urllib.parse import urlsplit

from guardrail.errors import GuardrailUsageError

Normalizer = Callable[[str], str]
"""A normaliser: an id as written in, its key out (raising, or returning no text, for no id)."""

NormalizeSpec = str | Sequence[str] | Normalizer | None
"""How a kind normalises: a built-in's name, a list of them in turn, a function, or None."""

#: Rounds a normaliser that runs to a fixed point runs before it gives up on a stable value.
_ROUNDS: Final = 8


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


# -- phone numbers ----------------------------------------------------------------------------

_PHONE_PUNCTUATION: Final = re.compile(r"[\s().\-/]")
_PHONE_DIGITS: Final = re.compile(r"\+?[0-9]{3,15}")
_COUNTRY_CODE: Final = re.compile(r"\+?([1-9][0-9]{0,2})")


def phone_number(value: str) -> str:
    """A phone number as E.164 writes it where it can: ``+1 (415) 555-0132`` is ``+14155550132``.

    Spaces, dashes, dots, slashes and parentheses go, a ``tel:`` scheme too;
    ``00`` before the country code becomes ``+``, and the ``(0)`` some write
    after it goes. A number written without a country code keeps its digits
    as written (``4155550132``): which country it is in, the text does not
    say (:func:`phone_normalizer` takes a default). Raises ValueError for
    what is no phone number.
    """
    text = value.strip()
    if text[:4].casefold() == "tel:":
        text = text[4:]
    international = text.startswith(("+", "00"))
    if international:
        text = text.replace("(0)", "")
    digits = _PHONE_PUNCTUATION.sub("", text)
    if digits.startswith("00"):
        digits = "+" + digits[2:]
    if not _PHONE_DIGITS.fullmatch(digits):
        raise ValueError("not a phone number")
    return digits


def phone_normalizer(country: str, *, kind: str = "?") -> Normalizer:
    """:func:`phone_number`, reading a number written without a country code as one of ``country``.

    ``country`` is a calling code (``"+1"``, ``"+44"``). With ``+1``,
    ``(555) 123-2002``, ``555-123-2002``, ``1 555 123 2002`` and
    ``+1 555 123 2002`` are one number, ``+15551232002``; elsewhere a
    national number's trunk ``0`` goes (``020 7946 0958`` with ``+44`` is
    ``+442079460958``). A number with a country code keeps its own.
    """
    found = _COUNTRY_CODE.fullmatch(country.strip()) if isinstance(country, str) else None
    if found is None:
        raise GuardrailUsageError(
            f"kind {kind!r}: phone:{country} needs a country calling code, such as "
            "'phone:+1' or 'phone:+44'"
        )
    code = found.group(1)

    def normalize(value: str) -> str:
        digits = phone_number(value)
        if digits.startswith("+"):
            return digits
        if code == "1":  # North America: ten digits, or eleven with the leading 1
            if len(digits) == 11 and digits.startswith("1"):
                return "+" + digits
            return "+1" + digits if len(digits) == 10 else digits
        if digits.startswith("0") and not digits.startswith("00"):
            return f"+{code}{digits[1:]}"
        return digits

    normalize.__name__ = f"phone_{code}"
    return normalize


_BUILTIN_NORMALIZERS: dict[str, Normalizer] = {
    "strip": str.strip,
    "casefold": _casefold,
    "lower": _casefold,
    "upper": _upper,
    "number": _number,
    "url": _url,
    "email": _email,
    "phone": phone_number,
}


def _one_normalizer(name: str, *, kind: str) -> Normalizer:
    if name.startswith("prefix:") and len(name) > len("prefix:"):
        return _strip_prefix(name[len("prefix:") :])
    if name.startswith("phone:"):
        return phone_normalizer(name[len("phone:") :], kind=kind)
    try:
        return _BUILTIN_NORMALIZERS[name]
    except KeyError:
        known = ", ".join([*sorted(_BUILTIN_NORMALIZERS), "phone:+<country code>", "prefix:<text>"])
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
