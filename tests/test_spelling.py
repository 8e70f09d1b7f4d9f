"""One spelling (American, as Python's own), one calling form: no old names, none released."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import guardrail
import guardrail.compaction
import guardrail.replay
import guardrail.testing
from guardrail import Guard, compact
from guardrail._guard.audit import SilentLogger
from guardrail.compaction import CompactOptions, Summarizer, model_summarizer
from guardrail.replay import LossySummarizer, plain_compact, side_by_side, strategies

from .conftest import call, result, user

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    user("Cancel my order please."),
    call("c1", "list_orders", {}),
    result("c1", {"orders": ["W1000001"]}),
    {"role": "assistant", "content": "Which one?"},
    user("W1000001."),
]


def summary(messages: list[dict[str, Any]], roles: dict[str, str], /) -> str:
    return "The user wants an order cancelled."


def shop() -> Guard:
    guard = Guard(logger=SilentLogger())
    guard.add_kind("order", pattern=r"W\d{7}")
    guard.declare("list_orders", produces={"orders[*]": "order"}, effect="read")
    return guard


@pytest.mark.parametrize(
    ("module", "old"),
    [
        (guardrail.compaction, "Summariser"),
        (guardrail.compaction, "model_summariser"),
        (guardrail.replay, "LossySummariser"),
        (guardrail.testing, "LossySummariser"),
        (guardrail.testing, "side_by_side"),
    ],
)
def test_an_old_name_is_no_name(module: Any, old: str) -> None:
    """guardrail.compaction.Summariser and the other old spellings and homes do not exist."""
    with pytest.raises(AttributeError, match=f"no attribute '{old}'"):
        getattr(module, old)


def test_importing_the_public_names_never_warns() -> None:
    """A fresh interpreter, warnings as errors, imports every public name."""
    code = (
        "import guardrail, guardrail.compaction, guardrail.replay, guardrail.testing\n"
        "from guardrail import *\n"
        "from guardrail.compaction import *\n"
        "from guardrail.replay import *\n"
        "from guardrail.testing import *\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_summarizer_names_are_exported_from_guardrail() -> None:
    """model_summarizer, Summarizer and extractive_summary sit beside compact."""
    assert guardrail.model_summarizer is model_summarizer
    assert guardrail.Summarizer is Summarizer
    assert guardrail.extractive_summary is guardrail.compaction.extractive_summary
    assert {"Summarizer", "model_summarizer", "extractive_summary"} <= set(guardrail.__all__)


def test_compact_takes_its_options_by_keyword_only() -> None:
    """compact(messages, ledger, f, 1) and compact(..., summarise=f) are type errors."""
    guard = shop()
    with pytest.raises(TypeError):
        compact(MESSAGES, guard.new_ledger(), summary, 1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected option 'summarise'; its options: .*summarize"):
        compact(MESSAGES, guard.new_ledger(), summarise=summary)  # type: ignore[call-overload]
    done = compact(MESSAGES, guard.new_ledger(), summarize=summary, keep_recent=1, guard=guard)
    assert done.report.summary == "The user wants an order cancelled."


def test_compact_options_are_written_once() -> None:
    """CompactOptions names every option of compact() (and compact_text's are a part of it)."""
    assert CompactOptions.__optional_keys__ == {
        "summarize",
        "keep_recent",
        "keep_last_messages",
        "shape",
        "role",
        "summary_chars",
        "tokens",
    }


def test_tool_options_are_written_once() -> None:
    """declare, tool and patch take one set of options; a misspelt one names the right ones."""
    assert guardrail.DeclareOptions.__optional_keys__ == {
        "ids",
        "produces",
        "mints",
        "effect",
        "verifies",
        "description",
        "egress",
        "outside",
        "fails",
    }
    assert guardrail.ToolOptions.__optional_keys__ == {
        *guardrail.DeclareOptions.__optional_keys__,
        "name",
    }
    guard = Guard(logger=SilentLogger())
    misspelt: list[Callable[[], object]] = [
        lambda: guard.declare("t", efect="read"),  # type: ignore[call-arg]
        lambda: guard.tool(nmae="t"),  # type: ignore[call-overload]
        lambda: guard.patch("shop.api:ship", verifes=True),  # type: ignore[call-arg]
    ]
    for name, wrong in zip(("declare", "tool", "patch"), misspelt, strict=True):
        with pytest.raises(TypeError, match=rf"{name}\(\) got an unexpected option .*verifies"):
            wrong()
    assert guard.specs == {}


def test_the_report_has_one_spelling() -> None:
    """CompactionReport.summarized, and no summarised; the audit event keeps its key."""
    guard = shop()
    report = compact(MESSAGES, guard.new_ledger(), keep_recent=1, guard=guard).report
    assert report.summarized == 4
    assert not hasattr(report, "summarised")
    assert report.to_dict()["summarized"] == 4
    assert report.audit_fields()["summarised"] == 4


def test_the_harness_takes_one_spelling() -> None:
    """LossySummarizer(generalise=), plain_compact(m, f, 1), summarise= are type errors."""
    with pytest.raises(TypeError):
        LossySummarizer(generalise=0.5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        plain_compact(MESSAGES, summary, 1)  # type: ignore[call-overload]


@pytest.mark.parametrize("function", [strategies, side_by_side])
def test_the_harness_takes_summarize_only(function: Callable[..., Any]) -> None:
    """strategies(summarise=) and side_by_side(summarise=) are type errors; summarize= works."""
    guard = shop()
    arguments: tuple[Any, ...] = (guard,) if function is strategies else ([MESSAGES], guard)
    with pytest.raises(TypeError):
        function(*arguments, summarise=summary)
    function(*arguments, summarize=summary)
