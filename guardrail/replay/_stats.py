"""The counts of a replay: per trace file and in total, each a :class:`Stats`.

A replay report holds one :class:`Stats` per trace file and their
sum. Each ``Stats`` has the guard's cost (false refusals: real calls that
succeeded in the recording but would be refused), its benefit (the share of
corrupted identifier arguments refused, per corruption class) and what
could not be read (malformed lines, unknown tools). ``availability`` holds
one :class:`Availability` per compaction strategy, and stays empty when the
replay ran without one; ``agent`` one :class:`AgentDiff` per strategy, and
``agent_recorded`` the agent against the recording, when an agent ran;
``live`` the counts of a live replay (see :mod:`guardrail.replay._live_stats`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from guardrail.replay._corruption import ALL_CLASSES
from guardrail.replay._live_stats import LiveStats
from guardrail.replay._traces import Malformed

#: Why a refused call that succeeded in the recording was refused.
GENUINE: Final = "genuine"
INVENTED: Final = "invented"
UNVERIFIED: Final = "unverified"
REASONS: Final[tuple[str, ...]] = (GENUINE, INVENTED, UNVERIFIED)


@dataclass(frozen=True)
class Example:
    """One call worth showing: where it is, the tool, and what the guard found."""

    trace: str
    path: str
    line: int | None
    message: int
    tool: str
    label: str
    findings: tuple[Mapping[str, Any], ...] = ()
    #: For a genuine false refusal: the result that returned the id and the path to declare.
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return {
            **({"hint": self.hint} if self.hint else {}),
            "trace": self.trace,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "tool": self.tool,
            "label": self.label,
            "findings": [dict(f) for f in self.findings],
        }

    def describe(self) -> str:
        """``param="value" (problem, near [role])`` for each finding."""
        parts = []
        for f in self.findings:
            near = f" near [{f['nearest_role']}]" if f.get("nearest_role") else ""
            value = json.dumps(f.get("value"), ensure_ascii=False)
            parts.append(f"{f.get('param')}={value} {f.get('problem')}{near}")
        return "; ".join(parts)


def _add_examples(into: list[Example], more: Iterable[Example], cap: int) -> None:
    for example in more:
        if len(into) >= cap:
            return
        into.append(example)


def _merge_counts(into: Any, other: Any, cap: int) -> None:
    """Add ``other``'s fields to ``into``'s (both of one class whose every field is a count).

    Numbers add up, ``Counter`` fields merge and example lists fill up to ``cap``.
    """
    for item in fields(into):
        mine, theirs = getattr(into, item.name), getattr(other, item.name)
        if isinstance(mine, Counter):
            mine.update(theirs)
        elif isinstance(mine, list):
            _add_examples(mine, theirs, cap)
        else:
            setattr(into, item.name, mine + theirs)


@dataclass
class ClassStats:
    """Detection for one corruption class.

    ``variants`` excludes collisions (variants that name another value the
    conversation holds), which are counted apart with how many were refused.
    """

    variants: int = 0
    refused: int = 0
    collisions: int = 0
    collisions_refused: int = 0
    not_applicable: int = 0
    findings: Counter[str] = field(default_factory=Counter)
    misses: list[Example] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        """The share of variants refused, or None when there were none."""
        return self.refused / self.variants if self.variants else None

    def merge(self, other: ClassStats, cap: int) -> None:
        """Add ``other``'s counts to this one."""
        _merge_counts(self, other, cap)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe counts, the rate, the findings of refused variants and missed examples."""
        return {
            "variants": self.variants,
            "refused": self.refused,
            "rate": self.rate,
            "collisions": self.collisions,
            "collisions_refused": self.collisions_refused,
            "not_applicable": self.not_applicable,
            "findings": dict(sorted(self.findings.items())),
            "misses": [m.to_dict() for m in self.misses],
        }


#: Where an identifier argument of a call came from, for availability and the agent diff.
LEDGER: Final = "ledger"  # an earlier successful tool result produced it, and the ledger holds it
EVICTED: Final = "evicted"  # a tool result produced it, but the ledger evicted it (capacity)
OTHER: Final = "other"  # in the context, from no tool result: typed by the user or the agent
ABSENT: Final = "absent"  # nowhere in the context before the call: invented

#: The definition the availability and agent-diff tables state.
REQUIRED_IDS: Final = (
    "ledger ids: identifier arguments of the recorded call whose value an earlier successful "
    "tool result produced and the ledger still holds (within capacity)"
)


@dataclass
class Availability:
    """For one compaction strategy: identifier arguments still present verbatim afterwards.

    A compaction is forced before each recorded call (each model turn), and
    every identifier argument of that call is counted once, by where its
    value came from. ``ids`` (the measured ones, :data:`REQUIRED_IDS`) are
    those an earlier successful tool result produced and the ledger still
    holds; ``present`` of them are in the compacted context verbatim, as a
    whole token. The rest are counted apart: ``evicted`` (produced by a tool
    result but evicted from the ledger: beyond capacity), ``other_ids`` (in
    the context but from no tool result: typed by the user or written by the
    agent, such as an airport code), with ``other_present`` still there after
    compaction, and ``not_in_context`` (nowhere before the call: invented).

    "Which one": ``which_ids`` of the ledger ids have a kind with several
    entries in the ledger; ``which_told`` of them are told apart in the
    compacted context (their role's block line or summary carries a note
    part or a status that each other entry of the kind lacks; see
    :mod:`guardrail.replay._which`), also counted by kind, and apart for the
    ids a result had described before the call (their entry had a note or
    a status): an id only ever listed bare has nothing to tell it by yet;
    and apart for the ids a write tool took (``which_write...``): where
    taking the wrong one changes something.
    """

    compactions: int = 0
    ids: int = 0
    present: int = 0
    which_ids: int = 0
    which_told: int = 0
    which_asked_by_kind: Counter[str] = field(default_factory=Counter)
    which_told_by_kind: Counter[str] = field(default_factory=Counter)
    which_described_by_kind: Counter[str] = field(default_factory=Counter)
    which_described_told_by_kind: Counter[str] = field(default_factory=Counter)
    which_write_by_kind: Counter[str] = field(default_factory=Counter)
    which_write_told_by_kind: Counter[str] = field(default_factory=Counter)
    evicted: int = 0
    other_ids: int = 0
    other_present: int = 0
    not_in_context: int = 0
    misses: list[Example] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        """The share of ledger ids still present, or None when none were asked."""
        return self.present / self.ids if self.ids else None

    def which(self, kind: str, told: bool, described: bool = False, write: bool = False) -> None:
        """Count one id argument with rivals of its kind: told apart, described, of a write."""
        self.which_ids += 1
        self.which_asked_by_kind[kind] += 1
        if told:
            self.which_told += 1
            self.which_told_by_kind[kind] += 1
        if described:
            self.which_described_by_kind[kind] += 1
            self.which_described_told_by_kind[kind] += told
        if write:
            self.which_write_by_kind[kind] += 1
            self.which_write_told_by_kind[kind] += told

    @property
    def which_rate(self) -> float | None:
        """The share of ids with rivals of their kind that the compacted context tells apart."""
        return self.which_told / self.which_ids if self.which_ids else None

    @property
    def other_rate(self) -> float | None:
        """The share of the other ids (user- or agent-written) still present."""
        return self.other_present / self.other_ids if self.other_ids else None

    def merge(self, other: Availability, cap: int) -> None:
        """Add ``other``'s counts to this one."""
        _merge_counts(self, other, cap)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe counts and the rates."""
        return {
            "compactions": self.compactions,
            "ids": self.ids,
            "present": self.present,
            "rate": self.rate,
            "which_ids": self.which_ids,
            "which_told": self.which_told,
            "which_rate": self.which_rate,
            "which_by_kind": {
                kind: {
                    "asked": asked,
                    "told_apart": self.which_told_by_kind[kind],
                    "described": self.which_described_by_kind[kind],
                    "described_told_apart": self.which_described_told_by_kind[kind],
                    "writes": self.which_write_by_kind[kind],
                    "writes_told_apart": self.which_write_told_by_kind[kind],
                }
                for kind, asked in sorted(self.which_asked_by_kind.items())
            },
            "evicted": self.evicted,
            "other_ids": self.other_ids,
            "other_present": self.other_present,
            "other_rate": self.other_rate,
            "not_in_context": self.not_in_context,
            "misses": [m.to_dict() for m in self.misses],
        }


@dataclass
class AgentDiff:
    """The identifier arguments of an agent's call on one context against a baseline call.

    After compaction the baseline is the agent's call on the uncompacted
    context; for the uncompacted context itself it is the recorded call.
    ``calls`` counts the comparisons and ``same`` those with the same tool
    and the same identifier arguments (both making no call counts as the
    same). Each identifier argument of the baseline is counted by origin
    (see :class:`Availability`): ``ids`` are the ledger ids and ``changed``
    those the other call does not carry unchanged (another value, left out,
    another tool, or no call); ``other_ids`` and ``other_changed`` the rest.
    ``added`` counts identifier arguments only the other call has.

    Each call that differs lands in one of four counts: ``no_call`` (the
    baseline made a call, the other did not), ``refused`` (the guard would
    refuse it), ``allowed`` (the guard would let through a call that
    carries a different identifier, or calls another tool: what provenance
    cannot see, such as another value of the same kind) and ``incomplete``
    (it only leaves identifiers out: nothing for the guard to check, and
    the tool would fail).
    """

    calls: int = 0
    same: int = 0
    ids: int = 0
    changed: int = 0
    other_ids: int = 0
    other_changed: int = 0
    added: int = 0
    no_call: int = 0
    refused: int = 0
    allowed: int = 0
    incomplete: int = 0
    examples: list[Example] = field(default_factory=list)

    @property
    def differing(self) -> int:
        """Calls that are not the same."""
        return self.calls - self.same

    @property
    def rate(self) -> float | None:
        """The share of ledger ids the other call carries unchanged."""
        return (self.ids - self.changed) / self.ids if self.ids else None

    def merge(self, other: AgentDiff, cap: int) -> None:
        """Add ``other``'s counts to this one."""
        _merge_counts(self, other, cap)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe counts, the rate and examples of differences."""
        out: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name != "examples"
        }
        out["differing"] = self.differing
        out["rate"] = self.rate
        out["examples"] = [e.to_dict() for e in self.examples]
        return out


@dataclass
class Stats:
    """Everything counted over one trace file (or over all of them, for the total)."""

    path: str
    max_examples: int = 10
    traces: int = 0
    messages: int = 0
    calls: int = 0
    checked: int = 0
    allowed: int = 0
    refused: int = 0
    refused_failed: Counter[str] = field(default_factory=Counter)
    refused_failed_examples: list[Example] = field(default_factory=list)
    refused_no_result: int = 0
    false_refusals: Counter[str] = field(default_factory=Counter)
    false_refusal_examples: dict[str, list[Example]] = field(default_factory=dict)
    unknown_tools: Counter[str] = field(default_factory=Counter)
    unreadable_arguments: int = 0
    orphan_results: int = 0
    unanswered_calls: int = 0
    identifier_arguments: int = 0
    advisory_arguments: int = 0
    malformed: list[Malformed] = field(default_factory=list)
    detection: dict[str, ClassStats] = field(default_factory=dict)
    availability: dict[str, Availability] = field(default_factory=dict)
    #: The agent's call after each compaction against its call on the uncompacted context.
    agent: dict[str, AgentDiff] = field(default_factory=dict)
    #: The agent's call on the uncompacted context against the recorded call (None: no agent).
    agent_recorded: AgentDiff | None = None
    #: Calls that would wait for the user's approval (none refused), by the tier of each value
    #: asked about; with ``approve="all"`` or ``"none"`` each was then approved or declined.
    asked: int = 0
    ask_tiers: Counter[str] = field(default_factory=Counter)
    ask_examples: list[Example] = field(default_factory=list)
    approved: int = 0
    declined: int = 0
    #: A live replay's counts: the calls run through the real tools, guarded and not (None: the
    #: recorded results were replayed).
    live: LiveStats | None = None
    #: Results read as successes whose text reads like an error (``Error``, ``Not found``...),
    #: from which a producer harvested ids: the tool's failure rule was overridden, or misses
    #: its failure text (see :func:`guardrail._provenance.failure.suspect_success`). Each
    #: example's ``label`` says which tool and what to declare.
    suspect_successes: int = 0
    suspect_examples: list[Example] = field(default_factory=list)
    #: Per declared result path, ``(tool, path)``: the successful results of its tool read,
    #: and those in which it reached a value. A path that never did is dead in this corpus.
    path_results: Counter[tuple[str, str]] = field(default_factory=Counter)
    path_hits: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def genuine_false_refusals(self) -> int:
        """False refusals that are not explained by an invented or unverified id."""
        return self.false_refusals[GENUINE]

    @property
    def expected_false_refusals(self) -> int:
        """False refusals of invented ids, and of user-typed ids never looked up."""
        return self.false_refusals[INVENTED] + self.false_refusals[UNVERIFIED]

    @property
    def malformed_lines(self) -> int:
        """Lines (or conversations) skipped whole."""
        return sum(1 for m in self.malformed if m.message is None)

    @property
    def malformed_messages(self) -> int:
        """Messages skipped, or partly read, inside conversations that were read."""
        return sum(1 for m in self.malformed if m.message is not None)

    def add_false_refusal(self, reason: str, example: Example) -> None:
        """Count one false refusal and keep it as an example if there is room."""
        self.false_refusals[reason] += 1
        kept = self.false_refusal_examples.setdefault(reason, [])
        _add_examples(kept, [example], self.max_examples)

    def add_refused_failure(self, reason: str, example: Example) -> None:
        """Count one refused call that failed in the recording too (the guard saw it coming)."""
        self.refused_failed[reason] += 1
        _add_examples(self.refused_failed_examples, [example], self.max_examples)

    def add_suspect_success(self, example: Example) -> None:
        """Count one result read as a success that reads like an error, and yielded ids."""
        self.suspect_successes += 1
        _add_examples(self.suspect_examples, [example], self.max_examples)

    def add_ask(self, tiers: Iterable[str], example: Example) -> None:
        """Count one call that would wait for the user, and the tier of each value asked about."""
        self.asked += 1
        self.ask_tiers.update(tiers)
        _add_examples(self.ask_examples, [example], self.max_examples)

    def detection_for(self, name: str) -> ClassStats:
        """The detection counts of one class (created on first use)."""
        stats = self.detection.get(name)
        if stats is None:
            stats = self.detection[name] = ClassStats()
        return stats

    def add_paths(self, tool: str, reached: Mapping[str, bool]) -> None:
        """Count one successful result of ``tool``: which of its declared paths reached a value."""
        for path, hit in reached.items():
            self.path_results[tool, path] += 1
            self.path_hits[tool, path] += hit

    @property
    def unmatched_paths(self) -> list[tuple[str, str, int]]:
        """``(tool, path, results)`` for each declared path that reached nothing in any result."""
        return [
            (tool, path, count)
            for (tool, path), count in sorted(self.path_results.items())
            if not self.path_hits[tool, path]
        ]

    def merge(self, other: Stats) -> None:
        """Add ``other``'s counts to this one (examples kept up to the cap)."""
        cap = self.max_examples
        for name in (
            "traces",
            "messages",
            "calls",
            "checked",
            "allowed",
            "refused",
            "refused_no_result",
            "unreadable_arguments",
            "orphan_results",
            "unanswered_calls",
            "identifier_arguments",
            "advisory_arguments",
            "asked",
            "approved",
            "declined",
            "suspect_successes",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        _add_examples(self.suspect_examples, other.suspect_examples, cap)
        self.ask_tiers.update(other.ask_tiers)
        self.path_results.update(other.path_results)
        self.path_hits.update(other.path_hits)
        _add_examples(self.ask_examples, other.ask_examples, cap)
        self.false_refusals.update(other.false_refusals)
        self.refused_failed.update(other.refused_failed)
        _add_examples(self.refused_failed_examples, other.refused_failed_examples, cap)
        for reason, examples in other.false_refusal_examples.items():
            _add_examples(self.false_refusal_examples.setdefault(reason, []), examples, cap)
        self.unknown_tools.update(other.unknown_tools)
        self.malformed.extend(other.malformed)
        for name, stats in other.detection.items():
            self.detection_for(name).merge(stats, cap)
        for name, avail in other.availability.items():
            self.availability.setdefault(name, Availability()).merge(avail, cap)
        for name, diff in other.agent.items():
            self.agent.setdefault(name, AgentDiff()).merge(diff, cap)
        if other.agent_recorded is not None:
            if self.agent_recorded is None:
                self.agent_recorded = AgentDiff()
            self.agent_recorded.merge(other.agent_recorded, cap)
        if other.live is not None:
            if self.live is None:
                self.live = LiveStats(max_examples=cap)
            self.live.merge(other.live)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe counts, rates and examples (``asked`` only where a call would ask)."""
        detection = {
            name: self.detection[name].to_dict() for name in ALL_CLASSES if name in self.detection
        }
        asked = (
            {
                "asked": {
                    "total": self.asked,
                    "by_tier": dict(sorted(self.ask_tiers.items())),
                    "approved": self.approved,
                    "declined": self.declined,
                    "examples": [e.to_dict() for e in self.ask_examples],
                }
            }
            if self.asked
            else {}
        )
        return {
            "path": self.path,
            "traces": self.traces,
            "messages": self.messages,
            "calls": self.calls,
            "checked_calls": self.checked,
            "allowed": self.allowed,
            "refused": self.refused,
            "refused_by_outcome": {
                "succeeded": sum(self.false_refusals.values()),
                "failed": sum(self.refused_failed.values()),
                "no_result": self.refused_no_result,
            },
            "refused_failed": {
                "total": sum(self.refused_failed.values()),
                "by_reason": {reason: self.refused_failed[reason] for reason in REASONS},
                "examples": [e.to_dict() for e in self.refused_failed_examples],
            },
            "false_refusals": {
                "total": sum(self.false_refusals.values()),
                "genuine": self.genuine_false_refusals,
                "expected": self.expected_false_refusals,
                "by_reason": {reason: self.false_refusals[reason] for reason in REASONS},
                "examples": {
                    reason: [e.to_dict() for e in self.false_refusal_examples.get(reason, [])]
                    for reason in REASONS
                },
            },
            "suspect_successes": {
                "total": self.suspect_successes,
                "examples": [e.to_dict() for e in self.suspect_examples],
            },
            "path_coverage": {
                "declared": len(self.path_results),
                "unmatched": [
                    {"tool": tool, "path": path, "results": count}
                    for tool, path, count in self.unmatched_paths
                ],
            },
            "unknown_tools": dict(sorted(self.unknown_tools.items())),
            "unknown_tool_calls": sum(self.unknown_tools.values()),
            "unreadable_arguments": self.unreadable_arguments,
            "orphan_results": self.orphan_results,
            "unanswered_calls": self.unanswered_calls,
            "identifier_arguments": {
                "checked": self.identifier_arguments,
                "advisory": self.advisory_arguments,
            },
            "malformed": {
                "lines": self.malformed_lines,
                "messages": self.malformed_messages,
                "examples": [m.to_dict() for m in self.malformed[: self.max_examples]],
            },
            "detection": detection,
            "availability": {name: a.to_dict() for name, a in self.availability.items()},
            "agent": None
            if self.agent_recorded is None
            else {
                "uncompacted_vs_recording": self.agent_recorded.to_dict(),
                "compacted_vs_uncompacted": {
                    name: diff.to_dict() for name, diff in self.agent.items()
                },
            },
            **asked,
            **({"live": self.live.to_dict()} if self.live is not None else {}),
        }


def false_refusals_line(stats: Stats) -> str:
    """The false refusals in one sentence: the tables' title and the assertion's first line.

    One sentence for both, so that what ``guardrail replay`` prints and what
    ``ReplayReport.assert_no_false_refusals`` fails on never disagree.
    """
    counts, failed = stats.false_refusals, stats.refused_failed
    expected = counts[INVENTED] + counts[UNVERIFIED]
    line = (
        f"False refusals (succeeded in the recording, refused): {counts[GENUINE]} genuine, "
        "which assert_no_false_refusals() fails on; "
        f"{expected} expected ({counts[INVENTED]} invented id, {counts[UNVERIFIED]} unverified), "
        "which it allows unless allow_expected=False. "
        f"Refused and failed in the recording too: {sum(failed.values())}"
    )
    if failed:
        line += " (" + ", ".join(f"{failed[r]} {r}" for r in REASONS if failed[r]) + ")"
    return line + f". No result recorded: {stats.refused_no_result}."


def _pct(rate: float | None) -> str:
    if rate is None:
        return "-"
    # Never round a miss up to a perfect score: 99.96% shows as 99.9%, not 100.0%.
    shown = int(rate * 1000) / 10
    return f"{shown:.1f}%"


def _n(number: int) -> str:
    return f"{number:,}"
