"""The SDK's tool approvals, for calls whose ids wait for the user.

A guarded function tool's ``needs_approval`` asks the guard: a call that
waits for the user interrupts the run (``result.interruptions``), the SDK's
own human-in-the-loop. :func:`approval_requests` gives what to show for an
interruption (the values and their evidence); ``RunState.approve(item)``
approves it (the guard approves the values when the call runs, then runs
it once); :func:`decline` records the user's no with the guard and rejects
the call, the model told that the user declined. Private to
:mod:`guardrail.integrations.openai_agents`.
"""

from __future__ import annotations

import json
from typing import Any

from agents import RunState, ToolApprovalItem

from guardrail._data.verdict import ApprovalRequest
from guardrail.errors import GuardrailUsageError
from guardrail.integrations._common.asking import declined
from guardrail.integrations.openai_agents._tools import ToolGuard, tool_guard

__all__ = ["approval_requests", "decline"]


def _guarded(item: ToolApprovalItem) -> ToolGuard | None:
    """The guard of the tool an interruption is for (None: a tool no guard of ours guards)."""
    if not isinstance(item, ToolApprovalItem):
        raise GuardrailUsageError(
            f"pass one of result.interruptions (a ToolApprovalItem), not {type(item).__name__}"
        )
    name = item.tool_name or item.name
    for tool in getattr(item.agent, "tools", None) or ():
        if getattr(tool, "name", None) == name:
            return tool_guard(tool)
    return None


def _arguments(item: ToolApprovalItem) -> Any:
    text = item.arguments
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text  # the check reports what it cannot read


def approval_requests(
    item: ToolApprovalItem, *, context: Any = None
) -> tuple[ApprovalRequest, ...]:
    """What the guard asks the user about an interruption: each value, kind and evidence.

    ``item`` is one of ``result.interruptions``; empty where the call waits
    for the tool's own ``needs_approval`` only. Call it in the conversation's
    session (``with guard.session(...)``), or pass the ``context`` given to
    ``Runner.run`` when ``guard_agent`` was given ``session_id=``.
    """
    owner = _guarded(item)
    if owner is None:
        return ()
    return owner.requests(item.tool_name or item.name or "", _arguments(item), context)


def decline(state: RunState[Any], item: ToolApprovalItem, *, context: Any = None) -> None:
    """The user said no: the guard keeps the no, and the call is rejected on ``state``.

    Each value the call waited for is declined for that tool (refused
    afterwards as ``declined``), and the model reads the guard's refusal:
    the user declined it. A call that waited for the tool's own approval
    only is rejected as the SDK rejects it. Then resume with
    ``Runner.run(agent, state)``.
    """
    requests = approval_requests(item, context=context)
    if not requests:
        state.reject(item)
        return
    owner = _guarded(item)
    assert owner is not None
    with owner.scope(context):
        message = declined(owner.guard, requests)
    state.reject(item, rejection_message=message)
