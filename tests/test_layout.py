"""The package's shape: which modules are public, and the names that moved."""

from __future__ import annotations

import importlib
import pkgutil

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
