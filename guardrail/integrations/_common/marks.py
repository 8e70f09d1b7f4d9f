"""Identifier marks in a JSON schema: the properties marked ``x-guardrail-kind``, by path.

``Annotated[str, Id("order")]`` puts the mark into the schema pydantic writes
(and MCP servers publish); :func:`marks_in` finds every marked property,
through ``$ref``, properties, items, ``additionalProperties`` and
``anyOf``/``oneOf``/``allOf``. Used by :mod:`guardrail.integrations._common.tools`
(binding a runtime's tool) and the MCP listing's declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardrail._declare.describe import KIND_KEY, SEP_KEY

__all__ = ["MAX_DEPTH", "Mark", "follow", "kinds_in", "marks_in", "plain"]

#: How deep a schema is walked for identifier properties ($refs included).
MAX_DEPTH = 32
#: Property names a result or parameter path can spell plainly.
_PLAIN_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_PLAIN_REST = _PLAIN_FIRST | frozenset("0123456789-")


def plain(key: str) -> bool:
    """Whether a property name can be spelt plainly in a path (``a.b``, not ``["a b"]``)."""
    return bool(key) and key[0] in _PLAIN_FIRST and set(key) <= _PLAIN_REST


@dataclass(frozen=True)
class Mark:
    """One property of a schema marked ``x-guardrail-kind``: its path, kinds and separator."""

    path: str
    kinds: tuple[str, ...]
    sep: str | None = None

    def declaration(self) -> str | list[str] | dict[str, Any]:
        """The mark as ``ids=`` takes it: a kind, a list of kinds, or with its separator."""
        kinds: str | list[str] = self.kinds[0] if len(self.kinds) == 1 else list(self.kinds)
        return {"kinds": list(self.kinds), "sep": self.sep} if self.sep else kinds


def marks_in(schema: Any) -> list[Mark]:
    """Every property of ``schema`` marked with ``x-guardrail-kind``, by its path.

    Follows local ``$ref``s (pydantic puts nested models in ``$defs``), object
    properties (``a.b``), array items (``a[*]``), ``additionalProperties``
    (``a.*``) and ``anyOf``/``oneOf``/``allOf`` branches; the root itself is ``$``.
    """
    found: dict[str, Mark] = {}

    def walk(node: Any, path: str, refs: tuple[str, ...]) -> None:
        if not isinstance(node, Mapping) or len(refs) + path.count(".") > MAX_DEPTH:
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/") and ref not in refs:
            walk(follow(schema, ref), path, (*refs, ref))
        kind = node.get(KIND_KEY)
        kinds: tuple[str, ...] = ()
        if isinstance(kind, str) and kind:
            kinds = (kind,)
        elif isinstance(kind, list) and kind and all(isinstance(k, str) and k for k in kind):
            kinds = tuple(kind)
        if kinds:
            sep = node.get(SEP_KEY)
            found[path or "$"] = Mark(path or "$", kinds, sep if isinstance(sep, str) else None)
        for branch in ("anyOf", "oneOf", "allOf"):
            for option in node.get(branch) or ():
                walk(option, path, refs)
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for key, child in properties.items():
                if isinstance(key, str) and plain(key):
                    walk(child, f"{path}.{key}" if path else key, refs)
        items = node.get("items")
        if isinstance(items, Mapping):
            walk(items, f"{path}[*]", refs)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            walk(extra, f"{path}.*" if path else "*", refs)

    walk(schema, "", ())
    return list(found.values())


def kinds_in(schema: Any) -> dict[str, str | list[str]]:
    """Path -> kind (a list where it accepts several) for every marked property of ``schema``."""
    return {
        mark.path: mark.kinds[0] if len(mark.kinds) == 1 else list(mark.kinds)
        for mark in marks_in(schema)
    }


def follow(root: Any, ref: str) -> Any:
    """What a local ``$ref`` (``#/$defs/Order``) points at in ``root`` (None: nothing)."""
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, Mapping) else None
    return target
