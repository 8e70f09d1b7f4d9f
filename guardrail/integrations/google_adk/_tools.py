"""ADK tools as the guard sees them: bound by the function declaration the model is given.

Private to :mod:`guardrail.integrations.google_adk`. ADK gives the model a
``FunctionDeclaration`` per tool, its parameters as a JSON schema (pydantic's,
``Id`` marks included, for a ``FunctionTool``) or as a Gemini ``Schema``.
:func:`bind_request` binds every tool of a model request to the guard (a tool
the guard does not know is declared by its marks) and puts, on each declared id
parameter, the instruction to copy the value exactly; :func:`bound_tool` binds
one tool where a call comes in before any model request showed it (a call
resumed after a confirmation, by a runner started since).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from google.adk.models.llm_request import LlmRequest
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from guardrail.integrations._common.tools import Bindings, Bound

__all__ = ["bind_request", "bound_tool"]


def _schema(declaration: types.FunctionDeclaration) -> Mapping[str, Any] | None:
    """The parameters of a declaration as a JSON schema (None: it takes none)."""
    if declaration.parameters_json_schema is not None:
        given = declaration.parameters_json_schema
        return given if isinstance(given, Mapping) else None
    if declaration.parameters is not None:
        schema: dict[str, Any] = declaration.parameters.json_schema.model_dump(
            mode="json", exclude_none=True, by_alias=True
        )
        return schema
    return None


def _function(tool: BaseTool | None) -> Callable[..., Any] | None:
    """The Python function behind a function tool (None for any other tool)."""
    function = tool.func if isinstance(tool, FunctionTool) else None
    return function if callable(function) else None


def _bind(bindings: Bindings, name: str, schema: Any, tool: BaseTool | None) -> Bound:
    function = _function(tool)
    return bindings.get(name, schema, source=function, function=function)


def bind_request(bindings: Bindings, llm_request: LlmRequest) -> None:
    """Bind each function the request declares; describe its id parameters for the model.

    A declaration whose schema changes is replaced by a copy (ADK may keep
    the one it built), its parameters given as the described JSON schema.
    """
    for index, tool in enumerate(llm_request.config.tools or ()):
        if not isinstance(tool, types.Tool) or not tool.function_declarations:
            continue
        declarations = list(tool.function_declarations)
        changed = False
        for at, declaration in enumerate(declarations):
            if not declaration.name:
                continue
            schema = _schema(declaration)
            owner = llm_request.tools_dict.get(declaration.name)
            bound = _bind(bindings, declaration.name, schema, owner)
            if bound.schema is not None and bound.schema != schema:
                declarations[at] = declaration.model_copy(
                    update={"parameters_json_schema": dict(bound.schema), "parameters": None}
                )
                changed = True
        if changed:
            assert llm_request.config.tools is not None
            llm_request.config.tools[index] = tool.model_copy(
                update={"function_declarations": declarations}
            )


async def bound_tool(bindings: Bindings, tool: BaseTool, tool_context: ToolContext) -> Bound:
    """``tool`` as bound to the guard: as the last model request showed it, else as ADK declares it.

    The declaration is the one the tool adds to a model request
    (``process_llm_request``, the tool's public way to describe itself).
    """
    bound = bindings.latest(tool.name)
    if bound is not None:
        return bound
    request = LlmRequest()
    await tool.process_llm_request(tool_context=tool_context, llm_request=request)
    schema = None
    for given in request.config.tools or ():
        for declaration in getattr(given, "function_declarations", None) or ():
            if declaration.name == tool.name:
                schema = _schema(declaration)
    return _bind(bindings, tool.name, schema, tool)
