"""Crafted text: the ready-made kinds' patterns on what an attacker writes.

A user message or a tool result is written by whoever wants it to be slow.
:func:`crafted` builds texts of a given length made to make a pattern
backtrack: runs of digits with and without separators after a ``+`` or a
``00``, ``a.a.a…``, ``@@@``, a local part of dashes, long dotted hosts, a URL
ending in thousands of brackets, hex runs, IBAN starts, prefixes and
underscores, and each kind's own ids side by side. The ``patterns`` group
times each ready-made kind's ``ids_in`` (the pattern's search, the trimming
and the normaliser, what ``observe_user`` and a mention scan run) on each,
against ``re.search`` of a trivial pattern over the same text, and prints each
kind's worst; ``tests/test_presets.py`` holds every one of these ratios to a
bound.
"""

from __future__ import annotations

import re

from guardrail import Kind

from .common import Run
from .report import Row, Section
from .timing import fastest

#: The ready-made kinds, as ``like=`` names them.
LIKES = ("email", "uuid", "url", "phone", "iban", "prefixed:cus_")

#: A pattern that never matches and has no literal prefix to skip ahead with: ``re`` tries
#: it at every position, the least a search of each position of the text costs.
TRIVIAL = re.compile(r"(?!x)x")

#: Named texts: a head, then a piece repeated to the length asked for.
_PIECES: dict[str, tuple[str, str]] = {
    "digits": ("", "1"),
    "digits and spaces": ("", "1 "),
    "digit pairs and dashes": ("", "12-"),
    "+ then digits": ("+", "1"),
    "+1 then digits": ("+1", "2"),
    "+1 then spaced digits": ("+1 ", "2 "),
    "00 then digits": ("00", "1"),
    "00100 repeated": ("", "00100"),
    "+1 then bracketed groups": ("+1 ", "(1)"),
    "+1, 40 digits and a letter, repeated": ("", "+1" + "2" * 40 + "a "),
    "+1, 30 digits and an underscore, repeated": ("", "+1" + "2" * 30 + "_ "),
    "0 then slashed digits": ("", "/030/12"),
    "a.a.a": ("", "a."),
    "a@a@a": ("", "a@"),
    "@@@": ("", "@"),
    "a local part of dashes": ("o'brien+s", "-"),
    "a long dotted host": ("x@", "a."),
    "a long dotted host, digits": ("x@", "a1-"),
    "an address and a full stop": ("", "a@b.cd@"),
    "quotes before an address": ("", "''''''''a@b.co "),
    "a URL ending in brackets": ("http://a", ")"),
    "a URL ending in dots and brackets": ("http://a", ".)"),
    "http:// repeated": ("", "http://"),
    "(http://a/(b)) repeated": ("", "(http://a/(b)) "),
    "hex and dashes": ("", "abcdefab-"),
    "{{{": ("", "{"),
    "an IBAN start, then digits": ("DE89", "1"),
    "IBAN groups": ("DE89 ", "1111 "),
    "a prefix, then underscores": ("cus_", "a_"),
    "prefixes and dashes": ("", "-cus_a"),
    "e-mail addresses": ("", "ana@example.com "),
    "UUIDs": ("", "{123e4567-e89b-12d3-a456-426614174000} "),
    "URLs": ("", "https://example.com/a "),
    "phone numbers": ("", "+1 (415) 555-0132 "),
    "IBANs": ("", "DE89 3704 0044 0532 0130 00 "),
    "prefixed ids": ("", "cus_41ZpA9 "),
}


def crafted(chars: int) -> dict[str, str]:
    """Every crafted text, ``chars`` characters long, by name."""
    texts = {}
    for name, (head, piece) in _PIECES.items():
        body = piece * ((chars - len(head)) // len(piece) + 1)
        texts[name] = (head + body)[:chars]
    return texts


def ratio_to_trivial(kind: Kind, text: str, rounds: int = 3) -> tuple[float, float, float]:
    """``kind.ids_in(text)`` against a trivial search of ``text``: the ratio, and each time."""
    took = fastest(lambda: kind.ids_in(text), rounds)
    trivial = fastest(lambda: TRIVIAL.search(text), rounds + 2)
    return took / trivial, took, trivial


def bench_patterns(run: Run) -> None:
    """Each ready-made kind on every crafted text: its worst, against a trivial search."""
    chars = run.pick(200_000, 2_000)
    rounds = run.pick(3, 1)
    texts = crafted(chars)
    section = Section(
        f"Ready-made kinds on crafted text of {chars:,} characters: each kind's worst input"
    )
    for like in LIKES:
        kind = Kind.build("k", like=like)
        measured = {name: ratio_to_trivial(kind, text, rounds) for name, text in texts.items()}
        name = max(measured, key=lambda key: measured[key][0])
        ratio, took, trivial = measured[name]
        section.rows.append(Row(f"{like}: ids_in, worst input ({name})", [took], unit="ms"))
        section.rows.append(Row(f"{like}: re.search of a trivial pattern", [trivial], unit="ms"))
        section.ratios.append((f"{like}: worst input / trivial search", f"{ratio:.0f}×"))
    section.notes.append(
        "ids_in is the pattern's search, the trimming and the normaliser of each match: "
        "what observe_user and a mention scan run per kind. Each time is the fastest of "
        f"{rounds} runs."
    )
    run.report.sections.append(section)
