"""One spelling (American, as Python's own): every old name still works, with a warning."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import guardrail
import guardrail.compaction
import guardrail.replay
import guardrail.testing
from guardrail import Guard, GuardrailUsageError, compact
from guardrail._audit import SilentLogger
from guardrail.compaction import Summarizer, model_summarizer
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


@contextmanager
def renamed(match: str) -> Iterator[list[warnings.WarningMessage]]:
    """Exactly one DeprecationWarning matching ``match``, pointing at this file's line."""
    with pytest.warns(DeprecationWarning, match=match) as seen:
        yield seen.list
    assert [w.filename for w in seen.list] == [__file__] * len(seen.list)


# -- module names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        (guardrail.compaction, "Summariser", "Summarizer"),
        (guardrail.compaction, "model_summariser", "model_summarizer"),
        (guardrail.replay, "LossySummariser", "LossySummarizer"),
    ],
)
def test_an_old_name_warns_and_is_the_new_one(module: Any, old: str, new: str) -> None:
    """guardrail.compaction.Summariser (and the rest) warn, naming the new spelling, and work."""
    with renamed(rf"{module.__name__}\.{old} is now {module.__name__}\.{new}"):
        found = getattr(module, old)
    assert found is getattr(module, new)
    assert old not in module.__all__


def test_from_import_of_an_old_name_warns_at_the_import() -> None:
    """`from guardrail.compaction import model_summariser` warns at that line, and works."""
    with renamed("model_summarizer"):
        from guardrail.compaction import model_summariser
    assert model_summariser is model_summarizer


def test_an_old_name_that_moved_warns_once_with_its_new_home() -> None:
    """guardrail.testing.LossySummariser (moved and respelled) names guardrail.replay's new name."""
    with renamed("guardrail.replay.LossySummarizer") as seen:
        found = guardrail.testing.LossySummariser
    assert found is LossySummarizer
    assert len(seen) == 1


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    """The old-name hook answers only for old names."""
    with pytest.raises(AttributeError, match="no attribute 'Summarise'"):
        guardrail.compaction.Summarise  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_new_names_never_warns() -> None:
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


# -- compact() ------------------------------------------------------------------------------


def test_compact_summarise_keyword_warns_and_works() -> None:
    """compact(..., summarise=f) warns naming summarize=, and uses f."""
    guard = shop()
    with renamed(r"summarise= is now summarize="):
        out = compact(MESSAGES, guard.new_ledger(), summarise=summary, keep_recent=1, guard=guard)  # type: ignore[call-overload]
    assert out.report.summary == "The user wants an order cancelled."


def test_compact_with_both_spellings_is_a_usage_error() -> None:
    """summarise= and summarize= together: which one was meant is unknown."""
    guard = shop()
    with pytest.raises(GuardrailUsageError, match="pass summarize= only"):
        compact(  # type: ignore[call-overload]
            MESSAGES, guard.new_ledger(), summarise=summary, summarize=summary, guard=guard
        )


def test_compact_positional_options_warn_and_work() -> None:
    """compact(messages, ledger, f, 1): the old positional form warns and means the keywords."""
    guard = shop()
    with renamed(r"pass summarize, keep_recent by keyword"):
        out = compact(MESSAGES, guard.new_ledger(), summary, 1, guard=guard)  # type: ignore[call-overload]
    assert out.report.summary == "The user wants an order cancelled."
    assert out.report.keep_recent == 1


def test_compact_positional_and_keyword_for_one_option_is_a_type_error() -> None:
    """An option given both ways, or too many positional arguments, fails as Python would."""
    guard = shop()
    with pytest.raises(TypeError, match="multiple values for argument 'keep_recent'"):
        compact(MESSAGES, guard.new_ledger(), summary, 1, keep_recent=2)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="4 positional arguments at most"):
        compact(MESSAGES, guard.new_ledger(), summary, 1, guard)  # type: ignore[call-overload]


def test_compacts_signature_is_the_new_one() -> None:
    """inspect sees messages, ledger, then keyword-only options spelled the American way."""
    parameters = inspect.signature(compact).parameters
    assert list(parameters)[:3] == ["messages", "ledger", "summarize"]
    assert parameters["summarize"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "summarise" not in parameters


def test_the_reports_old_attribute_warns_and_works() -> None:
    """CompactionReport.summarised warns and is .summarized; to_dict() has the new key."""
    guard = shop()
    report = compact(MESSAGES, guard.new_ledger(), keep_recent=1, guard=guard).report
    with renamed("CompactionReport.summarized"):
        assert report.summarised == report.summarized == 4
    assert "summarised" not in report.to_dict()
    assert report.to_dict()["summarized"] == 4


# -- the replay harness ---------------------------------------------------------------------


def test_lossy_generalise_keyword_warns_and_works() -> None:
    """LossySummarizer(generalise=r) warns naming generalize=, and sets that rate."""
    with renamed(r"LossySummarizer\(\): generalise= is now generalize="):
        lossy = LossySummarizer(generalise=0.5)  # type: ignore[call-arg]
    assert lossy.rates["generalize"] == 0.5
    assert lossy.fate("W1000001") in ("drop", "generalize", "truncate", "mutate", "keep")
    with pytest.raises(GuardrailUsageError, match="pass generalize= only"):
        LossySummarizer(generalise=0.5, generalize=0.5)  # type: ignore[call-arg]


def test_plain_compact_old_forms_warn_and_work() -> None:
    """plain_compact(messages, f, 1) and plain_compact(..., summarise=f) warn and work."""
    with renamed("pass summarize, keep_recent by keyword"):
        positional = plain_compact(MESSAGES, summary, 1)  # type: ignore[call-overload]
    with renamed("summarise= is now summarize="):
        keyword = plain_compact(MESSAGES, summarise=summary, keep_recent=1)  # type: ignore[call-overload]
    assert positional.messages == keyword.messages
    assert keyword.report.summary == "The user wants an order cancelled."


@pytest.mark.parametrize("function", [strategies, side_by_side])
def test_harness_summarise_keyword_warns_and_works(function: Callable[..., Any]) -> None:
    """strategies(summarise=) and side_by_side(summarise=) warn naming summarize=, and work."""
    guard = shop()
    arguments: tuple[Any, ...] = (guard,) if function is strategies else ([MESSAGES], guard)
    with renamed(r"summarise= is now summarize="):
        old = function(*arguments, summarise=summary)
    new = function(*arguments, summarize=summary)
    if function is strategies:
        assert sorted(old) == sorted(new) == ["guardrail", "plain summary"]
    else:
        assert old == new
