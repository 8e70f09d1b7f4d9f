"""The live replay: recorded calls run through the real tools, without and with the guard.

A replay of recorded results (:func:`guardrail.replay.replay`) sees what the
guard decides, not what the tool then does with it. :func:`replay_live`
runs the tools. For each recorded conversation it opens a fresh environment
and calls each recorded call's tool straight (the baseline), then opens
another and runs the same conversation behind the guard, the way a runtime
does (:class:`~guardrail.integrations.loops.Toolbox`, re-prompt mode):
the user's messages observed, each assistant message's calls checked, run
and recorded. It reports the counts a replay has (calls, refused, false
refusals by reason) and, in ``report.total.live``
(:class:`~guardrail.replay.LiveStats`), what only running the tools shows:
calls refused that succeeded, calls that fail behind the guard but not
without it (with each argument as the model wrote it and as the tool
received it), arguments rewritten, ids harvested from failed results, and
what a replay of the recorded results refuses of the same calls.

:func:`load_live` reads the ``--live module:attribute`` of the command line.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias

from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.replay._live_call import Tools
from guardrail.replay._live_run import LiveRun
from guardrail.replay._live_stats import LiveStats
from guardrail.replay._replay import TraceSource, files_of
from guardrail.replay._report import ReplayReport
from guardrail.replay._stats import Stats

ToolSource: TypeAlias = "Tools | Callable[..., Tools]"
"""What a live replay takes as tools: a function returning a fresh environment's, or a mapping."""


class _Checked:
    """An audit listener keeping the guard's ``guardrail.call_checked`` events, in order."""

    def __init__(self) -> None:
        # Refusals are warnings and asks info: allowed reads (debug) are never built.
        self.events: Mapping[str, int] = {"guardrail.call_checked": logging.INFO}
        self.seen: list[Mapping[str, Any]] = []

    def __call__(self, event: str, level: int, fields: Mapping[str, Any]) -> None:
        if event in self.events and level >= self.events[event]:
            self.seen.append(dict(fields))


def _guard(given: object, capacity: int | None) -> tuple[Guard, str]:
    """The guard to run behind (re-prompt mode, as a runtime's loop runs it), and its name."""
    if isinstance(given, Guard):
        if given.mode != "reprompt":
            raise GuardrailUsageError(
                "the live replay runs the guard as a runtime does, in re-prompt mode (a refusal "
                f"goes back to the model); this guard's mode is {given.mode!r}: build it with "
                "Guard(mode='reprompt') or Guard.from_manifest(path, mode='reprompt'), or pass "
                "the manifest"
            )
        if capacity is not None:
            raise GuardrailUsageError("capacity= goes with a manifest; a Guard has its own")
        return given, "<guard>"
    if isinstance(given, (str, os.PathLike, Mapping)):
        options: dict[str, Any] = {"mode": "reprompt"}
        if capacity is not None:
            options["capacity"] = capacity
        name = os.fspath(given) if isinstance(given, (str, os.PathLike)) else "<manifest>"
        return Guard.from_manifest(given, **options), name
    raise GuardrailUsageError(
        f"replay_live() takes a Guard in re-prompt mode or a manifest, not {type(given).__name__}"
    )


def _fresh(tools: ToolSource, environment: Callable[[], Any] | None) -> Callable[[], Tools]:
    """A function returning the tools of a fresh environment, from what the caller gave."""
    if isinstance(tools, Mapping):
        if environment is not None:
            raise GuardrailUsageError(
                "with environment=, give tools as a function of the environment "
                "(tools(environment()) -> {name: callable}): a mapping of tools cannot be given "
                "a fresh one"
            )
        fixed = tools
        return lambda: fixed
    if not callable(tools):
        raise GuardrailUsageError(
            "tools is a mapping of tool name to callable, or a function returning one for a "
            f"fresh environment; not {type(tools).__name__}"
        )
    if environment is None:
        return tools
    if not callable(environment):
        raise GuardrailUsageError(
            f"environment is a function returning a fresh environment, not {environment!r:.80}"
        )
    made = tools
    return lambda: made(environment())


def replay_live(
    traces: TraceSource | Iterable[TraceSource],
    guard: Guard | str | os.PathLike[str] | Mapping[str, Any],
    tools: ToolSource,
    *,
    environment: Callable[[], Any] | None = None,
    schemas: Mapping[str, Any] | Sequence[Any] | None = None,
    limit: int | None = None,
    examples: int = 10,
    capacity: int | None = None,
    approve: Literal["all", "none"] = "all",
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Run recorded conversations through the real tools, without and with the guard.

    Each conversation runs twice, each time on a fresh environment: its
    recorded calls straight to the tools, then the conversation behind the
    guard (user messages observed, each assistant message answered by a
    :class:`~guardrail.integrations.loops.Toolbox`, re-prompt mode), so what
    a call changes is there for the calls after it. The report has a
    replay's counts where they apply (calls, refused, false refusals by
    reason; no detection, no compaction) and, in ``report.total.live``,
    the live counts (see :class:`~guardrail.replay.LiveStats`).

    Args:
        traces: Trace file paths, loaded files or traces, as for :func:`replay`.
        guard: A guard in ``reprompt`` mode (its audit is silenced for the run; its
            sessions are used and deleted), or a manifest (path or mapping).
        tools: The tools of a fresh environment: a function returning
            ``{name: callable}``, called with ``environment()`` when
            ``environment`` is given, else with nothing; or a mapping of
            tools that keep no state between conversations.
        environment: A function returning a fresh environment (a database
            copy, say), handed to ``tools``; called twice per conversation.
        schemas: The tools' input schemas, or the tool definitions sent to
            the API, as :class:`~guardrail.integrations.loops.Toolbox` takes
            them (default: from each function's signature).
        limit: Run at most that many conversations.
        examples: The most examples kept per list of the report.
        capacity: The ledger capacity of a guard built from a manifest.
        approve: What the user answers a call that waits for approval:
            ``"all"`` (approved, then run) or ``"none"`` (declined: refused).
        progress: Called as ``progress(done, total)`` after each conversation.
    """
    if approve not in ("all", "none"):
        raise GuardrailUsageError(f"approve is 'all' or 'none', not {approve!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise GuardrailUsageError(f"limit must be an integer >= 0, not {limit!r}")
    built, described = _guard(guard, capacity)
    fresh = _fresh(tools, environment)
    quiet = built.silenced()
    checked = _Checked()
    unsubscribe = quiet.audit.subscribe(checked)
    files = files_of(traces)
    planned = [file.traces for file in files]
    if limit is not None:
        left = limit
        for i, group in enumerate(planned):
            planned[i] = group[:left]
            left -= len(planned[i])
    total_traces = sum(len(group) for group in planned)
    started = time.perf_counter()
    per_file: list[Stats] = []
    done = 0
    try:
        for file, group in zip(files, planned, strict=True):
            stats = Stats(path=file.path, max_examples=examples, malformed=list(file.malformed))
            stats.live = LiveStats(max_examples=examples)
            for trace in group:
                LiveRun(
                    quiet,
                    trace,
                    stats,
                    tools=fresh,
                    schemas=schemas,
                    approve=approve,
                    session=f"guardrail-live-{done}:{trace.id}",
                    checked=checked.seen,
                ).run()
                done += 1
                if progress is not None:
                    progress(done, total_traces)
            per_file.append(stats)
    finally:
        unsubscribe()
    total = Stats(path="total", max_examples=examples)
    total.live = LiveStats(max_examples=examples)
    for stats in per_file:
        total.merge(stats)
    settings: dict[str, Any] = {
        "manifest": described,
        "live": _name(tools),
        "limit": limit,
        "capacity": quiet.capacity,
        "approve": approve,
    }
    return ReplayReport(
        files=per_file, total=total, settings=settings, seconds=time.perf_counter() - started
    )


def _name(tools: object) -> str:
    if isinstance(tools, Mapping):
        return "<tools>"
    module = getattr(tools, "__module__", None)
    name = getattr(tools, "__qualname__", None) or getattr(tools, "__name__", None)
    return f"{module}:{name}" if module and name else repr(tools)[:80]


def load_live(spec: str) -> tuple[ToolSource, Callable[[], Any] | None, Any]:
    """The tools, environment and schemas named by ``module:attribute`` (or a bare module).

    The attribute (dotted, or the module itself) is either a function
    returning the tools of a fresh environment, ``{name: callable}``, or an
    object with ``tools`` (such a function, taking the environment when the
    object has one) and optionally ``environment`` (a function returning a
    fresh environment) and ``schemas`` (the tool definitions). The current
    directory is searched first, as ``python -m`` would.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise GuardrailUsageError(
            f"--live takes module:attribute (e.g. examples.live_shop:fresh), not {spec!r}"
        )
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise GuardrailUsageError(
            f"cannot import the live environment's module {module_name!r}: {exc}"
        ) from None
    for name in attribute.split(".") if attribute else ():
        if not hasattr(target, name):
            raise GuardrailUsageError(f"the module {module_name!r} has no {attribute!r}")
        target = getattr(target, name)
    if hasattr(target, "tools"):
        return target.tools, getattr(target, "environment", None), getattr(target, "schemas", None)
    if callable(target):
        return target, None, None
    raise GuardrailUsageError(
        f"{spec} is neither a function returning the tools of a fresh environment nor an "
        "object with tools (and environment, schemas)"
    )
