"""A scripted ADK model for the tests: ADK's own ``BaseLlm``, answering from a script, offline.

ADK ships no test model for programs (its ``MockModel`` lives in its test runner), so
the tests subclass ``BaseLlm``, as any model integration does. Each request is kept; the
script answers it with the parts of the model's next turn.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field

Script = Callable[[LlmRequest], Sequence[types.Part]]


def call(name: str, arguments: dict[str, Any], call_id: str) -> types.Part:
    """A function call part, as a model writes one."""
    return types.Part(function_call=types.FunctionCall(name=name, args=arguments, id=call_id))


def text(words: str) -> types.Part:
    return types.Part(text=words)


def steps(*turns: Sequence[types.Part]) -> Script:
    """A script of fixed turns, then "done" for any request after them."""
    left = iter(turns)

    def script(request: LlmRequest) -> Sequence[types.Part]:
        return next(left, [text("done")])

    return script


class ScriptedLlm(BaseLlm):
    """A model whose every answer is the script's: the requests it was sent stay in ``requests``."""

    model: str = "scripted"
    script: Any = None
    requests: list[LlmRequest] = Field(default_factory=list)

    @classmethod
    def of(cls, script: Script) -> ScriptedLlm:
        return cls(script=script, requests=[])

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        parts = list(self.script(llm_request))
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def system_text(request: LlmRequest) -> str:
    """The system instruction a request carries, as text."""
    given = request.config.system_instruction
    if given is None:
        return ""
    if isinstance(given, str):
        return given
    if isinstance(given, types.Content):
        return "".join(part.text or "" for part in given.parts or ())
    return str(given)


def responses(request: LlmRequest) -> dict[str, Any]:
    """The function responses a request carries, by call id (the last of each)."""
    found: dict[str, Any] = {}
    for content in request.contents:
        for part in content.parts or ():
            if part.function_response is not None and part.function_response.id:
                found[part.function_response.id] = part.function_response.response
    return found
