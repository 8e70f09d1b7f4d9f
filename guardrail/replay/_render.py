"""The replay report as readable tables (rich): what ``ReplayReport.to_text`` prints.

Kept apart from the report's data (:mod:`guardrail.replay._report`): a
report used for its numbers (``to_dict``, the assertions) never imports
rich, and the tables read the report as any caller would.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from guardrail.replay._corruption import ALL_CLASSES, CLASSES, DESCRIPTIONS, SAME_KIND
from guardrail.replay._live_stats import FAILED, NOT_RUN, REFUSED, SUCCEEDED, LiveStats
from guardrail.replay._stats import (
    GENUINE,
    INVENTED,
    REASONS,
    REQUIRED_IDS,
    UNVERIFIED,
    Availability,
    Stats,
    _n,
    _pct,
    false_refusals_line,
)


class ReplayReport(Protocol):
    """What the tables read of a report (:class:`guardrail.replay.ReplayReport` is one)."""

    files: list[Stats]
    total: Stats
    settings: dict[str, Any]
    seconds: float

    @property
    def availability(self) -> dict[str, Availability]: ...


_REASON_TEXT: Final[Mapping[str, str]] = {
    GENUINE: "a value a tool returned, or one the manifest should know",
    INVENTED: "appears in no earlier tool output: invented by the model",
    UNVERIFIED: "typed by the user, never looked up, passed to a write tool",
}


def as_text(report: ReplayReport, *, width: int = 100) -> str:
    """The report's tables as plain text, ``width`` columns wide, no trailing spaces."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, highlight=False)
    console.print(Group(*renderables(report)))
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def renderables(report: ReplayReport) -> Iterator[Any]:
    """The report's parts, in order: the heading, then each table."""
    total = report.total
    if total.live is not None:
        yield from _live_renderables(report, total.live)
        return
    seed = report.settings.get("seed")
    head = Text(
        f"guardrail replay: {_n(total.traces)} traces, {_n(total.calls)} tool calls, "
        f"{_n(total.identifier_arguments + total.advisory_arguments)} identifier arguments "
        "checked" + (f" (seed {seed})" if seed is not None else ""),
        style="bold",
    )
    yield head
    yield _files_table(report)
    # Above the table, not its title: a title wraps at the table's width.
    yield Text(false_refusals_line(total))
    yield from _false_refusals(report)
    if total.suspect_successes:
        yield _suspects(report)
    if total.unmatched_paths:
        yield _unmatched(report)
    if total.asked or "approve" in report.settings:
        yield _asks(report)
    yield _detection_table(report)
    yield _availability(report)
    yield from _which_one(report)
    yield from _agent(report)
    yield _input_problems(report)
    if report.seconds:
        yield Text(f"{report.seconds:.1f} s", style="dim")


def _live_renderables(report: ReplayReport, live: LiveStats) -> Iterator[Any]:
    """A live replay's parts: the heading, the per-file table, refusals, then the live counts."""
    total = report.total
    yield Text(
        f"guardrail replay --live: {_n(total.traces)} conversations, {_n(total.calls)} tool "
        f"calls, {_n(live.calls)} run through the real tools without the guard and behind it "
        "(re-prompt mode), each side on a fresh environment per conversation",
        style="bold",
    )
    yield _files_table(report)
    yield Text(false_refusals_line(total))
    yield from _false_refusals(report)
    if total.asked:
        yield _asks(report)
    yield _live_table(report)
    if live.refusal_causes:
        causes = ", ".join(f"{cause} {n}" for cause, n in live.refusal_causes.most_common())
        yield Text(f"Refused, ok without, by cause: {causes}.")
    yield from _live_examples(live)
    yield _input_problems(report)
    if report.seconds:
        yield Text(f"{report.seconds:.1f} s", style="dim")


def _live_table(report: ReplayReport) -> Table:
    """The live counts, per file where there are several, and in total."""
    table = Table(
        title="Live: the same calls without the guard and behind it", title_justify="left"
    )
    names = [
        *("without: ok / failed", "behind: ok / failed / refused / not run"),
        *("refused, ok\nwithout", "failed only\nbehind", "rewritten"),
        *("ids from\nfailures", "refused\nlive / replay"),
    ]
    for lead, stats in _strategy_rows(report, table, names):
        live = stats.live
        if live is None:
            continue
        base, behind = live.unguarded, live.guarded
        _row(
            table,
            *lead,
            f"{_n(base[SUCCEEDED])} / {_n(base[FAILED])}",
            " / ".join(_n(behind[name]) for name in (SUCCEEDED, FAILED, REFUSED, NOT_RUN)),
            _n(live.refused_succeeded),
            _n(live.failed_behind_guard),
            _n(live.rewritten_arguments),
            f"{_n(live.harvested_ids)} in {_n(live.harvested_from_failed)}",
            f"{_n(behind[REFUSED])} / {_n(live.replay_refused)}",
        )
    live = report.total.live
    assert live is not None
    table.caption = Text(
        "Refused, ok without: refused behind the guard, succeeded in the recording and "
        "without the guard. Failed only behind: failed "
        "behind the guard, succeeded without it. Rewritten: arguments the tool received "
        "otherwise than the model wrote them (the guard never rewrites one). Ids from "
        "failures: ids that entered the ledger from results that were failures. Refused "
        "live / replay: behind the guard, and in a replay of the recorded results. The "
        f"baseline agrees with the recording on {_n(live.recording_agrees)} of "
        f"{_n(live.recording_agrees + live.recording_disagrees)} calls"
        + (f"; re-prompt limit reached {_n(live.stopped)} times" if live.stopped else "")
        + (
            "; no tool in the environment for: "
            + ", ".join(f"{name} {count}" for name, count in live.missing_tools.most_common())
            if live.missing_tools
            else ""
        )
        + "."
    )
    table.caption_justify = "left"
    return table


def _live_examples(live: LiveStats) -> Iterator[Table]:
    """The calls behind each live count (up to the report's examples each)."""
    table = Table(title="Live examples", title_justify="left")
    for name in ("what", "trace", "msg", "tool", "detail"):
        table.add_column(name, overflow="fold")
    groups = (
        ("refused, ok without", live.refused_examples),
        ("failed only behind", live.failed_examples),
        ("rewritten", live.rewritten_examples),
        ("ids from a failure", live.harvested_examples),
    )
    for what, examples in groups:
        for example in examples:
            _row(table, what, example.trace, str(example.message), example.tool, example.describe())
    if table.rows:
        yield table


def _files_table(report: ReplayReport) -> Table:

    table = Table(title="Per trace file", title_justify="left", show_footer=len(report.files) > 1)
    table.add_column("file", footer="total", overflow="fold")
    names = ("traces", "calls", "refused", "false refusals", "detected", "unknown tools")
    for name, footer in zip((*names, "malformed"), _file_cells(report.total), strict=True):
        table.add_column(name, footer=footer, justify="right")
    for stats in report.files:
        _row(table, stats.path, *_file_cells(stats))
    return table


def _suspects(report: ReplayReport) -> Text:
    """A warning: results taken for successes that read like errors, and yielded ids."""
    total = report.total
    line = (
        f"Warning: {_n(total.suspect_successes)} result(s) read as successes although their "
        "text reads like an error, and ids were harvested from them:"
    )
    for example in total.suspect_examples[:5]:
        line += f"\n  {example.trace} (message {example.message}) {example.label}"
    return Text(line, style="yellow")


def _unmatched(report: ReplayReport) -> Text:
    """A warning: declared result paths that reached nothing in any successful result."""
    total = report.total
    dead = total.unmatched_paths
    line = (
        f"Warning: {_n(len(dead))} of {_n(len(total.path_results))} declared result paths "
        "matched nothing in any successful result of their tool (check each against the "
        "results' shape, or drop it):"
    )
    for tool, path, count in dead:
        line += f"\n  {tool} {path} ({_n(count)} result(s))"
    return Text(line, style="yellow")


def _asks(report: ReplayReport) -> Text:
    """Calls that would wait for the user's approval, by the tier of the values asked about."""
    total = report.total
    tiers = ", ".join(f"{tier} {count}" for tier, count in sorted(total.ask_tiers.items()))
    answer = {
        "all": f", all approved ({total.approved})",
        "none": f", all declined ({total.declined})",
    }
    line = (
        f"Asked the user (the call waits for approval, nothing refused): {_n(total.asked)} calls"
        + (f"; values by tier: {tiers}" if tiers else "")
        + answer.get(str(report.settings.get("approve")), "")
        + "."
    )
    for example in total.ask_examples[:5]:
        line += f"\n  {example.trace} (message {example.message}) {example.tool}: "
        line += example.describe()
    return Text(line)


def _false_refusals(report: ReplayReport) -> Iterator[Table]:
    """The refused calls' examples; none at all: no table (the line above says 0)."""
    total = report.total
    table = Table()
    for name in ("recording", "reason", "trace", "msg", "tool", "findings"):
        table.add_column(name, overflow="fold")
    for reason in REASONS:
        for example in total.false_refusal_examples.get(reason, []):
            _row(
                table,
                "succeeded",
                reason,
                example.trace,
                str(example.message),
                example.tool,
                example.describe() + (f"; {example.hint}" if example.hint else ""),
            )
    for example in total.refused_failed_examples:
        _row(
            table,
            "failed",
            example.label,
            example.trace,
            str(example.message),
            example.tool,
            example.describe(),
        )
    if not table.rows:
        return
    table.caption = Text("; ".join(f"{r}: {_REASON_TEXT[r]}" for r in REASONS))
    table.caption_justify = "left"
    yield table


def _detection_table(report: ReplayReport) -> Table:

    table = Table(
        title="Detection: one identifier argument of each allowed call corrupted",
        title_justify="left",
    )
    table.add_column("class")
    table.add_column("variants", justify="right")
    table.add_column("refused", justify="right")
    table.add_column("rate", justify="right")
    table.add_column("collisions", justify="right")
    table.add_column("findings")
    detection = report.total.detection
    for name in ALL_CLASSES:
        stats = detection.get(name)
        if stats is None:
            continue
        label = f"{name} (apart)" if name == SAME_KIND else name
        findings = ", ".join(f"{p} {c}" for p, c in stats.findings.most_common(3))
        collisions = (
            f"{stats.collisions} ({stats.collisions_refused} refused)" if stats.collisions else "0"
        )
        _row(
            table,
            label,
            _n(stats.variants),
            _n(stats.refused),
            _pct(stats.rate),
            collisions,
            findings,
        )
    table.caption = (
        f"{SAME_KIND}: {DESCRIPTIONS[SAME_KIND]}, what provenance alone cannot see. "
        "Collisions: a corruption that names another value the conversation holds, "
        "counted apart."
    )
    table.caption_justify = "left"
    return table


def _strategy_rows(
    report: ReplayReport, table: Table, names: list[str]
) -> list[tuple[list[str], Stats]]:
    """Add a strategy table's columns; return its rows to fill, as (leading cells, stats).

    Where there are several files, a file column leads and each file has
    its rows before the total's; else the rows are the total's alone.
    """
    by_file = len(report.files) > 1
    for name in ["file", *names] if by_file else names:
        left = name in ("file", "strategy", "kind")
        table.add_column(name, justify="left" if left else "right", overflow="fold")
    if not by_file:
        return [([], report.total)]
    return [*(([stats.path], stats) for stats in report.files), (["total"], report.total)]


def _availability(report: ReplayReport) -> Table | Text:

    if not report.total.availability:
        return Text("Availability after compaction: not measured (no compaction given).")
    compactions = max(a.compactions for a in report.total.availability.values())
    table = Table(
        title=f"Availability after compaction ({_n(compactions)} compactions each, one before "
        "each recorded call): its identifier arguments still in the context, verbatim",
        title_justify="left",
    )
    names = [
        *("strategy", "ledger ids", "present", "rate"),
        *("evicted", "other ids", "present", "rate"),
    ]
    for lead, stats in _strategy_rows(report, table, names):
        for name, avail in stats.availability.items():
            _row(
                table,
                *lead,
                name,
                _n(avail.ids),
                _n(avail.present),
                _pct(avail.rate),
                _n(avail.evicted),
                _n(avail.other_ids),
                _n(avail.other_present),
                _pct(avail.other_rate),
            )
    absent = max(a.not_in_context for a in report.total.availability.values())
    table.caption = Text(
        f"{REQUIRED_IDS[0].upper()}{REQUIRED_IDS[1:]}. Evicted: produced by a tool result "
        "but evicted since (beyond capacity), not asked. Other ids: in the context but from "
        "no tool result (typed by the user, or written by the agent), reported apart. In no "
        f"context before the call (invented): {absent}."
    )
    table.caption_justify = "left"
    return table


def _which_one(report: ReplayReport) -> Iterator[Table | Text]:
    """Of the ledger ids with rivals of their kind, those the compacted context tells apart."""
    if not any(a.which_ids for a in report.total.availability.values()):
        return
    yield Text(
        "Which one after compaction: of the ledger ids whose kind has several entries, those "
        "told apart by a note or status of their role that each other entry of the kind lacks"
    )
    table = Table()
    names = ["strategy", "kind", "asked", "told apart", "rate", "described", "told apart", "rate"]
    names += ["writes", "told apart", "rate"]
    for lead, stats in _strategy_rows(report, table, names):
        for name, avail in stats.availability.items():
            told = _pct(avail.which_rate)
            described = sum(avail.which_described_by_kind.values())
            told_described = sum(avail.which_described_told_by_kind.values())
            writes = sum(avail.which_write_by_kind.values())
            told_writes = sum(avail.which_write_told_by_kind.values())
            _row(
                table,
                *lead,
                name,
                "all",
                _n(avail.which_ids),
                _n(avail.which_told),
                told,
                _n(described),
                _n(told_described),
                _pct(told_described / described if described else None),
                _n(writes),
                _n(told_writes),
                _pct(told_writes / writes if writes else None),
            )
            for kind, asked in sorted(avail.which_asked_by_kind.items()):
                told_kind = avail.which_told_by_kind[kind]
                described = avail.which_described_by_kind[kind]
                told_described = avail.which_described_told_by_kind[kind]
                writes = avail.which_write_by_kind[kind]
                told_writes = avail.which_write_told_by_kind[kind]
                _row(
                    table,
                    *lead,
                    name,
                    kind,
                    _n(asked),
                    _n(told_kind),
                    _pct(told_kind / asked),
                    _n(described),
                    _n(told_described),
                    _pct(told_described / described if described else None),
                    _n(writes),
                    _n(told_writes),
                    _pct(told_writes / writes if writes else None),
                )
    yield Text(
        "Described: the ids a result had described before the call (their entry had a note or "
        "a status); an id only ever listed bare has nothing to be told apart by yet. Writes: "
        "the ids a write tool took, where taking the wrong one changes something."
    )
    yield table


def _agent(report: ReplayReport) -> Iterator[Table | Text]:

    recorded = report.total.agent_recorded
    if recorded is None:
        return
    agent = report.settings.get("agent") or "the agent"
    yield Text(
        f"Agent diff ({agent}): asked for its call before each of the "
        f"{_n(recorded.calls)} recorded calls. On the uncompacted context it made the "
        f"recorded call {_n(recorded.same)} times; of the recorded ledger ids it changed "
        f"{_n(recorded.changed)} of {_n(recorded.ids)}, of the other ids "
        f"{_n(recorded.other_changed)} of {_n(recorded.other_ids)}."
    )
    table = Table(
        title="Its calls on each compacted context against its calls on the uncompacted one",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    names = [
        *("strategy", "same\ncalls", "ledger\nids", "changed", "other\nids", "changed"),
        *("refused", "allowed", "incom-\nplete", "no\ncall"),
    ]
    for lead, stats in _strategy_rows(report, table, names):
        for name, diff in stats.agent.items():
            _row(
                table,
                *lead,
                name,
                _n(diff.same),
                _n(diff.ids),
                _n(diff.changed),
                _n(diff.other_ids),
                _n(diff.other_changed),
                _n(diff.refused),
                _n(diff.allowed),
                _n(diff.incomplete),
                _n(diff.no_call),
            )
    table.caption = Text(
        "Changed: identifier arguments not carried unchanged (another value, left out, or "
        "no call). A call that differs is refused by the guard, allowed though it carries "
        "another identifier, incomplete (ids left out: nothing to check), or no call."
    )
    table.caption_justify = "left"
    yield table
    shown = [
        (name, example)
        for name, diff in [("uncompacted", recorded), *report.total.agent.items()]
        for example in diff.examples[:3]
    ]
    if shown:
        text = Text("Differences (first three per context):")
        for name, example in shown:
            text.append(f"\n  {name}: {example.trace} msg {example.message} {example.label}")
        yield text


def _input_problems(report: ReplayReport) -> Text:

    total = report.total
    parts = [
        f"malformed lines {total.malformed_lines}",
        f"malformed messages {total.malformed_messages}",
        f"unknown tools {sum(total.unknown_tools.values())}"
        + (
            " (" + ", ".join(f"{k} {v}" for k, v in total.unknown_tools.most_common(5)) + ")"
            if total.unknown_tools
            else ""
        ),
        f"unreadable arguments {total.unreadable_arguments}",
        f"results with no call {total.orphan_results}",
        f"calls with no result {total.unanswered_calls}",
        f"advisory id arguments (checked, not corrupted) {total.advisory_arguments}",
    ]
    text = Text("Input: " + "; ".join(parts))
    for problem in total.malformed[:5]:
        text.append(f"\n  {problem}")
    if len(total.malformed) > 5:
        text.append(f"\n  ... and {len(total.malformed) - 5} more")
    return text


def _row(table: Table, *cells: str) -> None:
    """Add a row of plain text: identifiers and roles in brackets are not rich markup."""
    table.add_row(*(Text(cell) for cell in cells))


def _file_cells(stats: Stats) -> tuple[str, ...]:
    """The cells of a file's row (or of the total) in the per-file table."""
    return (
        _n(stats.traces),
        _n(stats.calls),
        _n(stats.refused),
        f"{stats.genuine_false_refusals} (+{stats.expected_false_refusals} expected)",
        _pct(_overall(stats)),
        _n(sum(stats.unknown_tools.values())),
        _n(len(stats.malformed)),
    )


def _overall(stats: Stats) -> float | None:
    variants = sum(stats.detection[name].variants for name in CLASSES if name in stats.detection)
    refused = sum(stats.detection[name].refused for name in CLASSES if name in stats.detection)
    return refused / variants if variants else None
