"""The package's shape: which modules are public, the names they export, how long they grow."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import guardrail

PUBLIC = {
    "guardrail",
    "guardrail.cli",
    "guardrail.compaction",
    "guardrail.errors",
    "guardrail.integrations",
    "guardrail.kinds",
    "guardrail.ledger",
    "guardrail.replay",
    "guardrail.stores",
    "guardrail.stores.protocol",
    "guardrail.testing",
}


def _modules() -> list[str]:
    return ["guardrail", *(i.name for i in pkgutil.walk_packages(guardrail.__path__, "guardrail."))]


def test_only_what_users_import_is_public() -> None:
    """Every module but the public ones starts with an underscore (or sits in a private one)."""
    public = {
        name
        for name in _modules()
        if not any(part.startswith("_") for part in name.split("."))
        and not name.startswith("guardrail.integrations.")
    }
    assert public == PUBLIC


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_every_public_name_imports(module: str) -> None:
    """Each public module's __all__ names every name once, and every name in it exists."""
    imported = importlib.import_module(module)
    names = getattr(imported, "__all__", [])
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(imported, name), f"{module}.{name}"


#: The most lines a module of the package holds: past it, a module does more than one thing.
MAX_MODULE_LINES = 600


def test_no_module_is_longer_than_a_few_screens() -> None:
    """Every module of the package is at most MAX_MODULE_LINES lines long (split one that grows)."""
    root = Path(guardrail.__file__).parent
    long = {
        str(path.relative_to(root.parent)): lines
        for path in sorted(root.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"
