"""The development tools: pinned as the project says, installable as an extra or a group."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from .conftest import REPO, computed_once

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


def test_the_dev_tools_are_one_list_the_group_names_the_extra() -> None:
    """`pip install -e . --group dev` installs the dev extra itself: one list, written once."""
    project = _project()
    assert project["dependency-groups"]["dev"] == [f"{project['project']['name']}[dev]"]


def test_computed_once_builds_a_value_once_for_all_the_workers_of_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under pytest-xdist the first worker computes and pickles; the others load its value."""
    runs: list[str] = []

    def compute() -> dict[str, int]:
        runs.append("computed")
        return {"answer": 42}

    class Factory:
        """What computed_once asks of pytest's TempPathFactory, on two workers of one run."""

        def __init__(self, worker: str) -> None:
            self.base = tmp_path / worker

        def getbasetemp(self) -> Path:
            return self.base

    for worker in ("popen-gw0", "popen-gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker.removeprefix("popen-"))
        factory = cast(pytest.TempPathFactory, Factory(worker))
        assert computed_once("answer", compute, factory) == {"answer": 42}
    assert runs == ["computed"]
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert computed_once("answer", compute, cast(pytest.TempPathFactory, Factory("x")))
    assert runs == ["computed", "computed"]  # a serial run computes: no cache across runs
