"""The lossy summarizer, the plain-summary baseline and the availability count."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from guardrail import Guard, GuardrailUsageError
from guardrail._guard.audit import SilentLogger
from guardrail._transcript.content import strings
from guardrail.compaction import BLOCK_HEADER, compact
from guardrail.replay import (
    FATES,
    LossySummarizer,
    plain_compact,
    replay,
    side_by_side,
    strategies,
    trace_from_messages,
)
from guardrail.replay._lossy import PLAIN_HEADER

from .conftest import AIRLINE_MANIFEST, need_corpus, needs_corpus

ORDERS = [f"W{1000000 + n}" for n in range(40)]


def make_guard() -> Guard:
    guard = Guard(logger=SilentLogger())
    guard.add_kind("order", pattern=r"#?W\d{7}", normalize=["strip", "prefix:#"])
    guard.declare("list_orders", produces={"orders[*]": "order"}, effect="read")
    guard.declare("cancel_order", ids={"order_id": "order"}, effect="write")
    return guard


def conversation() -> list[dict[str, Any]]:
    """A user lists their orders, then cancels one of them a few turns later."""
    return [
        {"role": "system", "content": "You are a shop assistant."},
        {"role": "user", "content": "Which orders do I have?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "name": "list_orders", "arguments": {}}],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": json.dumps({"orders": ORDERS}),
        },
        {"role": "assistant", "content": "You have 40 orders; the first is " + ORDERS[0] + "."},
        {"role": "user", "content": "Thanks. Let me think."},
        {"role": "assistant", "content": "Take your time."},
        {"role": "user", "content": "Cancel the 8th one."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c2", "name": "cancel_order", "arguments": {"order_id": ORDERS[7]}}
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "cancelled"},
    ]


def text_of(messages: list[Any]) -> str:
    return "\n".join(strings(messages))


def test_each_id_meets_one_fate_from_the_seed_and_itself() -> None:
    """Fates repeat for a seed, do not depend on other ids, and change with the seed."""
    one, same, other = LossySummarizer(seed=1), LossySummarizer(seed=1), LossySummarizer(seed=2)
    fates = [one.fate(value) for value in ORDERS]
    assert fates == [same.fate(value) for value in reversed(ORDERS)][::-1]
    assert fates != [other.fate(value) for value in ORDERS]
    assert set(fates) <= set(FATES)


def test_fates_follow_the_rates() -> None:
    """Over many ids, each failure mode happens about as often as its rate says."""
    lossy = LossySummarizer(seed=3, drop=0.1, generalize=0.2, truncate=0.05, mutate=0.15)
    counts = Counter(lossy.fate(f"id_{n:05d}") for n in range(4000))
    for fate, rate in [("drop", 0.1), ("generalize", 0.2), ("truncate", 0.05), ("mutate", 0.15)]:
        assert abs(counts[fate] / 4000 - rate) < 0.03, fate
    assert abs(counts["keep"] / 4000 - 0.5) < 0.03


@pytest.mark.parametrize("rates", [{"drop": -0.1}, {"mutate": 1.5}, {"drop": 0.5, "truncate": 0.6}])
def test_rates_out_of_range_are_usage_errors(rates: dict[str, float]) -> None:
    """Each rate lies in 0..1 and together they are at most 1."""
    with pytest.raises(GuardrailUsageError, match="rate"):
        LossySummarizer(**rates)  # type: ignore[arg-type]


def only(mode: str | None, **options: Any) -> LossySummarizer:
    """A lossy summarizer whose one failure mode always happens (or none does)."""
    return LossySummarizer(
        drop=float(mode == "drop"),
        generalize=float(mode == "generalize"),
        truncate=float(mode == "truncate"),
        mutate=float(mode == "mutate"),
        **options,
    )


def spoiled(mode: str | None) -> str:
    lossy = only(mode, seed=5, kinds=make_guard().kinds)
    return lossy.spoil("Cancel W1000007 now.", {"W1000007": "order"})


def test_each_failure_mode_does_what_it_says() -> None:
    """drop removes, generalize names the kind, truncate cuts (…), mutate changes one character."""
    assert spoiled("drop") == "Cancel now."
    assert spoiled("generalize") == "Cancel the order now."
    assert spoiled("truncate") == "Cancel W100… now."
    mutated = re.search(r"W\d{7}", spoiled("mutate"))
    assert mutated is not None
    assert mutated.group() != "W1000007"
    assert sum(a != b for a, b in zip(mutated.group(), "W1000007", strict=True)) == 1
    assert spoiled(None) == "Cancel W1000007 now."


def test_a_lossless_run_carries_every_id_it_saw() -> None:
    """With every rate at zero, each id in the messages is in the summary verbatim."""
    guard = make_guard()
    lossless = only(None, kinds=guard.kinds)
    summary = lossless(conversation()[1:], {})
    for value in ORDERS:
        assert value in summary


def test_without_kinds_tokens_mixing_letters_and_digits_are_ids() -> None:
    """With no kinds given, tokens like W1000007 or ab_1234 count as identifiers."""
    found = LossySummarizer().identifiers("See W1000007, ab_1234, 2024 and hello.")
    assert list(found) == ["W1000007", "ab_1234"]


def test_behind_the_ledger_it_has_nothing_to_lose() -> None:
    """compact() with the lossy summariser keeps every ledger value verbatim."""
    guard = make_guard()
    ledger = guard.new_ledger()
    lossy = LossySummarizer(seed=1, drop=0.25, generalize=0.25, truncate=0.25, mutate=0.25)
    out = compact(conversation()[:8], ledger, summarize=lossy, keep_recent=1, guard=guard)
    text = text_of(out.messages)
    assert all(re.search(rf"\b{value}\b", text) for value in ORDERS)
    assert out.report.lint == ()


def test_a_plain_summary_through_it_visibly_loses_ids() -> None:
    """plain_compact() with the lossy summariser loses ids the ledger would have kept."""
    lossy = LossySummarizer(seed=1, kinds=make_guard().kinds)
    out = plain_compact(conversation()[:8], summarize=lossy, keep_recent=1)
    text = text_of(out.messages)
    kept = [value for value in ORDERS if re.search(rf"(?<!\w){value}(?!\w)", text)]
    assert 0 < len(kept) < len(ORDERS)
    assert "…" in out.report.summary


def test_plain_compact_makes_the_same_cut_without_a_ledger() -> None:
    """The baseline keeps the same recent turns, with a plain summary and no ledger block."""
    guard = make_guard()
    messages = conversation()[:8]
    guarded = compact(messages, guard.new_ledger(), keep_recent=2, guard=guard).messages
    plain = plain_compact(messages, keep_recent=2).messages
    assert plain[2:] == guarded[2:]
    assert plain[1]["content"].startswith(PLAIN_HEADER + "\n")
    assert BLOCK_HEADER not in text_of(plain)
    assert plain_compact(messages, keep_recent=9).messages == messages


def test_side_by_side_counts_later_id_arguments_present_verbatim() -> None:
    """The count covers each id argument of a later call that a tool result produced."""
    guard = make_guard()
    lossy = only("drop", seed=1, kinds=guard.kinds)
    found = side_by_side([conversation()], guard, keep_recent=[0, 1], summarize=lossy)
    # Three compactions come after the list_orders result (before messages 4, 6 and 8), each
    # with one later id argument (W1000007). Keeping one turn raw saves it the first time.
    assert found.conversations == 1
    assert found.by_keep_recent == {0: (3, 3, 0), 1: (3, 3, 1)}
    assert (found.required, found.guarded, found.plain) == (6, 6, 1)
    table = found.table().splitlines()
    assert table[0].split() == ["keep_recent", "required", "guardrail", "plain", "summary"]
    assert table[-1].split() == ["all", "6", "6", "(100.0%)", "1", "(16.7%)"]


def test_strategies_plug_into_replay() -> None:
    """strategies() gives replay both compactions; only the plain summary loses the id."""
    guard = make_guard()
    trace = trace_from_messages(conversation())
    lossy = only("drop", seed=1, kinds=guard.kinds)
    both = strategies(guard, summarize=lossy, keep_recent=0)
    report = replay([trace], guard, classes=(), compaction=both)
    guarded, plain = report.availability["guardrail"], report.availability["plain summary"]
    assert (guarded.ids, guarded.present) == (1, 1)
    assert (plain.ids, plain.present) == (1, 0)


@needs_corpus
def test_strategies_on_corpus_traces_through_replay() -> None:
    """Through replay on 30 recorded conversations, guardrail keeps every id the context had."""
    traces = need_corpus()
    guard = Guard.from_manifest(AIRLINE_MANIFEST)
    both = strategies(guard, keep_recent=1)
    report = replay(traces, guard, limit=30, classes=(), compaction=both)
    guarded, plain = report.availability["guardrail"], report.availability["plain summary"]
    assert guarded.ids == plain.ids > 100
    assert guarded.present == guarded.ids
    assert plain.present < plain.ids
