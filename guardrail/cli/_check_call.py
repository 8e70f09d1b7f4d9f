"""``guardrail check``: try a manifest's rules on one conversation before deploying them.

Given a manifest, what the user wrote, the results tools returned and one
call, it prints the verdict on the call (its findings and the re-prompt a
model would get) and the ledger it was checked against. ``--kinds-only``
prints what each kind takes from the user's text instead: the pattern's
matches with their keys, and the plain words a pattern too broad takes.

Every input is inline (JSON, or text for ``--user``) or ``@FILE``. Steps run
in the order given: each ``--user`` is a user message, each ``--result`` a
result recorded (``{"tool": ..., "arguments": {...}, "result": ..., "error":
false}``, or a list of them), then ``--call`` (``{"tool": ..., "arguments":
{...}}``) is checked. The exit code is 0 for an allowed call, 1 for a
refused one, 2 for an error of use. A result is read as the guard reads it at
run time, by the tool's failure rule (``fails``; by default a text starting
``Error:`` is a failure), and a result taken for a success whose text reads
like an error (``Error``, ``Not found``, ``Invalid``...) and yielded ids is
warned about, with what to declare.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from guardrail._data.verdict import Verdict
from guardrail._guard.audit import SilentLogger
from guardrail._guard.facade import Guard
from guardrail._provenance.coverage import admitting, reached
from guardrail._provenance.failure import suspect_success
from guardrail.errors import BroadPatternWarning, GuardrailUsageError
from guardrail.kinds._words import COMMON_WORDS
from guardrail.ledger import Ledger

#: The exit code of a refused call (0: allowed; 2: an error of use).
REFUSED = 1


class _Step(argparse.Action):
    """Appends ``(option, raw)`` to ``steps``: user texts and results in command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        steps = getattr(namespace, "steps", None) or []
        steps.append((self.dest, values))
        namespace.steps = steps


def add_parser(commands: Any) -> None:
    """The ``check`` subcommand, on the ``guardrail`` parser's subcommands."""
    check = commands.add_parser(
        "check",
        help="try a manifest on user text, tool results and one call: the verdict and the ledger",
        description="Check one call against the ledger that user messages and tool results "
        "build, as the guard would at run time, and print the verdict, its re-prompt and the "
        "ledger. Each input is inline or @FILE. Exit code: 0 allowed, 1 refused, 2 error of use.",
    )
    check.add_argument(
        "--manifest", required=True, metavar="FILE", help="the tools' manifest (TOML or JSON)"
    )
    check.add_argument(
        "--user",
        action=_Step,
        dest="user",
        metavar="TEXT",
        help="a user message (repeat for several; @FILE reads one from a file)",
    )
    check.add_argument(
        "--result",
        action=_Step,
        dest="result",
        metavar="JSON",
        help='a tool result to record: {"tool": ..., "arguments": {...}, "result": ..., '
        '"error": false}, or a list of them; @FILE reads a JSON file',
    )
    check.add_argument(
        "--call",
        metavar="JSON",
        help='the call to check: {"tool": ..., "arguments": {...}}; @FILE reads a JSON file',
    )
    check.add_argument(
        "--kinds-only",
        action="store_true",
        help="print what each kind's pattern takes from the user text, and stop",
    )
    check.add_argument("--json", action="store_true", help="print the outcome as JSON")
    check.add_argument("--width", type=int, metavar="N", help="output width in characters")


def _read(raw: str, what: str) -> str:
    if not raw.startswith("@"):
        return raw
    path = Path(raw[1:])
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GuardrailUsageError(f"{what} {raw}: cannot read it: {exc.strerror or exc}") from None


def _json(raw: str, what: str) -> Any:
    text = _read(raw, what)
    try:
        return json.loads(text)
    except ValueError as exc:
        shown = raw if raw.startswith("@") else "(inline)"
        raise GuardrailUsageError(
            f"{what} {shown} is not valid JSON: {exc}; write it as JSON, or @FILE for a file"
        ) from None


def _call(raw: Any, what: str) -> tuple[str, Any]:
    """``(tool, arguments)`` from ``{"tool"|"name": ..., "arguments": ...}``."""
    if not isinstance(raw, dict):
        raise GuardrailUsageError(f'{what} is {{"tool": NAME, "arguments": {{...}}}}, not {raw!r}')
    tool = raw.get("tool", raw.get("name"))
    if not isinstance(tool, str) or not tool:
        raise GuardrailUsageError(f'{what} needs "tool": the name of the tool called')
    unknown = set(raw) - {"tool", "name", "arguments", "result", "error"}
    if unknown:
        raise GuardrailUsageError(f"{what} has unknown keys {sorted(unknown)}")
    return tool, raw.get("arguments", {})


def _results(raw: str) -> list[dict[str, Any]]:
    data = _json(raw, "--result")
    results = data if isinstance(data, list) else [data]
    for number, result in enumerate(results):
        _call(result, f"--result {number + 1}")
        if "result" not in result:
            raise GuardrailUsageError(
                f'--result {number + 1} needs "result": what the tool returned'
            )
    return results


def _load(manifest: str) -> tuple[Guard, list[str]]:
    """The guard (re-prompt mode: a refusal is a verdict), and the warnings its manifest gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BroadPatternWarning)
        guard = Guard.from_manifest(
            manifest, mode="reprompt", logger=SilentLogger()
        )  # the check prints its outcome
    return guard, [str(warning.message) for warning in caught]


def kinds_report(guard: Guard, texts: Sequence[str]) -> list[dict[str, Any]]:
    """Per kind: what its pattern takes from ``texts`` (written, key, whether a plain word)."""
    report = []
    for kind in guard.kinds.values():
        taken = [
            {"text": number, "written": written, "key": key, "plain_word": _plain(written)}
            for number, text in enumerate(texts)
            for written, key in kind.ids_in(text)
        ]
        report.append(
            {
                "kind": kind.name,
                "pattern": kind.pattern,
                "taken": taken,
                "plain_words": kind.plain_words(),
            }
        )
    return report


def _plain(written: str) -> bool:
    return written.casefold() in COMMON_WORDS


def run_check(args: argparse.Namespace, console: Console) -> int:
    """Run ``guardrail check``; returns the exit code."""
    guard, notes = _load(args.manifest)
    steps: list[tuple[str, str]] = getattr(args, "steps", None) or []
    texts = [_read(raw, "--user") for dest, raw in steps if dest == "user"]
    if args.kinds_only:
        report = kinds_report(guard, texts)
        if args.json:
            console.print_json(json.dumps({"kinds": report, "warnings": notes}))
        else:
            _print_kinds(console, report, texts, notes)
        return 0
    if args.call is None:
        raise GuardrailUsageError("give --call JSON (the call to check), or --kinds-only")
    tool, arguments = _call(_json(args.call, "--call"), "--call")
    returned: list[tuple[str, Any]] = []  # the successful results, in order
    unmatched: list[dict[str, str]] = []  # declared paths that reached nothing in a result
    with guard.session("guardrail-check") as ledger:
        for dest, raw in steps:
            if dest == "user":
                guard.observe_user(_read(raw, "--user"))
                continue
            for result in _results(raw):
                name, given = _call(result, "--result")
                error = bool(result.get("error", False))
                guard.record(name, given, result["result"], error)
                spec = guard.specs.get(name)
                if not error and spec is not None:
                    suspect = suspect_success(spec, result["result"], guard.kinds)
                    if suspect is not None:  # read as a success, though it reads like an error
                        notes.append(suspect.advice)
                failed = error or guard.failed(name, result["result"])
                if not failed:
                    returned.append((name, result["result"]))
                if not failed and spec is not None:
                    unmatched.extend(
                        {"tool": name, "path": path}
                        for path, hit in reached(spec, result["result"]).items()
                        if not hit
                    )
        verdict = guard.check(tool, arguments)
    hints = _hints(guard, verdict, returned)
    if args.json:
        outcome = _outcome(verdict, ledger, notes)
        outcome.update(unmatched_paths=unmatched, hints=hints)
        console.print_json(json.dumps(outcome, default=str))
    else:
        _print_verdict(console, verdict, ledger, notes, unmatched, hints)
    return 0 if verdict.allowed else REFUSED


def _hints(guard: Guard, verdict: Verdict, returned: Sequence[tuple[str, Any]]) -> dict[str, str]:
    """Per refused value found in a given result: where, and the declaration that admits it."""
    hints: dict[str, str] = {}
    for finding in verdict.findings:
        value = str(finding.to_dict()["value"])
        if finding.problem in ("unknown", "mutated", "truncated") and value not in hints:
            for tool, output in reversed(returned):  # the latest result that returned it
                fix = admitting(tool, output, value, finding.kind, guard.specs.get(tool))
                if fix is not None:
                    hints[value] = f"it is in the result of {tool}: {fix}"
                    break
    return hints


def _outcome(verdict: Verdict, ledger: Ledger, notes: Sequence[str]) -> dict[str, Any]:
    return {
        "tool": verdict.tool,
        "allowed": verdict.allowed,
        "findings": [finding.to_dict() for finding in verdict.findings],
        "message": verdict.message,
        "arguments": dict(verdict.arguments) if verdict.arguments is not None else None,
        "ledger": [_entry(entry) for entry in ledger.entries()],
        "warnings": list(notes),
    }


def _entry(entry: Any) -> dict[str, Any]:
    return {
        "role": entry.role,
        "kind": entry.kind,
        "value": entry.value,
        "verified": entry.verified,
        "source": entry.source.tool,
        "path": entry.source.path,
    }


def _print_notes(console: Console, notes: Sequence[str]) -> None:
    for note in notes:
        console.print(Text(f"warning: {note}", style="yellow"))


def _print_verdict(
    console: Console,
    verdict: Verdict,
    ledger: Ledger,
    notes: Sequence[str],
    unmatched: Sequence[Mapping[str, str]] = (),
    hints: Mapping[str, str] | None = None,
) -> None:
    _print_notes(console, notes)
    for dead in unmatched:
        console.print(
            Text(
                f"warning: {dead['tool']} declares produces {dead['path']!r}, which matched "
                "nothing in the result given: check the path against the result's shape",
                style="yellow",
            )
        )
    hints = hints or {}
    if verdict.allowed:
        console.print(Text(f"{verdict.tool}: allowed", style="bold green"))
    else:
        console.print(Text(f"{verdict.tool}: refused", style="bold red"))
    if verdict.findings:
        table = Table("problem", "param", "value", "kind", "nearest role", "detail")
        for finding in verdict.findings:
            table.add_row(  # values as text: an id or a pattern is never read as markup
                finding.problem,
                Text(finding.param),
                Text(finding.to_dict()["value"]),
                finding.kind,
                finding.nearest_role or "",
                finding.detail,
            )
        console.print(table)
    for value, hint in hints.items():
        console.print(Text(f"{value}: {hint}", style="cyan"), soft_wrap=True)
    if verdict.message:
        console.print("re-prompt sent to the model:")
        console.print(Text(verdict.message), soft_wrap=True)
    _print_ledger(console, ledger)


def _print_ledger(console: Console, ledger: Ledger) -> None:
    entries = list(ledger.entries())
    if not entries:
        console.print("ledger: empty")
        return
    table = Table("role", "kind", "value", "verified", "from", title="ledger", title_justify="left")
    for entry in entries:
        source = (
            "user" if entry.source.tool == "user" else f"{entry.source.tool} {entry.source.path}"
        )
        table.add_row(  # as text: "re:([a-z]+)" or an id in brackets is never read as markup
            entry.role,
            entry.kind,
            Text(entry.value),
            "yes" if entry.verified else "no",
            Text(source),
        )
    console.print(table)


def _print_kinds(
    console: Console,
    report: Sequence[Mapping[str, Any]],
    texts: Sequence[str],
    notes: Sequence[str],
) -> None:
    _print_notes(console, notes)
    for kind in report:
        pattern = kind["pattern"]
        head = f"{kind['kind']}: " + (f"pattern {pattern}" if pattern else "no pattern")
        console.print(Text(head, style="bold"))
        if pattern is None:
            console.print(
                "  matched in the user's words after its normaliser, when an argument is checked"
            )
            continue
        if not kind["taken"]:
            console.print("  takes nothing from the user text" if texts else "  (no --user text)")
        for taken in kind["taken"]:
            mark = "  <- a plain word: the pattern is too broad" if taken["plain_word"] else ""
            console.print(Text(f"  {taken['written']!r} -> {taken['key']!r}{mark}"))
