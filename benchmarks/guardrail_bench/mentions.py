"""Mentions: recording one huge result of free text, with a kind that takes mentions.

Two results, each one string: a million words that are all one IBAN (every word a
match, one value), and 100,000 distinct e-mail addresses in 1.3 MB (every word a
new value). A result is searched for mentions in at most 200,000 characters of its
free text, and no further than the most values one call may add (the per-call cap):
each is one ``guard.record`` of a read tool whose result declares no field, against
``re.findall`` of a plain pattern over the same text.
"""

from __future__ import annotations

import re

from guardrail import Guard

from .common import Run
from .report import Row, Section
from .timing import once

_WORD = re.compile(r"\S+")


def texts(words: int) -> dict[str, tuple[str, str]]:
    """The results, by name, each with the ready-made kind whose mentions it is full of."""
    addresses = max(1, words // 10)
    return {
        f"{words:,} words in one string, each the same IBAN": (
            "iban",
            " ".join(["DE89370400440532013000"] * words),
        ),
        f"{addresses:,} distinct e-mail addresses in one string": (
            "email",
            " ".join(f"u{index}@ex.io" for index in range(addresses)),
        ),
    }


def _guard(like: str) -> Guard:
    guard = Guard(mode="reprompt")
    guard.add_kind("k", like=like, mentions="ask")
    guard.declare("fetch", effect="read")
    return guard


def bench_mentions(run: Run) -> None:
    """Record each result once per round in a fresh session, and ``re.findall`` its text."""
    words = run.pick(1_000_000, 2_000)
    rounds = run.pick(3, 1)
    section = Section("Mentions in one huge result: guard.record against re.findall")
    sessions = iter(range(10**9))  # a fresh session per round: every value is new to it
    for name, (like, text) in texts(words).items():
        guard = _guard(like)

        def record(guard: Guard = guard, text: str = text) -> None:
            with guard.session(f"mentions-{next(sessions)}"):
                guard.record("fetch", {}, {"body": text})

        def words_of(text: str = text) -> None:
            _WORD.findall(text)

        recorded = once(record, rounds=rounds)
        found = once(words_of, rounds=rounds)
        size = f"{len(text) / 1e6:.1f} MB"
        section.rows.append(Row(f"guard.record, {name} ({size})", recorded, unit="ms"))
        section.rows.append(Row(f"re.findall(r'\\S+') of the same text ({size})", found, unit="ms"))
        section.ratios.append((f"{name}: record / findall", f"{min(recorded) / min(found):.2f}×"))
    run.report.sections.append(section)
