"""Chat-completions messages and function tools in Anthropic's shape, for a request.

A model adapter that holds a conversation in the chat shape sends it to
Anthropic's Messages API through here. It is a translation, not a round trip
(:mod:`guardrail._transcript.messages` reads each shape as it is and writes
each message back unchanged): system and developer messages join the system
prompt, calls and results become ``tool_use`` and ``tool_result`` blocks,
messages of one role in a row merge into one, and fields the API does not
take (a tool message's ``name``, a recorded ``result`` or ``error`` flag) are
left out. The blocks are written here rather than by
:func:`~guardrail._transcript.messages.result_message`, which writes one whole
message per result: merging needs the blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guardrail._declare.arguments import parse_arguments
from guardrail._transcript.messages import content_text


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
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    arguments = parse_arguments(arguments)
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


def _text(message: Any) -> str:
    """The text of a message's content ("" for a message with none, or not a message)."""
    content = message.get("content") if isinstance(message, Mapping) else None
    return content_text(content) or ""
