"""What the adapter reads of Agent Framework beyond its documented API, in one place.

The function-calling loop of ``agent-framework-core`` writes three keys into
``FunctionInvocationContext.metadata`` for the middleware of each call; the
framework's own middleware read them, its documentation does not name them.
Every other name the adapter uses is public (exported by ``agent_framework``,
or a ``Content`` type its documentation lists). ``tests/integrations/
test_agent_framework.py`` runs a real agent and fails, naming the key, when a
release stops setting one. Private to
:mod:`guardrail.integrations.agent_framework`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["APPROVAL_RESPONSE", "CALL_ID", "OCCURRENCE_ID", "UNDOCUMENTED"]

#: The call id the model gave the call (the one its result answers).
CALL_ID: Final = "call_id"
#: The framework's id of this occurrence of the call: an approval request's id is this.
OCCURRENCE_ID: Final = "function_call_occurrence_id"
#: The user's ``function_approval_response`` when the loop replays a call the user approved.
APPROVAL_RESPONSE: Final = "approval_response"

#: Every undocumented name the adapter reads: ``FunctionInvocationContext.metadata`` keys.
UNDOCUMENTED: Final = (CALL_ID, OCCURRENCE_ID, APPROVAL_RESPONSE)
