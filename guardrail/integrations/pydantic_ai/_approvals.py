"""Pydantic AI's deferred tool approvals, for calls whose ids wait for the user.

A call that waits raises Pydantic AI's ``ApprovalRequired`` carrying the
guard's requests in its metadata (:func:`deferral`); the run ends with
``DeferredToolRequests``, whose ``metadata[tool_call_id]["guardrail"]``
lists them with their evidence. :func:`answer_approvals` turns the user's
answers into the ``DeferredToolResults`` to resume with, recording each
no with the guard. Private to :mod:`guardrail.integrations.pydantic_ai`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from guardrail._data.verdict import ApprovalRequest
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.asking import KEY, declined, payload, question, shown

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard

__all__ = ["answer_approvals", "deferral"]


def deferral(tool: str, requests: Sequence[ApprovalRequest]) -> ApprovalRequired:
    """Pydantic AI's ``ApprovalRequired`` for a call that waits: the requests in its metadata."""
    return ApprovalRequired(metadata={KEY: shown(requests), "question": question(tool, requests)})


def answer_approvals(
    guard: Guard, requests: DeferredToolRequests, answers: Mapping[str, bool]
) -> DeferredToolResults:
    """The ``DeferredToolResults`` to resume a run with, from the user's answer to each call.

    ``answers`` maps a tool call id of ``requests.approvals`` to the user's
    yes or no. A yes resumes the call as approved (``ToolApproved``): when
    it runs, the guard approves the values it waited for, for that session
    and tool, and runs it once. A no is recorded with the guard
    (``guard.deny``: the value is refused for that tool afterwards) and
    answers the call with ``ToolDenied``, telling the model the user
    declined. A call the guard did not defer is passed on as answered.
    """
    pending = {call.tool_call_id for call in requests.approvals}
    unknown = sorted(set(answers) - pending)
    if unknown:
        raise GuardrailUsageError(
            f"answers name tool calls that do not wait for approval: {', '.join(unknown)}; "
            "answer the tool call ids of requests.approvals"
        )
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for call_id, yes in answers.items():
        if not isinstance(yes, bool):
            raise GuardrailUsageError(
                f"the answer for {call_id!r} is {yes!r}: answer each call True or False"
            )
        asked = payload(requests.metadata.get(call_id))
        if yes or not asked:
            approvals[call_id] = ToolApproved() if yes else ToolDenied()
        else:
            approvals[call_id] = ToolDenied(declined(guard, asked))
    return DeferredToolResults(approvals=approvals)
