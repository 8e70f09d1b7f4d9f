"""The distribution: its name on the package index, and what its sdist and wheel hold."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: The distribution's name: on the package index, ``guardrail`` is an unrelated library.
DISTRIBUTION = "guardrail-ids"

#: Where users read install lines, and where error messages tell them what to install.
_WRITTEN = ("README.md", "CHANGELOG.md", "docs", "guardrail", "examples", "benchmarks")


def _texts() -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for name in _WRITTEN:
        path = REPO / name
        files = [path] if path.is_file() else sorted(path.rglob("*"))
        found.extend(
            (file, file.read_text(encoding="utf-8"))
            for file in files
            if file.suffix in {".md", ".py", ".toml"} and file.is_file()
        )
    return found


def test_the_distribution_is_named_guardrail_ids() -> None:
    """pyproject names the distribution guardrail-ids; the command stays `guardrail`."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {"guardrail": "guardrail.cli:main"}


def test_every_install_line_names_the_distribution() -> None:
    """No README, docs page, changelog entry or error message says `pip install guardrail[...]`."""
    wrong = re.compile(r"(?<![\w/.-])guardrail\\?\[(?!\\w)")
    install = re.compile(r"pip install\s+'?(?!-)([^\s']+)")
    for path, text in _texts():
        for line_number, line in enumerate(text.splitlines(), 1):
            where = f"{path.relative_to(REPO)}:{line_number}"
            assert not wrong.search(line), f"{where}: install {DISTRIBUTION}[extra]: {line}"
            for target in install.findall(line):
                # A local path, the project itself, a dev tool, or the distribution by name.
                assert target.startswith((".", "/", DISTRIBUTION)) or "guardrail" not in target, (
                    f"{where}: {line}"
                )
