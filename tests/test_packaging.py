"""The distribution: its name on the package index, and what its sdist and wheel hold."""

from __future__ import annotations

import email
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

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


# -- what the artefacts hold -------------------------------------------------------------------


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist, built from this checkout by hatchling (as `python -m build`)."""
    hatchling = pytest.importorskip("hatchling.builders.wheel")
    from hatchling.builders.sdist import SdistBuilder

    out = tmp_path_factory.mktemp("dist")
    wheel = next(iter(hatchling.WheelBuilder(str(REPO)).build(directory=str(out))))
    sdist = next(iter(SdistBuilder(str(REPO)).build(directory=str(out))))
    return Path(wheel), Path(sdist)


def test_the_wheel_holds_every_package_file_py_typed_and_the_corpus(
    artefacts: tuple[Path, Path],
) -> None:
    """Every file of the package (py.typed, any data), the sample corpus and its manifest."""
    wheel, _ = artefacts
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        manifest = archive.read("guardrail/replay/_corpus/tau-airline/manifest.toml")
    package = {
        path.relative_to(REPO).as_posix()
        for path in (REPO / "guardrail").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert "guardrail/py.typed" in package
    assert package <= names, sorted(package - names)
    corpus = "guardrail/replay/_corpus/tau-airline/"
    assert {f"{corpus}traces.jsonl.gz", f"{corpus}LICENSE", f"{corpus}README.md"} <= names
    assert manifest == (REPO / "examples" / "tau_airline.toml").read_bytes()
    assert not [name for name in names if name.startswith(("tests/", "examples/", "docs/"))]


def test_the_wheel_metadata_names_the_distribution_its_extras_and_commands(
    artefacts: tuple[Path, Path],
) -> None:
    """METADATA: guardrail-ids, wrapt required, the otel extra; the command and pytest plugin."""
    wheel, _ = artefacts
    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert metadata["Name"] == DISTRIBUTION
    assert any(req.startswith("wrapt") for req in metadata.get_all("Requires-Dist", []))
    assert {"otel", "langchain", "redis"} <= set(metadata.get_all("Provides-Extra", []))
    assert "guardrail = guardrail.cli:main" in entry_points
    assert "guardrail = guardrail.testing._plugin" in entry_points


def test_the_wheel_carries_the_project_licence_and_the_corpus_licence(
    artefacts: tuple[Path, Path],
) -> None:
    """The MIT licence of the project and of the shipped corpus travel in the wheel's metadata."""
    wheel, _ = artefacts
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
        licence = archive.read(info.replace("METADATA", "licenses/LICENSE")).decode()
    assert metadata["License-Expression"] == "MIT"
    assert set(metadata.get_all("License-File", [])) == {"LICENSE", "corpus/tau-airline/LICENSE"}
    assert licence.startswith("MIT License")


def test_the_sdist_is_the_source_the_wheel_and_the_tests_are_built_from(
    artefacts: tuple[Path, Path],
) -> None:
    """The sdist: the package, what the wheel takes from outside it, the tests; no CI, no caches."""
    _, sdist = artefacts
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in (
        "guardrail/py.typed",
        "corpus/tau-airline/traces.jsonl.gz",
        "examples/tau_airline.toml",
        "LICENSE",
        "tests/conftest.py",
        "tests/smoke_installed.py",
        "docs/index.md",
        "mkdocs.yml",
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith((".ci/", ".venv/", "dist/", "build/", "site/"))]
    assert not [n for n in names if "__pycache__" in n]


def test_ci_checks_the_built_artefacts_after_the_tests() -> None:
    """.ci/run: make test, then make package-check (build, check, install with an extra, run)."""
    run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert run.index("make test\n") < run.index("make package-check\n")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    recipe = makefile[makefile.index("package-check: ") :].split("\n\n", 1)[0]
    for step in (
        "-m build",
        "twine check --strict",
        "check-wheel-contents",
        "-m venv",
        '.whl)[otel]"',
        "bin/guardrail --version",
        "bin/guardrail demo",
        "tests/smoke_installed.py",
    ):
        assert step in recipe, step
    assert "[dev]" not in recipe


def test_the_wheel_passes_check_wheel_contents_as_ci_runs_it(
    artefacts: tuple[Path, Path],
) -> None:
    """`make package-check` runs check-wheel-contents; its verdict is known before CI runs."""
    tool = Path(sys.executable).with_name("check-wheel-contents")
    if not tool.exists():
        pytest.skip("check-wheel-contents is a development tool: pip install -e '.[dev]'")
    wheel, _ = artefacts
    run = subprocess.run(
        [str(tool), str(wheel)], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
