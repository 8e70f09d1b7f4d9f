"""The replay report: per trace file, in total, and settings, as data and as assertions.

Its tables (rich) are :mod:`guardrail.replay._render`'s, imported only when
the report is printed: a report used for its numbers never imports rich.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from guardrail.replay._corruption import CLASSES
from guardrail.replay._live_stats import LiveStats
from guardrail.replay._stats import (
    GENUINE,
    REASONS,
    Availability,
    Stats,
    _pct,
    false_refusals_line,
)

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult


@dataclass
class ReplayReport:
    """The result of :func:`guardrail.replay._replay`: per trace file, in total, and settings.

    ``to_dict()`` is the machine form; ``to_text()`` (and printing with
    rich) the readable tables. ``assert_no_false_refusals`` and
    ``assert_detection`` make it a test.
    """

    files: list[Stats]
    total: Stats
    settings: dict[str, Any] = field(default_factory=dict)
    #: Wall-clock seconds of the run; shown in tables, left out of ``to_dict`` (not reproducible).
    seconds: float = 0.0

    # -- numbers ----------------------------------------------------------------------------

    @property
    def false_refusals(self) -> int:
        """Genuine false refusals in all files (the expected ones apart)."""
        return self.total.genuine_false_refusals

    def detection_rate(self, name: str) -> float | None:
        """The share of variants of class ``name`` refused, over all files."""
        stats = self.total.detection.get(name)
        return stats.rate if stats is not None else None

    @property
    def asked(self) -> int:
        """Calls in all files that would wait for the user's approval (no id refused)."""
        return self.total.asked

    @property
    def live(self) -> LiveStats | None:
        """A live replay's counts over all files (None: the recorded results were replayed)."""
        return self.total.live

    @property
    def availability(self) -> dict[str, Availability]:
        """Availability after compaction, per strategy (empty when no compaction was given)."""
        return self.total.availability

    # -- assertions -------------------------------------------------------------------------

    def assert_no_false_refusals(self, *, allow_expected: bool = True) -> None:
        """Fail (AssertionError) when the guard would refuse calls that succeeded.

        Refusals of invented ids and of user-typed ids never looked up are
        expected (the guard is right to refuse them) and pass unless
        ``allow_expected=False``.
        """
        total = self.total
        bad = total.genuine_false_refusals + (
            0 if allow_expected else total.expected_false_refusals
        )
        if not bad:
            return
        reasons = [GENUINE] if allow_expected else list(REASONS)
        lines = [
            false_refusals_line(total),
            f"{bad} call(s) that succeeded in the recording would be refused:",
        ]
        for reason in reasons:
            lines += (
                f"  {example.trace} ({example.path}, message {example.message}) "
                f"{example.tool}: {example.describe()} [{reason}]"
                + (f"\n    {example.hint}" if example.hint else "")
                for example in total.false_refusal_examples.get(reason, [])
            )
        raise AssertionError("\n".join(lines))

    def assert_asks(self, at_most: int) -> None:
        """Fail when more than ``at_most`` calls would wait for the user's approval."""
        total = self.total
        if total.asked <= at_most:
            return
        shown = "\n".join(
            f"  {e.trace} ({e.path}, message {e.message}) {e.tool}: {e.describe()}"
            for e in total.ask_examples
        )
        raise AssertionError(f"{total.asked} call(s) would ask the user, over {at_most}:\n{shown}")

    def assert_live_clean(self) -> None:
        """Fail when, live, the guard broke what works without it (needs :func:`replay_live`).

        Three things fail it: a call that fails behind the guard but not
        without it, an argument the tool received otherwise than the model
        wrote it (the guard never rewrites one), and an id that entered the
        ledger from a result that was a failure. Each is named with its
        examples. Refusals are left to :meth:`assert_no_false_refusals`.
        """
        live = self.total.live
        if live is None:
            raise AssertionError("not a live replay: run replay_live() for this assertion")
        problems = [
            (
                live.failed_behind_guard,
                "call(s) fail behind the guard but not without it",
                live.failed_examples,
            ),
            (
                live.rewritten_arguments,
                "argument(s) received otherwise than the model wrote them",
                live.rewritten_examples,
            ),
            (
                live.harvested_ids,
                "id(s) entered the ledger from failed results",
                live.harvested_examples,
            ),
        ]
        lines = []
        for count, what, examples in problems:
            if count:
                lines.append(f"{count} {what}:")
                lines += (
                    f"  {e.trace} (message {e.message}) {e.tool}: {e.describe()}" for e in examples
                )
        if lines:
            raise AssertionError("\n".join(lines))

    def assert_detection(self, at_least: float = 0.99, *, classes: Sequence[str] = CLASSES) -> None:
        """Fail when a corruption class is refused less often than ``at_least``."""
        short = []
        for name in classes:
            rate = self.detection_rate(name)
            if rate is not None and rate < at_least:
                stats = self.total.detection[name]
                missed = "; ".join(
                    f"{m.trace} {m.tool}: {m.describe() or m.label}" for m in stats.misses[:3]
                )
                short.append(f"  {name}: {_pct(rate)} of {stats.variants} refused ({missed})")
        if short:
            raise AssertionError(f"detection below {_pct(at_least)} for:\n" + "\n".join(short))

    # -- output -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-safe: settings, the total and one entry per file."""
        return {
            "settings": dict(self.settings),
            "total": self.total.to_dict(),
            "files": [stats.to_dict() for stats in self.files],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def to_text(self, *, width: int = 100) -> str:
        """The readable tables as plain text (see :mod:`guardrail.replay._render`)."""
        from guardrail.replay._render import as_text

        return as_text(self, width=width)

    def __str__(self) -> str:
        return self.to_text()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from guardrail.replay._render import renderables

        yield from renderables(self)
