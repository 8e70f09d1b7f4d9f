"""Tool definitions as agents send them to a model: OpenAI, Anthropic and MCP shapes, read as one.

A program that calls tools already describes each one to its model: a name,
a description and a JSON schema of its parameters. The shapes differ by API:

- OpenAI chat completions: ``{"type": "function", "function": {"name", "description",
  "parameters"}}`` (what tau-bench's ``get_info()`` returns);
- OpenAI Responses: ``{"type": "function", "name", "description", "parameters"}``;
- Anthropic: ``{"name", "description", "input_schema"}``;
- MCP: ``{"name", "description", "inputSchema"}``, or a ``tools/list`` answer
  ``{"tools": [...]}``.

:func:`read_definitions` reads any of them (a list, a mapping of name to
definition, a listing, or a JSON file holding one) into :class:`Definition`
objects. ``guard.bind(definitions=...)`` reads placeholder ids from their
descriptions and checks declared id parameters against them; ``guardrail
init`` proposes a starter manifest from them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardrail.errors import GuardrailUsageError

__all__ = ["Definition", "read_definitions"]


@dataclass(frozen=True)
class Definition:
    """One tool as a model is told about it: its name, description and parameters' schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def properties(self) -> dict[str, Mapping[str, Any]]:
        """The schema of each top-level parameter, by name."""
        found = self.parameters.get("properties")
        if not isinstance(found, Mapping):
            return {}
        return {str(k): v for k, v in found.items() if isinstance(v, Mapping)}


def read_definitions(source: object) -> list[Definition]:
    """The tool definitions in ``source``: a JSON file's path, a list, a mapping or a listing."""
    where = "tool definitions"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        where = str(path)
        try:
            source = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise GuardrailUsageError(f"{where}: cannot read it: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise GuardrailUsageError(f"{where}: not valid JSON: {exc}") from None
    if isinstance(source, Mapping) and isinstance(source.get("tools"), Sequence):
        source = source["tools"]  # an MCP tools/list answer, or {"tools": [...]}
    items: list[tuple[str | None, object]]
    if isinstance(source, Mapping) and not _is_definition(source):
        items = [(str(name), item) for name, item in source.items()]
    elif isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        items = [(None, item) for item in source]
    else:
        raise GuardrailUsageError(
            f"{where}: expected a list of tool definitions (OpenAI, Anthropic or MCP shape), "
            f"a mapping of name to definition, or {{'tools': [...]}}; not {type(source).__name__}"
        )
    found: list[Definition] = []
    seen: set[str] = set()
    for at, (key, item) in enumerate(items):
        definition = _definition(item, key, where=f"{where}[{key if key is not None else at}]")
        if definition.name in seen:
            raise GuardrailUsageError(f"{where}: tool {definition.name!r} is defined twice")
        seen.add(definition.name)
        found.append(definition)
    return found


def _is_definition(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("name"), str) or isinstance(data.get("function"), Mapping)


def _definition(item: object, key: str | None, *, where: str) -> Definition:
    data: Any = item
    if not isinstance(data, Mapping):
        # An object with attributes: an MCP types.Tool, a pydantic model.
        dump = getattr(data, "model_dump", None)
        if callable(dump):
            data = dump(by_alias=True)
        else:
            data = vars(data) if hasattr(data, "__dict__") else None
        if not isinstance(data, Mapping):
            raise GuardrailUsageError(f"{where}: a tool definition is an object, not {item!r}")
    if isinstance(data.get("function"), Mapping):
        data = data["function"]
    name = data.get("name", key)
    if not isinstance(name, str) or not name:
        raise GuardrailUsageError(f"{where}: a tool definition needs a 'name'")
    schema: object = {}
    for field_name in ("parameters", "input_schema", "inputSchema"):
        if data.get(field_name) is not None:
            schema = data[field_name]
            break
    if not isinstance(schema, Mapping):
        raise GuardrailUsageError(f"{where}: tool {name!r}'s parameters are not a JSON schema")
    description = data.get("description") or ""
    return Definition(name=name, description=str(description), parameters=dict(schema))
