"""The replay of one recorded trace: each call checked, corrupted, and asked after compaction."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar

from guardrail._data.text import has_token
from guardrail._data.verdict import Finding, Verdict
from guardrail._guard.facade import Guard
from guardrail._provenance.coverage import reached
from guardrail._provenance.failure import suspect_success
from guardrail._provenance.harvest import harvest
from guardrail._transcript.content import strings
from guardrail._transcript.messages import unsuccessful
from guardrail.compaction import ledger_facts
from guardrail.ledger import Ledger
from guardrail.replay._agent import Asker, Intent
from guardrail.replay._arguments import Leaf, leaves, with_value
from guardrail.replay._asks import answer
from guardrail.replay._corruption import SAME_KIND, Context, collision, corrupt
from guardrail.replay._origin import Returned, admitting
from guardrail.replay._stats import (
    ABSENT,
    EVICTED,
    GENUINE,
    INVENTED,
    LEDGER,
    OTHER,
    UNVERIFIED,
    AgentDiff,
    Availability,
    Example,
    Stats,
)
from guardrail.replay._traces import (
    Message,
    ToolCall,
    Trace,
)
from guardrail.replay._which import rivals, told_apart

#: ``(messages so far, ledger) -> the context the agent would see``. The messages are OpenAI
#: chat-completions dicts; the ledger is a copy the strategy may change.
Compaction: TypeAlias = Callable[[list[dict[str, Any]], Ledger], Sequence[Mapping[str, Any]]]


@dataclass
class _Pending:
    call: ToolCall
    message: int
    verdict: Verdict | None
    reason: str | None  # for a refused call: genuine, invented or unverified
    hint: str = ""  # for a genuine one: the result that returned the id, the path to declare


class _Open(Protocol):
    @property
    def call(self) -> ToolCall: ...


_O = TypeVar("_O", bound=_Open)


def answered(open_calls: list[_O], message: Message) -> _O | None:
    """Take the open call a recorded result answers: the latest with its id (else its name)."""
    for i in range(len(open_calls) - 1, -1, -1):
        call = open_calls[i].call
        if message.tool_call_id is not None:
            hit = call.id == message.tool_call_id
        else:
            hit = message.name is None or call.name == message.name
        if hit:
            return open_calls.pop(i)
    return None


def refusal_reason(
    findings: Iterable[Finding], outputs: str, returned: list[Returned]
) -> tuple[str, str]:
    """Why a refusal may be right (an invented id, or a typed one never looked up), or not.

    ``outputs`` is the text of the successful tool results before the call,
    ``returned`` those results. A genuine one comes with the result that
    returned the id and the path to declare.
    """
    reasons = set()
    for finding in findings:
        if not finding.enforced:
            continue
        if has_token(outputs, finding.value):  # a tool returned it: the manifest misses a path
            return GENUINE, admitting(returned, finding.value, finding.kind)
        if finding.problem in ("unknown", "mutated", "example"):
            reasons.add(INVENTED)
        elif finding.problem in ("unverified", "declined", "mentioned", "outside"):
            reasons.add(UNVERIFIED)  # a value no tool confirmed, or the user turned down
        else:
            return GENUINE, ""
    return (INVENTED if INVENTED in reasons else UNVERIFIED), ""


class TraceRun:
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
        agent: Asker | None,
        approve: str | None = None,
    ) -> None:
        self.guard = guard
        self.approve = approve
        self.trace = trace
        self.stats = stats
        self.classes = classes
        self.variants = variants
        self.compaction = compaction
        self.agent = agent
        # Whether each model turn is stopped at: to compact, to ask the agent, or both.
        self.turns = bool(compaction) or agent is not None
        # A seed per trace: a trace's variants do not depend on which traces ran before it.
        self.rng = random.Random(f"{seed}:{trace.id}")
        self.ledger = guard.new_ledger(trace.id)
        self.pending: list[_Pending] = []
        self.outputs: list[str] = []  # text of successful tool outputs so far
        self.returned: list[Returned] = []  # and the outputs themselves, with their tools
        # (kind, normalised value) of every id a successful tool result produced so far
        self.produced: set[tuple[str, str]] = set()

    def run(self) -> None:
        stats = self.stats
        stats.traces += 1
        stats.messages += len(self.trace.messages)
        for index, message in enumerate(self.trace.messages):
            if message.role == "user":
                self.guard.observe_user(message.content, ledger=self.ledger)
            elif message.role == "assistant" and message.tool_calls:
                if self.turns:
                    self._turn(index, message)
                for call in message.tool_calls:
                    self._call(index, call)
            elif message.role == "tool":
                self._result(index, message)
        for pending in self.pending:
            stats.unanswered_calls += 1
            if pending.verdict is not None and pending.verdict.outcome == "refused":
                stats.refused_no_result += 1

    def _example(
        self, index: int, tool: str, label: str, findings: Iterable[Finding], hint: str = ""
    ) -> Example:
        return Example(
            trace=self.trace.id,
            path=self.trace.path,
            line=self.trace.line,
            message=index,
            tool=tool,
            label=label,
            findings=tuple(f.to_dict() for f in findings),
            hint=hint,
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
        # Every identifier argument of a checked call is counted, refused calls' too: the
        # header's count; detection corrupts only those of allowed calls, of enforced kinds.
        for leaf in leaves(guard.specs[call.name], guard.kinds, call.arguments):
            if any(kind.enforce for kind in leaf.kinds):
                stats.identifier_arguments += 1
            else:
                stats.advisory_arguments += 1
        verdict = guard.check(call.name, call.arguments, ledger=self.ledger)
        if verdict.approvals:  # counted apart; approved or declined as the replay says
            example = self._example(index, call.name, "ask", ())
            verdict = answer(guard, self.ledger, stats, self.approve, call, verdict, example)
        reason, hint = None, ""
        if verdict.allowed:
            stats.allowed += 1
            self._corrupt(index, call)
        elif verdict.outcome == "refused":
            stats.refused += 1
            reason, hint = self._reason(verdict)
        self.pending.append(_Pending(call, index, verdict, reason, hint))

    def _reason(self, verdict: Verdict) -> tuple[str, str]:
        """Why a refusal may be right, or not (see :func:`refusal_reason`)."""
        return refusal_reason(verdict.findings, "\n".join(self.outputs), self.returned)

    def _result(self, index: int, message: Message) -> None:
        pending = self._answer(message)
        if pending is None:
            self.stats.orphan_results += 1
            return
        # A refusal the recording sent back as the result is a failure: no tool ran, and the
        # values it names must not be harvested (a trace built in code may not say so). A
        # result is read as at run time: by the tool's failure rule ("Error: ...", by default).
        call = pending.call
        failed = (
            message.error
            or unsuccessful(message.content, message.result)
            or self.guard.failed(call.name, message.output)
        )
        verdict = pending.verdict
        if verdict is not None and verdict.outcome == "refused":
            reason = pending.reason or GENUINE
            example = self._example(
                pending.message, pending.call.name, reason, verdict.findings, pending.hint
            )
            if failed:
                self.stats.add_refused_failure(reason, example)
            else:
                self.stats.add_false_refusal(reason, example)
        spec = self.guard.specs.get(call.name)
        if spec is not None:  # arguments that could not be read too: the result is real
            self.guard.record(
                call.name,
                call.arguments or {},
                message.output,
                error=failed,
                call_id=call.id,
                ledger=self.ledger,
            )
        if not failed and spec is not None:
            suspect = suspect_success(spec, message.output, self.guard.kinds)
            if suspect is not None:  # the rule took an error-looking text for a success
                self.stats.add_suspect_success(self._example(index, call.name, suspect.advice, ()))
        if not failed and spec is not None and spec.produces:
            self.stats.add_paths(call.name, reached(spec, message.output))
        if not failed:
            self.outputs.append(message.content)
            self.returned.append(Returned(index, call.name, message.output))
            if spec is not None and self.turns:
                try:
                    found = harvest(spec, message.output, self.guard.kinds).batches
                except Exception:  # a failing normaliser: record() logged it, nothing produced
                    found = []
                self.produced.update((batch.kind, key) for batch in found for key in batch.keys)

    def _answer(self, message: Message) -> _Pending | None:
        """The open call a result answers (see :func:`answered`)."""
        return answered(self.pending, message)

    # -- detection ------------------------------------------------------------------------

    def _corrupt(self, index: int, call: ToolCall) -> None:
        stats, guard, ledger = self.stats, self.guard, self.ledger
        arguments = call.arguments or {}
        for leaf in leaves(guard.specs[call.name], guard.kinds, arguments):
            if not any(kind.enforce for kind in leaf.kinds):
                continue
            context = Context(kinds=leaf.kinds, ledger=ledger, rng=self.rng)
            for name in self.classes:
                counts = stats.detection_for(name)
                for _ in range(self.variants):
                    variant = corrupt(name, leaf.text, context)
                    if variant is None:
                        counts.not_applicable += 1
                        continue
                    verdict = guard.check(
                        call.name, with_value(arguments, leaf, variant), ledger=ledger
                    )
                    hit = None if name == SAME_KIND else collision(variant, context)
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

    # -- availability after compaction, and the agent ------------------------------------

    def _origin(self, leaf: Leaf, before: str) -> str:
        """Where an identifier argument's value came from (see report.Availability)."""
        keys = set()
        for kind in leaf.kinds:
            try:
                keys.add((kind.name, kind.normalize(leaf.text)))
            except Exception:  # a failing normaliser: this kind cannot have produced it
                continue
        if keys & self.produced:
            held = any(self.ledger.get(kind, leaf.text) is not None for kind, _ in keys)
            return LEDGER if held else EVICTED
        return OTHER if has_token(before, leaf.text) else ABSENT

    def _rivals(self, leaf: Leaf) -> tuple[str, bool, str, list[str]] | None:
        """A ledger id argument's kind, role and the other roles of its kind (None: no others).

        Second, whether a result described it (its entry has a note or a status).
        """
        for kind in leaf.kinds:
            entry = self.ledger.get(kind.name, leaf.text)
            if entry is not None:
                others = rivals(self.ledger, entry)
                described = bool(entry.note or entry.status)
                return (entry.kind, described, entry.role, others) if others else None
        return None

    def _ledger_copy(self) -> Ledger:
        """The ledger as it stands, for what may change it (a check, a compaction strategy)."""
        return Ledger.from_dict(self.ledger.to_dict(), kinds=self.guard.kinds)

    def _turn(self, index: int, message: Message) -> None:
        """Before a recorded call: compact the conversation so far, count, ask the agent."""
        context = self.trace.openai_messages(stop=index)
        before = "\n".join(strings(context))
        calls = [
            call
            for call in message.tool_calls
            if call.name in self.guard.specs and call.arguments is not None
        ]
        arguments = [
            (call, leaf, self._origin(leaf, before))
            for call in calls
            for leaf in leaves(self.guard.specs[call.name], self.guard.kinds, call.arguments)
        ]
        contexts: dict[str, list[Any]] = {}
        among = {id(leaf): self._rivals(leaf) for _, leaf, origin in arguments if origin == LEDGER}
        for name, strategy in self.compaction.items():
            avail = self.stats.availability.setdefault(name, Availability())
            compacted = list(strategy([dict(m) for m in context], self._ledger_copy()))
            contexts[name] = compacted
            after = "\n".join(strings(compacted))
            facts = ledger_facts(compacted)
            avail.compactions += 1
            for call, leaf, origin in arguments:
                if origin == LEDGER:
                    avail.ids += 1
                    found = among[id(leaf)]
                    if found is not None:  # several of its kind: is its own told apart?
                        write = self.guard.specs[call.name].effect == "write"
                        avail.which(found[0], told_apart(*found[2:], facts), found[1], write)
                    if has_token(after, leaf.text):
                        avail.present += 1
                    elif len(avail.misses) < self.stats.max_examples:
                        label = f"{leaf.label}={leaf.text!r} lost by {name}"
                        avail.misses.append(self._example(index, call.name, label, ()))
                elif origin == EVICTED:
                    avail.evicted += 1
                elif origin == OTHER:
                    avail.other_ids += 1
                    avail.other_present += has_token(after, leaf.text)
                else:
                    avail.not_in_context += 1
        if self.agent is not None:
            for call in calls:
                self._ask(index, call, context, before, contexts)

    def _ask(
        self,
        index: int,
        call: ToolCall,
        context: list[dict[str, Any]],
        before: str,
        contexts: Mapping[str, list[Any]],
    ) -> None:
        """The agent's call on the uncompacted context and on each compacted one, compared."""
        asker = self.agent
        assert asker is not None
        intent = Intent.of(self.guard, call.name, call.arguments or {}, self.ledger)
        where = f"{self.trace.id} message {index}"
        baseline = asker.ask(context, intent, where)
        recorded = (call.name, call.arguments)
        if self.stats.agent_recorded is None:
            self.stats.agent_recorded = AgentDiff()
        self._diff(self.stats.agent_recorded, index, recorded, baseline, before)
        for name, compacted in contexts.items():
            diff = self.stats.agent.setdefault(name, AgentDiff())
            self._diff(diff, index, baseline, asker.ask(compacted, intent, where), before)

    def _diff(
        self,
        diff: AgentDiff,
        index: int,
        base: tuple[str, Any] | None,
        other: tuple[str, Any] | None,
        before: str,
    ) -> None:
        """Count how ``other`` differs from ``base`` in its identifier arguments."""
        diff.calls += 1
        base_leaves = self._call_leaves(base)
        other_leaves = {leaf.place: leaf for leaf in self._call_leaves(other)}
        same_tool = _tool(base) == _tool(other)  # both making no call is the same too
        readable = other is None or isinstance(other[1], Mapping)
        changes: list[str] = []
        other_value = False  # the other call carries a different value somewhere (not a gap)
        for leaf in base_leaves:
            mine = other_leaves.pop(leaf.place, None) if same_tool else None
            origin = self._origin(leaf, before)
            if origin == LEDGER:
                diff.ids += 1
            else:
                diff.other_ids += 1
            if mine is not None and leaf.same(mine.text):
                continue
            if origin == LEDGER:
                diff.changed += 1
            else:
                diff.other_changed += 1
            other_value = other_value or mine is not None
            changes.append(f"{leaf.label}: {leaf.text!r} -> {mine.text if mine else None!r}")
        added = list(other_leaves.values()) if same_tool else self._call_leaves(other)
        diff.added += len(added)
        other_value = other_value or bool(added)
        changes += [f"{leaf.label}: None -> {leaf.text!r}" for leaf in added]
        if same_tool and readable and not changes:
            diff.same += 1
            return
        verdict = None
        if other is None:
            diff.no_call += base is not None
        else:  # arguments that are no object too: the guard refuses them as malformed
            verdict = self.guard.check(other[0], other[1], ledger=self._ledger_copy())
        if verdict is not None and not verdict.allowed:
            diff.refused += 1
            problems = dict.fromkeys(f.problem for f in verdict.findings if f.enforced)
            judged = f"refused: {', '.join(problems)}"
        elif other is None:
            judged = "no call"
        elif other_value or not same_tool or not readable:
            diff.allowed += 1
            judged = "allowed"
        else:
            diff.incomplete += 1
            judged = "incomplete"
        if len(diff.examples) < self.stats.max_examples:
            tool = _tool(other if other is not None else base) or ""
            if not same_tool:
                changes.insert(0, f"{_name(base)} -> {_name(other)}")
            if not readable:
                changes.append("arguments not a JSON object")
            label = f"{'; '.join(changes)} ({judged})"
            findings = verdict.findings if verdict is not None else ()
            diff.examples.append(self._example(index, tool, label, findings))

    def _call_leaves(self, call: tuple[str, Any] | None) -> list[Leaf]:
        if call is None or not isinstance(call[1], Mapping):
            return []
        spec = self.guard.specs.get(call[0])
        return [] if spec is None else list(leaves(spec, self.guard.kinds, call[1]))


def _tool(call: tuple[str, Any] | None) -> str | None:
    return None if call is None else call[0]


def _name(call: tuple[str, Any] | None) -> str:
    return "no call" if call is None else f"{call[0]}()"
