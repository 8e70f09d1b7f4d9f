"""A scripted LangChain chat model: each reply is a function of the messages it is sent."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

Script = Callable[[Sequence[BaseMessage]], AIMessage]

_ids = itertools.count(1)


def call(name: str, **args: Any) -> dict[str, Any]:
    """One tool call as a model sends it, with a fresh id."""
    return {"name": name, "args": args, "id": f"call_{next(_ids)}", "type": "tool_call"}


def calls(*tool_calls: dict[str, Any]) -> AIMessage:
    """A model reply that makes these tool calls (several: parallel calls in one turn)."""
    return AIMessage(content="", tool_calls=list(tool_calls))


class ScriptedModel(BaseChatModel):
    """Answers with ``script(messages)``; binding tools changes nothing (the script knows them)."""

    script: Script
    #: Every message list the model was sent, in order.
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    #: The tools of the latest ``bind_tools``, as a provider sends them (OpenAI's form).
    bound: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.script(messages))])

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        self.bound = [convert_to_openai_tool(tool) for tool in tools]
        return self
