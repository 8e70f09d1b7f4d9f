"""A pytest plugin: assert on your own recorded traces in a few lines.

Installed with guardrail (a ``pytest11`` entry point), it gives every test
suite the ``guardrail_replay`` fixture::

    def test_the_guard_on_our_traces(guardrail_replay):
        guard = Guard.from_manifest("tools.toml")
        report = guardrail_replay("traces/*.jsonl", guard)
        report.assert_no_false_refusals()
        report.assert_detection(at_least=0.99)
        report.assert_asks(at_most=0)   # calls that would wait for the user's approval

The fixture takes what :func:`guardrail.replay.replay` takes (paths may be
glob patterns) and returns its :class:`~guardrail.replay.ReplayReport`.
When the test fails, the report's tables are shown with the failure.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pytest

from guardrail.errors import GuardrailUsageError

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard
    from guardrail.replay import Agent, Compaction, ReplayReport, TraceSource

_PATTERN_CHARS = frozenset("*?[")


class GuardrailReplay(Protocol):
    """The ``guardrail_replay`` fixture: :func:`guardrail.replay.replay`, with glob patterns.

    The options are :func:`~guardrail.replay.replay`'s, spelled out so a type
    checker sees them; their defaults are replay's.
    """

    def __call__(
        self,
        traces: TraceSource | Iterable[TraceSource],
        guard: Guard,
        *,
        seed: int = ...,
        limit: int | None = ...,
        classes: Sequence[str] = ...,
        variants: int = ...,
        examples: int = ...,
        compaction: Compaction | Mapping[str, Compaction] | None = ...,
        agent: Agent | None = ...,
        tools: Sequence[Mapping[str, Any]] | None = ...,
        progress: Callable[[int, int], None] | None = ...,
        approve: Literal["all", "none"] | None = ...,
    ) -> ReplayReport: ...


def expand(traces: Any) -> list[Any]:
    """Trace sources with glob patterns expanded (sorted).

    A pattern that matches nothing is an error, so a moved folder fails the test instead of
    passing on zero traces.
    """
    items = [traces] if isinstance(traces, (str, os.PathLike)) else list(traces)
    expanded: list[Any] = []
    for item in items:
        if isinstance(item, str) and _PATTERN_CHARS & set(item):
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise GuardrailUsageError(
                    f"no trace files match {item!r} (relative to {Path.cwd()})"
                )
            expanded.extend(matches)
        else:
            expanded.append(item)
    return expanded


@pytest.fixture
def guardrail_replay(request: pytest.FixtureRequest) -> GuardrailReplay:
    """Replay recorded traces through a guard and return the report."""
    from guardrail.replay import replay

    runs = 0

    def run(
        traces: TraceSource | Iterable[TraceSource], guard: Guard, **options: Any
    ) -> ReplayReport:
        nonlocal runs
        report = replay(expand(traces), guard, **options)
        runs += 1
        # Shown with the failure of the test (pytest prints captured sections of failed tests).
        title = "guardrail replay" if runs == 1 else f"guardrail replay {runs}"
        request.node.add_report_section("call", title, report.to_text(width=120))
        return report

    return run
