"""Binding: a guard's declarations applied to the Python callables that run its tools.

A manifest (or ``guard.declare``) says what each tool takes and gives; the
program still holds the callables. :func:`bind_tools` guards each one under
its tool's name with the declaration already made, so nothing is declared
twice: functions, bound methods, static methods of tool classes, a mapping of
name to callable or a list of callables. Tool definitions as sent to a model
(OpenAI, Anthropic or MCP shapes) may come beside them: the guard learns the
placeholder ids their descriptions quote, and a declared id parameter a
definition does not have is an error (a misspelt name would go unchecked).

:func:`tool_name` is the name a callable gets when none is given: its own,
or, for a static or class method of a tool class (``GetUserDetails.invoke``),
the class's in snake case (``get_user_details``), so the tools of a class-per-
tool set are not all named ``invoke``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from guardrail._declare.definitions import Definition, read_definitions
from guardrail._declare.spec import signature_ids
from guardrail._guard.decorator import GUARDED_ATTRIBUTE
from guardrail._guard.registry import Registry
from guardrail.errors import GuardrailUsageError

__all__ = ["bind_tools", "snake_case", "tool_name"]

Decorate = Callable[[Callable[..., Any], str], Callable[..., Any]]


def snake_case(name: str) -> str:
    """``GetUserDetails`` as ``get_user_details`` (a class named as its tool)."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return spaced.lower()


def _owner_name(function: Callable[..., Any], owner: type | None) -> str | None:
    """The class a method was found in, given or read from its qualified name."""
    if owner is not None:
        return owner.__name__
    parts = getattr(function, "__qualname__", "").split(".")
    if len(parts) >= 2 and parts[-2] != "<locals>":
        return parts[-2]
    return None


def tool_name(
    function: Callable[..., Any], declared: Mapping[str, object], *, owner: type | None = None
) -> str:
    """The tool name of a callable given none: its own, or its tool class's.

    A static or class method (``owner`` given) is named by its class unless
    the guard declares the method's own name; any other callable is named by
    its class only when the guard declares the class's name and not its own.
    """
    own = getattr(function, "__name__", None) or ""
    if own in declared:
        return own
    cls = _owner_name(function, owner)
    if cls is not None and (owner is not None or snake_case(cls) in declared):
        return snake_case(cls)
    if not own:
        raise GuardrailUsageError(f"{function!r} has no __name__; give it a name")
    return own


def bind_tools(
    registry: Registry,
    engine: object,
    decorate: Decorate,
    tools: Mapping[str, Callable[..., Any]] | Iterable[Callable[..., Any]],
    definitions: object = None,
) -> dict[str, Callable[..., Any]]:
    """Each callable guarded under its tool's name with the declaration the guard holds."""
    pairs: list[tuple[str | None, Callable[..., Any]]]
    if isinstance(tools, Mapping):
        pairs = [(str(name), function) for name, function in tools.items()]
    elif isinstance(tools, Iterable) and not isinstance(tools, (str, bytes)):
        pairs = [(None, function) for function in tools]
    else:
        raise GuardrailUsageError(
            "bind() takes a mapping of tool name to callable, or a list of callables; "
            f"not {type(tools).__name__}"
        )
    described = {d.name: d for d in read_definitions(definitions)} if definitions else {}
    planned: list[tuple[str, Callable[..., Any], bool]] = []
    for key, function in pairs:
        if not callable(function):
            raise GuardrailUsageError(f"tool {key!r} is not callable: {function!r}", tool=key)
        name = key or tool_name(function, registry.specs)
        guarded = getattr(function, GUARDED_ATTRIBUTE, None)
        if guarded is not None and getattr(guarded, "engine", None) is engine:
            if guarded.name != name:
                raise GuardrailUsageError(
                    f"tool {name!r} is the guarded function of tool {guarded.name!r}; "
                    "bind it under that name",
                    tool=name,
                )
            planned.append((name, function, True))
            continue
        if name not in registry.specs and not any(signature_ids(function)):
            known = ", ".join(sorted(registry.specs)) or "none"
            raise GuardrailUsageError(
                f"bind(): the guard declares no tool {name!r} (it declares: {known}), and "
                f"{getattr(function, '__qualname__', function)!r} marks no ids: add "
                f"[tools.{name}] to the manifest, or bind the callable under its tool's name",
                tool=name,
            )
        if name in described and name in registry.specs:
            _check_parameters(registry, name, described[name])
        planned.append((name, function, False))
    bound: dict[str, Callable[..., Any]] = {}
    for name, function, done in planned:
        if name in bound:
            raise GuardrailUsageError(f"bind(): two callables for tool {name!r}", tool=name)
        bound[name] = function if done else decorate(function, name)
    for name, definition in described.items():
        if name in registry.specs:
            registry.learn_examples(name, _texts(definition))
    return bound


def _check_parameters(registry: Registry, name: str, definition: Definition) -> None:
    """A declared id parameter the definition does not have: the model never sends it."""
    spec = registry.specs[name]
    properties = definition.properties
    if not properties:
        return
    for param in (*spec.params, *spec.mints):
        if param.name not in properties:
            raise GuardrailUsageError(
                f"tool {name!r} declares an id parameter {param.name!r}, but its definition "
                f"has none of that name (it has: {', '.join(properties)}); the model could "
                "never send it, so the declaration checks nothing: fix its name",
                tool=name,
                param=param.name,
            )


def _texts(definition: Definition) -> Sequence[str]:
    """The description of a tool and of each of its parameters: where placeholders are quoted."""
    texts = [definition.description]
    for schema in definition.properties.values():
        text = schema.get("description")
        if isinstance(text, str):
            texts.append(text)
    return texts
