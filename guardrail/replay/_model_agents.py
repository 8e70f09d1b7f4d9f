"""Agents backed by model clients: OpenAI-compatible chat completions, and Anthropic.

:func:`openai_agent` and :func:`anthropic_agent` turn a client into an agent
of the contract (:mod:`guardrail.replay._agent`): the context and tools go
out in the API's shape, and the first tool call of the reply comes back.
They import nothing from ``openai`` or ``anthropic`` unless they have to
build a client themselves, so this module imports without those packages.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from guardrail._transcript.chat_to_anthropic import anthropic_messages, anthropic_tools
from guardrail.replay._agent import ModelAgent, call_arguments

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
            "arguments": call_arguments(_field(function, "arguments")),
        }

    return agent


def anthropic_agent(
    client: Any = None, *, model: str, max_tokens: int = 1024, **options: Any
) -> ModelAgent:
    """An agent backed by an Anthropic client: ``client.messages.create``.

    Without ``client``, ``anthropic.Anthropic()`` is built on first use.
    The messages and tools are converted from the OpenAI shape
    (:func:`~guardrail._transcript.chat_to_anthropic.anthropic_messages`,
    :func:`~guardrail._transcript.chat_to_anthropic.anthropic_tools`); the first
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


def _field(obj: Any, name: str) -> Any:
    """An attribute of an SDK object, or a key of the same response as a dict."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)
