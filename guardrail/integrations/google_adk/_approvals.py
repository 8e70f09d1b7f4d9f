"""ADK's tool confirmation, for calls whose ids wait for the user.

Private to :mod:`guardrail.integrations.google_adk`, which re-exports
:class:`PendingApproval`, :func:`pending_approvals` and
:func:`answer_approvals`.

A call that waits asks through ``ToolContext.request_confirmation`` (:func:`ask`):
the hint is the question (each value and where it was seen), the payload the
guard's requests, and the model reads the call's response: it waits for the
user and did not run. ADK pauses the run with an ``adk_request_confirmation``
function call; the client answers it with a function response holding
``{"confirmed": true}`` or ``false`` (:func:`answer_approvals` writes it), and
ADK runs the held call again in a later turn, the answer in
``tool_context.tool_confirmation``. Only an answer to a request the guard made
approves (:func:`asked_by_guard` reads the request in the session's own events,
which the client cannot write): the plugin then approves the values a fresh
check of the call asks for, and the call runs once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.adk.events import Event
from google.adk.flows.llm_flows.functions import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from guardrail._data.verdict import Verdict
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.asking import KEY, payload, question, shown

__all__ = [
    "CONFIRMATION",
    "HELD_CALL",
    "QUESTION",
    "PendingApproval",
    "answer_approvals",
    "ask",
    "asked_by_guard",
    "pending_approvals",
]

#: The name of the function call ADK pauses a run with, and of the client's answer to it.
CONFIRMATION = REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
#: The arguments of that call, as ADK writes them for its clients: the held call, the question.
HELD_CALL, QUESTION = "originalFunctionCall", "toolConfirmation"


def ask(tool_context: ToolContext, tool: str, verdict: Verdict) -> dict[str, Any]:
    """Put a call that waits to the user; the response the model reads in its place.

    The run pauses after this turn's calls (no model call reads the response
    first), as it does for ADK's own ``require_confirmation``.
    """
    tool_context.request_confirmation(
        hint=question(tool, verdict.approvals), payload={KEY: shown(verdict.approvals)}
    )
    tool_context.actions.skip_summarization = True
    return {"error": verdict.message}


def asked_by_guard(tool_context: ToolContext) -> bool:
    """Whether the confirmation a resumed call carries answers a request of the guard's.

    The latest request for this call in the session's events (ADK writes
    them; a client's message holds content only) must carry the guard's
    requests: an answer to a tool's own ``require_confirmation`` approves no
    value.
    """
    call_id = tool_context.function_call_id
    for event in reversed(tool_context.session.events):
        requested = event.actions.requested_tool_confirmations if event.actions else None
        if requested and call_id in requested:
            return bool(payload(requested[call_id].payload))
    return False


@dataclass(frozen=True)
class PendingApproval:
    """One ``adk_request_confirmation`` call of a paused run, not answered yet.

    ``id`` is what the answer names; ``call_id``, ``tool`` and ``arguments``
    are the held call's; ``question`` is what to ask the user; ``requests``
    are the guard's requests (each value's ``param``, ``value``, ``kind``,
    ``tier``, ``evidence`` and ``token``), empty for a confirmation the tool
    asked for itself.
    """

    id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    question: str
    requests: tuple[Mapping[str, Any], ...]


def pending_approvals(events: Iterable[Event]) -> list[PendingApproval]:
    """The confirmations a run paused on, in order: the events it yielded, or a session's.

    A confirmation answered by a later event of ``events`` is left out.
    """
    pending: dict[str, PendingApproval] = {}
    for event in events:
        if event.author == "user":
            for response in event.get_function_responses():
                if response.name == CONFIRMATION and response.id:
                    pending.pop(response.id, None)
            continue
        for call in event.get_function_calls():
            if call.name != CONFIRMATION or not call.id:
                continue
            found = _pending(call)
            if found is not None:
                pending[call.id] = found
    return list(pending.values())


def _pending(call: types.FunctionCall) -> PendingApproval | None:
    """A confirmation call as a :class:`PendingApproval` (None: not of ADK's form)."""
    arguments = call.args or {}
    original = arguments.get(HELD_CALL)
    confirmation = arguments.get(QUESTION)
    if not isinstance(original, Mapping) or not isinstance(confirmation, Mapping):
        return None
    held = original.get("args")
    hint = confirmation.get("hint")
    return PendingApproval(
        id=str(call.id),
        call_id=str(original.get("id", "")),
        tool=str(original.get("name", "")),
        arguments=dict(held) if isinstance(held, Mapping) else {},
        question=hint if isinstance(hint, str) else "",
        requests=tuple(payload(confirmation.get("payload"))),
    )


def answer_approvals(
    pending: Sequence[PendingApproval], answers: Mapping[str, bool]
) -> types.Content:
    """The user's message that answers confirmations: run it with ``runner.run_async``.

    ``answers`` maps the ``id`` of a :class:`PendingApproval` to the user's
    yes (``True``) or no (``False``). ADK runs each held call again with the
    answer: on a yes the guard approves the values it waited for, for that
    session and tool, and the call runs once; on a no the guard keeps the no
    (the value is refused for that tool afterwards) and the model reads that
    the user declined.
    """
    known = {approval.id for approval in pending}
    unknown = sorted(str(name) for name in answers if name not in known)
    if unknown:
        raise GuardrailUsageError(
            f"answers name confirmations that do not wait: {', '.join(unknown)}; answer the "
            "ids of the PendingApproval objects pending_approvals() gave"
        )
    parts = []
    for name, yes in answers.items():
        if not isinstance(yes, bool):
            raise GuardrailUsageError(
                f"the answer for {name!r} is {yes!r}: answer each confirmation True or False"
            )
        response = types.FunctionResponse(name=CONFIRMATION, id=name, response={"confirmed": yes})
        parts.append(types.Part(function_response=response))
    if not parts:
        raise GuardrailUsageError("answers is empty: answer at least one pending confirmation")
    return types.Content(role="user", parts=parts)
