"""Corrupted identifiers: one seeded generator per way an id goes wrong.

The classes are the ways an identifier goes wrong in an agent's hands: a character
substituted, two swapped, one deleted, one inserted, the value truncated,
an id invented in the same shape, a ledger value of another kind, and a
placeholder from a tool description. A swap for another ledger value of the
same kind is generated too, but reported apart: provenance alone cannot see
it. Every generator takes a :class:`random.Random`, so a seed gives the same
variants on every run.

A corruption that happens to produce another value the conversation holds
(flight ``HAT136`` mutated into ``HAT137`` when both were returned) is a
*collision*: :func:`collision` finds it so a replay counts it apart instead
of as a miss.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from guardrail.errors import GuardrailUsageError
from guardrail.kinds import Kind
from guardrail.ledger import Entry, Ledger
from guardrail.ledger._ledger import state_of

#: The classes whose detection rate a replay reports, in report order.
CLASSES: Final[tuple[str, ...]] = (
    "substituted",
    "transposed",
    "deleted",
    "inserted",
    "truncated",
    "invented",
    "other_kind",
    "example",
)
#: Another ledger value of the same kind: what provenance cannot see, reported apart.
SAME_KIND: Final = "same_kind"
#: Every class a replay generates: :data:`CLASSES`, then :data:`SAME_KIND`.
ALL_CLASSES: Final[tuple[str, ...]] = (*CLASSES, SAME_KIND)

#: What each class means, for reports.
DESCRIPTIONS: Final[Mapping[str, str]] = {
    "substituted": "one character replaced by another of the same class",
    "transposed": "two characters swapped",
    "deleted": "one character deleted",
    "inserted": "one character inserted",
    "truncated": "cut short, sometimes with an ellipsis",
    "invented": "a new id in the same shape",
    "other_kind": "a ledger value of another kind",
    "example": "a placeholder from a tool description",
    SAME_KIND: "another ledger value of the same kind",
}

_ATTEMPTS: Final = 8
_ELLIPSIS: Final = "…"


@dataclass(frozen=True)
class Context:
    """What a generator may look at: the argument's kinds, the ledger, the random source."""

    kinds: Sequence[Kind]
    ledger: Ledger
    rng: random.Random


Generator = Callable[[str, Context], "str | None"]


def _alphabet(char: str) -> str:
    """Characters a model would plausibly write in place of ``char``."""
    if char.isdigit():
        return string.digits
    if char.isupper():
        return string.ascii_uppercase
    if char.islower():
        return string.ascii_lowercase
    return string.ascii_letters + string.digits


def _positions(value: str) -> list[int]:
    """Positions of letters and digits (separators are rarely what a summariser changes)."""
    found = [i for i, char in enumerate(value) if char.isalnum()]
    return found or list(range(len(value)))


def substituted(value: str, context: Context) -> str | None:
    """One letter or digit replaced by another of the same class (``HAT136`` -> ``HAT186``)."""
    if not value:
        return None
    rng = context.rng
    i = rng.choice(_positions(value))
    choices = [c for c in _alphabet(value[i]) if c != value[i]]
    return value[:i] + rng.choice(choices) + value[i + 1 :]


def transposed(value: str, context: Context) -> str | None:
    """Two neighbouring, different characters swapped (``HAT136`` -> ``HAT163``)."""
    pairs = [i for i in range(len(value) - 1) if value[i] != value[i + 1]]
    if not pairs:
        return None
    i = context.rng.choice(pairs)
    return value[:i] + value[i + 1] + value[i] + value[i + 2 :]


def deleted(value: str, context: Context) -> str | None:
    """One character left out (``HAT136`` -> ``HT136``)."""
    if len(value) < 2:
        return None
    i = context.rng.randrange(len(value))
    return value[:i] + value[i + 1 :]


def inserted(value: str, context: Context) -> str | None:
    """One character added, of the class of its neighbour (``HAT136`` -> ``HAT1306``)."""
    if not value:
        return None
    rng = context.rng
    i = rng.randrange(len(value) + 1)
    neighbour = value[i - 1] if i > 0 else value[0]
    return value[:i] + rng.choice(_alphabet(neighbour)) + value[i:]


def truncated(value: str, context: Context) -> str | None:
    """A prefix of at least half the value, with an ellipsis a third of the time."""
    if len(value) < 3:
        return None
    rng = context.rng
    keep = rng.randrange(max(2, (len(value) + 1) // 2), len(value))
    cut = value[:keep]
    return cut + _ELLIPSIS if rng.random() < 1 / 3 else cut


def _reshape(value: str, rng: random.Random, *, letters: bool) -> str:
    return "".join(
        rng.choice(_alphabet(c)) if c.isdigit() or (letters and c.isalpha()) else c for c in value
    )


def invented(value: str, context: Context) -> str | None:
    """A new id of the same shape: every letter and digit redrawn, in the same class.

    When the kind has a pattern and the redrawn value no longer fits it
    (``credit_card_4421486`` has fixed words), only the digits are redrawn,
    as a model inventing an id would (``credit_card_7334...``).
    """
    if not value or not any(c.isalnum() for c in value):
        return None
    rng = context.rng
    shaped = [kind for kind in context.kinds if kind.has_pattern and kind.matches(value)]
    candidate = _reshape(value, rng, letters=True)
    misfit = shaped and not any(kind.matches(candidate) for kind in shaped)
    if misfit and any(c.isdigit() for c in value):
        candidate = _reshape(value, rng, letters=False)
    return candidate


def other_kind(value: str, context: Context) -> str | None:
    """The value of a ledger entry of another kind (a user id passed as a reservation id)."""
    wanted = {kind.name for kind in context.kinds}
    tables = [
        table
        for kind, table in sorted(state_of(context.ledger).tables.items())
        if kind not in wanted and table
    ]
    if not tables:
        return None
    table = context.rng.choice(tables)
    entry: Entry = table[context.rng.choice(sorted(table))]
    return entry.value


def example(value: str, context: Context) -> str | None:
    """A placeholder quoted in a tool description (one of the kind's examples)."""
    examples = sorted({e for kind in context.kinds for e in kind.examples})
    return context.rng.choice(examples) if examples else None


def same_kind(value: str, context: Context) -> str | None:
    """The value of another ledger entry of the argument's kind (provenance cannot tell)."""
    keys = {kind.normalize(value) for kind in context.kinds}
    others = [
        entry
        for kind in context.kinds
        for key, entry in sorted(state_of(context.ledger).tables.get(kind.name, {}).items())
        if key not in keys
    ]
    return context.rng.choice(others).value if others else None


GENERATORS: Final[Mapping[str, Generator]] = {
    "substituted": substituted,
    "transposed": transposed,
    "deleted": deleted,
    "inserted": inserted,
    "truncated": truncated,
    "invented": invented,
    "other_kind": other_kind,
    "example": example,
    SAME_KIND: same_kind,
}


def _same_id(a: str, b: str, kinds: Sequence[Kind]) -> bool:
    return any(kind.normalize(a) == kind.normalize(b) for kind in kinds)


def corrupt(name: str, value: str, context: Context) -> str | None:
    """A variant of ``value`` by the class ``name``, or None where the class does not apply.

    The variant always names a different id under the kinds' normalisers
    (deleting the ``#`` of ``#W8855135`` changes nothing, so another draw is
    taken).
    """
    try:
        generate = GENERATORS[name]
    except KeyError:
        raise GuardrailUsageError(
            f"unknown corruption class {name!r}; use one of {', '.join(ALL_CLASSES)}"
        ) from None
    for _ in range(_ATTEMPTS):
        variant = generate(value, context)
        if variant is None:
            return None
        if not _same_id(variant, value, context.kinds):
            return variant
    return None


def collision(variant: str, context: Context) -> str | None:
    """What ``variant`` happens to name that the conversation holds, or None.

    A ledger entry of the argument's kinds (``ledger role [flight_2]``), or a
    token of the kinds' shape the user typed verbatim: the guard rightly treats either as known,
    so a replay counts the variant apart rather than as a miss.
    """
    for kind in context.kinds:
        entry = context.ledger.get(kind.name, variant)
        if entry is not None:
            return f"ledger role [{entry.role}]"
    shaped = any(not kind.has_pattern or kind.matches(variant) for kind in context.kinds)
    if shaped and state_of(context.ledger).typed_by_user(variant):
        return "typed by the user"
    return None
