"""Agents for the decisive test: what a model calls next, with and without compaction.

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
ignore it; :func:`reference_agent` needs it.

:func:`openai_agent` and :func:`anthropic_agent` wrap a model client. They
import nothing from ``openai`` or ``anthropic`` unless they have to build a
client themselves, so this module imports without those packages.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from guardrail._data.text import ELLIPSES, TOKEN_BREAKS, has_token
from guardrail._declare.arguments import parse_arguments
from guardrail._declare.describe import id_description
from guardrail._declare.paths import EACH, INDEX, KEY, KEYS, VALUES
from guardrail._declare.spec import ToolSpec
from guardrail._guard.facade import Guard
from guardrail._transcript.content import strings
from guardrail._transcript.messages import content_text
from guardrail.compaction import ledger_values
from guardrail.errors import GuardrailUsageError
from guardrail.ledger import Ledger
from guardrail.replay._arguments import Leaf, leaves, with_value

#: ``(messages, tools) -> {"name", "arguments"} | None`` (optionally with ``intent=``).
Agent: TypeAlias = Callable[..., Any]
#: What :func:`openai_agent` and :func:`anthropic_agent` return: an agent without ``intent``.
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


# -- the reference agent ----------------------------------------------------------------------


def reference_agent(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    intent: Intent | None = None,
) -> dict[str, Any] | None:
    """A deterministic agent that makes the recorded call with values read from the context.

    It stands for a careful model that knows what it wants to do: from the
    ``intent`` it knows the tool, the other arguments, and for each
    identifier argument its kind and its ledger role in the uncompacted
    run. Every identifier value it uses it takes from ``messages``:

    1. the value of the role in the ID LEDGER block, when the context has one
       naming that role (read with :func:`guardrail.compaction.ledger_values`);
    2. else the recorded value where the context has it verbatim, as a whole
       token;
    3. else the closest look-alike the context has (one character changed,
       inserted, deleted or swapped, or a cut-short copy ending in an
       ellipsis), as a model copies what a summary left;
    4. else nothing: the argument is left empty (``null``), and the call is
       made with the rest, so each argument's fate is seen on its own.

    So on an uncompacted context it repeats the recorded call wherever the
    ids are there to copy, and any difference after compaction is what the
    compaction left in the context.
    """
    if intent is None:
        raise GuardrailUsageError(
            "reference_agent replays a recorded call and needs intent=; run it through "
            "replay(..., agent=reference_agent) or guardrail replay --agent"
        )
    block = ledger_values(messages)
    text = "\n".join(strings(list(messages)))
    values = []
    for slot in intent.slots:
        value = block.get(slot.role) if slot.role is not None else None
        values.append(value if value is not None else _verbatim_or_look_alike(slot.recorded, text))
    return {"name": intent.tool, "arguments": intent.fill(values)}


def _text(message: Any) -> str:
    """The text of a message's content ("" for a message with none, or not a message)."""
    content = message.get("content") if isinstance(message, Mapping) else None
    return content_text(content) or ""


#: A token of a tool output or a message as the reference agent reads one: a token of prose
#: (:data:`~guardrail._data.text.TOKEN`) that ``|`` and ``=`` end as well, so a value in a table
#: cell or on a ``key=value`` line is a token of its own. The summary lint judges such a
#: token whole (what it flags would change with it).
_TOKEN = re.compile(f"[^{TOKEN_BREAKS}|=]+")
_TRAILING = ".:!?"


def _tokens(text: str) -> Iterator[str]:
    for match in _TOKEN.finditer(text):
        token = match.group()
        if not token.endswith(ELLIPSES):
            token = token.rstrip(_TRAILING)
        if token:
            yield token


def _verbatim_or_look_alike(wanted: str, text: str) -> str | None:
    if has_token(text, wanted):
        return wanted
    best: tuple[int, str] | None = None
    for token in _tokens(text):
        score = _likeness(token, wanted)
        if score is not None and (best is None or score < best[0]):
            best = (score, token)
    return best[1] if best is not None else None


def _likeness(token: str, wanted: str) -> int | None:
    """1 for one edit or swap away, 2 for a cut-short copy; None when not alike."""
    for ellipsis in ELLIPSES:
        if token.endswith(ellipsis):
            stem = token[: -len(ellipsis)]
            return 2 if len(stem) >= 2 and wanted.startswith(stem) else None
    if abs(len(token) - len(wanted)) > 1 or len(wanted) < 4:  # three letters: another code
        return None
    return 1 if _one_edit(token, wanted) else None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one substitution, insertion, deletion or adjacent swap."""
    if a == b:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        return (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1 :]


# -- adapters for real models -----------------------------------------------------------------


def _field(obj: Any, name: str) -> Any:
    """An attribute of an SDK object, or a key of the same response as a dict."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _arguments(raw: Any) -> Any:
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


_OPENAI_FIELDS = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages with only the fields the chat-completions API takes for each role."""
    out = []
    for message in messages:
        keep = _OPENAI_FIELDS.get(str(message.get("role")), tuple(message))
        out.append({key: message[key] for key in keep if key in message})
    return out


def openai_agent(client: Any = None, *, model: str, **options: Any) -> ModelAgent:
    """An agent backed by an OpenAI-compatible client: ``client.chat.completions.create``.

    ``client`` is any object with that method (``openai.OpenAI(base_url=...)``
    for OpenAI-compatible servers); without one, ``openai.OpenAI()`` is built
    on first use. ``options`` go to every request (``temperature=0``, say).
    The first tool call of the reply is the agent's call.
    """

    def agent(
        messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any] | None:
        nonlocal client
        if client is None:
            client = importlib.import_module("openai").OpenAI()
        response = client.chat.completions.create(
            model=model, messages=openai_messages(messages), tools=list(tools), **options
        )
        choices = _field(response, "choices") or []
        message = _field(choices[0], "message") if choices else None
        calls = (_field(message, "tool_calls") or []) if message is not None else []
        if not calls:
            return None
        function = _field(calls[0], "function")
        return {
            "name": _field(function, "name"),
            "arguments": _arguments(_field(function, "arguments")),
        }

    return agent


def anthropic_messages(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI chat messages as Anthropic's ``(system, messages)``.

    System messages (the compacted ledger and summary included) join the
    system prompt; assistant tool calls become ``tool_use`` blocks, tool
    messages ``tool_result`` blocks in a user message; messages of one role
    in a row are merged, and a conversation that does not start with the
    user gets a short user message first, as the API requires.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for message in messages:
        role = message.get("role")
        text = _text(message)
        if role in ("system", "developer"):
            system.append(text)
        elif role == "tool":
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": str(message.get("tool_call_id")),
                        "content": text,
                    }
                ],
            )
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                arguments = _arguments(function.get("arguments"))
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id")),
                        "name": function.get("name"),
                        "input": arguments if isinstance(arguments, Mapping) else {},
                    }
                )
            add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": text or "(empty)"}])
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continue)"}]})
    return "\n\n".join(part for part in system if part), out


def anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools as Anthropic tools (``name``, ``description``, ``input_schema``)."""
    out = []
    for tool in tools:
        function = tool.get("function") or tool
        out.append(
            {
                "name": function["name"],
                "description": function.get("description", ""),
                "input_schema": function.get("parameters") or {"type": "object"},
            }
        )
    return out


def anthropic_agent(
    client: Any = None, *, model: str, max_tokens: int = 1024, **options: Any
) -> ModelAgent:
    """An agent backed by an Anthropic client: ``client.messages.create``.

    Without ``client``, ``anthropic.Anthropic()`` is built on first use.
    The messages and tools are converted from the OpenAI shape
    (:func:`anthropic_messages`, :func:`anthropic_tools`); the first
    ``tool_use`` block of the reply is the agent's call.
    """

    def agent(
        messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any] | None:
        nonlocal client
        if client is None:
            client = importlib.import_module("anthropic").Anthropic()
        system, converted = anthropic_messages(messages)
        request: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": converted,
            "tools": anthropic_tools(tools),
            **options,
        }
        if system:
            request["system"] = system
        response = client.messages.create(**request)
        for block in _field(response, "content") or []:
            if _field(block, "type") == "tool_use":
                return {"name": _field(block, "name"), "arguments": _field(block, "input") or {}}
        return None

    return agent


# -- loading and calling ----------------------------------------------------------------------


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
        return output["name"], _arguments(output.get("arguments"))
    raise GuardrailUsageError(
        "an agent returns {'name': tool, 'arguments': {...}} or None for no call, not "
        f"{output!r:.200}"
    )


def agent_name(agent: Agent) -> str:
    """How the replay's settings name an agent: ``module:qualname``."""
    module = getattr(agent, "__module__", None)
    name = getattr(agent, "__qualname__", None) or type(agent).__name__
    return f"{module}:{name}" if module else name


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
