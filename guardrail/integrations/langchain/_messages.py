"""LangChain messages to and from the OpenAI chat dicts compaction reads, and tool results.

Private to :mod:`guardrail.integrations.langchain`; imports LangChain, so it
is only imported from there (after the extra's import check).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langgraph.types import Command

from guardrail.compaction import BLOCK_HEADER

__all__ = [
    "TOOL_CONTENT",
    "from_chat",
    "is_tool_content",
    "marked_tool_content",
    "new_user_texts",
    "to_chat",
    "tool_result",
    "with_tool_message",
]


def to_chat(messages: Sequence[BaseMessage]) -> tuple[list[dict[str, Any]], dict[int, BaseMessage]]:
    """The messages as OpenAI chat dicts, and each dict's message (by the dict's ``id()``).

    A tool message marked ``status="error"`` carries ``"error": True``, the
    flag compaction reads a failure by in this shape (chat completions has no
    field of its own), so the text of an error is never harvested. A tool
    message's ``artifact`` goes along as ``"result"``, the value compaction
    harvests in place of the text, as the middleware records it.
    """
    chat: list[dict[str, Any]] = []
    origin: dict[int, BaseMessage] = {}
    for message in messages:
        converted = convert_to_openai_messages(message)
        for item in converted if isinstance(converted, list) else [converted]:
            if isinstance(message, ToolMessage):
                if message.status == "error":
                    item["error"] = True
                if message.artifact is not None:
                    item["result"] = message.artifact
            chat.append(item)
            origin[id(item)] = message
    return chat, origin


def from_chat(chat: Sequence[dict[str, Any]], origin: dict[int, BaseMessage]) -> list[BaseMessage]:
    """Compacted chat dicts back as LangChain messages: the kept ones are the very messages given.

    Compaction returns the messages it keeps as the objects it was given,
    so each is found by identity and its LangChain message (id, metadata,
    status) comes back untouched. What compaction wrote (the ledger block
    and summary, an error result for an unanswered call) is converted; a
    tool result it wrote is always an error.
    """
    out: list[BaseMessage] = []
    seen: set[int] = set()
    for item in chat:
        original = origin.get(id(item))
        if original is not None:
            if id(original) not in seen:  # one message read as several dicts comes back once
                seen.add(id(original))
                out.append(original)
            continue
        (message,) = convert_to_messages([item])
        if isinstance(message, ToolMessage):
            message.status = "error"
        out.append(message)
    return out


def new_user_texts(messages: Sequence[AnyMessage]) -> list[str]:
    """The text of the user messages after the model's last message: what the user just said.

    Earlier user messages were seen when their run started. A ledger block
    compaction wrote in the user's role is not the user's text, and neither
    is a human message a tool added beside its result (marked by
    :func:`marked_tool_content`).
    """
    texts: list[str] = []
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            break
        if isinstance(message, HumanMessage) and not is_tool_content(message):
            text = message.text
            if text and not text.lstrip().startswith(BLOCK_HEADER):
                texts.append(text)
    texts.reverse()
    return texts


#: The ``response_metadata`` key marking a human message a tool's ``Command`` added.
TOOL_CONTENT = "guardrail_tool_content"


def is_tool_content(message: BaseMessage) -> bool:
    """Whether ``message`` is a human message a tool added beside its result (see below)."""
    return bool(message.response_metadata.get(TOOL_CONTENT))


def marked_tool_content(response: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
    """``response`` with each human message its ``Command`` adds marked as the tool's content.

    A tool may answer with a ``Command`` whose update adds a human message
    beside its tool message: the page it fetched, say, in the user's role.
    What a tool returned is never the user's words, so the message is marked
    (in its ``response_metadata``, which the history keeps) and never read as
    typed by the user when a run starts. A copy: nothing is changed in place.
    """
    if isinstance(response, ToolMessage):
        return response
    update = response.update
    found = update.get("messages") if isinstance(update, dict) else None
    if not isinstance(found, (list, tuple)) or not any(
        isinstance(item, HumanMessage) for item in found
    ):
        return response
    messages = [
        item.model_copy(
            update={"response_metadata": {**item.response_metadata, TOOL_CONTENT: True}}
        )
        if isinstance(item, HumanMessage)
        else item
        for item in found
    ]
    assert isinstance(update, dict)
    return dataclasses.replace(response, update={**update, "messages": messages})


def tool_result(response: ToolMessage | Command[Any], call_id: str) -> tuple[Any, bool, str] | None:
    """What a tool call returned, whether it failed, and its text; None when no result answers.

    The ``artifact`` where the tool gave one (the raw value, beside the text
    for the model), else the content: its text, read as JSON by the record.
    The text is the one the model reads, for the tool's failure rule. A
    ``Command`` answers with the tool message in its update, if any.
    """
    message: ToolMessage | None = None
    if isinstance(response, ToolMessage):
        message = response
    else:
        update = response.update
        found = update.get("messages", ()) if isinstance(update, dict) else ()
        for item in found if isinstance(found, (list, tuple)) else ():
            if isinstance(item, ToolMessage) and item.tool_call_id == call_id:
                message = item
    if message is None:
        return None
    error = message.status == "error"
    content = message.content
    text = content if isinstance(content, str) else message.text
    if message.artifact is not None:
        return message.artifact, error, text
    return text, error, text


def with_tool_message(
    response: ToolMessage | Command[Any], call_id: str, rewrite: Callable[[str], str]
) -> ToolMessage | Command[Any]:
    """``response`` with the text of its successful tool message for ``call_id`` rewritten.

    A copy: the message (or the ``Command`` whose update holds it) is never
    changed in place. A failed message, or one whose content is not one text
    (a list of blocks), comes back as it is.
    """

    def rewritten(message: ToolMessage) -> ToolMessage:
        if message.status == "error" or not isinstance(message.content, str):
            return message
        return message.model_copy(update={"content": rewrite(message.content)})

    if isinstance(response, ToolMessage):
        return rewritten(response) if response.tool_call_id == call_id else response
    update = response.update
    if not isinstance(update, dict):
        return response
    found = update.get("messages")
    if not isinstance(found, (list, tuple)):
        return response
    messages = [
        rewritten(item) if isinstance(item, ToolMessage) and item.tool_call_id == call_id else item
        for item in found
    ]
    if all(a is b for a, b in zip(messages, found, strict=True)):
        return response
    return dataclasses.replace(response, update={**update, "messages": messages})
