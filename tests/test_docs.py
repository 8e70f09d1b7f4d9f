"""The documentation: its examples run, it names what exists, the reference misses no name.

``make docs`` builds the site with ``mkdocs build --strict``; the build's hooks
(``docs/_tooling/hooks.py``) fail it when the API reference leaves out a public
name, when a page cites the internal design notes, or when a page loads anything
from the network. These tests run without building: they check the pages' text,
run their examples, and test the hooks' checks on their own.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from . import docblocks, docrun
from .conftest import REPO

DOCS = REPO / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_tooling" not in path.parts)


def _tooling(name: str) -> ModuleType:
    """A module of ``docs/_tooling`` (not a package: MkDocs loads them by path)."""
    path = DOCS / "_tooling" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"guardrail_docs_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hooks = _tooling("hooks")
roles = _tooling("griffe_roles")


def _page_id(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


# -- every code block runs, or says what it needs ---------------------------------------------


def _marks(page: str) -> list[pytest.MarkDecorator]:
    """An adapter's page imports its runtime; a page that replays the corpus is slow."""
    marks = [pytest.mark.runtimes] if "/integrations/" in f"/{page}" else []
    if page.endswith("agent_framework.md") and sys.version_info < (3, 11):
        marks.append(pytest.mark.skip(reason="Agent Framework needs Python 3.11"))
    text = (REPO / page).read_text(encoding="utf-8")
    if "corpus/tau-airline" in text and "guardrail replay" in text:
        marks.append(pytest.mark.slow)
    return marks


CODE_PAGES = [
    pytest.param(page, marks=_marks(page), id=page)
    for page in (docblocks.page_id(path) for path in docblocks.pages())
    # Every page with a block that is not plain text: one without a language fails, too.
    if any(
        block.language != docblocks.OUTPUT
        for block in docblocks.blocks((REPO / page).read_text(encoding="utf-8"), page)
    )
]


@pytest.mark.parametrize("page", CODE_PAGES)
def test_every_code_block_of_a_page_runs_and_prints_what_it_shows(
    page: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each code block runs as written (or its *Needs* line says why not) and prints its output.

    The page's blocks run in order, in a scratch folder holding the repository's examples/
    and corpus/; README.md is one of the pages.
    """
    listed = docblocks.blocks((REPO / page).read_text(encoding="utf-8"), page)
    with docrun.Runner(tmp_path, REPO, request) as runner:
        for block in listed:
            runner.run(block)


def test_the_block_reader_knows_code_outputs_marks_and_files() -> None:
    """Output pairs with the block before it; *Needs* and *Continues* lines are read."""
    page = (
        "```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "*Needs an OpenAI API key.*\n```python\nboom()\n```\n"
        "*Continues the example above.*\n\n```python\nx\n```\n"
        "<!-- not run: hidden -->\n```toml\n# tools.toml\n```\nA diagram:\n```text\ndiagram\n```\n"
    )
    found = docblocks.blocks(page, "p.md")
    assert [(b.language, b.output, b.needs, b.continues, b.runs) for b in found] == [
        ("python", "1\n", None, False, True),
        ("python", None, "an OpenAI API key", False, False),
        ("python", None, None, True, True),
        ("toml", None, None, False, True),
        ("text", None, None, False, False),
    ]
    assert found[3].hidden_mark and found[3].file == "tools.toml"
    # In a list item, or fenced otherwise, a block is found all the same.
    nested = "- a step:\n\n  ```python\n  print(1)\n  ```\n~~~toml\na = 1\n~~~\n"
    assert [(b.language, b.code) for b in docblocks.blocks(nested)] == [
        ("python", "print(1)\n"),
        ("toml", "a = 1\n"),
    ]
    assert docblocks.blocks("*Needs a key*\n```python\nx\n```\n")[0].needs == "a key"
    assert [b.line for b in found] == [1, 9, 14, 18, 22]


def test_shell_lines_are_read_as_the_shell_reads_them() -> None:
    """Continued lines join, quotes may span lines, comments go, a here-document is stdin."""
    code = (
        'guardrail check --user "a #b" \\\n    --call \'{"x":\n 1}\'  # why\n'
        "python - <<'EOF'\nprint(2)\nEOF\n"
    )
    assert docblocks.commands(code) == [
        docblocks.Command(["guardrail", "check", "--user", "a #b", "--call", '{"x":\n 1}']),
        docblocks.Command(["python", "-"], "print(2)\n"),
    ]


def test_an_output_matches_in_order_with_dots_for_any_lines() -> None:
    """A shown output is found in what is printed, its runs in order, ... standing for lines."""
    printed = "head\na   \nb\nc\nd\ntail\n"
    assert docblocks.output_matches("a\nb\n...\nd\n", printed)
    assert docblocks.output_matches("a\nb\n", printed)
    assert not docblocks.output_matches("d\n...\na\n", printed)
    assert not docblocks.output_matches("a\nc\n", printed)
    assert docblocks.output_matches("ta...\n", printed)
    assert not docblocks.output_matches("tail x...\n", printed)


@pytest.mark.parametrize(
    ("markdown", "says"),
    [
        ("```python\nundefined_name\n```\n", "NameError"),
        ("```python\nprint(1)\n```\n\n```text\n2\n```\n", "prints something else"),
        ('```toml\n[tools.t]\nids = { a = "nokind" }\n```\n', "nokind"),
        ("```sh\npip install guardrail-ids\n```\n", "cannot run 'pip'"),
        ("<!-- not run: x -->\n```python\nx\n```\n", "an HTML comment"),
        ("```\nx\n```\n", "no language"),
    ],
)
def test_a_block_that_fails_says_where_and_how_to_fix_or_mark_it(
    markdown: str, says: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A new unmarked block that fails breaks the test, naming the page, line and the fix."""
    (block,) = docblocks.blocks(markdown, "docs/new.md")
    with (
        docrun.Runner(tmp_path, REPO, request) as runner,
        pytest.raises(docrun.BlockFailed) as failed,
    ):
        runner.run(block)
    message = str(failed.value)
    assert message.startswith(("docs/new.md:1 ", "docs/new.md:2 "))
    assert says in message
    assert "*Needs <what it needs>.*" in message


def test_a_block_runs_on_its_own_unless_it_continues_the_example(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A block without the mark sees none of the page's names; one with it sees the first."""
    page = (
        "```python\nguard = 'first'\n```\n"
        "```python\nguard = 'its own'\n```\n"
        "*Continues the example above.*\n```python\nprint(guard)\n```\n\n```text\nfirst\n```\n"
        "```python\nprint(guard)\n```\n"
    )
    *runs, alone = docblocks.blocks(page, "docs/p.md")
    with docrun.Runner(tmp_path, REPO, request) as runner:
        for block in runs:
            runner.run(block)
        with pytest.raises(docrun.BlockFailed, match="NameError"):
            runner.run(alone)


def test_a_block_marked_needs_is_not_run(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A block whose *Needs* line says it needs a key is skipped, shown as such."""
    (block,) = docblocks.blocks("*Needs an OpenAI API key.*\n```python\nboom()\n```\n")
    with docrun.Runner(tmp_path, REPO, request) as runner:
        runner.run(block)
        assert runner.skipped == [block]


@pytest.mark.slow  # every step in a subprocess
def test_the_first_hour_timer_runs_every_step_of_the_page() -> None:
    """benchmarks/first_hour.py, which the page's table of times quotes, runs each step."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "first_hour.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    steps = {row.split(" | ")[0][2:4] for row in rows}
    assert steps == {"1.", "2.", "3.", "4.", "5.", "6."}
    assert "`guardrail replay support.json" in done.stdout
    assert not (REPO / "first-hour-work").exists()


# -- the pages name what exists ----------------------------------------------------------------

MODULE_NAME = re.compile(r"`(guardrail(?:\.\w+)+)`")
PRIVATE_MODULE = re.compile(r"`(_[a-z]\w*)`")
TEST_FILE = re.compile(r"`?(tests/test_\w+\.py)`?")
TEST_NAME = re.compile(r"`(test_\w+)`")


#: Audit event names look like module paths (``guardrail.call_checked``): every string of
#: that form in the package's source.
EVENTS = {
    name
    for path in (REPO / "guardrail").rglob("*.py")
    for name in re.findall(r"\"(guardrail\.\w+)\"", path.read_text(encoding="utf-8"))
}


def _defines(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async )?def {name}\(", path.read_text(), re.MULTILINE) is not None


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_the_modules_and_tests_a_page_names_exist(page: Path) -> None:
    """Every module, event, test file and test a page names in code is in the repository."""
    text = page.read_text()
    for dotted in MODULE_NAME.findall(text):
        if dotted in EVENTS:
            continue
        parts = dotted.split(".")
        # ``guardrail.compaction.compact`` names a function: a prefix of it must be a module.
        found = any(
            (REPO / Path(*parts[:n])).with_suffix(".py").exists()
            or (REPO / Path(*parts[:n]) / "__init__.py").exists()
            for n in range(len(parts), 1, -1)
        )
        assert found, f"{_page_id(page)} names {dotted}, which is in no module of guardrail"
    for private in PRIVATE_MODULE.findall(text):
        located = [
            *(REPO / "guardrail").rglob(f"{private}.py"),
            *(REPO / "guardrail").rglob(f"{private}/__init__.py"),
        ]
        assert located, f"{_page_id(page)} names the module {private}, which does not exist"
    for name in TEST_FILE.findall(text):
        assert (REPO / name).exists(), f"{_page_id(page)} names {name}, which does not exist"
    tests = sorted((REPO / "tests").rglob("test_*.py"))  # the adapters' under integrations/
    for name in TEST_NAME.findall(text):
        assert any(_defines(path, name) for path in tests), (
            f"{_page_id(page)} names the test {name}, which no test file defines"
        )


def test_every_page_is_in_the_navigation_and_every_public_module_has_a_reference_page() -> None:
    """mkdocs.yml lists every page; docs/reference/ renders every public module."""
    config = (REPO / "mkdocs.yml").read_text()
    for page in PAGES:
        assert f": {_page_id(page)}" in config, f"{_page_id(page)} is not in the nav"
    rendered = {
        match
        for page in (DOCS / "reference").glob("*.md")
        for match in re.findall(r"^::: (guardrail[\w.]*)$", page.read_text(), re.MULTILINE)
    }
    generated = any(hooks.TOP_LEVEL_MARKER in page.read_text() for page in PAGES)
    for module in hooks.public_modules():
        assert module in rendered or (module == "guardrail" and generated), module


# -- nothing cites the internal design notes ---------------------------------------------------

DESIGN_NOTES = re.compile(r"\bDESIGN\b|DESIGN\.md|\.\./shared\b|/work/shared\b")


def _sources() -> Iterator[Path]:
    for folder in ("guardrail", "tests", "benchmarks", "examples", "docs"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in {".py", ".md", ".toml", ".json", ".yml"} and path.is_file():
                yield path
    yield REPO / "mkdocs.yml"
    yield REPO / "Makefile"
    yield REPO / "pyproject.toml"


def test_no_page_and_no_code_cites_the_internal_design_notes() -> None:
    """The docs explain the project in its own words: no DESIGN.md, no ../shared, anywhere."""
    this = Path(__file__).resolve()
    found: list[str] = []
    for path in _sources():
        if path.resolve() in (this, DOCS / "_tooling" / "hooks.py"):
            continue  # the patterns themselves
        name = path.relative_to(REPO).as_posix()
        found += (
            f"{name}: {line.strip()}"
            for line in path.read_text(encoding="utf-8").splitlines()
            if DESIGN_NOTES.search(line)
        )
    assert found == []


# -- the build's checks, on their own ----------------------------------------------------------


def test_the_build_finds_a_public_name_the_reference_leaves_out() -> None:
    """A name without an anchor is missing; a top-level name may be a link to its module's."""
    names = {"guardrail": ["Guard", "Kind"], "guardrail.kinds": ["Kind", "id_text"]}
    pages = {
        "reference/guardrail/index.html": (
            '<h2 id="guardrail.Guard">Guard</h2>'
            '<a href="../kinds/#guardrail.kinds.Kind"><code>Kind</code></a>'
        ),
        "reference/kinds/index.html": '<h2 id="guardrail.kinds.Kind">Kind</h2>',
    }
    missing = hooks.missing_names(names, pages, "reference/guardrail/index.html")
    assert missing == ["guardrail.kinds.id_text"]
    unlinked = {**pages, "reference/guardrail/index.html": '<h2 id="guardrail.Guard">G</h2>'}
    assert hooks.missing_names(names, unlinked, "reference/guardrail/index.html") == [
        "guardrail.Kind",
        "guardrail.kinds.id_text",
    ]


def test_the_build_refuses_remote_assets_and_citations() -> None:
    """Scripts and style sheets from a CDN, and lines naming the design notes, are found."""
    cdn = '<script src="https://cdnjs.cloudflare.com/x.js"></script><link href="//a/b.css">'
    assert len(hooks.remote_assets(cdn)) == 2
    assert hooks.remote_assets('<script src="../js/theme.js"></script><a href="https://x">') == []
    assert hooks.citations("fine\nsee DESIGN.md\nand ../shared/x\nDESIGNER") == [
        "see DESIGN.md",
        "and ../shared/x",
    ]


@pytest.mark.runtimes  # every public module is imported, the adapters too
def test_the_top_level_page_renders_names_without_a_module_and_links_the_others() -> None:
    """Guard is rendered on the guardrail page; Kind is a link to guardrail.kinds."""
    text = hooks.top_level_markdown(hooks.public_names())
    assert "::: guardrail.Guard\n" in text
    assert "[`Kind`][guardrail.kinds.Kind]" in text
    assert "::: guardrail.Kind\n" not in text
    assert text.index("::: guardrail.Guard") < text.index("::: guardrail.Verdict")


def test_docstring_roles_read_as_code_and_hash_colon_comments_as_docstrings() -> None:
    """:class:`~a.B` becomes `B`; #: lines above a constant become its docstring."""
    assert roles.markdown("see :class:`~guardrail.ledger.Ledger` and :meth:`Guard.record`") == (
        "see `Ledger` and `Guard.record`"
    )
    assert roles.markdown(":func:`the thing <a.b>` fixture::") == "`the thing` fixture:"
    lines = ["import x", "#: The first line", "#: and the second.", "NAME = 1"]
    assert roles.comment_docstring(lines, 4) == "The first line and the second."
    assert roles.comment_docstring(lines, 1) is None
