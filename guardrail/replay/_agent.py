"""The agent contract: what the replay gives an agent, and what it takes back.

An **agent** is any callable ``(messages, tools) -> call``:

- ``messages``: the context, a list of OpenAI chat-completions messages
  (``{"role": "system" | "user" | "assistant" | "tool", "content": ...}``,
  assistant messages with ``tool_calls`` (``{"id", "type": "function",
  "function": {"name", "arguments"}}``, arguments as JSON text), tool
  messages with ``tool_call_id``). A compacted context starts with the
  system prompt and one system message holding the ID LEDGER block and the
  summary.
- ``tools``: OpenAI function tools (``{"type": "function", "function":
  {"name", "description", "parameters"}}``), derived from the guard's specs
  by :func:`tool_definitions`.
- the return value: ``{"name": tool, "arguments": {...}}`` (arguments may
  also be JSON text), or ``None`` for no call.

An agent may also take a keyword-only ``intent``: the replay then passes an
:class:`Intent` saying which recorded call is next (the tool, the other
arguments, each identifier argument's kind and ledger role). Real models
ignore it; the reference agent (:mod:`guardrail.replay._reference_agent`)
needs it. Adapters for model clients are :mod:`guardrail.replay._model_agents`.

:func:`load_agent` finds an agent by its ``module:callable`` name, and
:class:`Asker` is how the replay asks one: a copy of the context, the tools,
the intent where it takes one, and the answer read by :func:`as_call`.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from guardrail._declare.arguments import parse_arguments
from guardrail._declare.describe import id_description
from guardrail._declare.paths import EACH, INDEX, KEY, KEYS, VALUES
from guardrail._declare.spec import ToolSpec
from guardrail._guard.facade import Guard
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Ledger
from guardrail.replay._arguments import Leaf, leaves, with_value

#: ``(messages, tools) -> {"name", "arguments"} | None`` (optionally with ``intent=``).
Agent: TypeAlias = Callable[..., Any]
#: What :func:`~guardrail.replay.openai_agent` and :func:`~guardrail.replay.anthropic_agent`
#: return: an agent without ``intent``.
ModelAgent: TypeAlias = Callable[
    [Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], "dict[str, Any] | None"
]


# -- what the recorded call needs -------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One identifier argument the next call needs: where it goes, its kinds and its role.

    ``role`` is the role the recorded value has in the uncompacted run's
    ledger (None when the ledger does not hold it: an id the agent wrote
    itself, or invented). ``recorded`` is the recorded value, so that a
    scripted agent can recognise it in a context; it must take the value it
    uses from the context.
    """

    leaf: Leaf
    role: str | None
    place: Leaf  # the same argument in the intent's arguments, where its placeholder is

    @property
    def param(self) -> str:
        """The parameter path (``flights[*].flight_number``)."""
        return self.leaf.param.path.text

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds the parameter accepts."""
        return self.leaf.param.kinds

    @property
    def recorded(self) -> str:
        """The value the recorded call used."""
        return self.leaf.text


@dataclass(frozen=True)
class Intent:
    """The recorded call an agent is asked to make: its tool, arguments and identifier slots.

    ``arguments`` are the recorded ones with every identifier replaced by a
    placeholder (``<id 0>``, ``<id 1>``, ...); :meth:`fill` puts values in.
    """

    tool: str
    arguments: Mapping[str, Any]
    slots: tuple[Slot, ...]

    @classmethod
    def of(cls, guard: Guard, name: str, arguments: Mapping[str, Any], ledger: Ledger) -> Intent:
        """The intent of a recorded call, with roles from ``ledger`` (the uncompacted run's)."""
        spec = guard.specs[name]
        found = list(leaves(spec, guard.kinds, arguments))
        blank: Any = dict(arguments)
        for index, leaf in enumerate(found):
            blank = with_value(blank, leaf, _placeholder(index))
        places = {leaf.text: leaf for leaf in leaves(spec, guard.kinds, blank)}
        slots = tuple(
            Slot(leaf, _role(leaf, ledger), places[_placeholder(index)])
            for index, leaf in enumerate(found)
        )
        return cls(name, blank, slots)

    def fill(self, values: Sequence[str | None]) -> dict[str, Any]:
        """The arguments with ``values[i]`` in slot ``i`` (None leaves the slot empty)."""
        if len(values) != len(self.slots):
            raise GuardrailUsageError(f"fill() takes {len(self.slots)} values, not {len(values)}")
        filled: Any = dict(self.arguments)
        for slot, value in zip(self.slots, values, strict=True):
            filled = with_value(filled, slot.place, value)
        return dict(filled)


def _placeholder(index: int) -> str:
    return f"<id {index}>"


def _role(leaf: Leaf, ledger: Ledger) -> str | None:
    for kind in leaf.param.kinds:
        try:
            entry = ledger.get(kind, leaf.text)
        except Exception:  # a user-supplied normaliser that fails: no entry
            entry = None
        if entry is not None:
            return entry.role
    return None


# -- the tools, as a model sees them ----------------------------------------------------------


def tool_definitions(guard: Guard) -> list[dict[str, Any]]:
    """OpenAI function tools for the guard's specs.

    A spec knows its identifier parameters, not the others: each schema
    declares the identifier parameters (strings, lists or objects as their
    paths say) and allows any other property.
    """
    return [_tool(spec) for spec in guard.specs.values()]


def _tool(spec: ToolSpec) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for param in spec.params:
        # What an Id() annotation publishes in a pydantic schema: one wording everywhere.
        leaf: dict[str, Any] = {
            "type": "string",
            "description": id_description(param.kinds, param.sep),
        }
        steps = list(param.path.steps)
        if not steps or steps[0][0] != KEY:
            continue  # a path that does not start with an argument name has no property
        _merge(properties, steps[0][1], _schema(steps[1:], leaf))
    description = spec.description or f"{spec.name} ({spec.effect})"
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": description,
            "parameters": {"type": "object", "properties": properties},
        },
    }


def _schema(steps: list[tuple[str, Any]], leaf: dict[str, Any]) -> dict[str, Any]:
    if not steps:
        return dict(leaf)
    (op, arg), rest = steps[0], steps[1:]
    inner = _schema(rest, leaf)
    if op == KEY:
        return {"type": "object", "properties": {arg: inner}}
    if op in (EACH, INDEX):
        return {"type": "array", "items": inner}
    if op == VALUES:
        return {"type": "object", "additionalProperties": inner}
    if op == KEYS:
        return {"type": "object", "description": "keyed by " + leaf["description"]}
    return dict(leaf)


def _merge(properties: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    """Put ``schema`` under ``name``, merging with what another parameter put there."""
    old = properties.get(name)
    if old is None:
        properties[name] = schema
        return
    if old.get("type") == schema.get("type") == "object":
        for key, value in schema.get("properties", {}).items():
            _merge(old.setdefault("properties", {}), key, value)
    elif old.get("type") == schema.get("type") == "array":
        merged = {"items": old["items"]}
        _merge(merged, "items", schema["items"])
        old["items"] = merged["items"]


# -- loading and calling ----------------------------------------------------------------------


def call_arguments(raw: Any) -> Any:
    """Arguments as an object: JSON object text parsed, none or blank text as ``{}``.

    Any other text (not JSON, or JSON that is not an object) is kept as it is,
    for the replay to count as unreadable.
    """
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if isinstance(raw, str):
        parsed = parse_arguments(raw)
        return raw if parsed is None else parsed
    return raw


def load_agent(spec: str) -> Agent:
    """The callable named ``module:attribute`` (``attribute`` may be dotted).

    The current directory is searched first, as ``python -m`` would, so a
    file ``my_agent.py`` beside you is ``my_agent:agent``.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise GuardrailUsageError(
            f"--agent takes module:callable (e.g. guardrail.replay:reference_agent), not {spec!r}"
        )
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise GuardrailUsageError(
            f"cannot import the agent's module {module_name!r}: {exc}"
        ) from None
    for name in attribute.split("."):
        if not hasattr(target, name):
            raise GuardrailUsageError(f"the module {module_name!r} has no {attribute!r}")
        target = getattr(target, name)
    if not callable(target):
        raise GuardrailUsageError(f"{spec} is not callable; give a function (messages, tools)")
    return target  # type: ignore[no-any-return]


def takes_intent(agent: Agent) -> bool:
    """Whether ``agent`` has a parameter named ``intent`` (so the replay passes one)."""
    try:
        parameters = inspect.signature(agent).parameters
    except (TypeError, ValueError):
        return False
    return "intent" in parameters


def as_call(output: Any) -> tuple[str, Any] | None:
    """An agent's return value as ``(name, arguments)``, or None for no call.

    Arguments given as JSON text are parsed; text that is not a JSON object
    comes back as it is (the replay counts it as unreadable).
    """
    if output is None:
        return None
    if isinstance(output, Mapping) and isinstance(output.get("name"), str):
        return output["name"], call_arguments(output.get("arguments"))
    raise GuardrailUsageError(
        "an agent returns {'name': tool, 'arguments': {...}} or None for no call, not "
        f"{output!r:.200}"
    )


def agent_name(agent: Agent) -> str:
    """How the replay's settings name an agent: ``module:qualname``, by its public module.

    An agent defined in a private module and exported by its package
    (``guardrail.replay.reference_agent``) is named by the package, the path
    a program imports it from (and ``--agent`` takes).
    """
    module = getattr(agent, "__module__", None)
    name = getattr(agent, "__qualname__", None) or type(agent).__name__
    if not module:
        return name
    parts = module.split(".")
    while len(parts) > 1 and parts[-1].startswith("_"):
        package = sys.modules.get(".".join(parts[:-1]))
        if getattr(package, name, None) is not agent:
            break
        parts.pop()
    return f"{'.'.join(parts)}:{name}"


class Asker:
    """An agent as the replay asks it: the tools it is shown, and whether it takes an intent."""

    def __init__(self, agent: Agent, tools: list[dict[str, Any]]) -> None:
        self.agent = agent
        self.tools = tools
        self.intent = takes_intent(agent)

    def ask(self, messages: Sequence[Any], intent: Intent, where: str) -> tuple[str, Any] | None:
        given = [copy.deepcopy(m) for m in messages]  # an agent cannot change the replay
        try:
            if self.intent:
                output = self.agent(given, self.tools, intent=intent)
            else:
                output = self.agent(given, self.tools)
        except GuardrailUsageError:
            raise
        except Exception as exc:
            raise GuardrailUsageError(
                f"the agent raised {type(exc).__name__} at {where}: {exc}"
            ) from exc
        return as_call(output)
