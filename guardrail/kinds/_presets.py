"""Ready-made kinds: the pattern and normaliser of ids every program meets, written once.

``guard.add_kind("email", like="email")`` (or ``like = "email"`` in a
manifest) gives a kind the pattern, normaliser and description of one of
these: ``email``, ``uuid``, ``url``, ``phone``, ``iban``, and
``prefixed:<prefix>`` for ids that start with a fixed prefix (``cus_...``).
Each pattern finds the id in what users write (any case, in quotes, angle
brackets or parentheses, after ``mailto:``, before a full stop), and each
normaliser gives every way of writing one id the same key, so the pattern
and the normaliser agree: what the pattern takes from a text, the
normaliser keys as the id it is. Writing these by hand is where a first
guard goes wrong (a pattern that takes ``close`` as an id, an address that
stops counting once capitalised).

Every pattern runs in time linear in the text it searches, whatever the
text: a user message or a tool result is written by whoever wants it to be
slow. Each repetition is bounded or ends where the text's run of its
characters ends, no repetition holds another that could split the same
characters two ways, and what a pattern cannot check cheaply (enough digits
for a phone number, a domain's length) is left to the normaliser and
``accept``. ``tests/test_presets.py`` times each one on crafted texts of
200,000 characters against a trivial search of the same text.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from guardrail.errors import GuardrailUsageError
from guardrail.kinds._normalizers import _email, _url, phone_normalizer, phone_number

#: What ``like=`` accepts, in the order the docs list them.
NAMES: Final = (
    "email",
    "uuid",
    "url",
    "phone",
    "phone:+<country code>",
    "iban",
    "prefixed:<prefix>",
)


@dataclass(frozen=True)
class Preset:
    """A ready-made kind: its pattern, normaliser, the test of ids found in text, a description."""

    pattern: str
    normalize: Callable[[str], str]
    accept: Callable[[str], bool] | None
    description: str


# -- e-mail -----------------------------------------------------------------------------------

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#: The local part starts where a run of the characters it may hold starts (the lookbehind):
#: a search tried from every dot of ``a.a.a...`` would read the same run again from each.
#: It holds up to 64 characters (RFC 5321's limit), the domain up to 127 labels.
EMAIL_PATTERN: Final = rf"(?<![.%+'-])[\w.%+'-]{{1,64}}@(?:{_LABEL}\.){{1,126}}[A-Za-z]{{2,63}}"


# -- UUID -------------------------------------------------------------------------------------

UUID_PATTERN: Final = (
    r"\{?[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\}?"
)


def uuid_text(value: str) -> str:
    """A UUID in its canonical form: lower case, hyphenated; braces and ``urn:uuid:`` go.

    Raises ValueError for what is no UUID.
    """
    return str(uuid.UUID(value.strip()))


# -- URL --------------------------------------------------------------------------------------

#: Unbounded, and still linear: every word character is in the class, so the repetition ends
#: only where the text's run of URL characters ends, the match never backs off from there,
#: and the search goes on after it. (A bound would make each ``http://`` inside one long
#: run read that run again, or take a prefix of a longer URL for a URL.) The normaliser
#: refuses a URL of more than 8,192 characters.
URL_PATTERN: Final = r"(?i:https?)://[^\s<>\"'`]+"


# -- phone numbers ----------------------------------------------------------------------------

#: One group of an international number after the first run of digits: a separator and
#: digits, or a bracketed group (``(0)``, ``(415)``) and the digits that may follow it unspaced.
#: Each group starts with a separator or a bracket, so a run of digits is never split two ways.
_PHONE_GROUP: Final = r"(?:[ .-]?\([0-9]{1,4}\)[0-9]{0,14}|[ .-][0-9]{1,14})"
#: International (``+`` or ``00`` and the country code), North American (``(415) 555-0132``)
#: and national numbers with a trunk prefix (``020 7946 0958``). Dates and times never fit.
#: Every repetition is bounded and splits digits only at a separator, so a long run of digits
#: costs each start a few dozen steps; how many digits a number has is ``accept``'s to judge.
PHONE_PATTERN: Final = (
    rf"(?:\+|00)[1-9](?:[0-9]{{2,14}}{_PHONE_GROUP}{{0,7}}|[0-9]?{_PHONE_GROUP}{{1,7}})"
    r"|\(?[2-9][0-9]{2}\)?[ .-]?[0-9]{3}[ .-][0-9]{4}"
    r"|0[1-9](?:[0-9]{0,4}[ /.-][0-9]{2,14}|[0-9]{2,14})(?:[ .-][0-9]{2,14}){0,4}"
)


def _plausible_phone(key: str) -> bool:
    """Enough digits for a phone number found in text: 8 with a country code, else 9."""
    digits = len(key.lstrip("+"))
    return digits <= 15 and digits >= (8 if key.startswith("+") else 9)


# -- IBAN -------------------------------------------------------------------------------------

#: Country, check digits, then the account in groups of four (a space between, or none).
#: Bounded: at most 34 characters are read from any start.
IBAN_PATTERN: Final = r"[A-Za-z]{2}[0-9]{2}(?:[ ]?[A-Za-z0-9]{4}){2,7}(?:[ ]?[A-Za-z0-9]{1,4})?"
_IBAN: Final = re.compile(r"[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}")


def iban_text(value: str) -> str:
    """An IBAN as one block of capitals: ``de89 3704 0044 …`` is ``DE89370400440532013000``.

    Raises ValueError for what has not the shape of an IBAN. The check
    digits are not tested here, so a value one character off is still
    compared with the ledger and refused as a near miss of the IBAN it
    copies; :func:`iban_checksum_ok` keeps the wrong ones out of what is
    taken from text.
    """
    text = "".join(value.split()).replace("-", "").upper()
    if not _IBAN.fullmatch(text):
        raise ValueError("not an IBAN")
    return text


def iban_checksum_ok(key: str) -> bool:
    """Whether an IBAN's check digits are right (ISO 13616: the number mod 97 is 1)."""
    moved = key[4:] + key[:4]
    return int("".join(str(int(char, 36)) for char in moved)) % 97 == 1


# -- prefixed ids -----------------------------------------------------------------------------

_PREFIX: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,31}")


def _strip(value: str) -> str:
    return value.strip()


def _prefixed(prefix: str, kind: str) -> Preset:
    if not _PREFIX.fullmatch(prefix):
        raise GuardrailUsageError(
            f"kind {kind!r}: like='prefixed:{prefix}' needs a prefix of letters, digits and "
            "_ . : / - (up to 32 characters, starting with a letter or digit), e.g. "
            "like='prefixed:cus_'"
        )
    # Unbounded, and linear: each repetition starts at a separator, so the id's characters
    # split one way only; a match backs off only to end before a "-", and a search that
    # fails has read a run of word characters that no other start enters.
    return Preset(
        pattern=rf"{re.escape(prefix)}[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*",
        normalize=_strip,
        accept=None,
        description=f"an identifier that starts with {prefix!r}",
    )


_PRESETS: Final = {
    "email": Preset(EMAIL_PATTERN, _email, None, "an e-mail address"),
    "uuid": Preset(UUID_PATTERN, uuid_text, None, "a UUID"),
    "url": Preset(URL_PATTERN, _url, None, "an http or https URL"),
    "phone": Preset(PHONE_PATTERN, phone_number, _plausible_phone, "a phone number"),
    "iban": Preset(IBAN_PATTERN, iban_text, iban_checksum_ok, "an IBAN (bank account)"),
}


def preset(like: str, *, kind: str) -> Preset:
    """The ready-made kind ``like`` names, for the kind called ``kind`` (named in errors)."""
    if not isinstance(like, str):
        raise GuardrailUsageError(f"kind {kind!r}: like= takes a name, such as 'email'")
    if like.startswith("prefixed:"):
        return _prefixed(like[len("prefixed:") :], kind)
    if like.startswith("phone:"):  # a default country code: phone:+1
        normalize = phone_normalizer(like[len("phone:") :], kind=kind)
        return Preset(PHONE_PATTERN, normalize, _plausible_phone, "a phone number")
    try:
        return _PRESETS[like]
    except KeyError:
        raise GuardrailUsageError(
            f"kind {kind!r}: no ready-made kind {like!r}; like= takes one of {', '.join(NAMES)}"
        ) from None
