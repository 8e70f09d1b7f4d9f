"""A plain loop's tools: the function to run, its input schema compiled once, its definition.

Private to :mod:`guardrail.integrations.loops`: :class:`LoopTool` is one
tool of a :class:`~guardrail.integrations.loops.Toolbox`, validated against
the schema given (or the one pydantic builds from the signature);
:func:`input_schemas` reads the schemas from a mapping or from the tool
definitions sent to an API; :func:`unwrapped` finds the function under
``@guard.tool``, so a call is checked once.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from guardrail._data.verdict import ApprovalRequest
from guardrail._guard.decorator import GUARDED_ATTRIBUTE, GuardedTool
from guardrail.errors import GuardrailUsageError

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

__all__ = [
    "NO_SCHEMA",
    "LoopTool",
    "ToolResults",
    "input_schemas",
    "signature_schema",
    "unwrapped",
]

#: Marks a tool given ``schemas={name: None}``: run without validating its arguments.
NO_SCHEMA = object()


class ToolResults(list[dict[str, Any]]):
    """The messages answering a message's tool calls, and the approvals they wait for.

    A list of the answers, in the message's shape, as before; ``approvals``
    is empty unless a call waits for the user's approval of some of its ids.
    Then no tool of the message ran and the list is empty: show each
    request's ``tool``, ``param``, ``value``, ``kind`` and ``evidence`` to the
    user, pass each answer to ``guard.approve(request)`` or
    ``guard.deny(request)``, and answer the same message again. An approved
    call then runs (once); a declined one is refused as the user declined.
    """

    def __init__(
        self, answers: Iterable[dict[str, Any]] = (), approvals: Iterable[ApprovalRequest] = ()
    ) -> None:
        super().__init__(answers)
        #: What the user is asked to approve, one request per value and tool.
        self.approvals: tuple[ApprovalRequest, ...] = tuple(approvals)

    @property
    def waiting(self) -> bool:
        """Whether the message waits for the user (``approvals`` is not empty)."""
        return bool(self.approvals)


@dataclass
class LoopTool:
    """One tool of a toolbox: its name, the function to run, and its compiled input schema."""

    name: str
    function: Callable[..., Any]
    is_async: bool
    schema: Any  # a JSON schema, NO_SCHEMA, or None: not built yet (from the signature)
    #: The description of the tool's given definition (None: the function's docstring).
    description: str | None = None
    validator: jsonschema.protocols.Validator | None = None
    compiled: bool = False
    #: The input schema the model is given, as the binding reads it (None: none known).
    shown: Mapping[str, Any] | None = None

    def compile(self) -> None:
        """Build the argument validator once: from the schema given, else the signature."""
        if self.compiled:
            return
        schema = self.schema
        if schema is None:
            schema = signature_schema(self.name, self.function)
        if schema is NO_SCHEMA:
            # Not validated, but the signature's schema, where pydantic can build one, still
            # says which parameters are ids (its marks) and under which names.
            try:
                self.shown = signature_schema(self.name, self.function)
            except GuardrailUsageError:
                self.shown = None
        else:
            self.shown = schema if isinstance(schema, Mapping) else None
        if schema is not NO_SCHEMA:
            cls = jsonschema.validators.validator_for(schema)
            try:
                cls.check_schema(schema)
            except jsonschema.exceptions.SchemaError as exc:
                raise GuardrailUsageError(
                    f"the input schema of {self.name} is not a valid JSON schema: {exc.message}",
                    tool=self.name,
                ) from None
            self.validator = cls(schema)
        self.compiled = True

    def invalid(self, arguments: Mapping[str, Any]) -> str | None:
        """What is wrong with ``arguments`` for this tool, or None when they are valid."""
        self.compile()
        if self.validator is None or self.validator.is_valid(arguments):
            return None
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(arguments))
        if error is None:
            return None
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
        return f"{where.lstrip('.')}: {error.message}" if where else error.message


def signature_schema(name: str, function: Callable[..., Any]) -> Any:
    """The JSON schema of a function's parameters, built by pydantic from its signature."""
    import pydantic

    try:
        return pydantic.TypeAdapter(cast(Any, function)).json_schema()
    except Exception as exc:  # an annotation pydantic cannot describe
        raise GuardrailUsageError(
            f"cannot build an input schema for {name} from its signature "
            f"({type(exc).__name__}: {exc}); pass schemas={{{name!r}: schema}}, or "
            f"schemas={{{name!r}: None}} to run it without validating its arguments",
            tool=name,
        ) from None


def input_schemas(
    given: Mapping[str, Any] | Iterable[Any] | None, descriptions: dict[str, str] | None = None
) -> dict[str, Any]:
    """Input schemas by tool name, from a mapping or from the tool definitions sent to an API.

    A definition may be in OpenAI chat form (``{"type": "function", "function":
    {"name", "parameters"}}``), Responses form (``{"type": "function", "name",
    "parameters"}``) or Anthropic form (``{"name", "input_schema"}``); the
    descriptions of definitions go into ``descriptions``.
    """
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return {name: NO_SCHEMA if schema is None else schema for name, schema in given.items()}
    found: dict[str, Any] = {}
    for definition in given:
        spec = definition.get("function", definition) if isinstance(definition, Mapping) else None
        name = spec.get("name") if isinstance(spec, Mapping) else None
        if not isinstance(spec, Mapping) or not isinstance(name, str):
            raise GuardrailUsageError(
                "schemas= takes a mapping of tool name to JSON schema, or the tool definitions "
                f"you send to the API (each with a name); got {definition!r}"
            )
        schema = spec.get("parameters", spec.get("input_schema"))
        found[name] = NO_SCHEMA if schema is None else schema
        description = spec.get("description")
        if descriptions is not None and isinstance(description, str):
            descriptions[name] = description
    return found


def unwrapped(guard: Guard, function: Callable[..., Any]) -> tuple[str | None, Callable[..., Any]]:
    """The spec name and the function under ``@guard.tool`` (so a call is checked once).

    ``(None, function)`` for a function the decorator did not wrap.
    """
    bound = function.__self__ if inspect.ismethod(function) else None
    plain = function.__func__ if inspect.ismethod(function) else function
    tool = getattr(plain, "__dict__", {}).get(GUARDED_ATTRIBUTE)
    if not isinstance(tool, GuardedTool):
        return None, function
    if guard.specs.get(tool.name) is not tool.spec:  # declared by another guard
        raise GuardrailUsageError(
            f"{tool.name} is guarded by another Guard; give the loop the guard that declared it",
            tool=tool.name,
        )
    target: Callable[..., Any] = getattr(plain, "__wrapped__")  # noqa: B009
    return tool.name, types.MethodType(target, bound) if bound is not None else target
