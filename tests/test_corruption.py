"""Corruption generators: one per class, seeded, and always a different identifier."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrail import Guard
from guardrail._data.batch import Batch
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Ledger, Source
from guardrail.ledger._ledger import state_of
from guardrail.replay._corruption import (
    ALL_CLASSES,
    CLASSES,
    SAME_KIND,
    Context,
    collision,
    corrupt,
    deleted,
    example,
    inserted,
    invented,
    other_kind,
    same_kind,
    substituted,
    transposed,
    truncated,
)


def _guard() -> Guard:
    guard = Guard()
    guard.add_kind("flight", pattern=r"HAT[0-9]{3}", examples=["HAT001"])
    guard.add_kind(
        "payment",
        pattern=r"(?:credit_card|gift_card)_[0-9]{7}",
        examples=["credit_card_0000000"],
    )
    guard.add_kind("order", pattern=r"#?W[0-9]{7}", normalize=["strip", "prefix:#"])
    guard.add_kind("note")  # no pattern, no examples
    guard.declare("book", ids={"flight": "flight", "payment": "payment"})
    return guard


def _ledger(guard: Guard, values: dict[str, list[str]]) -> Ledger:
    ledger = guard.new_ledger("t")
    items = [
        Batch.one(kind, value, guard.kinds[kind].normalize(value), "$")
        for kind, group in values.items()
        for value in group
    ]
    state_of(ledger).admit(items, source=Source("seed", None, "$", 0))
    return ledger


def _context(guard: Guard, kind: str, ledger: Ledger | None = None, seed: int = 0) -> Context:
    return Context(
        kinds=(guard.kinds[kind],),
        ledger=ledger if ledger is not None else guard.new_ledger("t"),
        rng=random.Random(seed),
    )


def test_classes_are_the_design_classes_plus_same_kind_apart() -> None:
    """Eight detection classes, and the same-kind swap reported apart."""
    assert CLASSES == (
        "substituted",
        "transposed",
        "deleted",
        "inserted",
        "truncated",
        "invented",
        "other_kind",
        "example",
    )
    assert (*CLASSES, SAME_KIND) == ALL_CLASSES


def test_substituted_changes_one_character_of_the_same_class() -> None:
    """A substitution keeps the length and swaps a digit for a digit, a letter for a letter."""
    guard = _guard()
    for seed in range(50):
        variant = substituted("HAT136", _context(guard, "flight", seed=seed))
        assert variant is not None
        diffs = [(a, b) for a, b in zip("HAT136", variant, strict=True) if a != b]
        assert len(diffs) == 1
        ((a, b),) = diffs
        assert a.isdigit() == b.isdigit()
        assert a.isupper() == b.isupper()


def test_transposed_swaps_two_neighbours() -> None:
    """A transposition swaps two different neighbouring characters."""
    guard = _guard()
    variant = transposed("HAT136", _context(guard, "flight"))
    assert variant is not None
    assert sorted(variant) == sorted("HAT136")
    assert variant != "HAT136"
    for seed in range(30):
        variant = transposed("HAT136", _context(guard, "flight", seed=seed))
        assert variant is not None
        i, j = (k for k, (a, b) in enumerate(zip("HAT136", variant, strict=True)) if a != b)
        assert j == i + 1
        assert (variant[i], variant[j]) == ("HAT136"[j], "HAT136"[i])
    assert transposed("AAAA", _context(guard, "flight")) is None


def test_deleted_and_inserted_change_the_length_by_one() -> None:
    """A deletion drops one character; an insertion adds one."""
    guard = _guard()
    gone = deleted("HAT136", _context(guard, "flight"))
    added = inserted("HAT136", _context(guard, "flight"))
    assert gone is not None
    assert len(gone) == 5
    assert added is not None
    assert len(added) == 7


def test_truncated_is_a_prefix_sometimes_with_an_ellipsis() -> None:
    """A truncation keeps at least half of the value and sometimes ends in an ellipsis."""
    guard = _guard()
    seen_ellipsis = False
    for seed in range(40):
        variant = truncated("credit_card_4421486", _context(guard, "payment", seed=seed))
        assert variant is not None
        stem = variant.removesuffix("…")
        seen_ellipsis |= stem != variant
        assert "credit_card_4421486".startswith(stem)
        assert len("credit_card_4421486") // 2 <= len(stem) < len("credit_card_4421486")
    assert seen_ellipsis
    assert truncated("AB", _context(guard, "flight")) is None


def test_invented_keeps_the_shape_of_the_kind() -> None:
    """An invented id has the same shape and still fits the kind's pattern where it can."""
    guard = _guard()
    for seed in range(30):
        flight = invented("HAT136", _context(guard, "flight", seed=seed))
        card = invented("credit_card_4421486", _context(guard, "payment", seed=seed))
        assert flight is not None
        assert guard.kinds["flight"].matches(flight)
        assert card is not None
        assert card.startswith("credit_card_")
        assert guard.kinds["payment"].matches(card)
    assert invented("___", _context(guard, "flight")) is None


def test_other_kind_takes_a_ledger_value_of_another_kind() -> None:
    """other_kind returns the value of an entry of another kind, or None when there is none."""
    guard = _guard()
    ledger = _ledger(guard, {"flight": ["HAT136"], "payment": ["gift_card_1234567"]})
    assert other_kind("HAT136", _context(guard, "flight", ledger)) == "gift_card_1234567"
    only_flights = _ledger(guard, {"flight": ["HAT136", "HAT137"]})
    assert other_kind("HAT136", _context(guard, "flight", only_flights)) is None


def test_example_takes_a_placeholder_of_the_kind() -> None:
    """example returns one of the kind's examples, or None for a kind with none."""
    guard = _guard()
    assert example("HAT136", _context(guard, "flight")) == "HAT001"
    assert example("anything", _context(guard, "note")) is None


def test_same_kind_takes_another_value_of_the_kind() -> None:
    """same_kind returns another entry of the same kind, never the value itself."""
    guard = _guard()
    ledger = _ledger(guard, {"flight": ["HAT136", "HAT200"], "payment": ["gift_card_1234567"]})
    assert same_kind("HAT136", _context(guard, "flight", ledger)) == "HAT200"
    alone = _ledger(guard, {"flight": ["HAT136"]})
    assert same_kind("HAT136", _context(guard, "flight", alone)) is None


def test_same_seed_same_variants() -> None:
    """Corruptions are deterministic for a seed and vary with it."""
    guard = _guard()
    ledger = _ledger(guard, {"flight": ["HAT136", "HAT200"], "payment": ["gift_card_1234567"]})

    def run(seed: int) -> list[str | None]:
        context = _context(guard, "flight", ledger, seed=seed)
        return [corrupt(name, "HAT136", context) for name in ALL_CLASSES for _ in range(5)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_corrupt_never_returns_the_same_id_under_the_normaliser() -> None:
    """Deleting the '#' of '#W1234567' names the same order, so corrupt draws again."""
    guard = _guard()
    for seed in range(60):
        variant = corrupt("deleted", "#W1234567", _context(guard, "order", seed=seed))
        assert variant is not None
        assert guard.kinds["order"].normalize(variant) != "W1234567"


def test_corrupt_returns_none_where_the_class_does_not_apply() -> None:
    """A class with nothing to draw from gives None, not a fake variant."""
    guard = _guard()
    assert corrupt("example", "x", _context(guard, "note")) is None
    assert corrupt("same_kind", "HAT136", _context(guard, "flight")) is None


def test_unknown_class_is_a_usage_error() -> None:
    """corrupt() with an unknown class name raises a usage error listing the classes."""
    guard = _guard()
    with pytest.raises(GuardrailUsageError, match="substituted"):
        corrupt("garbled", "HAT136", _context(guard, "flight"))


def test_collision_names_another_value_the_conversation_holds() -> None:
    """A variant equal to a ledger value, or to a typed token of the kind's shape, collides."""
    guard = _guard()
    ledger = _ledger(guard, {"flight": ["HAT136", "HAT137"], "payment": ["gift_card_1234567"]})
    state_of(ledger).observe_text("I fly HAT555 tomorrow")
    context = _context(guard, "flight", ledger)
    assert collision("HAT137", context) == "ledger role [flight_2]"
    assert collision("HAT555", context) == "typed by the user"
    assert collision("HAT999", context) is None
    # A value of another kind is not a collision: the check calls it wrong_kind.
    assert collision("gift_card_1234567", context) is None


# The kind takes any short word on purpose (every variant must keep its shape): not a pattern
# to deploy, so its BroadPatternWarning is expected here.
@pytest.mark.filterwarnings("ignore::guardrail.errors.BroadPatternWarning")
@settings(max_examples=80, deadline=None)
@given(
    value=st.from_regex(r"[A-Z]{2}[0-9]{4}[a-z]{2}", fullmatch=True),
    seed=st.integers(0, 10_000),
    name=st.sampled_from(("substituted", "transposed", "deleted", "inserted", "truncated")),
)
def test_a_mutated_id_is_never_allowed(value: str, seed: int, name: str) -> None:
    """Every mutation of a verified ledger value is refused, unless it names another entry."""
    guard = Guard()
    guard.add_kind("code", pattern=r"[A-Za-z0-9]{5,9}")
    guard.declare("use", ids={"code": "code"})
    ledger = _ledger(guard, {"code": [value]})
    context = _context(guard, "code", ledger, seed=seed)
    variant = corrupt(name, value, context)
    if variant is None or collision(variant, context) is not None:
        return
    verdict = guard.check("use", {"code": variant}, ledger=ledger)
    assert not verdict.allowed
