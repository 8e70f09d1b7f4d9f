"""What a run measured, and its rendering: one markdown table per section, then the targets."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import platform
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .timing import paired_difference, paired_ratio

HERE = Path(__file__).resolve().parent

#: Packages whose versions the table names, where installed (the first three always are).
VERSIONS = (
    "wrapt",
    "pydantic",
    "structlog",
    "langchain-core",
    "langchain",
    "langgraph",
    "pydantic-ai-slim",
    "openai-agents",
    "google-adk",
    "mcp",
    "redis",
    "psycopg",
)


@dataclass
class Row:
    """One measured case: samples (seconds per operation, or bytes), or why it was skipped."""

    name: str
    samples: list[float] = field(default_factory=list)
    unit: str = "µs"
    note: str = ""
    skipped: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


@dataclass
class Section:
    """One table: rows, then derived ratios."""

    title: str
    rows: list[Row] = field(default_factory=list)
    ratios: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Target:
    """One target set for a number, with what was measured."""

    what: str
    target: str
    measured: str
    met: bool | None  # None: not measured (skipped)


@dataclass
class Report:
    sections: list[Section] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


def ratio(a: Row, b: Row) -> float:
    """``a / b``: the median of per-round ratios when the rounds line up, else of medians."""
    return paired_ratio(a.samples, b.samples)


def difference(a: Row, b: Row) -> float:
    """``a - b`` in seconds: the median of the per-round differences."""
    return paired_difference(a.samples, b.samples)


def _scale(unit: str) -> float:
    return {"µs": 1e6, "ms": 1e3, "s": 1.0, "B": 1.0, "KB": 1e-3, "MB": 1e-6, "rows": 1.0}[unit]


def _fmt(value: float) -> str:
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def machine() -> list[str]:
    """The CPU, Python, the versions of what was measured, and the commit."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), Path("/proc/cpuinfo").open() as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        importlib.import_module("wrapt._wrappers")
        wrapt_kind = "C extension"
    except ImportError:
        wrapt_kind = "pure Python"
    versions = {}
    for name in VERSIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    commit = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    return [
        f"- CPU: {cpu} ({os.cpu_count()} logical CPUs)",
        (
            f"- Python: {platform.python_implementation()} {platform.python_version()}"
            f" on {platform.system()}"
        ),
        "- "
        + ", ".join(f"{name} {version}" for name, version in versions.items())
        + f" (wrapt {wrapt_kind})",
        *([f"- guardrail at commit {commit}"] if commit else []),
    ]


def render(report: Report, command: str, quick: bool) -> str:
    """The report as markdown: the machine, one table per section, the targets."""
    lines = ["# guardrail benchmarks", ""]
    if quick:
        lines += [
            "**Quick mode: tiny sizes, only a check that the harness runs. Not numbers.**",
            "",
        ]
    lines += [f"Command: `{command}`", "", *machine(), ""]
    lines += [
        (
            "Median, min and max over interleaved rounds; a ratio is the median of the per-round "
            "ratios of the two cases. structlog is configured as in production (filtering below "
            "WARNING, JSON to a sink)."
        ),
        "",
    ]
    for section in report.sections:
        lines += [
            f"## {section.title}",
            "",
            "| case | median | min | max | unit |",
            "|---|---:|---:|---:|---|",
        ]
        for row in section.rows:
            if row.skipped:
                lines.append(f"| {row.name} | skipped | | | {row.skipped} |")
                continue
            scale = _scale(row.unit)
            values = [row.median, min(row.samples), max(row.samples)]
            lines.append(
                f"| {row.name} | "
                + " | ".join(_fmt(v * scale) for v in values)
                + f" | {row.unit} |"
            )
        if section.ratios:
            lines += ["", "| ratio | value |", "|---|---:|"]
            lines += [f"| {what} | {value} |" for what, value in section.ratios]
        for note in section.notes:
            lines += ["", note]
        lines.append("")
    if report.targets:
        lines += ["## Targets", ""]
        if quick:  # tiny sizes and short samples: a verdict would mean nothing
            lines += ["Not judged at quick sizes: the figures only show the harness ran.", ""]
        lines += ["| what | target | measured | met |", "|---|---|---|---|"]
        for target in report.targets:
            met = "n/a" if target.met is None else ("yes" if target.met else "**no**")
            met = "not judged" if quick else met
            lines.append(f"| {target.what} | {target.target} | {target.measured} | {met} |")
        lines.append("")
    return "\n".join(lines)


def plot(report: Report, path: Path) -> str:
    """Scaling curves as a PNG; returns a note (matplotlib is a dev dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[dev]'); no plot written"
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for label, points in report.curves.items():
        if label.startswith("compaction") or not points:
            continue
        xs, ys = zip(*points, strict=True)
        style = "--" if "wrapt" in label else "-o"
        left.plot(xs, [y * 1e6 for y in ys], style, label=label)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("ledger entries")
    left.set_ylabel("µs per call")
    left.set_title("Time against ledger size")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    points = report.curves.get("compaction, per transcript", [])
    if points:
        xs, ys = zip(*points, strict=True)
        right.plot(xs, [y * 1e3 for y in ys], "-o", label="compact, no summariser")
        right.set_xscale("log")
        right.set_yscale("log")
        right.legend(fontsize=8)
    else:
        right.text(
            0.5,
            0.5,
            "compaction not measured\n(not in this run's --only groups)",
            ha="center",
            va="center",
            transform=right.transAxes,
        )
    right.set_xlabel("transcript messages")
    right.set_ylabel("ms per compaction")
    right.set_title("Time against transcript size")
    right.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"plot written to {path}"
