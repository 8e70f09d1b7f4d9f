"""Replay recorded conversations through a guard: what it would cost, and what it would catch.

For each trace, a fresh ledger: user messages go to ``observe_user``, each
recorded call to ``check``, each recorded result to ``record`` (results are
paired with calls by id; where ids repeat, a result answers the latest open
call with its id). That measures the cost: real calls that succeeded in the
recording but that the guard refuses. For each allowed call, variants with
one identifier argument corrupted measure the benefit: the share refused,
per corruption class (see :mod:`guardrail.replay._corruption`).

``compaction=`` is where compaction strategies plug in: before each recorded
call (each model turn) the conversation so far is compacted, and the
identifier arguments of the call are looked for, verbatim, in the result.
``agent=`` is the decisive test: an agent is asked for its next call on the
uncompacted and on each compacted context, and their ids are compared.
A call that would wait for the user is counted apart (``approve=``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.replay._agent import Agent, Asker, agent_name, tool_definitions
from guardrail.replay._corruption import ALL_CLASSES
from guardrail.replay._report import ReplayReport
from guardrail.replay._run import Compaction, TraceRun
from guardrail.replay._stats import (
    Stats,
)
from guardrail.replay._traces import (
    Malformed,
    Trace,
    TraceFile,
    load_trace_file,
)

TraceSource: TypeAlias = "str | os.PathLike[str] | TraceFile | Trace"
"""What replay takes as traces: a trace file's path, a loaded file, or one trace."""


def files_of(traces: TraceSource | Iterable[TraceSource]) -> list[TraceFile]:
    """The trace files a replay reads: paths loaded, loose traces gathered into one file."""
    if isinstance(traces, (str, os.PathLike, TraceFile, Trace)):
        traces = [traces]
    files: list[TraceFile] = []
    loose: list[Trace] = []
    for item in traces:
        if isinstance(item, TraceFile):
            files.append(item)
        elif isinstance(item, Trace):
            loose.append(item)
        elif isinstance(item, (str, os.PathLike)):
            files.append(load_trace_file(item))
        else:
            raise GuardrailUsageError(
                f"replay takes trace file paths, TraceFile or Trace objects, not "
                f"{type(item).__name__}"
            )
    if loose:
        files.append(TraceFile("<memory>", tuple(loose)))
    return files


def _stats(
    path: str, examples: int, classes: Sequence[str], malformed: Iterable[Malformed] = ()
) -> Stats:
    """Empty counts, with the detection classes in the order asked."""
    stats = Stats(path=path, max_examples=examples, malformed=list(malformed))
    for name in classes:
        stats.detection_for(name)
    return stats


def replay(
    traces: TraceSource | Iterable[TraceSource],
    guard: Guard,
    *,
    seed: int = 0,
    limit: int | None = None,
    classes: Sequence[str] = ALL_CLASSES,
    variants: int = 1,
    examples: int = 10,
    compaction: Compaction | Mapping[str, Compaction] | None = None,
    agent: Agent | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    progress: Callable[[int, int], None] | None = None,
    approve: Literal["all", "none"] | None = None,
) -> ReplayReport:
    """Replay recorded traces through a guard and report its cost and what it catches.

    Before each recorded call (each model turn), the conversation so far
    (OpenAI chat-completions dicts) and a copy of the ledger are handed to
    each compaction strategy, and the identifier arguments of the call are
    looked for, verbatim, in what it returns: the ledger ids (values an
    earlier successful tool result produced that the ledger still holds)
    are measured, the others counted apart (see
    :class:`~guardrail.replay.Availability`). At the same points an agent,
    when given, is asked for its call on the uncompacted context and on
    each compacted one: ``report.total.agent`` compares them, and
    ``report.total.agent_recorded`` the uncompacted call with the recorded.

    Args:
        traces: Trace file paths (JSONL or JSON, see :func:`load_trace_file`),
            loaded files or traces.
        guard: The guard to replay them through (its audit events are
            silenced for the replay); for a manifest file,
            ``Guard.from_manifest(path)``.
        seed: Makes the corruptions reproducible.
        limit: Replay at most that many traces.
        classes: The corruption classes to generate (default: all).
        variants: Variants per class and identifier argument.
        examples: The most examples kept per list of the report.
        compaction: A strategy ``(messages, ledger) -> messages``, or a
            mapping of names to them (:func:`strategies` gives guardrail's
            and a plain summary's); its counts land in
            ``report.availability``.
        agent: ``(messages, tools) -> {"name", "arguments"} | None`` (see
            :func:`reference_agent`, :func:`openai_agent`).
        tools: The OpenAI function tools the agent is shown (default:
            derived from the guard's specs by :func:`tool_definitions`).
        progress: Called as ``progress(done, total)`` after each trace.
        approve: What the user answers a call that would wait for approval:
            ``"all"`` (approved, then checked again), ``"none"`` (declined:
            refused), or None (counted as asked, neither allowed nor refused).
            ``report.total.asked`` counts such calls either way.
    """
    unknown = [name for name in classes if name not in ALL_CLASSES]
    if unknown:
        raise GuardrailUsageError(
            f"unknown corruption class(es) {', '.join(unknown)}; use {', '.join(ALL_CLASSES)}"
        )
    if not isinstance(variants, int) or variants < 0:
        raise GuardrailUsageError(f"variants must be an integer >= 0, not {variants!r}")
    if approve not in (None, "all", "none"):
        raise GuardrailUsageError(f"approve is 'all', 'none' or None, not {approve!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise GuardrailUsageError(f"limit must be an integer >= 0, not {limit!r}")
    given: object = guard
    if not isinstance(given, Guard):
        raise GuardrailUsageError(
            "replay() takes a Guard (for a manifest file, Guard.from_manifest(path)), "
            f"not {type(given).__name__}"
        )
    guard, described = given.silenced(), "<guard>"
    if agent is not None and not callable(agent):
        raise GuardrailUsageError(f"agent must be callable (messages, tools), not {agent!r:.80}")
    asker = (
        None
        if agent is None
        else Asker(agent, [dict(t) for t in tools] if tools else tool_definitions(guard))
    )
    files = files_of(traces)
    strategies: dict[str, Compaction] = (
        {}
        if compaction is None
        else dict(compaction)
        if isinstance(compaction, Mapping)
        else {"compaction": compaction}
    )
    started = time.perf_counter()
    planned = [file.traces for file in files]
    if limit is not None:
        left = limit
        for i, group in enumerate(planned):
            planned[i] = group[:left]
            left -= len(planned[i])
    total_traces = sum(len(group) for group in planned)
    per_file: list[Stats] = []
    done = 0
    for file, group in zip(files, planned, strict=True):
        stats = _stats(file.path, examples, classes, file.malformed)
        for trace in group:
            TraceRun(
                guard,
                trace,
                stats,
                seed=seed,
                classes=classes,
                variants=variants,
                compaction=strategies,
                agent=asker,
                approve=approve,
            ).run()
            done += 1
            if progress is not None:
                progress(done, total_traces)
        per_file.append(stats)
    total = _stats("total", examples, classes)
    for stats in per_file:
        total.merge(stats)
    settings = {
        "manifest": described,
        "seed": seed,
        "limit": limit,
        "classes": list(classes),
        "variants": variants,
        "capacity": guard.capacity,
        "compaction": list(strategies),
        "agent": None if agent is None else agent_name(agent),
    }
    if approve is not None:
        settings["approve"] = approve
    return ReplayReport(
        files=per_file,
        total=total,
        settings=settings,
        seconds=time.perf_counter() - started,
    )
