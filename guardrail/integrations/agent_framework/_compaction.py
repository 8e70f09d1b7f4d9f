"""In-run compaction: a ``CompactionStrategy`` built on :func:`guardrail.compact`.

Private to :mod:`guardrail.integrations.agent_framework`, which re-exports
:class:`GuardrailCompaction`. Agent Framework's messages are read as the
OpenAI chat dicts compaction reads (:func:`to_chat`); the strategy then
marks the messages it summarized excluded and puts one message with the
ledger block and the summary in their place, the way the framework's own
summarizing strategy annotates its work, so the framework keeps the
messages it did not touch as the very objects it had.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from agent_framework import (
    EXCLUDE_REASON_KEY,
    EXCLUDED_KEY,
    GROUP_ANNOTATION_KEY,
    GROUP_ID_KEY,
    SUMMARIZED_BY_SUMMARY_ID_KEY,
    SUMMARY_OF_GROUP_IDS_KEY,
    SUMMARY_OF_MESSAGE_IDS_KEY,
    Content,
    Message,
)

from guardrail._guard.facade import Guard
from guardrail.compaction import (
    BLOCK_HEADER,
    DEFAULT_KEEP_RECENT,
    CompactionReport,
    Summarizer,
    compact,
)
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.asking import KEY
from guardrail.integrations._common.compaction import (
    Trigger,
    chat_tokens,
    check_keep,
    check_trigger,
)

__all__ = ["COMPACTED", "GuardrailCompaction", "compacted", "to_chat"]

#: ``additional_properties[KEY]`` of the message a compaction wrote.
COMPACTED = "compacted"


def compacted(message: Message) -> bool:
    """Whether ``message`` is one a compaction wrote (the ledger block and the summary)."""
    return message.additional_properties.get(KEY) == COMPACTED


class GuardrailCompaction:
    """A ``CompactionStrategy`` that compacts with :func:`guardrail.compact`.

    ``Agent(..., compaction_strategy=GuardrailCompaction(guard))`` compacts
    the messages the model is sent before each model call of a run, once
    ``trigger`` is reached (``("messages", n)``: n messages or more;
    ``("tokens", n)``: n tokens or more, characters / 4 of the messages as
    JSON). It compacts the run's own messages, those after the user's last
    message: the framework keeps a summary in the conversation only where
    the run made every message it replaces, so the turns before stay as the
    history gave them. Of those, the last ``keep_last_messages`` stay raw
    (or, with ``keep_last_messages=None``, the last ``keep_recent`` turns),
    moved back so a tool call keeps its result; the ones before are marked
    excluded, summarized, and replaced by one message (``role``:
    ``"system"``, or ``"user"`` for a provider that takes one system message)
    holding the sealed ID LEDGER block and a summary in which ids appear only
    as ``[role]``. The messages kept are the very ones given.

    The ledger is the conversation's session open where the strategy runs:
    the :class:`Guardrail` provider opens it around every model call.
    ``summarize`` is any ``(messages, roles) -> str`` (the extractive
    summarizer by default). ``last_report`` is the report of the last
    compaction.
    """

    def __init__(
        self,
        guard: Guard,
        *,
        trigger: Trigger = ("messages", 40),
        keep_last_messages: int | None = 6,
        keep_recent: int = DEFAULT_KEEP_RECENT,
        summarize: Summarizer | None = None,
        role: Literal["system", "user"] = "system",
    ) -> None:
        if not isinstance(guard, Guard):
            raise GuardrailUsageError(
                f"GuardrailCompaction needs a guardrail Guard, not {type(guard).__name__}"
            )
        kind, limit = check_trigger(trigger)
        check_keep(keep_recent, keep_last_messages)
        if role not in ("system", "user"):
            raise GuardrailUsageError(f"role must be 'system' or 'user', not {role!r}")
        self.guard = guard
        self.trigger: Trigger = (kind, limit)
        self.keep_last_messages = keep_last_messages
        self.keep_recent = keep_recent
        self.summarize = summarize
        self.role = role
        #: The report of the last compaction (None before the first).
        self.last_report: CompactionReport | None = None

    async def __call__(self, messages: list[Message]) -> bool:
        """Compact ``messages`` in place once the trigger is reached; whether anything changed."""
        included = [m for m in messages if not m.additional_properties.get(EXCLUDED_KEY)]
        kind, limit = self.trigger
        if kind == "messages" and len(included) < limit:
            return False
        # The run's own messages: those after the user's last message. The framework keeps a
        # summary in the conversation only where every message it replaces is one the run
        # made, so the turns before stay as the history gave them.
        start = 0
        for index, message in enumerate(included):
            if message.role == "user" and not compacted(message):
                start = index + 1
        own = included[start:]
        chat, origin = to_chat(own)
        if kind == "tokens" and chat_tokens(to_chat(included)[0]) < limit:
            return False
        keep = self.keep_last_messages
        if keep is not None:
            # Counted in the framework's messages: the chat dicts of the last ``keep`` of them.
            last = {id(message) for message in own[max(0, len(own) - keep) :]}
            keep = sum(id(origin[id(item)]) in last for item in chat)
        result = compact(
            chat,
            self.guard.ledger,
            guard=self.guard,
            keep_recent=self.keep_recent,
            keep_last_messages=keep,
            summarize=self.summarize,
            shape="openai_chat",
            role=self.role,
        )
        if not result.report.summarized:
            return False
        self.last_report = result.report
        return _replace(messages, own, result.messages, origin, self.role)


def _replace(
    messages: list[Message],
    included: Sequence[Message],
    compacted_chat: Sequence[Any],
    origin: dict[int, Message],
    role: str,
) -> bool:
    """Mark what was summarized excluded and put the compacted message in its place."""
    kept = {id(origin[id(item)]) for item in compacted_chat if id(item) in origin}
    texts = [
        item["content"]
        for item in compacted_chat
        if id(item) not in origin
        and isinstance(item, dict)
        and isinstance(item.get("content"), str)
        and BLOCK_HEADER in item["content"]
    ]
    if not texts:
        return False
    # What compaction keeps is the system messages it started with and the recent end: the
    # messages before the first one kept (but those system messages) were summarized.
    first = next(i for i, m in enumerate(included) if m.role != "system" or id(m) not in kept)
    end = next((i for i in range(first, len(included)) if id(included[i]) in kept), len(included))
    summarized = included[first:end]
    if not summarized:
        return False
    summary_id = f"guardrail_summary_{uuid.uuid4().hex[:16]}"
    group_ids: list[str] = []
    for message in summarized:
        annotation = message.additional_properties.get(GROUP_ANNOTATION_KEY)
        if not isinstance(annotation, dict):
            annotation = {}
            message.additional_properties[GROUP_ANNOTATION_KEY] = annotation
        group = annotation.get(GROUP_ID_KEY)
        if isinstance(group, str) and group not in group_ids:
            group_ids.append(group)
        annotation[SUMMARIZED_BY_SUMMARY_ID_KEY] = summary_id
        message.additional_properties[EXCLUDED_KEY] = True
        message.additional_properties[EXCLUDE_REASON_KEY] = "summarized"
    summary = Message(
        role,
        [texts[0]],
        message_id=summary_id,
        additional_properties={
            KEY: COMPACTED,
            GROUP_ANNOTATION_KEY: {
                SUMMARY_OF_MESSAGE_IDS_KEY: [m.message_id for m in summarized if m.message_id],
                SUMMARY_OF_GROUP_IDS_KEY: group_ids,
            },
        },
    )
    messages.insert(messages.index(summarized[0]), summary)
    return True


# -- the framework's messages as OpenAI chat dicts ------------------------------------------------


def to_chat(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], dict[int, Message]]:
    """The messages as OpenAI chat dicts, and each dict's message (by the dict's ``id()``).

    By content, whatever the message's role: a ``function_call`` is an
    assistant's tool call, a ``function_result`` a tool message (``"error":
    True`` where it holds an exception, the flag compaction reads a failure
    by), text the message's own role's words. So a tool's result is never
    read as the user's words, even in a message of the user's role, and a
    user's text never as a result. Approval requests and responses, and
    content with no text, carry nothing for compaction.
    """
    chat: list[dict[str, Any]] = []
    origin: dict[int, Message] = {}
    for message in messages:
        for item in _chat_of(message):
            chat.append(item)
            origin[id(item)] = message
    return chat, origin


def _chat_of(message: Message) -> list[dict[str, Any]]:
    texts = [c.text for c in message.contents if c.type == "text" and c.text]
    calls = [c for c in message.contents if c.type == "function_call" and c.call_id and c.name]
    results = [c for c in message.contents if c.type == "function_result" and c.call_id]
    out: list[dict[str, Any]] = []
    if message.role == "assistant" or calls:
        if texts or calls:
            item: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
            if calls:
                item["tool_calls"] = [_tool_call(call) for call in calls]
            out.append(item)
    elif texts and message.role in ("system", "user"):
        out.append({"role": message.role, "content": "\n".join(texts)})
    for result in results:
        tool: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": result.call_id,
            "content": _result_text(result),
        }
        if result.exception is not None:
            tool["error"] = True
        out.append(tool)
    return out


def _tool_call(call: Content) -> dict[str, Any]:
    arguments = call.arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, default=str)
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": text},
    }


def _result_text(result: Content) -> str:
    """A function result's text, as the model reads it."""
    value = result.result
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            item.text
            for item in value
            if isinstance(item, Content) and item.type == "text" and item.text is not None
        )
    return "" if value is None else json.dumps(value, default=str)
