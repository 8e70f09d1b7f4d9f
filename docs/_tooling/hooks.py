"""MkDocs hooks: the top-level reference written from ``guardrail.__all__``, and the checks.

``mkdocs build --strict`` runs these. The page holding :data:`TOP_LEVEL_MARKER` gets
one section per name ``guardrail`` exports: rendered in full where the name has no
public module of its own (``Guard``, ``Verdict``...), a link to its module's page where
it has one (``Kind`` is documented under ``guardrail.kinds``). A name added to
``__all__`` is therefore documented without editing a page.

The build fails (a ``PluginError``) when:

- a name in the ``__all__`` of a public module has no entry in the reference (the
  reference renders only documented objects, so this also catches a public name
  without a docstring);
- a page cites the team's internal design notes (the docs explain the project in
  their own words), in its Markdown or in a docstring it renders;
- a built page loads a script, style sheet or image from the network (the site must
  read offline, and the build must not fetch anything).

The functions the checks are made of take plain text, so ``tests/test_docs.py``
tests them on their own.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

#: Where the generated top-level entries go, in the Markdown of the ``guardrail`` page.
TOP_LEVEL_MARKER = "<!-- guardrail: top-level names -->"

#: The names defined in ``guardrail`` itself, in reading order; others follow in ``__all__``'s.
READING_ORDER = ("Guard", "SessionScope", "Id", "ToolSpec", "Verdict", "Finding", "Rejection")

#: What a page must not cite: the internal design notes, by name or by their folder.
CITATION = re.compile(r"\bDESIGN\b|\.\./shared\b|/work/shared\b")

#: A tag that would load something from the network when a page is opened.
_REMOTE_ASSET = re.compile(
    r"<(?:script|img|iframe|source)\b[^>]*\bsrc=[\"']?(?:https?:)?//"
    r"|<link\b[^>]*\bhref=[\"']?(?:https?:)?//",
    re.IGNORECASE,
)
_ANCHOR = re.compile(r"\bid=\"([^\"]+)\"")
_LINK_TARGET = re.compile(r"\bhref=\"[^\"#]*#([^\"]+)\"")
_TAG = re.compile(r"<[^>]+>")


# -- what is public ---------------------------------------------------------------------------


def public_modules() -> list[str]:
    """Every module of guardrail with no underscore in its dotted name.

    Read from the files, not by walking the packages: that would import them, and each
    runtime adapter's package imports its runtime.
    """
    import guardrail

    root = Path(guardrail.__file__).parent
    names = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not any(part.startswith("_") for part in parts):
            names.add(".".join(parts))
    return sorted(names)


def exported(module: str) -> list[str]:
    """The public names of ``module``: its ``__all__``, else the classes and functions it defines.

    Without ``__all__``, a name is public when it has no leading underscore and is
    defined in the module itself (not imported into it), as the reference reads it.
    """
    imported = importlib.import_module(module)
    names = getattr(imported, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in vars(imported).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module
    ]


def public_names() -> dict[str, list[str]]:
    """Module -> its public names (see :func:`exported`)."""
    return {module: exported(module) for module in public_modules()}


def home_of(name: str, names: Mapping[str, list[str]]) -> str:
    """The public module that documents ``guardrail.<name>``: its own, else ``guardrail``."""
    import guardrail

    value = getattr(guardrail, name)
    for module, names_there in names.items():
        if (
            module != "guardrail"
            and name in names_there
            and getattr(importlib.import_module(module), name) is value
        ):
            return module
    return "guardrail"


# -- the top-level page -----------------------------------------------------------------------


def top_level_markdown(names: Mapping[str, list[str]]) -> str:
    """The entries of ``guardrail``'s page: names defined here in full, the others as links."""
    import guardrail

    exported = names["guardrail"]
    ordered = [n for n in READING_ORDER if n in exported]
    ordered += [n for n in exported if n not in ordered]
    here = [n for n in ordered if home_of(n, names) == "guardrail"]
    elsewhere = [n for n in ordered if n not in here]
    parts: list[str] = []
    for name in here:
        value = getattr(guardrail, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            parts.append(f"::: guardrail.{name}\n    options:\n      heading_level: 2\n")
        else:
            # A plain value (``__version__``) may be computed when first read: no docstring
            # to render, so its entry is written here.
            what = "The installed version, as text." if name == "__version__" else ""
            parts.append(
                f'<h2 id="guardrail.{name}"><code>guardrail.{name}</code></h2>\n\n'
                f"`{name} = {value!r}`. {what}\n"
            )
    if elsewhere:
        rows = [
            f"| [`{name}`][{home_of(name, names)}.{name}] | `{home_of(name, names)}` |"
            for name in elsewhere
        ]
        parts.append(
            "## Documented with their module\n\n"
            "These names are importable from `guardrail` too; each is documented on its "
            "module's page.\n\n| name | module |\n|---|---|\n" + "\n".join(rows) + "\n"
        )
    return "\n".join(parts)


# -- the checks -------------------------------------------------------------------------------


def citations(text: str) -> list[str]:
    """The lines of ``text`` that cite the internal design notes."""
    return [line.strip() for line in text.splitlines() if CITATION.search(line)]


def remote_assets(html: str) -> list[str]:
    """The tags of ``html`` that load something over the network."""
    return [match.group(0) for match in _REMOTE_ASSET.finditer(html)]


def anchors(html: str) -> set[str]:
    """Every ``id`` in ``html``."""
    return set(_ANCHOR.findall(html))


def link_targets(html: str) -> set[str]:
    """The fragment of every link in ``html`` (``guardrail.kinds.Kind`` of ``../kinds/#...``)."""
    return set(_LINK_TARGET.findall(html))


def missing_names(
    names: Mapping[str, list[str]], pages: Mapping[str, str], top_level_page: str
) -> list[str]:
    """``module.name`` for every exported name the built reference ``pages`` do not document.

    ``pages`` maps each reference page to its HTML. A name is documented when
    some page has the anchor ``module.name``; a name of ``guardrail`` may instead
    be a link, on ``top_level_page``, to the anchor of its module's entry.
    """
    everywhere: set[str] = set()
    for html in pages.values():
        everywhere |= anchors(html)
    linked = link_targets(pages.get(top_level_page, ""))
    missing = []
    for module, exported in names.items():
        for name in exported:
            target = f"{module}.{name}"
            if target in everywhere:
                continue
            if module == "guardrail" and any(
                link.endswith(f".{name}") and link in everywhere for link in linked
            ):
                continue
            missing.append(target)
    return missing


# -- the hooks --------------------------------------------------------------------------------

#: The built pages that hold the top-level entries (filled as the pages are read).
_top_level_pages: list[str] = []


def on_pre_build(**kwargs: Any) -> None:
    """Forget the previous build's top-level page (``mkdocs serve`` rebuilds in one process)."""
    _top_level_pages.clear()


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Fill in the top-level entries; refuse a page that cites the design notes."""
    cited = citations(markdown)
    if cited:
        raise PluginError(
            f"{page.file.src_uri} cites the internal design notes; explain it in the "
            f"project's own words instead: {cited[0]!r}"
        )
    if TOP_LEVEL_MARKER in markdown:
        _top_level_pages.append(page.file.dest_uri)
        markdown = markdown.replace(TOP_LEVEL_MARKER, top_level_markdown(public_names()))
    return markdown


def on_post_page(output: str, page: Any, **kwargs: Any) -> str:
    """Refuse a rendered page (docstrings included) that cites the notes or loads remote assets."""
    cited = citations(_TAG.sub(" ", output))
    if cited:
        raise PluginError(
            f"{page.file.src_uri} renders a citation of the internal design notes "
            f"(from a docstring?): {cited[0][:160]!r}"
        )
    remote = remote_assets(output)
    if remote:
        raise PluginError(
            f"{page.file.src_uri} loads {remote[0]!r} from the network; the site must read "
            "offline (theme option highlightjs: false, no remote assets)"
        )
    return output


def on_post_build(config: Any, **kwargs: Any) -> None:
    """Refuse a reference that leaves out a public name."""
    site = Path(config["site_dir"])
    pages = {
        path.relative_to(site).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted((site / "reference").rglob("*.html"))
    }
    top = _top_level_pages[0] if _top_level_pages else ""
    missing = missing_names(public_names(), pages, top)
    if missing:
        raise PluginError(
            "the API reference leaves out "
            + ", ".join(missing)
            + ": give each a docstring, and put its module on a page in docs/reference/"
        )
