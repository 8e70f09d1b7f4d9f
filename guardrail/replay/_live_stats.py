"""What a live replay counts: the recorded calls run through the real tools, guarded and not.

A live replay runs each recorded call twice, on fresh environments: straight
to the tool (the baseline) and through the guard as a runtime runs it. These
counts compare the two (and the recording), where a replay of recorded
results cannot look: what the tool really received, a failure it reported
as text, a state change a later call depended on. The counts every replay
has (calls, refused, false refusals by reason) stay in
:class:`~guardrail.replay.Stats`; this is its ``live`` part.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any

#: How a live call ended: it ran and succeeded or failed; the guard refused it; it did not run
#: (the runtime answered without running it: invalid arguments, the re-prompt limit).
SUCCEEDED, FAILED, REFUSED, NOT_RUN = "succeeded", "failed", "refused", "not_run"


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Rewrite:
    """One argument the tool received otherwise than the model wrote it.

    ``path`` is where it sits in the arguments (``order_id``,
    ``flights[0].flight_number``). The guard never rewrites an argument, so
    each one is a regression: the call ran behind the guard otherwise than
    it would have run without it.
    """

    path: str
    written: Any
    received: Any

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields (values cut short)."""
        return {
            "path": self.path,
            "written": _short(self.written),
            "received": _short(self.received),
        }

    def describe(self) -> str:
        """``order_id: "W1000002" -> "#W1000002"``."""
        written = json.dumps(self.written, ensure_ascii=False, default=str)
        received = json.dumps(self.received, ensure_ascii=False, default=str)
        return f"{self.path}: {_short(written)} -> {_short(received)}"


@dataclass(frozen=True)
class LiveExample:
    """One live call worth showing: where it is, what happened, what the tool received."""

    trace: str
    path: str
    line: int | None
    message: int
    tool: str
    #: What happened, in words (the guarded result, the refusal's causes).
    label: str
    #: The arguments the tool received otherwise than the model wrote them (none, normally).
    rewrites: tuple[Rewrite, ...] = ()
    #: Ids that entered the ledger from this call's failed result.
    ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return {
            "trace": self.trace,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "tool": self.tool,
            "label": self.label,
            "rewrites": [r.to_dict() for r in self.rewrites],
            "ids": [_short(value) for value in self.ids],
        }

    def describe(self) -> str:
        """The label, then each rewritten argument and each id harvested."""
        parts = [self.label, *(r.describe() for r in self.rewrites)]
        if self.ids:
            parts.append("ids: " + ", ".join(json.dumps(_short(v)) for v in self.ids))
        return "; ".join(part for part in parts if part)


@dataclass
class LiveStats:
    """The live counts of one trace file (or of all of them, for the total).

    Every recorded call the environment has a tool for runs twice:
    ``unguarded`` counts its baseline outcomes (straight to the tool) and
    ``guarded`` its outcomes behind the guard (``succeeded``, ``failed``,
    ``refused``, ``not_run``). ``recording_agrees`` and
    ``recording_disagrees`` compare the baseline with the recording (a
    disagreement means the environment does not reproduce what was
    recorded, and the other counts inherit it).

    What the guard cost:

    - ``refused_succeeded``: refused behind the guard, succeeded in the
      recording and without the guard; ``refusal_causes`` names each
      cause (``tool.param: problem``);
    - ``failed_behind_guard``: failed behind the guard, succeeded without it;
    - ``rewritten_calls`` (and ``rewritten_arguments``): calls whose tool
      received arguments other than the model wrote (the guard never
      rewrites one: any is a regression);
    - ``harvested_from_failed`` (and ``harvested_ids``): calls whose
      result was a failure and whose ids entered the ledger anyway (added,
      or confirmed).

    ``replay_refused`` is what a replay of the recorded results refuses of
    the same calls, for comparison with ``guarded["refused"]``.
    ``succeeded_behind_guard_only`` counts the other way round: a call
    that failed without the guard and succeeded behind it.
    """

    max_examples: int = 10
    conversations: int = 0
    calls: int = 0
    unguarded: Counter[str] = field(default_factory=Counter)
    guarded: Counter[str] = field(default_factory=Counter)
    recording_agrees: int = 0
    recording_disagrees: int = 0
    missing_tools: Counter[str] = field(default_factory=Counter)
    refused_succeeded: int = 0
    refusal_causes: Counter[str] = field(default_factory=Counter)
    refused_examples: list[LiveExample] = field(default_factory=list)
    failed_behind_guard: int = 0
    failed_examples: list[LiveExample] = field(default_factory=list)
    succeeded_behind_guard_only: int = 0
    rewritten_calls: int = 0
    rewritten_arguments: int = 0
    rewritten_examples: list[LiveExample] = field(default_factory=list)
    harvested_from_failed: int = 0
    harvested_ids: int = 0
    harvested_examples: list[LiveExample] = field(default_factory=list)
    #: Messages the re-prompt limit stopped: none of their calls ran.
    stopped: int = 0
    replay_refused: int = 0

    def keep(self, into: list[LiveExample], example: LiveExample) -> None:
        """Keep ``example`` in ``into`` if there is room."""
        if len(into) < self.max_examples:
            into.append(example)

    def merge(self, other: LiveStats) -> None:
        """Add ``other``'s counts to this one (examples kept up to the cap)."""
        for item in fields(self):
            if item.name == "max_examples":
                continue
            mine, theirs = getattr(self, item.name), getattr(other, item.name)
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, list):
                for example in theirs:
                    self.keep(mine, example)
            else:
                setattr(self, item.name, mine + theirs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe counts and examples."""
        outcomes = (SUCCEEDED, FAILED, REFUSED, NOT_RUN)
        return {
            "conversations": self.conversations,
            "calls": self.calls,
            "unguarded": {name: self.unguarded[name] for name in (SUCCEEDED, FAILED)},
            "guarded": {name: self.guarded[name] for name in outcomes},
            "recording": {"agrees": self.recording_agrees, "disagrees": self.recording_disagrees},
            "missing_tools": dict(sorted(self.missing_tools.items())),
            "refused_succeeded": {
                "total": self.refused_succeeded,
                "causes": dict(self.refusal_causes.most_common()),
                "examples": [e.to_dict() for e in self.refused_examples],
            },
            "failed_behind_guard": {
                "total": self.failed_behind_guard,
                "examples": [e.to_dict() for e in self.failed_examples],
            },
            "succeeded_behind_guard_only": self.succeeded_behind_guard_only,
            "rewritten": {
                "calls": self.rewritten_calls,
                "arguments": self.rewritten_arguments,
                "examples": [e.to_dict() for e in self.rewritten_examples],
            },
            "harvested_from_failed": {
                "calls": self.harvested_from_failed,
                "ids": self.harvested_ids,
                "examples": [e.to_dict() for e in self.harvested_examples],
            },
            "stopped": self.stopped,
            "replay_refused": self.replay_refused,
        }
