"""A Griffe extension: the library's docstring habits, read as Markdown.

Two habits of the code base that Markdown does not know:

- Sphinx roles (:class:`Ledger`, :func:`~a.b.compact`), which Markdown would show as
  written. Each becomes a code span of the name a reader knows: the last part when
  the target starts with ``~``, the target itself otherwise, the title when one is
  given. Many targets are private modules, so no link is made; the signatures link
  their types already. A paragraph ending in ``::`` (a reST literal block follows)
  ends in ``:``.
- ``#:`` comments above a module constant or a class attribute, the Sphinx form of an
  attribute's docstring: they become its docstring, so the reference shows them.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|data|mod|attr|exc|obj|const):`([^`]+)`")
_TITLED = re.compile(r"(.+?)\s*<([^<>]+)>")
_LITERAL_INTRO = re.compile(r"(?<=\S)::$", re.MULTILINE)


def _name(target: str) -> str:
    titled = _TITLED.fullmatch(target)
    if titled is not None:
        return titled.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target


def markdown(docstring: str) -> str:
    """``docstring`` with its reST roles as code spans and literal-block intros as colons."""
    text = _ROLE.sub(lambda match: f"`{_name(match.group(1))}`", docstring)
    return _LITERAL_INTRO.sub(":", text)


@cache
def _lines(path: str) -> tuple[str, ...]:
    return tuple(Path(path).read_text(encoding="utf-8").splitlines())


def comment_docstring(lines: tuple[str, ...] | list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines right above line ``lineno`` (1-based), as one text, or None."""
    found: list[str] = []
    index = lineno - 2
    while index >= 0 and lines[index].strip().startswith("#:"):
        found.append(lines[index].strip()[2:].strip())
        index -= 1
    return " ".join(reversed(found)) or None


class RolesAsCode(griffe.Extension):
    """Rewrites every docstring Griffe loads, and reads ``#:`` comments (see the module)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None and obj.is_attribute and obj.lineno is not None:
            path = obj.filepath
            if isinstance(path, Path) and path.suffix == ".py":
                text = comment_docstring(_lines(str(path)), obj.lineno)
                if text is not None:
                    obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
