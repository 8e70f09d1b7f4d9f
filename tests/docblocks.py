"""The code blocks of README.md and docs/: what each one is, and whether the docs test runs it.

Every fenced block of a page is one of:

- **code** (``python``, ``toml``, ``json``, ``sh``): run by ``tests/test_docs.py`` as written,
  unless the line right before it is a visible *needs* line, ``*Needs an OpenAI API key.*``,
  saying what it needs that the suite does not have;
- **output** (``text`` right after a code block, blank lines between): what that block
  prints, compared with what it does print (a line ``...`` stands for any lines, a line
  ending in ``...`` for any end of that line);
- **illustration** (``text`` anywhere else): a diagram or a synopsis, not run.

Within a page, a Python block runs on its own, in a namespace of its own, unless the line right
before it is ``*Continues the example above.*``: then it runs with the names the page's blocks
above it defined (where two define one name, the first). A code block whose first line is a
comment naming a file (``# tools.toml``, ``# shop/api.py: a vendor's module``) is also written
to that file, in the page's scratch folder, where the shell lines and imports after it find it.
``docs/contributing.md`` says the same for those who write pages.

``python -m tests.docblocks`` counts the blocks: run, marked, and what the marks say.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"

#: The languages of blocks that run; ``text`` is output or an illustration.
CODE = frozenset({"python", "toml", "json", "sh"})
OUTPUT = "text"
#: Other names of those languages.
ALIASES = {"py": "python", "python3": "python", "bash": "sh", "shell": "sh"}

#: The visible marks, each alone on the line right before a block.
NEEDS = re.compile(r"^\*Needs (?P<what>[^*]+?)\.?\*$")
CONTINUES = "*Continues the example above.*"
#: The old, invisible mark: rejected, a reader cannot see it.
HIDDEN = re.compile(r"<!--\s*not run")

#: A fenced block, also indented (in a list item) or fenced with ~~~ or more backticks.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[^\n`]*)\n"
    r"(?P<code>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.DOTALL | re.MULTILINE,
)
FILE_NAME = re.compile(r"^#\s*(?P<name>[\w./-]+\.(?:py|toml|json|jsonl|txt))(?::.*)?$")

#: How to fix a block, the end of every failure message of the docs test.
HOW_TO_FIX = (
    "Every code block of README.md and docs/ runs in tests/test_docs.py. Make the block run "
    "as written (complete imports and names; a file it reads written by a block above that "
    "starts with '# the-file-name'); or, if it uses names from the blocks above it, put the "
    "line '*Continues the example above.*' right before it; or, if it needs what the test "
    "suite does not have (a model's API key, a server, the network), put the line "
    "'*Needs <what it needs>.*' right before it. See docs/contributing.md."
)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with the marks before it and the output shown after it."""

    page: str  # the page's path, relative to the repository
    line: int  # the line of its opening fence, counted from 1
    language: str
    code: str
    needs: str | None = None  # what the *Needs ...* line says it needs
    continues: bool = False
    hidden_mark: bool = False  # an HTML comment before it, which readers do not see
    output: str | None = None  # the text block right after it: what it prints

    @property
    def where(self) -> str:
        """``page:line``, the place an editor jumps to."""
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether the docs test runs it: code, and no *Needs* line."""
        return self.language in CODE and self.needs is None

    @property
    def file(self) -> str | None:
        """The file it is written to: the name its first line comments, if any."""
        first = self.code.split("\n", 1)[0]
        match = FILE_NAME.match(first)
        return match.group("name") if match else None


def pages() -> list[Path]:
    """README.md and every page of docs/ (not the build's tooling)."""
    found = sorted(path for path in DOCS.rglob("*.md") if "_tooling" not in path.parts)
    return [REPO / "README.md", *found]


def page_id(path: Path) -> str:
    """A page's path relative to the repository: ``docs/concepts.md``."""
    return path.relative_to(REPO).as_posix()


def blocks(text: str, page: str = "<page>") -> list[Block]:
    """The fenced blocks of a page's Markdown, code and illustrations, in order.

    An output block is not listed on its own: it is the ``output`` of the block before it.
    """
    found = list(FENCE.finditer(text))
    listed: list[Block] = []
    taken: set[int] = set()
    for i, fence in enumerate(found):
        if i in taken:
            continue
        language = fence.group("lang").strip().split(" ")[0].lower()
        language = ALIASES.get(language, language)
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        output = None
        if language in CODE and i + 1 < len(found):
            after = found[i + 1]
            gap = text[fence.end() : after.start()]
            if after.group("lang").strip() == OUTPUT and not gap.strip():
                output = after.group("code")
                taken.add(i + 1)
        needs = NEEDS.match(before)
        listed.append(
            Block(
                page=page,
                line=text.count("\n", 0, fence.start()) + 1,
                language=language,
                code=_dedent(fence.group("code"), fence.group("indent")),
                needs=needs.group("what") if needs else None,
                continues=before == CONTINUES,
                hidden_mark=HIDDEN.search(before) is not None,
                output=output,
            )
        )
    return listed


def _dedent(code: str, indent: str) -> str:
    """A block's code without the indentation of its fence (a block inside a list item)."""
    if not indent:
        return code
    return "".join(
        line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t")
        for line in code.splitlines(keepends=True)
    )


def all_blocks() -> Iterator[Block]:
    """The blocks of every page, page by page."""
    for path in pages():
        yield from blocks(path.read_text(encoding="utf-8"), page_id(path))


# -- shell lines --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command of a ``sh`` block: its words, and the text a here-document gives it."""

    argv: list[str]
    stdin: str | None = None


_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<tag>\w+)\1")


def commands(code: str) -> list[Command]:
    """The commands of a ``sh`` block: continued lines joined, quotes and here-documents read.

    A line ending in a backslash continues; so does a line that ends inside quotes.
    """
    lines = code.splitlines()
    found: list[Command] = []
    i = 0
    while i < len(lines):
        text = lines[i]
        i += 1
        while i < len(lines) and (text.endswith("\\") or not _closed(text)):
            text = text[:-1] if text.endswith("\\") else text + "\n"
            text += lines[i]
            i += 1
        stdin = None
        heredoc = _HEREDOC.search(text)
        if heredoc:
            end = lines.index(heredoc.group("tag"), i)
            stdin = "\n".join(lines[i:end]) + "\n"
            i = end + 1
            text = text[: heredoc.start()] + text[heredoc.end() :]
        argv = shlex.split(text, comments=True)
        if argv:
            found.append(Command(argv, stdin))
    return found


def _closed(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # "No closing quotation": the command goes on on the next line
        return False
    return True


# -- outputs ------------------------------------------------------------------------------------


def output_matches(expected: str, printed: str) -> bool:
    """Whether ``printed`` shows ``expected``: its runs of lines between ``...`` lines, in order.

    Trailing spaces are ignored; what is printed before, between and after the runs is too.
    A line ending in ``...`` matches any line that starts with the rest (``1 passed in ...``).
    """
    lines = [line.rstrip() for line in printed.splitlines()]
    position = 0
    run: list[str] = []
    for line in [*expected.splitlines(), "..."]:
        if line.strip() != "...":
            run.append(line.rstrip())
            continue
        while run and not run[0]:
            run.pop(0)
        while run and not run[-1]:
            run.pop()
        if not run:
            continue
        starts = [
            i
            for i in range(position, len(lines) - len(run) + 1)
            if all(_same(want, got) for want, got in zip(run, lines[i : i + len(run)], strict=True))
        ]
        if not starts:
            return False
        position = starts[0] + len(run)
        run = []
    return True


def _same(expected: str, printed: str) -> bool:
    """A line shown ending in ``...`` stands for every line that starts with what precedes it."""
    if expected.endswith("...") and expected.strip() != "...":
        return printed.startswith(expected[:-3])
    return expected == printed


# -- counting -----------------------------------------------------------------------------------


def count(listed: list[Block]) -> str:
    """How many code blocks run, how many are marked and what the marks say."""
    code = [block for block in listed if block.language in CODE]
    run = [block for block in code if block.runs]
    needs = Counter(block.needs for block in code if not block.runs)
    lines = [f"{len(code)} code blocks: {len(run)} run, {len(code) - len(run)} marked"]
    lines += [f"  {number} x Needs {what}" for what, number in needs.most_common()]
    outputs = sum(block.output is not None for block in run)
    lines.append(
        f"{outputs} outputs compared; by language: "
        + ", ".join(f"{lang} {n}" for lang, n in sorted(Counter(b.language for b in code).items()))
    )
    return "\n".join(lines)


if __name__ == "__main__":
    everything = list(all_blocks())
    if "-v" in sys.argv:
        for block in everything:
            state = "run" if block.runs else f"needs {block.needs}"
            if block.language in CODE:
                print(f"{block.where:40} {block.language:7} {state}")
    print(count(everything))
