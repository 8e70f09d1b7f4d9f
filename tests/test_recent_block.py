"""The every-turn ledger block: the entries used last, within a token budget, sealed on request."""

from __future__ import annotations

import pytest

from guardrail import Guard, GuardrailUsageError
from guardrail.compaction import BLOCK_HEADER, DEFAULT_BLOCK_TOKENS, ledger_block, recent_block
from guardrail.compaction._block import unseal
from guardrail.compaction._recent import quarter_tokens
from guardrail.ledger._ledger import state_of

ORDERS = [f"#W{1000000 + number}" for number in range(200)]


def shop(**options: object) -> Guard:
    """A guard whose search returns many orders, and a refund that takes one."""
    guard = Guard(mode="reprompt", **options)  # type: ignore[arg-type]
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("search", produces={"orders[*]": "order"}, effect="read")
    guard.declare("get_order", ids={"order_id": "order"}, effect="read")
    guard.declare("refund", ids={"order_id": "order"}, effect="write")
    return guard


def found(guard: Guard, orders: list[str]) -> None:
    """Record searches that returned ``orders``, fifty at a time (a result may add 100)."""
    for start in range(0, len(orders), 50):
        guard.record("search", {}, {"orders": orders[start : start + 50]})


def values(block: str) -> set[str]:
    """The order ids a block shows."""
    return {word for word in block.split() if word.startswith("#W")}


def test_a_short_ledger_is_the_whole_block() -> None:
    """Under the budget the block is the full ledger block, nothing left out."""
    guard = shop()
    with guard.session("s") as ledger:
        guard.record("search", {}, {"orders": ORDERS[:3]})
        assert recent_block(ledger) == ledger_block(ledger)


def test_the_block_stays_within_its_budget_and_says_what_it_left_out() -> None:
    """200 entries in 200 tokens: the block fits, shows the entries used last, counts the rest."""
    guard = shop()
    with guard.session("s") as ledger:
        found(guard, ORDERS)
        guard.enforce("get_order", {"order_id": ORDERS[5]})  # a use: now the latest
        block = recent_block(ledger, max_tokens=200)
    assert quarter_tokens(block) <= 200
    assert block.startswith(BLOCK_HEADER + "\n")
    shown = values(block)
    assert ORDERS[5] in shown and ORDERS[-1] in shown and ORDERS[0] not in shown
    assert f"({200 - len(shown)} less recently used entries not shown" in block


def test_pinned_entries_are_shown_first() -> None:
    """A pinned entry stays in the block however long ago it was used."""
    guard = shop()
    with guard.session("s") as ledger:
        found(guard, ORDERS)
        ledger.pin("order")
        assert ORDERS[0] in values(recent_block(ledger, max_tokens=100))


def test_a_refusal_that_points_at_an_entry_puts_it_in_the_block() -> None:
    """The entry a re-prompt says to copy "from the ID LEDGER" is in the next every-turn block."""
    guard = shop()
    with guard.session("s") as ledger:
        found(guard, ORDERS)
        assert ORDERS[3] not in values(recent_block(ledger, max_tokens=100))
        # One character added to ORDERS[3], and one edit from no other of these dense ids
        # (one edit from several, a re-prompt names none).
        verdict = guard.enforce("refund", {"order_id": "#W1000003x"})
        [finding] = verdict.findings
        assert finding.nearest_role is not None
        assert "from the ID LEDGER" in verdict.message
        named = ledger[finding.nearest_role].value
        block = recent_block(ledger, max_tokens=100)
    assert named in values(block)


def test_the_block_is_sealed_when_asked_and_the_seal_is_the_ledgers() -> None:
    """sealed=True adds the seal line compaction's block carries, for this ledger only."""
    guard = shop(secret=b"k" * 32)
    with guard.session("s") as ledger:
        found(guard, ORDERS)
        block = recent_block(ledger, max_tokens=150, sealed=True)
        assert quarter_tokens(block) <= 150
        assert unseal(block, state_of(ledger)) == (block.rpartition("\n")[0], True)
    with guard.session("other") as other:
        assert unseal(block, state_of(other))[1] is False


def test_a_token_counter_may_be_given() -> None:
    """``tokens`` counts the budget: a counter of lines bounds the lines."""
    guard = shop()
    with guard.session("s") as ledger:
        found(guard, ORDERS)
        block = recent_block(ledger, max_tokens=50, tokens=lambda text: text.count("\n") + 1)
    assert len(block.splitlines()) == 50


@pytest.mark.parametrize("budget", [0, 39, True, "1000", None])
def test_a_budget_too_small_or_not_a_number_is_a_usage_error(budget: object) -> None:
    """A budget no block fits in says what to pass."""
    guard = shop()
    with guard.session("s") as ledger, pytest.raises(GuardrailUsageError, match="integer >= 40"):
        recent_block(ledger, max_tokens=budget)  # type: ignore[arg-type]
    assert DEFAULT_BLOCK_TOKENS >= 40


def test_every_budget_shows_the_most_entries_that_fit() -> None:
    """Budget by budget: the block fits, and shows one more entry only once that one fits."""
    guard = Guard()
    guard.add_kind("ref", pattern=r"R-\w+")
    guard.declare("search", produces={"refs[*]": "ref"}, effect="read")
    refs = [f"R-{'x' * (number % 13)}{number}" for number in range(60)]  # widths that vary
    with guard.session("s") as ledger:
        for start in range(0, 60, 7):
            guard.record("search", {}, {"refs": refs[start : start + 7]})
        whole = quarter_tokens(recent_block(ledger, max_tokens=10**6))
        shown_before = -1
        for budget in range(40, whole + 2):
            block = recent_block(ledger, max_tokens=budget)
            shown = sum(word.startswith("R-") for word in block.split())
            assert quarter_tokens(block) <= budget
            assert shown >= shown_before
            if shown > shown_before >= 0:
                assert quarter_tokens(block) == budget  # it did not fit one token less
            shown_before = shown
        assert shown_before == 60


def test_only_what_may_be_shown_is_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a ledger of 5,000 entries no rendering holds more than twice the entries shown."""
    import guardrail.compaction._recent as recent

    rendered: list[int] = []
    written = recent._written

    def counting(state: object, shown: list[object], *args: object) -> str:
        rendered.append(len(shown))
        return written(state, shown, *args)  # type: ignore[arg-type]

    guard = shop(capacity=10_000)
    orders = [f"#W{2000000 + number}" for number in range(5000)]
    with guard.session("s") as ledger:
        found(guard, orders)
        guard.enforce("get_order", {"order_id": orders[7]})
        monkeypatch.setattr(recent, "_written", counting)
        block = recent_block(ledger)
    shown = len(values(block))
    assert orders[7] in values(block) and orders[-1] in values(block)
    assert 0 < shown < 5000 and max(rendered) <= 2 * shown
    assert len(rendered) <= 12  # a handful of renderings
