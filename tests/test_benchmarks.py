"""The benchmark harness runs end to end in quick mode (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "run.py"

EXPECTED_ROWS = (
    "| bare call |",
    "| bare await |",
    "| functools.wraps pass-through |",
    "| wrapt pass-through (empty) |",
    "| pydantic.validate_call |",
    "| LangChain tool.invoke |",
    "| LangChain tool.ainvoke |",
    "| guarded, ledger 100 |",
    "| guarded, ledger 1,000 |",
    "| unknown id, ledger 1,000 (guard.check) |",
    "| mutated id, ledger 1,000 (guard.check) |",
    "| unknown id, 300 new ids since the last refusal (guard.check) |",
    "| naive Levenshtein scan, unknown id |",
    "| naive Levenshtein scan, mutated id |",
    "| guard.record, ",
    "| json.loads, ",
    "| one ledger of 1,000 entries, per entry |",
    "| 20 sessions × 5 entries, per session |",
    "compaction",
    "| ids recorded per second, parsing included |",
    "| MemoryStore, ledger 100: allowed call, session opened per call |",
    "| SQLiteStore (file), ledger 100: record of 1 new id, session per call |",
    "| SQLiteStore (file), ledger 100: stored bytes per entry |",
    "finished sessions × 5 ids, MemoryStore + cache of 1,024 |",
    "| guard's own work (guarded − wrapt) / wrapt's own cost (wrapt − bare) |",
    "| GuardrailMiddleware around tool.invoke |",
    "| create_agent run, GuardrailMiddleware |",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One quick run of the harness, its output and its results folder."""
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout, out


def test_quick_mode_prints_every_row(quick_run: tuple[str, Path]) -> None:
    """Quick mode prints a markdown table with a row for every benchmark the issue names."""
    text, _ = quick_run
    missing = [row for row in EXPECTED_ROWS if row not in text]
    assert not missing, f"rows missing from the table: {missing}\n{text}"
    assert "| case | median | min | max | unit |" in text


def test_quick_mode_names_machine_and_targets(quick_run: tuple[str, Path]) -> None:
    """The table names the CPU and Python version and ends in the targets."""
    text, _ = quick_run
    assert "- CPU: " in text
    assert "- Python: " in text
    assert "## Targets" in text
    assert "Quick mode" in text


def test_quick_mode_writes_results(quick_run: tuple[str, Path]) -> None:
    """With --out the table is saved, and the scaling plot when matplotlib is installed."""
    _, out = quick_run
    assert (out / "latest.md").read_text(encoding="utf-8").startswith("# guardrail benchmarks")
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
