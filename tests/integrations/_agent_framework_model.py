"""A scripted Agent Framework chat client: each reply is a function of what the model is sent.

Built from the framework's own layers as its provider clients are (function
invocation, chat middleware, the base client), so middleware, approvals and
in-run compaction all run as they do with a real model; no network.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent_framework import (
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    FunctionTool,
    Message,
    ResponseStream,
)


@dataclass
class Sent:
    """One model call: the messages and the options (instructions, tools) the model was sent."""

    messages: list[Message]
    options: dict[str, Any]

    @property
    def instructions(self) -> str:
        given = self.options.get("instructions")
        if isinstance(given, str):
            return given
        return "\n".join(str(item) for item in given or ())

    def results(self) -> dict[str, str]:
        """The tool results the model was sent, by call id (their text)."""
        return {
            content.call_id: str(content.result)
            for message in self.messages
            for content in message.contents
            if content.type == "function_result" and content.call_id
        }

    def last_result(self) -> str:
        """The text of the last tool result the model was sent."""
        found = [
            str(content.result)
            for message in self.messages
            for content in message.contents
            if content.type == "function_result"
        ]
        return found[-1] if found else ""

    def tool(self, name: str) -> dict[str, Any]:
        """The parameter schema of the tool ``name`` as the model was given it."""
        for tool in self.options.get("tools") or ():
            if isinstance(tool, FunctionTool) and tool.name == name:
                return dict(tool.parameters())
        raise KeyError(name)


T = TypeVar("T")


def finish(pending: Awaitable[T]) -> T:
    """Run an agent's ``run(...)`` (an awaitable) to its end, outside any event loop."""

    async def wait() -> T:
        return await pending

    return asyncio.run(wait())


Reply = Sequence[Content] | str
Script = Callable[[Sent], Reply]

_ids = itertools.count(1)


def call(name: str, **arguments: Any) -> Content:
    """One tool call as a model sends it, with a fresh call id."""
    return Content.from_function_call(f"call_{next(_ids)}", name, arguments=json.dumps(arguments))


@dataclass
class Steps:
    """A script of replies in order; the last one repeats (usually the final text)."""

    replies: list[Reply | Callable[[Sent], Reply]]
    at: int = 0

    def __call__(self, sent: Sent) -> Reply:
        reply = self.replies[min(self.at, len(self.replies) - 1)]
        self.at += 1
        return reply(sent) if callable(reply) else reply


@dataclass(eq=False)
class _State:
    seen: list[Sent] = field(default_factory=list)


class ScriptedClient(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """Answers each model call with ``script(sent)``: tool calls, or text."""

    def __init__(self, script: Script | Sequence[Any]) -> None:
        super().__init__()
        self.script: Script = script if callable(script) else Steps(list(script))
        self.state = _State()

    @property
    def seen(self) -> list[Sent]:
        """Every model call, in order."""
        return self.state.seen

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Any:
        sent = Sent(list(messages), dict(options))
        self.state.seen.append(sent)
        reply = self.script(sent)
        contents = [Content.from_text(reply)] if isinstance(reply, str) else list(reply)
        if not stream:

            async def respond() -> ChatResponse:
                return ChatResponse(messages=[Message("assistant", contents)])

            return respond()

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            yield ChatResponseUpdate(role="assistant", contents=contents)

        return ResponseStream(updates(), finalizer=ChatResponse.from_updates)
