"""Replay recorded conversations through a guard: what it would cost, and what it would catch.

For each trace, a fresh ledger: user messages go to ``observe_user``, each
recorded call to ``check``, each recorded result to ``record`` (results are
paired with calls by id; where ids repeat, a result answers the latest open
call with its id). That measures the cost: real calls that succeeded in the
recording but that the guard refuses. For each allowed call, variants with
one identifier argument corrupted measure the benefit: the share refused,
per corruption class (see :mod:`guardrail.testing.corruption`).

``compaction=`` is where compaction strategies plug in: at every turn the
conversation so far is compacted, and the identifier arguments of the next
recorded call are looked for, verbatim, in the result.
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from guardrail.audit import Audit
from guardrail.check import Verdict
from guardrail.errors import GuardrailUsageError
from guardrail.guard import Guard
from guardrail.kinds import Kind
from guardrail.ledger import Ledger
from guardrail.paths import EACH, INDEX, KEY, KEYS, VALUES, Step
from guardrail.spec import ParamSpec
from guardrail.testing.corruption import ALL_CLASSES, Context, collision, corrupt
from guardrail.testing.report import (
    GENUINE,
    INVENTED,
    UNVERIFIED,
    Availability,
    Example,
    ReplayReport,
    Stats,
)
from guardrail.testing.traces import Message, ToolCall, Trace, TraceFile, load_trace_file

#: ``(messages so far, ledger) -> the context the agent would see``. The messages are OpenAI
#: chat-completions dicts; the ledger is a copy the strategy may change.
Compaction: TypeAlias = Callable[[list[dict[str, Any]], Ledger], Sequence[Any]]
TraceSource: TypeAlias = "str | os.PathLike[str] | TraceFile | Trace"

_RENAME: Final = "rename"  # a location step: an identifier used as a key of an object


class _Silent:
    """A logger that drops everything: a replay checks thousands of variants."""

    def isEnabledFor(self, level: int) -> bool:
        return False

    def debug(self, *args: Any, **kwargs: Any) -> None:
        return None

    info = warning = debug


def _quiet(guard: Guard) -> Guard:
    """The same guard (kinds, specs) with its audit events silenced."""
    quiet = copy.copy(guard)
    quiet.audit = Audit(_Silent())
    return quiet


def _guard(
    source: Guard | str | os.PathLike[str] | Mapping[str, Any], capacity: int | None
) -> Guard:
    if isinstance(source, Guard):
        if capacity is not None and capacity != source.capacity:
            raise GuardrailUsageError(
                "capacity= applies to a manifest; a Guard brings its own (Guard(capacity=...))"
            )
        return _quiet(source)
    options: dict[str, Any] = {"logger": _Silent()}
    if capacity is not None:
        options["capacity"] = capacity
    return Guard.from_manifest(source, **options)


def _describe(source: Guard | str | os.PathLike[str] | Mapping[str, Any]) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return "<guard>" if isinstance(source, Guard) else "<mapping>"


def _files(traces: TraceSource | Iterable[TraceSource]) -> list[TraceFile]:
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


# -- where identifier arguments sit -----------------------------------------------------------

Location: TypeAlias = tuple[tuple[str, Any], ...]


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _locate(steps: tuple[Step, ...], value: Any, at: Location) -> Iterator[tuple[Location, Any]]:
    """Every leaf a parameter path reaches, with the concrete keys and indexes leading to it."""
    if not steps:
        yield at, value
        return
    (op, arg), rest = steps[0], steps[1:]
    value = _maybe_json(value)
    if op == KEY:
        if isinstance(value, Mapping) and arg in value:
            yield from _locate(rest, value[arg], (*at, (KEY, arg)))
    elif op == EACH:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield from _locate(rest, item, (*at, (INDEX, i)))
        elif value is not None:  # one value where a list was declared: the check reads it too
            yield from _locate(rest, value, at)
    elif op == INDEX:
        if isinstance(value, (list, tuple)) and -len(value) <= arg < len(value):
            yield from _locate(rest, value[arg], (*at, (INDEX, arg % len(value))))
    elif op == VALUES:
        if isinstance(value, Mapping):
            for key, item in value.items():
                yield from _locate(rest, item, (*at, (KEY, key)))
    elif op == KEYS and isinstance(value, Mapping):
        for key in value:
            yield (*at, (_RENAME, key)), key


def _replace(value: Any, at: Location, new: Any) -> Any:
    """A copy of ``value`` with the leaf at ``at`` replaced (JSON-string containers parsed)."""
    if not at:
        return new
    (op, arg), rest = at[0], at[1:]
    value = _maybe_json(value)
    if op == KEY:
        changed = dict(value)
        changed[arg] = _replace(value[arg], rest, new)
        return changed
    if op == INDEX:
        items = list(value)
        items[arg] = _replace(items[arg], rest, new)
        return items
    # _RENAME: the id is a key; keep the order of the object
    return {(new if key == arg else key): item for key, item in value.items()}


@dataclass(frozen=True)
class _Leaf:
    """One identifier argument: the parameter, where it sits, and its text."""

    param: ParamSpec
    kinds: tuple[Kind, ...]
    at: Location
    text: str
    part: int | None  # index within a separator-packed string


def _as_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (str, int)):
        return str(value)
    return None


def _leaves(guard: Guard, call: ToolCall) -> Iterator[_Leaf]:
    spec = guard.specs[call.name]
    arguments = call.arguments or {}
    for param in spec.params:
        kinds = tuple(guard.kinds[name] for name in param.kinds)
        for at, value in _locate(param.path.steps, arguments, ()):
            text = _as_text(value)
            if text is None:
                continue
            if param.sep and isinstance(value, str):
                for index, part in enumerate(value.split(param.sep)):
                    if part.strip():
                        yield _Leaf(param, kinds, at, part.strip(), index)
            else:
                yield _Leaf(param, kinds, at, text, None)


def _variant_arguments(arguments: Mapping[str, Any], leaf: _Leaf, new: str) -> Any:
    if leaf.part is None:
        return _replace(arguments, leaf.at, new)
    original = _locate_one(arguments, leaf.at)
    parts = str(original).split(leaf.param.sep or ",")
    old = parts[leaf.part]
    parts[leaf.part] = old.replace(old.strip(), new)
    return _replace(arguments, leaf.at, (leaf.param.sep or ",").join(parts))


def _locate_one(value: Any, at: Location) -> Any:
    for op, arg in at:
        value = _maybe_json(value)
        value = arg if op == _RENAME else value[arg]
    return value


# -- text of a context ------------------------------------------------------------------------


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif value is not None and not isinstance(value, (bool, int, float)):
        yield from _strings(getattr(value, "__dict__", None) or str(value))


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def has_token(text: str, value: str) -> bool:
    """Whether ``value`` appears in ``text`` as a whole token (not inside a longer id)."""
    if not value:
        return False
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        if (start == 0 or not _word(text[start - 1])) and (
            end == len(text) or not _word(text[end])
        ):
            return True
        start = text.find(value, start + 1)
    return False


# -- the replay of one trace ------------------------------------------------------------------


@dataclass
class _Pending:
    call: ToolCall
    message: int
    verdict: Verdict | None
    reason: str | None  # for a refused call: genuine, invented or unverified


class _Run:
    """Replays one trace into a Stats object."""

    def __init__(
        self,
        guard: Guard,
        trace: Trace,
        stats: Stats,
        *,
        seed: int,
        classes: Sequence[str],
        variants: int,
        compaction: Mapping[str, Compaction],
    ) -> None:
        self.guard = guard
        self.trace = trace
        self.stats = stats
        self.classes = classes
        self.variants = variants
        self.compaction = compaction
        # A seed per trace: a trace's variants do not depend on which traces ran before it.
        self.rng = random.Random(f"{seed}:{trace.id}")
        self.ledger = guard.new_ledger(trace.id)
        self.pending: list[_Pending] = []
        self.outputs: list[str] = []  # text of successful tool outputs so far
        self.compact_next = False

    def run(self) -> None:
        stats = self.stats
        stats.traces += 1
        stats.messages += len(self.trace.messages)
        for index, message in enumerate(self.trace.messages):
            if message.role == "user":
                self.guard.observe_user(message.content, ledger=self.ledger)
                self.compact_next = True
            elif message.role == "assistant" and message.tool_calls:
                if self.compaction and self.compact_next:
                    self.compact_next = False
                    self._availability(index, message)
                for call in message.tool_calls:
                    self._call(index, call)
            elif message.role == "tool":
                self._result(message)
        for pending in self.pending:
            stats.unanswered_calls += 1
            if pending.verdict is not None and not pending.verdict.allowed:
                stats.refused_no_result += 1

    def _example(self, index: int, tool: str, label: str, findings: Iterable[Any]) -> Example:
        return Example(
            trace=self.trace.id,
            path=self.trace.path,
            line=self.trace.line,
            message=index,
            tool=tool,
            label=label,
            findings=tuple(f.to_dict() if hasattr(f, "to_dict") else f for f in findings),
        )

    def _call(self, index: int, call: ToolCall) -> None:
        stats, guard = self.stats, self.guard
        stats.calls += 1
        if call.name not in guard.specs:
            stats.unknown_tools[call.name] += 1
            self.pending.append(_Pending(call, index, None, None))
            return
        if call.arguments is None:
            stats.unreadable_arguments += 1
            self.pending.append(_Pending(call, index, None, None))
            return
        stats.checked += 1
        verdict = guard.check(call.name, call.arguments, ledger=self.ledger)
        reason = None
        if verdict.allowed:
            stats.allowed += 1
            self._corrupt(index, call)
        else:
            stats.refused += 1
            reason = self._reason(verdict)
        self.pending.append(_Pending(call, index, verdict, reason))

    def _reason(self, verdict: Verdict) -> str:
        """Why a refusal may be right: an invented id, or a user-typed one never looked up."""
        outputs = "\n".join(self.outputs)
        reasons = set()
        for finding in verdict.findings:
            if not finding.enforced:
                continue
            if has_token(outputs, finding.value):
                return GENUINE  # a tool returned it: the manifest misses a path, or a bug
            if finding.problem in ("unknown", "mutated", "example"):
                reasons.add(INVENTED)
            elif finding.problem == "unverified":
                reasons.add(UNVERIFIED)
            else:
                return GENUINE
        return INVENTED if INVENTED in reasons else UNVERIFIED

    def _result(self, message: Message) -> None:
        pending = self._answer(message)
        if pending is None:
            self.stats.orphan_results += 1
            return
        verdict = pending.verdict
        if verdict is not None and not verdict.allowed:
            reason = pending.reason or GENUINE
            example = self._example(pending.message, pending.call.name, reason, verdict.findings)
            if message.error:
                self.stats.add_refused_failure(reason, example)
            else:
                self.stats.add_false_refusal(reason, example)
        call = pending.call
        if call.name in self.guard.specs and call.arguments is not None:
            self.guard.record(
                call.name,
                call.arguments,
                message.output,
                error=message.error,
                call_id=call.id,
                ledger=self.ledger,
            )
        if not message.error:
            self.outputs.append(message.content)

    def _answer(self, message: Message) -> _Pending | None:
        """The open call a result answers: the latest with its id (or, with no id, its name)."""
        for i in range(len(self.pending) - 1, -1, -1):
            call = self.pending[i].call
            if message.tool_call_id is not None:
                hit = call.id == message.tool_call_id
            else:
                hit = message.name is None or call.name == message.name
            if hit:
                return self.pending.pop(i)
        return None

    # -- detection ------------------------------------------------------------------------

    def _corrupt(self, index: int, call: ToolCall) -> None:
        stats, guard, ledger = self.stats, self.guard, self.ledger
        arguments = call.arguments or {}
        for leaf in _leaves(guard, call):
            if not any(kind.enforce for kind in leaf.kinds):
                stats.advisory_arguments += 1
                continue
            stats.identifier_arguments += 1
            context = Context(kinds=leaf.kinds, ledger=ledger, rng=self.rng)
            for name in self.classes:
                counts = stats.detection_for(name)
                for _ in range(self.variants):
                    variant = corrupt(name, leaf.text, context)
                    if variant is None:
                        counts.not_applicable += 1
                        continue
                    verdict = guard.check(
                        call.name, _variant_arguments(arguments, leaf, variant), ledger=ledger
                    )
                    hit = None if name == "same_kind" else collision(variant, context)
                    if hit is not None:
                        counts.collisions += 1
                        counts.collisions_refused += not verdict.allowed
                        continue
                    counts.variants += 1
                    if verdict.allowed:
                        if len(counts.misses) < stats.max_examples:
                            label = f"{leaf.param.path.text}: {leaf.text!r} -> {variant!r}"
                            counts.misses.append(self._example(index, call.name, label, ()))
                        continue
                    counts.refused += 1
                    first = next(f for f in verdict.findings if f.enforced)
                    counts.findings[first.problem] += 1

    # -- availability after compaction ----------------------------------------------------

    def _availability(self, index: int, message: Message) -> None:
        context = self.trace.openai_messages(stop=index)
        before = "\n".join(_strings(context))
        leaves = [
            (call, leaf)
            for call in message.tool_calls
            if call.name in self.guard.specs and call.arguments is not None
            for leaf in _leaves(self.guard, call)
        ]
        for name, strategy in self.compaction.items():
            avail = self.stats.availability.setdefault(name, Availability())
            ledger = Ledger.from_dict(self.ledger.to_dict(), kinds=self.guard.kinds)
            compacted = strategy([dict(m) for m in context], ledger)
            after = "\n".join(_strings(list(compacted)))
            avail.compactions += 1
            for call, leaf in leaves:
                if not has_token(before, leaf.text):
                    avail.not_in_context += 1
                    continue
                avail.ids += 1
                if has_token(after, leaf.text):
                    avail.present += 1
                elif len(avail.misses) < self.stats.max_examples:
                    label = f"{leaf.param.path.text}={leaf.text!r} lost by {name}"
                    avail.misses.append(self._example(index, call.name, label, ()))


def replay(
    traces: TraceSource | Iterable[TraceSource],
    guard_or_manifest: Guard | str | os.PathLike[str] | Mapping[str, Any],
    *,
    seed: int = 0,
    limit: int | None = None,
    classes: Sequence[str] = ALL_CLASSES,
    variants: int = 1,
    capacity: int | None = None,
    examples: int = 10,
    compaction: Compaction | Mapping[str, Compaction] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Replay recorded traces through a guard and report its cost and what it catches.

    ``traces``: trace file paths (JSONL or JSON, see :mod:`guardrail.testing.traces`),
    loaded files or traces. ``guard_or_manifest``: a :class:`~guardrail.Guard`
    (its audit events are silenced for the replay) or a manifest (path or
    mapping; a bad one raises :class:`~guardrail.errors.ManifestError` before
    anything runs). ``seed`` makes the corruptions reproducible; ``limit``
    replays at most that many traces; ``classes`` picks corruption classes;
    ``variants`` is the number of variants per class and identifier
    argument; ``capacity`` is the ledger capacity for a manifest-built guard;
    ``examples`` caps the examples kept per list; ``progress(done, total)``
    is called after each trace.

    ``compaction`` is the seam for compaction strategies: a callable
    ``(messages, ledger) -> messages`` (or a mapping of names to them, to
    compare strategies). At every turn, before the first call of the turn,
    the conversation so far (OpenAI chat-completions dicts) and a copy of
    the ledger are handed to each strategy, and the identifier arguments of
    the call are looked for, verbatim, in what it returns. The counts land
    in ``report.availability``; with no compaction it stays empty.
    """
    unknown = [name for name in classes if name not in ALL_CLASSES]
    if unknown:
        raise GuardrailUsageError(
            f"unknown corruption class(es) {', '.join(unknown)}; use {', '.join(ALL_CLASSES)}"
        )
    if not isinstance(variants, int) or variants < 0:
        raise GuardrailUsageError(f"variants must be an integer >= 0, not {variants!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise GuardrailUsageError(f"limit must be an integer >= 0, not {limit!r}")
    guard = _guard(guard_or_manifest, capacity)
    files = _files(traces)
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
        stats = Stats(path=file.path, max_examples=examples, malformed=list(file.malformed))
        for name in classes:
            stats.detection_for(name)
        for trace in group:
            _Run(
                guard,
                trace,
                stats,
                seed=seed,
                classes=classes,
                variants=variants,
                compaction=strategies,
            ).run()
            done += 1
            if progress is not None:
                progress(done, total_traces)
        per_file.append(stats)
    total = Stats(path="total", max_examples=examples)
    for name in classes:
        total.detection_for(name)
    for stats in per_file:
        total.merge(stats)
    settings = {
        "manifest": _describe(guard_or_manifest),
        "seed": seed,
        "limit": limit,
        "classes": list(classes),
        "variants": variants,
        "capacity": guard.capacity,
        "compaction": list(strategies),
    }
    return ReplayReport(
        files=per_file,
        total=total,
        settings=settings,
        seconds=time.perf_counter() - started,
    )
