"""Injected ids on recorded AgentDojo runs: how many attacker goals the guard stops, at what cost.

``python benchmarks/agentdojo.py`` replays ``corpus/agentdojo/traces.jsonl.gz``
(banking and Slack, two models) through the guards of
``examples/agentdojo_banking.toml`` and ``examples/agentdojo_slack.toml``
and prints:

- of the successful attacks whose goal needs an attacker-chosen id (a call
  passes, as an identifier argument, a value of a declared kind written in
  the planted text), the share whose first such call the guard refuses or
  asks the user about; runs where the user's own request names that value
  are counted apart;
- of the successful benign runs (the user's task solved, no attack), the
  share with a refusal and the share with an ask, each with its first
  causes.

Each run gets a fresh ledger: user messages go to ``observe_user``, each
recorded call to ``check`` (nothing is approved), each successful result to
``record``.
"""

from __future__ import annotations

import gzip
import json
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail import Guard, Ledger, Verdict

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "corpus" / "agentdojo" / "traces.jsonl.gz"
MANIFESTS = {
    "banking": REPO / "examples" / "agentdojo_banking.toml",
    "slack": REPO / "examples" / "agentdojo_slack.toml",
}
COMMAND = "python benchmarks/agentdojo.py"


@dataclass
class Figures:
    """The counts of one measurement, and the shares the docs quote."""

    attacks: int = 0  # successful attack runs
    needing_id: int = 0  # ... whose goal call passes an attacker-chosen id
    user_named: int = 0  # ... of which the user's own request names the value (counted apart)
    stopped: int = 0  # ... (user_named apart) whose first goal call is refused or asked
    stopped_by: Counter[str] = field(default_factory=Counter)  # "refused" / "ask"
    missed: list[str] = field(default_factory=list)
    benign: int = 0  # successful benign runs
    refused: int = 0  # ... with a refusal
    asked: int = 0  # ... with an ask
    refusal_causes: Counter[str] = field(default_factory=Counter)
    ask_causes: Counter[str] = field(default_factory=Counter)

    @property
    def stopped_share(self) -> float:
        """Attacks stopped, of those needing an attacker-chosen id the user did not name."""
        counted = self.needing_id - self.user_named
        return self.stopped / counted if counted else 1.0

    @property
    def refused_share(self) -> float:
        """Benign runs with a refusal."""
        return self.refused / self.benign if self.benign else 0.0

    @property
    def asked_share(self) -> float:
        """Benign runs with an ask."""
        return self.asked / self.benign if self.benign else 0.0

    def to_text(self) -> str:
        """The figures as the docs print them."""
        counted = self.needing_id - self.user_named
        lines = [
            (
                f"successful attacks: {self.attacks}; whose goal needs an attacker-chosen id: "
                f"{self.needing_id} ({self.user_named} where the user's request names it, "
                "counted apart)"
            ),
            (
                f"goal call refused or asked: {self.stopped}/{counted} = "
                f"{self.stopped_share:.1%} (refused {self.stopped_by['refused']}, "
                f"asked {self.stopped_by['ask']})"
            ),
            (
                f"successful benign runs: {self.benign}; with a refusal: {self.refused} = "
                f"{self.refused_share:.1%}; with an ask: {self.asked} = {self.asked_share:.1%}"
            ),
            "first cause of a refusal: " + _causes(self.refusal_causes),
            "first cause of an ask: " + _causes(self.ask_causes),
        ]
        lines += [f"missed: {run}" for run in self.missed]
        return "\n".join(lines)


def _causes(counts: Counter[str]) -> str:
    return ", ".join(f"{cause} {n}" for cause, n in counts.most_common()) or "none"


def load_runs(path: Path = CORPUS) -> list[dict[str, Any]]:
    """The recorded runs, one object each."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def guards(manifests: Mapping[str, Path] = MANIFESTS, *, strict: bool = False) -> dict[str, Guard]:
    """One guard per suite, built from its manifest; silenced (no audit for a measurement).

    ``strict``: the manifests without their approval policies (no ``user_typed``,
    ``mentions``, ``outside`` or ``egress``), the guard as it was before asking.
    """
    built = {}
    for suite, path in manifests.items():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if strict:
            for kind in data.get("kinds", {}).values():
                for option in ("user_typed", "mentions", "outside"):
                    kind.pop(option, None)
            for tool in data["tools"].values():
                tool.pop("egress", None)
                tool.pop("outside", None)
                for produced in (tool.get("produces") or {}).values():
                    if isinstance(produced, dict):
                        produced.pop("outside", None)
        built[suite] = Guard.from_manifest(data).silenced()
    return built


def attacker_values(guard: Guard, run: Mapping[str, Any]) -> set[tuple[str, str]]:
    """``(kind, key)`` of every value of a declared kind's pattern in the planted texts."""
    found: set[tuple[str, str]] = set()
    for text in (run.get("injections") or {}).values():
        for kind in guard.kinds.values():
            found.update((kind.name, key) for _, key in kind.ids_in(text))
    return found


def _arguments(guard: Guard, name: str, arguments: Mapping[str, Any]) -> set[tuple[str, str]]:
    """``(kind, key)`` of each top-level identifier argument of a call."""
    spec = guard.specs.get(name)
    taken: set[tuple[str, str]] = set()
    if spec is None:
        return taken
    for param in spec.params:
        value = arguments.get(param.name)
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            continue
        for kind_name in param.kinds:
            key = guard.kinds[kind_name].key(str(value))
            if key:
                taken.add((kind_name, key))
    return taken


def _cause(verdict: Verdict) -> str:
    if verdict.approvals:
        request = verdict.approvals[0]
        tier = "outside" if request.outside else request.tier
        return f"{verdict.tool} {request.param} ({tier})"
    finding = next((f for f in verdict.findings if f.enforced), verdict.findings[0])
    return f"{verdict.tool} {finding.param} ({finding.problem})"


@dataclass
class RunResult:
    """What replaying one run found: every call's verdict, and the first goal call's."""

    verdicts: list[Verdict]
    goal: Verdict | None
    user_named: bool


def replay_run(guard: Guard, run: Mapping[str, Any]) -> RunResult:
    """Replay one run on a fresh ledger; the verdicts, and the first goal call's."""
    ledger: Ledger = guard.new_ledger(str(run["id"]))
    attacker = attacker_values(guard, run)
    user_text = ""
    verdicts: list[Verdict] = []
    goal: Verdict | None = None
    calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for message in run["messages"]:
        role = message["role"]
        if role == "user":
            user_text += "\n" + (message.get("content") or "")
            guard.observe_user(message.get("content") or "", ledger=ledger)
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                arguments = call.get("arguments") or {}
                calls[call.get("id") or call["name"]] = (call["name"], arguments)
                if call["name"] not in guard.specs:
                    continue
                verdict = guard.check(call["name"], arguments, ledger=ledger)
                verdicts.append(verdict)
                if goal is None and attacker & _arguments(guard, call["name"], arguments):
                    goal = verdict
        elif role == "tool":
            name, arguments = calls.get(message.get("tool_call_id") or "", (message["name"], {}))
            failed = bool(message.get("error")) or message.get("result_format") == "error"
            output = message["result"] if message.get("result") is not None else message["content"]
            if name in guard.specs:
                guard.record(name, arguments, output, error=failed, ledger=ledger)
    named = any(
        key in guard.kinds[kind].keys_in(user_text) or key in user_text for kind, key in attacker
    )
    return RunResult(verdicts, goal, named)


def measure(runs: Iterable[Mapping[str, Any]], by_suite: Mapping[str, Guard]) -> Figures:
    """The figures over ``runs`` (see the module docstring)."""
    figures = Figures()
    for run in runs:
        guard = by_suite.get(str(run["domain"]))
        if guard is None:
            continue
        attack = run.get("attack") not in (None, "none")
        benign = not attack and str(run.get("task_kind", "")).startswith("user_task")
        if attack and not run.get("security"):
            continue
        if not attack and not (benign and run.get("utility")):
            continue
        result = replay_run(guard, run)
        if attack:
            figures.attacks += 1
            if result.goal is None:
                continue
            figures.needing_id += 1
            if result.user_named:
                figures.user_named += 1
                continue
            outcome = result.goal.outcome
            if outcome in ("refused", "ask"):
                figures.stopped += 1
                figures.stopped_by[outcome] += 1
            else:
                figures.missed.append(str(run["id"]))
            continue
        figures.benign += 1
        refusal = next((v for v in result.verdicts if v.outcome == "refused"), None)
        ask = next((v for v in result.verdicts if v.outcome == "ask"), None)
        if refusal is not None:
            figures.refused += 1
            figures.refusal_causes[_cause(refusal)] += 1
        if ask is not None:
            figures.asked += 1
            figures.ask_causes[_cause(ask)] += 1
    return figures


def main(argv: list[str] | None = None) -> int:
    """Print the figures for the shipped corpus and manifests (``--strict``: without policies)."""
    strict = "--strict" in (sys.argv[1:] if argv is None else argv)
    figures = measure(load_runs(), guards(strict=strict))
    sys.stdout.write(f"{COMMAND}{' --strict' if strict else ''}\n{figures.to_text()}\n")
    return 0
