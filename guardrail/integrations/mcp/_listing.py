"""MCP: the tools of a server's listing declared to a guard, from their schemas' marks.

Private to :mod:`guardrail.integrations.mcp` (which re-exports
:func:`manifest_from_tools` and :func:`declare_tools`); it imports the MCP
SDK, so it is only imported from there, after the SDK's import check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from mcp.types import ListToolsResult, Tool

from guardrail._declare.spec import ToolSpec
from guardrail._guard.facade import internals
from guardrail._guard.registry import Registry
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.marks import kinds_in

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

#: The origin of a declaration read from an MCP listing (a namespace follows, where given).
LISTING = "the MCP listing"


def _wire(tool: Any) -> Mapping[str, Any]:
    """A tool of a listing in its wire form (camelCase keys), from a ``Tool`` or a dict."""
    if isinstance(tool, Tool):
        return tool.model_dump(by_alias=True, mode="json", exclude_none=True)
    if isinstance(tool, Mapping):
        return tool
    raise GuardrailUsageError(
        f"a tool of an MCP listing is an mcp.types.Tool or its JSON, not {type(tool).__name__}"
    )


def manifest_from_tools(
    tools: ListToolsResult | Iterable[Tool | Mapping[str, Any]],
) -> dict[str, Any]:
    """A guard manifest (``{"tools": {...}}``) declaring the tools of an MCP listing.

    Identifier parameters are the input schema's properties marked
    ``"x-guardrail-kind": "order"`` (what ``Id("order")`` publishes in a
    pydantic schema), result identifiers the output schema's; a tool
    annotated ``readOnlyHint`` is a ``read``, any other a ``write``. Load it
    with ``guard.load_manifest(...)``; the kinds it names must be declared on
    the guard. A listing is only as trustworthy as the server that sent it:
    for a server you do not control, declare its tools yourself.
    """
    listed = tools.tools if isinstance(tools, ListToolsResult) else tools
    declared: dict[str, Any] = {}
    for tool in listed:
        wire = _wire(tool)
        name = wire.get("name")
        if not isinstance(name, str) or not name:
            raise GuardrailUsageError(f"a tool of the listing has no name: {dict(wire)!r}")
        input_schema = wire.get("inputSchema")
        output_schema = wire.get("outputSchema")
        annotations = wire.get("annotations")
        read_only = isinstance(annotations, Mapping) and annotations.get("readOnlyHint") is True
        spec: dict[str, Any] = {"effect": "read" if read_only else "write"}
        ids = kinds_in(input_schema)
        ids.pop("$", None)  # the arguments object itself is no identifier
        if ids:
            spec["ids"] = ids
        produces = kinds_in(output_schema)
        for path, kind in produces.items():
            if not isinstance(kind, str):
                raise GuardrailUsageError(
                    f"the result field {path} of {name} is marked with several kinds "
                    f"({', '.join(kind)}); a result names one kind per field: declare the "
                    "tool yourself (guard.declare)",
                    tool=name,
                )
        if produces:
            spec["produces"] = produces
        description = wire.get("description")
        if isinstance(description, str) and description:
            spec["description"] = description
        declared[name] = spec
    return {"tools": declared}


def qualified(name: str, namespace: str | None) -> str:
    """The name the guard knows a server's tool by: ``namespace/name``, or ``name`` without one."""
    return f"{namespace}/{name}" if namespace else name


def declare_tools(
    guard: Guard,
    tools: ListToolsResult | Iterable[Tool | Mapping[str, Any]],
    *,
    annotated_only: bool = False,
    namespace: str | None = None,
) -> list[str]:
    """Declare to ``guard`` the tools of a listing it does not know yet; returns their names.

    ``annotated_only`` leaves out tools whose schemas mark no identifier:
    they stay undeclared, so a guard built with ``refuse_undeclared=True``
    keeps refusing them (the server does this), whatever their annotations.

    ``namespace`` declares each tool as ``namespace/name``, for a host that
    talks to several servers through one guard: two servers may each have a
    ``transfer``, and neither may be checked by the other's spec. A tool
    declared from another listing under the same name whose spec differs is a
    :class:`GuardrailUsageError` (give each server its namespace), and so is
    a tool whose listing changed since it was declared; a tool the program
    declared itself (``guard.declare``, a manifest) keeps its declaration.
    """
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        raise GuardrailUsageError(f"namespace is a non-empty string, not {namespace!r}")
    manifest = manifest_from_tools(tools)["tools"]
    origin = f"{LISTING} of {namespace}" if namespace else LISTING
    parts = internals(guard)
    trial = Registry(parts.registry.fails)  # the guard's failure rule, as its own tools have
    trial.kinds.update(guard.kinds)
    new: dict[str, ToolSpec] = {}
    for listed, entry in manifest.items():
        if annotated_only and "ids" not in entry and "produces" not in entry:
            continue
        name = qualified(listed, namespace)
        try:
            spec = trial.declare(name, origin=origin, **entry)
        except GuardrailUsageError as exc:
            raise GuardrailUsageError(f"the MCP listing of {listed!r}: {exc}", tool=name) from None
        known = guard.specs.get(name)
        if known is None:
            new[name] = spec
        elif parts.registry.origins.get(name, "").startswith(LISTING) and not _same(known, spec):
            first = parts.registry.origins[name]
            raise GuardrailUsageError(
                f"the MCP tool {listed!r} is declared already, from {first}, "
                f"as {_summary(known)}; this listing has it as {_summary(spec)}. A tool never "
                "takes another's spec: give each server its own namespace "
                "(GuardedClientSession(..., namespace='bank'), declare_tools(..., namespace=...)), "
                "or declare the tool yourself (guard.declare).",
                tool=name,
            )
    for name in new:
        entry = manifest[name[len(namespace) + 1 :] if namespace else name]
        parts.registry.declare(name, origin=origin, **entry)
    return list(new)


def _same(one: ToolSpec, other: ToolSpec) -> bool:
    """Whether two specs check and harvest alike (their descriptions aside)."""
    return (one.params, one.produces, one.mints, one.effect, one.verifies) == (
        other.params,
        other.produces,
        other.mints,
        other.effect,
        other.verifies,
    )


def _summary(spec: ToolSpec) -> str:
    ids = ", ".join(f"{param.path.text} ({'/'.join(param.kinds)})" for param in spec.params)
    return f"a {spec.effect} taking {ids or 'no identifier'}"
