"""LangGraph interrupts for tool calls whose ids wait for the user, as ``HumanInTheLoopMiddleware``.

The value interrupted with is the per-call ``ToolApprovalRequest`` shape of
LangChain's human-in-the-loop middleware (``type: "tool_approval"``, the
call's id, name and arguments, and a ``description`` for the reviewer, here
each value and its evidence), with the guard's requests under
``"guardrail"``. The run resumes with ``Command(resume=decision)``: an
``{"type": "approve"}`` or ``{"type": "reject", "message": ...}`` decision,
checked by LangGraph against the schema given with the interrupt. Private to
:mod:`guardrail.integrations.langchain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Union

from langchain.agents.middleware.human_in_the_loop import ApproveDecision, RejectDecision
from langchain_core.messages import ToolMessage
from langchain_core.messages.tool import ToolCall
from langgraph.types import interrupt
from pydantic import Discriminator

from guardrail._data.verdict import ApprovalRequest
from guardrail.integrations._common.asking import KEY, declined, question, shown

if TYPE_CHECKING:
    from guardrail._guard.facade import Guard
    from guardrail.ledger import Ledger

__all__ = ["ask"]

#: What a resume may answer: approve or reject, as LangChain's own decisions.
_DECISION: Any = Annotated[Union[ApproveDecision, RejectDecision], Discriminator("type")]  # noqa: UP007


def ask(
    guard: Guard, call: ToolCall, requests: Sequence[ApprovalRequest], ledger: Ledger
) -> ToolMessage | None:
    """Interrupt the run for the user's answer; None once approved, else the message to answer.

    The first time this raises LangGraph's interrupt; when the run resumes
    the node runs again and ``interrupt`` returns the decision. A rejection
    is recorded with the guard (``guard.deny``) and answered with its
    refusal (the user declined, their reason after it), ``status="error"``.
    """
    value = {
        "type": "tool_approval",
        "tool_call_id": call["id"] or "",
        "name": call["name"],
        "args": call["args"],
        "description": question(call["name"], requests),
        KEY: shown(requests),
    }
    decision: Mapping[str, Any] = interrupt(value, response_schema=_DECISION)
    if decision["type"] == "approve":
        return None
    text = declined(guard, requests, ledger=ledger)
    reason = decision.get("message")
    if reason:
        text = f"{text}\nThe user's reason: {reason}"
    return ToolMessage(
        content=text, tool_call_id=call["id"] or "", name=call["name"], status="error"
    )
