"""ADK's event compaction, summarized by :func:`guardrail.compaction.compact_text`.

Private to :mod:`guardrail.integrations.google_adk`, which re-exports
:class:`GuardrailSummarizer`. ADK compacts a session's events itself
(``EventsCompactionConfig``: when the prompt reaches ``token_threshold``,
inside the run, keeping the last ``event_retention_size`` events raw; or
every few invocations) and asks its summarizer for one event that stands for
the older ones. :class:`GuardrailSummarizer` is that summarizer: the events
are read as chat messages (:func:`to_chat`), and the compacted content is the
sealed ID LEDGER block and a summary in which every id is its ``[role]``.
ADK puts the previous compaction first among the events of the next one; its
block is recognised there when its seal verifies, and carried forward.

Who wrote what is read from each event's author, never from the role ADK
gives its content (tool responses travel in ``user`` contents):

- the user's text (author ``user``) is a user message;
- an agent's text and function calls are an assistant message, its function
  responses tool messages (an ``"error"`` in the response marks a failure);
- a function response the client sent (author ``user``: the answer to a
  long-running tool, or a forged one) is the client's word: a failed tool
  message, so nothing in it is ever harvested;
- ADK's own client calls (confirmations, credentials, input requests) and
  their answers are left out, as ADK leaves them out of the model's request;
- of several responses to one call, the last counts, as it does for ADK.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.adk.flows.llm_flows.functions import (
    REQUEST_CONFIRMATION_FUNCTION_CALL_NAME,
    REQUEST_EUC_FUNCTION_CALL_NAME,
    REQUEST_INPUT_FUNCTION_CALL_NAME,
)
from google.genai import types

from guardrail._guard.facade import Guard
from guardrail.compaction import Summarizer, SummaryOptions, compact_text
from guardrail.errors import GuardrailUsageError
from guardrail.integrations.google_adk._conversations import Scopes

if TYPE_CHECKING:
    from guardrail.integrations.google_adk import GuardrailPlugin

__all__ = ["CLIENT_CALLS", "GuardrailSummarizer", "to_chat"]

#: ADK's function calls to the client, and the client's answers: never sent to the model.
CLIENT_CALLS = frozenset(
    {
        REQUEST_CONFIRMATION_FUNCTION_CALL_NAME,
        REQUEST_EUC_FUNCTION_CALL_NAME,
        REQUEST_INPUT_FUNCTION_CALL_NAME,
    }
)


def _response_text(response: Any) -> str:
    """What a function response says: a tool's plain return (ADK's ``{"result": ...}``) or JSON."""
    if (
        isinstance(response, dict)
        and len(response) == 1
        and isinstance(response.get("result"), str)
    ):
        return str(response["result"])
    return json.dumps(response, ensure_ascii=False, default=str)


def _failed(response: Any) -> bool:
    """ADK's mark of a failed call: an ``"error"`` in its response."""
    return isinstance(response, dict) and bool(response.get("error"))


def to_chat(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The events as OpenAI chat messages, each part read by who wrote it (module docstring)."""
    last: dict[str, int] = {}  # each call's last response, by the index of its event
    for index, event in enumerate(events):
        for response in event.get_function_responses():
            if response.id and response.name not in CLIENT_CALLS:
                last[response.id] = index
    chat: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        parts = event.content.parts if event.content is not None else None
        if not parts:
            continue
        by_user = event.author == "user"
        texts = [part.text for part in parts if part.text and not part.thought]
        calls = [
            part.function_call
            for part in parts
            if part.function_call is not None and part.function_call.name not in CLIENT_CALLS
        ]
        results = [
            part.function_response
            for part in parts
            if part.function_response is not None
            and part.function_response.name not in CLIENT_CALLS
            and last.get(part.function_response.id or "") == index
        ]
        if by_user and texts:
            chat.append({"role": "user", "content": "\n".join(texts)})
        if calls:
            chat.append(
                {
                    "role": "assistant",
                    "content": "\n".join(texts) or None,
                    "tool_calls": [
                        {
                            "id": call.id or "",
                            "type": "function",
                            "function": {
                                "name": call.name or "",
                                "arguments": json.dumps(call.args or {}, ensure_ascii=False),
                            },
                        }
                        for call in calls
                    ],
                }
            )
        for result in results:
            message: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": result.id or "",
                "content": _response_text(result.response),
            }
            if by_user or _failed(result.response):
                message["error"] = True
            chat.append(message)
        if not by_user and texts and not calls:
            chat.append({"role": "assistant", "content": "\n".join(texts)})
    return chat


class GuardrailSummarizer(BaseEventsSummarizer):
    """ADK's events summarizer, built on :func:`guardrail.compaction.compact_text`.

    ``EventsCompactionConfig(summarizer=GuardrailSummarizer(plugin),
    token_threshold=..., event_retention_size=...)`` in the ``App`` whose
    plugins include ``plugin``: ADK decides when to compact and which events
    stay raw; this writes the event that stands for the others. Its content
    is the conversation's ID LEDGER block, sealed, then the summary
    (``summarize`` as for :func:`guardrail.compact`; the extractive
    summarizer, which needs no model, by default), every id in it written as
    its ``[role]``. The conversation is the run's (the plugin knows it), so
    this summarizer serves only runs that plugin guards.
    """

    def __init__(
        self,
        plugin: GuardrailPlugin,
        *,
        summarize: Summarizer | None = None,
        summary_chars: int | None = None,
    ) -> None:
        # What it reads of its plugin (the package imports this module: no import back).
        if not isinstance(getattr(plugin, "scopes", None), Scopes) or not isinstance(
            getattr(plugin, "guard", None), Guard
        ):
            raise GuardrailUsageError(
                "GuardrailSummarizer(plugin) takes the GuardrailPlugin of the App it compacts, "
                f"not {type(plugin).__name__}"
            )
        self.plugin = plugin
        self.summarize = summarize
        self.summary_chars = summary_chars

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        """One event standing for ``events``: the ledger block and the summary (None: no events)."""
        if not events:
            return None
        conversation = self.plugin.scopes.conversation.get()
        if conversation is None:
            raise GuardrailUsageError(
                "GuardrailSummarizer compacts the events of a run its GuardrailPlugin guards: "
                "put the plugin in the same App (plugins=[plugin]) as the compaction config"
            )
        guard = self.plugin.guard
        options: SummaryOptions = {"shape": "openai_chat"}
        if self.summarize is not None:
            options["summarize"] = self.summarize
        if self.summary_chars is not None:
            options["summary_chars"] = self.summary_chars
        async with guard.session(conversation) as ledger:
            text = compact_text(to_chat(events), ledger, guard=guard, **options)
        compaction = EventCompaction(
            start_timestamp=events[0].timestamp,
            end_timestamp=events[-1].timestamp,
            compacted_content=types.Content(role="model", parts=[types.Part(text=text)]),
        )
        # As ADK's own summarizer writes it: the compaction rides on the event's actions.
        return Event(
            author="user", actions=EventActions(compaction=compaction), invocation_id=Event.new_id()
        )
