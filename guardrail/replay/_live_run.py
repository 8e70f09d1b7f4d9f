"""One recorded conversation run live: its calls through the real tools, without and with the guard.

Each side gets a fresh environment (its own tools): the baseline calls each
tool straight with the recorded arguments; the guarded side observes the
user's messages and answers each recorded assistant message with
:class:`~guardrail.integrations.loops.Toolbox`, as a hand-written loop does
(re-prompt mode), so what an earlier call changed is there for a later one
on both sides, as it was when the conversation was recorded. Each tool is
wrapped to keep what it received; the guard's audit says why a call was
refused; the ledger, read before each tool runs and after the message,
says which ids a call brought in.

Whether a call failed is decided in one place for both sides alike,
:func:`guardrail.replay._live_call.call_failed`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from guardrail._data.entry import tier_rank
from guardrail._data.text import shorten
from guardrail._data.verdict import Finding, Problem
from guardrail._guard.facade import Guard
from guardrail._transcript.result_text import is_refusal, split_seal
from guardrail.errors import GuardrailUsageError, RepromptLimitExceeded
from guardrail.replay._arguments import leaves
from guardrail.replay._live_call import (
    Ran,
    Snapshot,
    Tools,
    call_failed,
    recording,
    rewrites,
)
from guardrail.replay._live_stats import (
    FAILED,
    NOT_RUN,
    REFUSED,
    SUCCEEDED,
    LiveExample,
    LiveStats,
)
from guardrail.replay._origin import Returned
from guardrail.replay._run import TraceRun, answered, refusal_reason
from guardrail.replay._stats import Example, Stats
from guardrail.replay._traces import Message, ToolCall, Trace

if TYPE_CHECKING:
    from guardrail.integrations.loops import Toolbox, ToolResults


@dataclass
class _Planned:
    """One recorded call: where it is, and how it ended in the recording (None: no result)."""

    message: int
    call: ToolCall
    recorded: str | None = None
    #: The recorded results before its message: their texts, and the successful ones.
    seen: int = 0
    returned: int = 0


@dataclass
class _Guarded:
    """How a call ended behind the guard."""

    outcome: str
    text: str = ""
    ran: Ran | None = None
    findings: tuple[Finding, ...] = ()
    #: Ids that entered the ledger from the call's result (added, or confirmed).
    ids: tuple[str, ...] = ()


class LiveRun:
    """Runs one trace live, both sides, into a :class:`Stats` and its :class:`LiveStats`."""

    def __init__(
        self,
        guard: Guard,
        trace: Trace,
        stats: Stats,
        *,
        tools: Callable[[], Tools],
        schemas: Mapping[str, Any] | Sequence[Any] | None,
        approve: str,
        session: str,
        checked: list[Mapping[str, Any]],
    ) -> None:
        self.guard = guard
        self.trace = trace
        self.stats = stats
        assert stats.live is not None
        self.live: LiveStats = stats.live
        self.tools = tools
        self.schemas = schemas
        self.approve = approve
        self.session = session
        #: The guard's ``guardrail.call_checked`` events, as its audit sends them.
        self.checked = checked
        self.plan: list[_Planned] = []
        #: The text of every recorded result in order, and the successful ones.
        self.seen: list[str] = []
        self.returned: list[Returned] = []

    # -- the run --------------------------------------------------------------------------

    def run(self) -> None:
        self._read()
        tools = self._tools()
        runnable = self._runnable(tools)
        unguarded = self._unguarded(runnable, tools)
        guarded = self._guarded(runnable)
        self._compare(runnable, unguarded, guarded)
        replayed = Stats(path=self.stats.path, max_examples=0)
        TraceRun(
            self.guard,
            self.trace,
            replayed,
            seed=0,
            classes=(),
            variants=0,
            compaction={},
            agent=None,
            approve=self.approve,
        ).run()
        self.live.replay_refused += replayed.refused

    def _read(self) -> None:
        """The recorded calls in order, each with its recorded outcome; the counts of input."""
        stats = self.stats
        stats.traces += 1
        stats.messages += len(self.trace.messages)
        self.live.conversations += 1
        open_calls: list[_Planned] = []
        for index, message in enumerate(self.trace.messages):
            if message.role == "assistant":
                for call in message.tool_calls:
                    made = _Planned(index, call, None, len(self.seen), len(self.returned))
                    self.plan.append(made)
                    open_calls.append(made)
            elif message.role == "tool":
                found = answered(open_calls, message)
                if found is None:
                    stats.orphan_results += 1
                else:
                    found.recorded = FAILED if message.error else SUCCEEDED
                self.seen.append(message.content)
                if not message.error:
                    name = found.call.name if found is not None else message.name or ""
                    self.returned.append(Returned(index, name, message.output))
        stats.unanswered_calls += len(open_calls)

    def _runnable(self, tools: Tools) -> list[_Planned]:
        """The calls that run live: readable arguments, a tool the environment has."""
        names = set(tools)
        runnable = []
        for planned in self.plan:
            call = planned.call
            if call.arguments is None:
                continue
            if call.name not in names:
                self.live.missing_tools[call.name] += 1
                continue
            runnable.append(planned)
        return runnable

    def _tools(self) -> Tools:
        """The tools of a fresh environment."""
        tools = self.tools()
        if not isinstance(tools, Mapping) or not all(callable(t) for t in tools.values()):
            raise GuardrailUsageError(
                "the live replay's tools are a mapping of tool name to callable (the tools of "
                f"one fresh environment); got {type(tools).__name__}"
            )
        for name, tool in tools.items():
            if inspect.iscoroutinefunction(tool) or inspect.iscoroutinefunction(
                getattr(tool, "__call__", None)  # noqa: B004 - an async callable object
            ):
                raise GuardrailUsageError(
                    f"{name} is async; the live replay runs synchronous tools (wrap it: "
                    "lambda **kw: asyncio.run(tool(**kw)))",
                    tool=name,
                )
        return tools

    # -- the baseline: each call straight to the tool ----------------------------------------

    def _unguarded(self, runnable: list[_Planned], tools: Tools) -> dict[int, Ran]:
        """Each call straight to the tool of ``tools`` (a fresh environment's), in order."""
        out: dict[int, Ran] = {}
        for planned in runnable:
            # As a runtime hands them: parsed from the JSON the model wrote.
            arguments = json.loads(json.dumps(planned.call.arguments, default=str))
            ran = Ran(planned.call.name, dict(arguments))
            try:
                ran.result = tools[planned.call.name](**arguments)
            except Exception as exc:
                ran.raised = exc
            out[id(planned)] = ran
        return out

    # -- behind the guard: each assistant message through the toolbox ---------------------

    def _snapshot(self) -> Snapshot:
        return {
            (entry.kind, entry.key): (entry.value, entry.verified, tier_rank(entry.tier))
            for entry in self.guard.ledger
        }

    def _guarded(self, runnable: list[_Planned]) -> dict[int, _Guarded]:
        # Here, not at the top: the loop's schema validation (jsonschema) loads when a live
        # replay runs, not with `import guardrail.replay`.
        from guardrail.integrations.loops import Toolbox

        ran: list[Ran] = []
        tools = {
            name: recording(name, function, ran, self._snapshot)
            for name, function in self._tools().items()
        }
        toolbox = Toolbox(self.guard, tools, schemas=self.schemas)
        by_message: dict[int, list[_Planned]] = {}
        for planned in runnable:
            by_message.setdefault(planned.message, []).append(planned)
        out: dict[int, _Guarded] = {}
        guard = self.guard
        try:
            with guard.session(self.session):
                for index, message in enumerate(self.trace.messages):
                    if message.role == "user":
                        guard.observe_user(message.content)
                    elif index in by_message:
                        out.update(self._message(toolbox, index, message, by_message[index], ran))
        finally:
            guard.end_session(self.session, delete=True)
        return out

    def _message(
        self,
        toolbox: Toolbox,
        index: int,
        message: Message,
        calls: list[_Planned],
        ran: list[Ran],
    ) -> dict[int, _Guarded]:
        """Answer one recorded assistant message behind the guard; how each of its calls ended."""
        ids = [f"live-{index}-{i}" for i in range(len(calls))]
        sent = {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": planned.call.name,
                        "arguments": json.dumps(planned.call.arguments, default=str),
                    },
                }
                for call_id, planned in zip(ids, calls, strict=True)
            ],
        }
        start = len(ran)
        self.checked.clear()
        try:
            results = toolbox.run(sent, shape="openai_chat")
            for _ in range(3):  # an approved call is checked again; a declined one is refused
                if not results.waiting:
                    break
                self._asked(index, results)
                self.checked.clear()
                results = toolbox.run(sent, shape="openai_chat")
        except RepromptLimitExceeded:
            return self._stopped(calls)
        # Each answer's text, its seal apart (a guard with a secret seals what it returns).
        answers = {
            answer.get("tool_call_id"): split_seal(str(answer.get("content", "")))[0]
            for answer in results
        }
        end = self._snapshot()
        mine = ran[start:]
        # What a call brought in: the ledger when the next tool ran, or after the message.
        afters = [*(later.before for later in mine[1:]), end][: len(mine)]
        runs = list(zip(mine, afters, strict=True))
        refusals = self._refusals()
        out: dict[int, _Guarded] = {}
        for call_id, planned in zip(ids, calls, strict=True):
            text = answers.get(call_id, "")
            # The tools ran in the order of their calls; a call's run answers it with its text.
            if runs and runs[0][0].tool == planned.call.name and runs[0][0].answer == text:
                one, after = runs.pop(0)
                gained = _gained(one.before or {}, after or {})
                outcome = FAILED if call_failed(self.guard, one) else SUCCEEDED
                out[id(planned)] = _Guarded(outcome, text, ran=one, ids=gained)
            elif is_refusal(text):
                out[id(planned)] = _Guarded(
                    REFUSED, text, findings=self._findings(planned, refusals)
                )
            else:  # answered by the loop without running: no such tool, invalid arguments
                out[id(planned)] = _Guarded(NOT_RUN, text)
        if runs:  # every tool run answers one call: else what ran is not what was counted
            raise AssertionError(f"{self.trace.id}, message {index}: a tool ran for no call")
        return out

    def _stopped(self, calls: list[_Planned]) -> dict[int, _Guarded]:
        """A message the re-prompt limit stopped: no tool of it ran.

        The model was re-prompted too often this turn; the loop raised before
        running anything. The calls refused on the way (the last one too) are
        refused, each taking the next refusal of its tool; the others did not run.
        """
        self.live.stopped += 1
        left = [event for event in self.checked if event.get("outcome") == REFUSED]
        out: dict[int, _Guarded] = {}
        for planned in calls:
            if left and left[0].get("tool") == planned.call.name:
                findings = self._findings(planned, iter([left.pop(0)]))
                out[id(planned)] = _Guarded(REFUSED, findings=findings)
            else:
                out[id(planned)] = _Guarded(NOT_RUN, "stopped by the re-prompt limit")
        return out

    def _refusals(self) -> Iterator[Mapping[str, Any]]:
        """The audit events of the refused calls of the message, in order."""
        return iter([event for event in self.checked if event.get("outcome") == REFUSED])

    def _findings(
        self, planned: _Planned, refusals: Iterator[Mapping[str, Any]]
    ) -> tuple[Finding, ...]:
        """A refused call's findings, from its audit event (one per refused call, in order)."""
        event = next(refusals, None)
        if event is None:
            return ()
        name = planned.call.name
        spec = self.guard.specs.get(name)
        kinds_of: dict[str, tuple[str, ...]] = {}
        for param in spec.params if spec is not None else ():
            kinds_of[param.name] = kinds_of.get(param.name, ()) + param.kinds
        found = []
        problems, params = event.get("problems") or [], event.get("params") or []
        values, roles = event.get("values") or [], event.get("nearest_roles") or []
        for i, (problem, param, value) in enumerate(zip(problems, params, values, strict=False)):
            kinds = kinds_of.get(param, ())
            kind = event.get("kind") if i == 0 else (kinds[0] if kinds else "")
            enforced = not kinds or any(
                self.guard.kinds[k].enforce for k in kinds if k in self.guard.kinds
            )
            found.append(
                Finding(
                    problem=_problem(problem),
                    tool=name,
                    param=str(param),
                    value=str(value),
                    kind=str(kind or ""),
                    nearest_role=roles[i] if i < len(roles) else None,
                    enforced=enforced,
                )
            )
        return tuple(found)

    def _asked(self, index: int, results: ToolResults) -> None:
        """Count the calls that wait for the user, then answer every request as told."""
        for event in self.checked:
            if event.get("outcome") != "ask":
                continue
            tiers = list(event.get("tiers") or [])
            shown = tuple(
                {"problem": tier, "param": param, "value": value, "nearest_role": None}
                for tier, param, value in zip(
                    tiers, event.get("params") or [], event.get("values") or [], strict=False
                )
            )
            example = self._example(index, str(event.get("tool")), "ask", shown)
            self.stats.add_ask(tiers, example)
            if self.approve == "all":
                self.stats.approved += 1
            else:
                self.stats.declined += 1
        for request in results.approvals:
            (self.guard.approve if self.approve == "all" else self.guard.deny)(request)

    # -- the comparison ----------------------------------------------------------------------

    def _example(
        self, index: int, tool: str, label: str, findings: Sequence[Mapping[str, Any]] = ()
    ) -> Example:
        trace = self.trace
        return Example(trace.id, trace.path, trace.line, index, tool, label, tuple(findings))

    def _live_example(self, planned: _Planned, label: str, **more: Any) -> LiveExample:
        trace = self.trace
        return LiveExample(
            trace.id, trace.path, trace.line, planned.message, planned.call.name, label, **more
        )

    def _compare(
        self,
        runnable: list[_Planned],
        unguarded: Mapping[int, Ran],
        guarded: Mapping[int, _Guarded],
    ) -> None:
        stats, guard = self.stats, self.guard
        runs = {id(planned) for planned in runnable}
        for planned in self.plan:
            call = planned.call
            stats.calls += 1
            spec = guard.specs.get(call.name)
            if spec is None:
                stats.unknown_tools[call.name] += 1
            elif call.arguments is None:
                stats.unreadable_arguments += 1
            if spec is not None and call.arguments is not None:
                stats.checked += 1
                for leaf in leaves(spec, guard.kinds, call.arguments):
                    if any(kind.enforce for kind in leaf.kinds):
                        stats.identifier_arguments += 1
                    else:
                        stats.advisory_arguments += 1
            if id(planned) not in runs:
                continue
            self._one(planned, unguarded[id(planned)], guarded[id(planned)], spec is not None)

    def _one(self, planned: _Planned, base: Ran, behind: _Guarded, declared: bool) -> None:
        """Count one call: its baseline, its outcome behind the guard, and what they differ in."""
        stats, live = self.stats, self.live
        live.calls += 1
        base_ok = not call_failed(self.guard, base)
        live.unguarded[SUCCEEDED if base_ok else FAILED] += 1
        live.guarded[behind.outcome] += 1
        if planned.recorded is not None:
            agrees = (planned.recorded == SUCCEEDED) == base_ok
            live.recording_agrees += agrees
            live.recording_disagrees += not agrees
        if behind.outcome == REFUSED:
            self._refused(planned, behind, base_ok)
        elif behind.ran is not None and declared:
            stats.allowed += 1
        if behind.ran is None:
            return
        ran = behind.ran
        # The guard never rewrites an argument: a difference here is a regression to report.
        changed = rewrites(planned.call.arguments or {}, ran.received)
        if behind.outcome == FAILED and base_ok:
            live.failed_behind_guard += 1
            label = f"behind the guard: {shorten(ran.text)}; succeeded without it"
            if not changed:
                label += "; received as written"
            example = self._live_example(planned, label, rewrites=changed)
            live.keep(live.failed_examples, example)
        elif behind.outcome == SUCCEEDED and not base_ok:
            live.succeeded_behind_guard_only += 1
        if changed:
            live.rewritten_calls += 1
            live.rewritten_arguments += len(changed)
            example = self._live_example(planned, f"result: {shorten(ran.text)}", rewrites=changed)
            live.keep(live.rewritten_examples, example)
        if behind.outcome == FAILED and behind.ids:
            live.harvested_from_failed += 1
            live.harvested_ids += len(behind.ids)
            example = self._live_example(planned, f"result: {shorten(ran.text)}", ids=behind.ids)
            live.keep(live.harvested_examples, example)

    def _refused(self, planned: _Planned, behind: _Guarded, base_ok: bool) -> None:
        stats, live = self.stats, self.live
        stats.refused += 1
        outputs = "\n".join(r_text for r_text in self.seen[: planned.seen])
        reason, hint = refusal_reason(behind.findings, outputs, self.returned[: planned.returned])
        example = Example(
            self.trace.id,
            self.trace.path,
            self.trace.line,
            planned.message,
            planned.call.name,
            reason,
            tuple(f.to_dict() for f in behind.findings),
            hint,
        )
        if planned.recorded == SUCCEEDED:
            stats.add_false_refusal(reason, example)
        elif planned.recorded == FAILED:
            stats.add_refused_failure(reason, example)
        else:
            stats.refused_no_result += 1
        if planned.recorded == SUCCEEDED and base_ok:
            live.refused_succeeded += 1
            enforced = [f for f in behind.findings if f.enforced] or list(behind.findings)
            for finding in enforced:
                live.refusal_causes[f"{finding.tool}.{finding.param}: {finding.problem}"] += 1
            if not enforced:
                live.refusal_causes[f"{planned.call.name}: refused"] += 1
            label = (
                "; ".join(f"{f.param}={json.dumps(f.value)} {f.problem}" for f in enforced)
                or "refused"
            )
            live.keep(live.refused_examples, self._live_example(planned, label))


def _gained(before: Snapshot, after: Snapshot) -> tuple[str, ...]:
    """The values of the entries a call added, confirmed or raised to a better tier."""
    gained = []
    for key, (value, verified, rank) in after.items():
        old = before.get(key)
        if old is None or (verified and not old[1]) or rank < old[2]:
            gained.append(value)
    return tuple(gained)


def _problem(text: Any) -> Problem:
    """A finding's problem as the audit wrote it (its own, as a string)."""
    return cast(Problem, str(text))
