"""docs/manifest.md names every key the manifest loader takes, and no other, each example valid."""

from __future__ import annotations

import re
import sys
from typing import Any

import pytest

from guardrail import Guard
from guardrail._declare import manifest

from .conftest import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PAGE = REPO / "docs" / "manifest.md"
_TOOL = manifest.SCHEMA["properties"]["tools"]["additionalProperties"]
_PARAM_TABLE: dict[str, Any] = manifest._MINT["oneOf"][2]  # type: ignore[index]

#: Each table of the page, by the start of its heading, and the schema object it documents.
SECTIONS: dict[str, dict[str, Any]] = {
    "The file": manifest.SCHEMA,
    "A kind": manifest.SCHEMA["properties"]["kinds"]["additionalProperties"],
    "A tool": _TOOL,
    "An id parameter": _PARAM_TABLE,
    "A result path": manifest._PRODUCER["oneOf"][1],
    "A failure rule": manifest._FAILS_RULE["oneOf"][1],
}
#: The kinds every example may name.
KINDS: dict[str, dict[str, Any]] = {
    name: {} for name in ("order", "item", "user", "customer", "line")
}


def _tables() -> dict[str, list[tuple[str, str, str]]]:
    """The page's tables: per section, each row's key, default and example (code unquoted)."""
    text = PAGE.read_text(encoding="utf-8")
    found: dict[str, list[tuple[str, str, str]]] = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading = section.splitlines()[0]
        rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| `([^`]+)` \|", section, re.MULTILINE)
        if rows:
            found[heading] = [(key, default.strip(), example) for key, default, example in rows]
    return found


def _table(start: str) -> list[tuple[str, str, str]]:
    matches = [rows for heading, rows in _tables().items() if heading.startswith(start)]
    assert len(matches) == 1, f"docs/manifest.md has no one table under '## {start}...'"
    return matches[0]


@pytest.mark.parametrize("section", SECTIONS)
def test_the_page_names_every_key_the_loader_takes_and_no_other(section: str) -> None:
    """A key added to the loader's schema and left off the page (or the reverse) fails here."""
    keys = [key for key, _, _ in _table(section)]
    known = set(SECTIONS[section]["properties"])
    assert len(keys) == len(set(keys)), f"a key is listed twice under {section}"
    assert set(keys) - known == set(), f"the page names keys the loader does not take: {section}"
    assert known - set(keys) == set(), f"the page leaves out keys the loader takes: {section}"


def test_every_row_gives_a_default() -> None:
    """No row leaves its default empty."""
    for rows in _tables().values():
        for key, default, _ in rows:
            assert default, key


#: Kind keys that mean something only beside another: the example is compiled with it.
KIND_COMPANIONS: dict[str, dict[str, Any]] = {"operator_per": {"operator_ids": "builtins:list"}}


def _manifest(section: str, key: str, example: str) -> dict[str, Any]:
    """The example of one row, as a whole manifest the loader can compile."""
    if section == "The file":
        data = tomllib.loads(example if not example.startswith("[") else f"{example}\n")
        assert key in data, (key, example)
        return {"kinds": dict(KINDS), "tools": {}, **data}
    parsed = tomllib.loads(example)
    if section == "A kind":
        assert list(parsed) == [key], example
        return {"kinds": {"example": {**KIND_COMPANIONS.get(key, {}), **parsed}}, "tools": {}}
    tool: dict[str, Any]
    if section == "A tool":
        assert list(parsed) == [key], example
        tool = {"effect": "read"} if key in ("egress", "verifies") else {}
        tool.update(parsed)
    elif section == "An id parameter":
        ((_, declaration),) = parsed.items()
        assert key in declaration, example
        tool = {"mints": parsed} if key == "role" else {"ids": parsed}
    elif section == "A result path":
        ((_, declaration),) = parsed.items()
        assert key in declaration, example
        tool = {"effect": "read", "produces": parsed}
    else:
        assert key in parsed["fails"], example
        tool = parsed
    return {"kinds": dict(KINDS), "tools": {"example": tool}}


CASES = [
    pytest.param(start, key, example, id=f"{start}:{key}")
    for start in SECTIONS
    for key, _, example in _table(start)
]


@pytest.mark.parametrize(("section", "key", "example"), CASES)
def test_every_example_is_a_manifest_the_loader_compiles(
    section: str, key: str, example: str
) -> None:
    """Each row's example is valid TOML that the loader reads, checks and compiles."""
    guard = Guard.from_manifest(_manifest(section, key, example))
    assert guard.specs or section in ("The file", "A kind")


def test_from_manifest_points_to_the_reference() -> None:
    """Guard.from_manifest's docstring sends its reader to the page."""
    assert "docs/manifest.md" in (Guard.from_manifest.__doc__ or "")
    assert "manifest.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")
