"""The development tools: pinned as the project says, installable as an extra or a group."""

from __future__ import annotations

import re
import sys
from typing import Any

from .conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: Linters and the type checker: a new release that formats or infers differently must not
#: fail a fresh clone's `make test`, so these are pinned exactly.
EXACT = {"ruff", "mypy"}


def _project() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return match.group(0).lower()


def test_every_dev_tool_has_a_range_and_the_linters_an_exact_pin() -> None:
    """Each dev requirement has a lower and an upper bound; ruff and mypy are pinned with ==."""
    dev = _project()["project"]["optional-dependencies"]["dev"]
    assert {_name(r) for r in dev} >= EXACT
    for requirement in dev:
        spec = requirement.split(";")[0]
        if _name(requirement) in EXACT:
            assert re.search(r"==\d", spec), f"{requirement}: pin the linter exactly"
        else:
            assert ">=" in spec and "<" in spec.replace("<=", ""), (
                f"{requirement}: give a range, e.g. pytest>=8,<10"
            )


def test_the_dev_group_mirrors_the_dev_extra() -> None:
    """`pip install --group dev` installs what `pip install -e '.[dev]'` adds, no more, no less."""
    project = _project()
    assert project["dependency-groups"]["dev"] == project["project"]["optional-dependencies"]["dev"]
