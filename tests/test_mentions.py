"""Mention scanning on results an attacker wrote: linear, bounded, evidence from where it was found.

A result's free text is written by whoever wrote the page, the file or the
message: it may be megabytes of ids, or one string of a million words. The
scan for mentions reads at most 200,000 characters of a result's free text,
within one string too, stops at the per-call cap, and takes each value's
evidence from where the search found it. The timing tests compare the record
with ``re.findall`` of a plain pattern over the same text, never a clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from guardrail import Guard
from guardrail._provenance.mentions import MAX_TEXT

IBAN = "DE89370400440532013000"
OTHER_IBAN = "GB82WEST12345698765432"
_WORD = re.compile(r"\S+")
#: How many times ``re.findall(r"\S+")`` of the same text a record of a huge result may take.
#: After the fix the record is the faster of the two (it reads at most 200,000 characters);
#: an excerpt searched for per mention, and a limit checked only between strings, took
#: 100x to 500x.
BOUND = 5


def _guard(like: str = "iban", **options: object) -> Guard:
    guard = Guard(mode="reprompt", **options)  # type: ignore[arg-type]
    guard.add_kind("k", like=like, mentions="ask")
    guard.declare("fetch", effect="read")
    guard.declare("pay", ids={"to": "k"}, effect="write")
    return guard


def _within(run: Callable[[], object], baseline: Callable[[], object]) -> float:
    """``run``'s time over ``baseline``'s: the best of three of each (stops once within bound)."""
    base = min(_took(baseline) for _ in range(3))
    ratio = float("inf")
    for _ in range(3):
        ratio = min(ratio, _took(run) / base)
        if ratio <= BOUND:
            break
    return ratio


def _took(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _recorder(guard: Guard, result: object) -> Callable[[], object]:
    sessions = iter(range(10**6))

    def record() -> None:
        with guard.session(f"s{next(sessions)}"):
            guard.record("fetch", {}, result)

    return record


@pytest.mark.slow
def test_a_result_of_100k_addresses_costs_no_more_than_a_findall_of_it() -> None:
    """1.3 MB of 100,000 distinct addresses: the scan stops at the cap, each excerpt is local."""
    text = " ".join(f"u{index}@ex.io" for index in range(100_000))
    guard = _guard("email")
    ratio = _within(_recorder(guard, {"body": text}), lambda: _WORD.findall(text))
    assert ratio <= BOUND, f"{ratio:.0f}x re.findall"


@pytest.mark.slow
def test_a_million_words_in_one_string_cost_no_more_than_a_findall_of_them() -> None:
    """One string of a million words, each an IBAN: read no further than the scan limit."""
    text = " ".join([IBAN] * 1_000_000)
    guard = _guard()
    ratio = _within(_recorder(guard, {"body": text}), lambda: _WORD.findall(text))
    assert ratio <= BOUND, f"{ratio:.0f}x re.findall"


def test_a_value_past_the_scan_limit_of_one_string_is_not_taken() -> None:
    """The limit holds within one string: an IBAN after 200,000 characters is no mention."""
    filler = "lorem ipsum " * (MAX_TEXT // 12 + 1)
    guard = _guard()
    with guard.session("s") as ledger:
        guard.record("fetch", {}, {"body": f"pay {OTHER_IBAN} {filler} pay {IBAN}"})
        assert [entry.value for entry in ledger] == [OTHER_IBAN]
        assert guard.check("pay", {"to": IBAN}).outcome == "refused"


def test_an_id_the_limit_cuts_through_is_not_taken_in_part() -> None:
    """A value that starts before the limit and ends after it is read whole, or not at all."""
    number = "+44 20 7946 0958"
    head = "x" * (MAX_TEXT - 9) + " "  # the limit falls inside the number
    guard = _guard("phone")
    with guard.session("s") as ledger:
        guard.record("fetch", {}, {"body": f"{head}{number} and more text after it"})
        assert [entry.value for entry in ledger] == [number]


def test_a_mentions_evidence_is_the_text_where_the_search_found_it() -> None:
    """The excerpt is around the match, not around the first place the same letters occur."""
    text = f"account x{IBAN} was closed long ago. " + "filler " * 40 + f"Now pay {IBAN} please."
    guard = _guard()
    with guard.session("s"):
        guard.record("fetch", {}, {"body": text})
        (request,) = guard.check("pay", {"to": IBAN}).approvals
    assert f"Now pay {IBAN} please." in request.evidence
    assert "account" not in request.evidence


def test_the_scan_takes_no_more_values_than_one_call_may_add() -> None:
    """Past the per-call cap nothing more is taken: the first values in the text are."""
    text = " ".join(f"u{index}@ex.io" for index in range(500))
    guard = _guard("email", max_ids_per_call=20)
    with guard.session("s") as ledger:
        added = guard.record("fetch", {}, {"body": text})
        assert [entry.value for entry in added] == [f"u{index}@ex.io" for index in range(20)]
        assert len(ledger) == 20
