"""The README's example runs as written and prints what it says."""

from __future__ import annotations

import re

import pytest

from .conftest import REPO


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The thirty-line example at the top of the README works and refuses the mutated id."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert example is not None
    code = example.group(1)
    assert len(code.splitlines()) <= 30
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "refunded 40 on W2378156" in out
    assert "\nmutated\n" in out
    assert "guardrail refused the call to issue_refund" in out
