"""Role names: what a summary calls an entry, checked when given and filled from templates.

A role is a name of letters, digits, ``_``, ``-`` and ``.`` that does not
start with a digit (a ``[role]`` reference in a summary must read back).
A spec's role template (``{status}_order``, ``{tool}-{n}``) is filled with
the kind, the kind's next number, the tool and the status, and cut down to
those characters.
"""

from __future__ import annotations

from typing import Any

from guardrail.errors import GuardrailUsageError

ROLE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


class _Fields(dict[str, Any]):
    """A template's fields: an unknown field reads as its own name."""

    def __missing__(self, key: str) -> str:
        return key


def templated(template: str, kind: str, number: int, tool: str, status: str | None) -> str:
    """The role a template gives (not yet made unique): the kind's name if it cannot be read."""
    fields = {"kind": kind, "n": number, "tool": tool, "status": status}
    try:
        base = template.format_map(_Fields(fields))
    except (ValueError, IndexError):
        base = kind
    return "".join(c if c in ROLE_CHARS else "_" for c in base) or kind


def check_role_name(role: str) -> None:
    """Refuse a role that is not a name of letters, digits, ``_``, ``-`` or ``.``."""
    if not isinstance(role, str) or not role or not set(role) <= ROLE_CHARS:
        raise GuardrailUsageError(
            f"role {role!r} must be a non-empty name of letters, digits, '_', '-' or '.'"
        )
    if role[0].isdigit():
        raise GuardrailUsageError(f"role {role!r} must not start with a digit")
