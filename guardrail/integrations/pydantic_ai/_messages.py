"""Pydantic AI message histories to and from the OpenAI chat shape that compaction reads.

:func:`to_chat` writes one chat message per system prompt, user prompt and
tool return of a ``ModelRequest``, and one assistant message per
``ModelResponse`` (its text and its tool calls), remembering which parts
each chat message stands for. Parts with no chat form (thinking, files,
instruction deltas) travel with a neighbouring chat message of theirs, so
they are kept or summarized with it. :func:`from_chat` turns the compacted
list back: the chat messages kept give back their very parts, regrouped
into their own messages (the original object where all its parts are
kept, a copy with the parts kept where the cut split it), and the message
compaction wrote becomes a ``ModelRequest`` holding a ``CompactionPart``.

A user part in a request that carries tool returns (``ToolReturn.content``,
which Pydantic AI sends as a user part after the tool's result; content a
tool enqueued beside its return) is written as a user message among that
request's tool messages, with no assistant message between: the transcript
reader takes it as tool content, never as the user's words, so a ledger
rebuilt from the history observes none of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

#: Which message, by index in the history, and which of its parts a chat message stands for.
Origins = dict[int, list[tuple[int, Any]]]

#: The metadata of the ``CompactionPart`` guardrail writes (never sent to the model).
COMPACTION_METADATA = {"written_by": "guardrail", "holds": "ledger block and summary"}


def _user_text(content: str | Sequence[Any]) -> str:
    if isinstance(content, str):
        return content
    texts = [item if isinstance(item, str) else getattr(item, "content", None) for item in content]
    return "\n".join(text for text in texts if isinstance(text, str))


def _request_part(part: Any) -> dict[str, Any] | None:
    """The chat message of one part of a request, or None for a part with no chat form."""
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _user_text(part.content)}
    if isinstance(part, ToolReturnPart):
        message: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": part.tool_call_id,
            "content": part.model_response_str(),
        }
        if part.outcome != "success":
            message["error"] = True  # a failure, a retry (a refusal among them), a denial
        return message
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:
        # The deprecated form of a retried return, still found in histories built in memory.
        return {
            "role": "tool",
            "tool_call_id": part.tool_call_id,
            "content": part.model_response(),
            "error": True,
        }
    if isinstance(part, CompactionPart) and part.content:
        return {"role": "system", "content": part.content}
    return None


def _response(message: ModelResponse) -> dict[str, Any]:
    """The one assistant chat message of a response: its text and its tool calls."""
    texts = [part.content for part in message.parts if isinstance(part, TextPart)]
    calls = [
        {
            "id": part.tool_call_id,
            "type": "function",
            "function": {"name": part.tool_name, "arguments": part.args_as_json_str()},
        }
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]
    chat: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
    if calls:
        chat["tool_calls"] = calls
    elif chat["content"] is None:
        chat["content"] = ""
    return chat


def to_chat(messages: Sequence[ModelMessage]) -> tuple[list[dict[str, Any]], Origins]:
    """The history as OpenAI chat messages, and the parts each one stands for (by ``id``)."""
    chat: list[dict[str, Any]] = []
    origins: Origins = {}
    waiting: list[tuple[int, Any]] = []  # parts with no chat form, not yet given a neighbour

    def add(message: dict[str, Any], parts: list[tuple[int, Any]]) -> None:
        chat.append(message)
        origins[id(message)] = [*waiting, *parts]
        waiting.clear()

    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            add(_response(message), [(index, part) for part in message.parts])
            continue
        own: dict[str, Any] | None = None  # the last chat message of this request
        for part in message.parts:
            written = _request_part(part)
            if written is not None:
                add(written, [(index, part)])
                own = written
            elif own is not None:
                origins[id(own)].append((index, part))
            else:
                waiting.append((index, part))
        if waiting and own is None and chat:
            # A request with no part of a chat form goes with the message before it.
            origins[id(chat[-1])].extend(waiting)
            waiting.clear()
    if waiting and chat:
        origins[id(chat[-1])].extend(waiting)
        waiting.clear()
    return chat, origins


def from_chat(
    chat: Sequence[dict[str, Any]], origins: Origins, messages: Sequence[ModelMessage]
) -> list[ModelMessage]:
    """The history back from a compacted chat list (see the module's docstring)."""
    names = {
        part.tool_call_id: part.tool_name
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    }
    rebuilt: list[ModelMessage] = []
    group: list[Any] = []
    source: int | None = None  # the message the group's parts came from; None: new parts

    def flush() -> None:
        if not group:
            return
        if source is None:
            rebuilt.append(ModelRequest(parts=list(group)))
        else:
            original = messages[source]
            same = len(group) == len(original.parts) and all(
                a is b for a, b in zip(group, original.parts, strict=True)
            )
            if same:
                rebuilt.append(original)
            elif isinstance(original, ModelRequest):
                rebuilt.append(replace(original, parts=list(group)))
            else:
                rebuilt.append(replace(original, parts=list(group)))
        group.clear()

    for message in chat:
        pairs: Sequence[tuple[int | None, Any]] | None = origins.get(id(message))
        if pairs is None:
            pairs = [(None, _new_part(message, names))]
        for index, part in pairs:
            if index != source or (index is None and not isinstance(part, ToolReturnPart)):
                flush()
                source = index
            group.append(part)
    flush()
    return rebuilt


def _new_part(message: dict[str, Any], names: dict[str, str]) -> Any:
    """The part of a chat message compaction wrote: the compacted message, or a repair."""
    if message.get("role") == "tool":
        # An error result put in for a call that had none: the call's own return, failed.
        call_id = str(message.get("tool_call_id"))
        return ToolReturnPart(
            tool_name=names.get(call_id, ""),
            content=str(message.get("content", "")),
            tool_call_id=call_id,
            outcome="failed",
        )
    return CompactionPart(
        content=str(message.get("content", "")), metadata=dict(COMPACTION_METADATA)
    )
